"""policy-rules, Python twin: the rules and their matching (see ../README.md).

Built on the Keel Python SDK (guest-sdk/python): the SDK parses the config
strictly, names the key of every error, rebuilds nothing here (the policy
asks for the call-only view) and serves the `policy` world from app.py.
"""

import keel_guest as keel
from keel_guest import ConfigError, Verdict, jsontext

ACTIONS = ("allow", "deny", "require-approval", "abort")
_ABSENT = object()


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


class Rule:
    __slots__ = ("tool", "effects", "args", "action", "reason")

    def __init__(self):
        self.tool = None  # glob or None
        self.effects = None  # frozenset of effect names or None
        self.args = None  # list of (key, glob) or None (None also for {})
        self.action = None
        self.reason = None


def _action(value, path):
    if not isinstance(value, str):
        raise ConfigError("%s: expected a string, one of %s" % (path, ", ".join(ACTIONS)))
    if value not in ACTIONS:
        raise ConfigError("%s: %s is not one of %s" % (path, jsontext.compact(value), ", ".join(ACTIONS)))
    return value


def _effects(value, path):
    bad_shape = ConfigError("%s: expected a string or a non-empty array of strings" % path)
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise bad_shape
    # Elements in document order; an element's problem is reported at the
    # `effect` path itself (the README's messages name no element index).
    for name in names:
        if not isinstance(name, str):
            raise bad_shape
        if name not in keel.EFFECTS:
            raise ConfigError("%s: %s is not an effect class" % (path, jsontext.compact(name)))
    return frozenset(names)


def _string(value, path):
    if not isinstance(value, str):
        raise ConfigError("%s: expected a string" % path)
    return value


def _rule(path, value):
    rule = Rule()
    # Keys in document order, so the first problem is the first one written.
    for kpath, key, v in keel.config.Obj(path, value).entries():
        if key == "tool":
            rule.tool = _string(v, kpath)
        elif key == "effect":
            rule.effects = _effects(v, kpath)
        elif key == "args":
            args = keel.config.Obj(kpath, v) if isinstance(v, dict) else None
            if args is None:
                raise ConfigError("%s: expected an object of string to string" % kpath)
            rule.args = [(k, _string(g, p)) for p, k, g in args.entries()] or None
        elif key == "action":
            rule.action = _action(v, kpath)
        elif key == "reason":
            rule.reason = _string(v, kpath)
        else:
            raise ConfigError("%s: unknown key %s" % (path, jsontext.compact(key)))
    if rule.action is None:
        raise ConfigError("%s.action: missing" % path)
    return rule


class RulesPolicy(keel.Policy):
    """The first matching rule decides; the default when none matches."""

    # Rules match the call alone: the host need not send the steps.
    view = "call-only"

    def __init__(self, config):
        self.rules = None
        self.default = "deny"
        for path, key, value in keel.config.parse(config).entries():
            if key == "rules":
                if not isinstance(value, list):
                    raise ConfigError("%s: expected an array" % path)
                self.rules = [_rule("%s[%d]" % (path, i), r) for i, r in enumerate(value)]
            elif key == "default":
                self.default = _action(value, path)
            else:
                raise ConfigError("config: unknown key %s" % jsontext.compact(key))
        if self.rules is None:
            raise ConfigError("config.rules: missing")

    def evaluate(self, call, effect, view):
        return self.judge(call.tool, call.arguments, effect)

    def judge(self, tool, arguments, effect):
        """The verdict on `tool` called with `arguments` (JSON text) whose
        effect class is `effect`. Never raises."""
        parsed = []  # the arguments object, parsed on first need

        def args_object():
            if not parsed:
                try:
                    value = jsontext.parse(arguments)
                except jsontext.JsonError:
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
                if not all(isinstance(obj.get(k), str) and glob_match(g, obj[k]) for k, g in rule.args):
                    continue
            reason = rule.reason if rule.reason is not None else "matched rule %d" % index
            return _verdict(rule.action, reason, index, tool)
        return _verdict(self.default, "no rule matched", None, tool)


def _verdict(action, reason, index, tool):
    if action == "allow":
        return Verdict.allow()
    if action == "require-approval":
        return Verdict.require_approval(reason, {"rule": index, "tool": tool})
    return Verdict(action, reason)
