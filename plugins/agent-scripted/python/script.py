"""Pure logic of the agent-scripted plugin (no dependency on the generated bindings).

The semantics are specified in ../README.md. `Script.parse(config_text)` raises
`ConfigError` with a "config...: why" message; `View` reassembles the host's view
from deltas; `Script.decide(view)` returns the next `Decision`.
"""

import json
import re

KINDS = ("call", "complete", "fail")


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


class Decision:
    """`kind` is "call" (`tool`, `arguments` as compact JSON text), "complete"
    (`value` as compact JSON text) or "fail" (`value` the reason)."""

    __slots__ = ("kind", "tool", "arguments", "value")

    def __init__(self, kind, tool=None, arguments=None, value=None):
        self.kind = kind
        self.tool = tool
        self.arguments = arguments
        self.value = value

    @classmethod
    def call(cls, tool, arguments):
        return cls("call", tool=tool, arguments=arguments)

    @classmethod
    def complete(cls, value):
        return cls("complete", value=value)

    @classmethod
    def fail(cls, reason):
        return cls("fail", value=reason)

    def _key(self):
        return (self.kind, self.tool, self.arguments, self.value)

    def __eq__(self, other):
        return isinstance(other, Decision) and self._key() == other._key()

    def __repr__(self):
        if self.kind == "call":
            return "Decision.call(%r, %r)" % (self.tool, self.arguments)
        return "Decision.%s(%r)" % (self.kind, self.value)


def _parse_entry(entry, path):
    if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in KINDS:
        raise ConfigError("%s: expected an object with exactly one of call, complete, fail" % path)
    kind, value = next(iter(entry.items()))
    kpath = "%s.%s" % (path, kind)
    if kind == "complete":
        return Decision.complete(compact(value))
    if kind == "fail":
        if not isinstance(value, str):
            raise ConfigError("%s: expected a string" % kpath)
        return Decision.fail(value)
    if not isinstance(value, dict):
        raise ConfigError("%s: expected an object" % kpath)
    tool = None
    arguments = {}
    for key, v in value.items():
        if key == "tool":
            if not isinstance(v, str):
                raise ConfigError("%s.tool: expected a string" % kpath)
            tool = v
        elif key == "arguments":
            arguments = v
        else:
            raise ConfigError("%s: unknown key %s" % (kpath, compact(key)))
    if tool is None:
        raise ConfigError("%s.tool: missing" % kpath)
    return Decision.call(tool, compact(arguments))


class Script:
    def __init__(self, decisions):
        self.decisions = decisions

    @classmethod
    def parse(cls, text):
        try:
            config = parse_json(text)
        except ValueError as err:
            raise ConfigError("config: invalid JSON: %s" % err) from None
        if not isinstance(config, dict):
            raise ConfigError("config: expected an object")
        decisions = None
        for key, value in config.items():
            if key == "script":
                if not isinstance(value, list):
                    raise ConfigError("config.script: expected an array")
                decisions = [_parse_entry(e, "config.script[%d]" % i) for i, e in enumerate(value)]
            else:
                raise ConfigError("config: unknown key %s" % compact(key))
        if decisions is None:
            raise ConfigError("config.script: missing")
        return cls(decisions)

    def decide(self, view):
        """script[i], i = number of steps in `view` that carry a decision."""
        i = view.decided_count()
        if i < len(self.decisions):
            return self.decisions[i]
        return Decision.fail("script exhausted after %d decisions" % len(self.decisions))


class View:
    """The host's view, reassembled from deltas.

    Steps are kept by index and approvals by id; a step or approval is any
    object with `index` (and `decision`) or `id` attributes, such as the
    generated binding records.
    """

    def __init__(self):
        self.steps = {}
        self.approvals = {}

    def apply(self, reset, steps, approvals):
        if reset:
            self.steps.clear()
            self.approvals.clear()
        for step in steps:
            self.steps[step.index] = step
        for approval in approvals:
            self.approvals[approval.id] = approval

    def decided_count(self):
        return sum(1 for step in self.steps.values() if step.decision is not None)
