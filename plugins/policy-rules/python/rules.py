"""Pure logic of the policy-rules plugin (no dependency on the generated bindings).

The semantics are specified in ../README.md. `Policy.parse(config_text)` raises
`ConfigError` with a "config...: why" message; `Policy.evaluate(tool, arguments,
effect)` returns a `Verdict`.
"""

import json
import re

ACTIONS = ("allow", "deny", "require-approval", "abort")
EFFECTS = ("read-only", "idempotent", "local-mutation", "remote-mutation", "destructive")
RULE_KEYS = ("tool", "effect", "args", "action", "reason")


class ConfigError(Exception):
    """An invalid config; `str(err)` is the message `init` returns."""


def compact(value):
    """Compact JSON text of `value`, non-ASCII kept as is (like serde_json).

    Falls back to ASCII escapes if the text would not be valid UTF-8 (a lone
    surrogate from a `\\ud800` escape), so the result always lowers to a WIT
    string.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text


# Deepest nesting of arrays and objects accepted: as serde_json with its
# default recursion limit (127 levels parse, 128 do not). CPython compiled to
# wasm overflows the wasm stack (a trap, not a RecursionError) a few thousand
# levels deep, so depth is checked before parsing.
MAX_DEPTH = 127
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def _too_deep(text):
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        if m.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def parse_json(text):
    """Strict JSON: NaN/Infinity are rejected, nesting is limited to
    MAX_DEPTH. Raises ValueError."""
    if _too_deep(text):
        raise ValueError("nested more than %d levels deep" % MAX_DEPTH)
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def glob_match(pattern, text):
    """`*` any run (also empty, also '/'), `?` one scalar value, the rest literal.

    Iterative with single backtrack point: O(len(pattern) * len(text)).
    """
    p = t = 0
    star_p = -1
    star_t = 0
    np_, nt = len(pattern), len(text)
    while t < nt:
        if p < np_ and pattern[p] == "*":
            star_p = p
            star_t = t
            p += 1
        elif p < np_ and (pattern[p] == "?" or pattern[p] == text[t]):
            p += 1
            t += 1
        elif star_p >= 0:
            p = star_p + 1
            star_t += 1
            t = star_t
        else:
            return False
    while p < np_ and pattern[p] == "*":
        p += 1
    return p == np_


class Verdict:
    """`action` is one of ACTIONS; `reason` is None for allow; `presentation`
    is compact JSON text for require-approval, else None."""

    __slots__ = ("action", "reason", "presentation")

    def __init__(self, action, reason=None, presentation=None):
        self.action = action
        self.reason = reason
        self.presentation = presentation

    def __eq__(self, other):
        return isinstance(other, Verdict) and (self.action, self.reason, self.presentation) == (
            other.action,
            other.reason,
            other.presentation,
        )

    def __repr__(self):
        return "Verdict(%r, %r, %r)" % (self.action, self.reason, self.presentation)


class Rule:
    __slots__ = ("tool", "effects", "args", "action", "reason")

    def __init__(self):
        self.tool = None  # glob or None
        self.effects = None  # frozenset of effect names or None
        self.args = None  # list of (key, glob) or None (None also for {})
        self.action = None
        self.reason = None


def _parse_action(value, path):
    if not isinstance(value, str):
        raise ConfigError("%s: expected a string, one of %s" % (path, ", ".join(ACTIONS)))
    if value not in ACTIONS:
        raise ConfigError("%s: %s is not one of %s" % (path, compact(value), ", ".join(ACTIONS)))
    return value


def _parse_effect(value, path):
    bad_shape = ConfigError("%s: expected a string or a non-empty array of strings" % path)
    if isinstance(value, str):
        names = [value]
    elif isinstance(value, list) and value:
        names = value
    else:
        raise bad_shape
    # Elements in document order; an array element's problem is reported at
    # the `effect` path itself (the README's messages name no element index).
    for name in names:
        if not isinstance(name, str):
            raise bad_shape
        if name not in EFFECTS:
            raise ConfigError("%s: %s is not an effect class" % (path, compact(name)))
    return frozenset(names)


def _parse_rule(value, path):
    if not isinstance(value, dict):
        raise ConfigError("%s: expected an object" % path)
    rule = Rule()
    for key, v in value.items():
        kpath = "%s.%s" % (path, key)
        if key == "tool":
            if not isinstance(v, str):
                raise ConfigError("%s: expected a string" % kpath)
            rule.tool = v
        elif key == "effect":
            rule.effects = _parse_effect(v, kpath)
        elif key == "args":
            if not isinstance(v, dict):
                raise ConfigError("%s: expected an object of string to string" % kpath)
            pairs = []
            for ak, av in v.items():
                if not isinstance(av, str):
                    raise ConfigError("%s.%s: expected a string" % (kpath, ak))
                pairs.append((ak, av))
            rule.args = pairs or None
        elif key == "action":
            rule.action = _parse_action(v, kpath)
        elif key == "reason":
            if not isinstance(v, str):
                raise ConfigError("%s: expected a string" % kpath)
            rule.reason = v
        else:
            raise ConfigError("%s: unknown key %s" % (path, compact(key)))
    if rule.action is None:
        raise ConfigError("%s.action: missing" % path)
    return rule


class Policy:
    def __init__(self, rules, default="deny"):
        self.rules = rules
        self.default = default

    @classmethod
    def parse(cls, text):
        try:
            config = parse_json(text)
        except ValueError as err:
            raise ConfigError("config: invalid JSON: %s" % err) from None
        if not isinstance(config, dict):
            raise ConfigError("config: expected an object")
        rules = None
        default = "deny"
        for key, value in config.items():
            if key == "rules":
                if not isinstance(value, list):
                    raise ConfigError("config.rules: expected an array")
                rules = [_parse_rule(r, "config.rules[%d]" % i) for i, r in enumerate(value)]
            elif key == "default":
                default = _parse_action(value, "config.default")
            else:
                raise ConfigError("config: unknown key %s" % compact(key))
        if rules is None:
            raise ConfigError("config.rules: missing")
        return cls(rules, default)

    def evaluate(self, tool, arguments, effect):
        """`tool`: the call's tool name; `arguments`: its JSON text; `effect`:
        one of EFFECTS. Never raises."""
        parsed = []  # lazily parsed arguments object, [] = not yet

        def args_object():
            if not parsed:
                try:
                    value = parse_json(arguments)
                except ValueError:
                    value = None
                parsed.append(value if isinstance(value, dict) else None)
            return parsed[0]

        for index, rule in enumerate(self.rules):
            if rule.tool is not None and not glob_match(rule.tool, tool):
                continue
            if rule.effects is not None and effect not in rule.effects:
                continue
            if rule.args is not None:
                obj = args_object()
                if obj is None:
                    continue
                ok = True
                for key, pattern in rule.args:
                    value = obj.get(key)
                    if not isinstance(value, str) or not glob_match(pattern, value):
                        ok = False
                        break
                if not ok:
                    continue
            reason = rule.reason if rule.reason is not None else "matched rule %d" % index
            return _verdict(rule.action, reason, index, tool)
        return _verdict(self.default, "no rule matched", None, tool)


def _verdict(action, reason, index, tool):
    if action == "allow":
        return Verdict("allow")
    if action == "require-approval":
        return Verdict(action, reason, compact({"rule": index, "tool": tool}))
    return Verdict(action, reason)
