"""agent-scripted, Python twin: the script and its order (see ../README.md).

Built on the Keel Python SDK (guest-sdk/python): the SDK parses the config
strictly, names the key of every error, rebuilds the view from the host's
deltas and serves the `agent` world from app.py.
"""

import keel_guest as keel
from keel_guest import ConfigError, Decision, Json, jsontext

KINDS = ("call", "complete", "fail")


def _entry(path, entry):
    if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in KINDS:
        raise ConfigError("%s: expected an object with exactly one of call, complete, fail" % path)
    kind, value = next(iter(entry.items()))
    kpath = "%s.%s" % (path, kind)
    if kind == "complete":
        return Decision.complete(value)
    if kind == "fail":
        if not isinstance(value, str):
            raise ConfigError("%s: expected a string" % kpath)
        return Decision.fail(value)
    tool = None
    arguments = {}
    # Keys in document order, so the first problem is the first one written.
    for key_path, key, v in keel.config.Obj(kpath, value).entries():
        if key == "tool":
            if not isinstance(v, str):
                raise ConfigError("%s: expected a string" % key_path)
            tool = v
        elif key == "arguments":
            arguments = v
        else:
            raise ConfigError("%s: unknown key %s" % (kpath, jsontext.compact(key)))
    if tool is None:
        raise ConfigError("%s.tool: missing" % kpath)
    return Decision.call_tool(tool, Json(jsontext.compact(arguments)))


class Script(keel.Agent):
    """Plays `script[i]`, where i is how many steps carry a decision."""

    def __init__(self, config, tools=()):
        super().__init__(config, tools)
        self.decisions = None
        for path, key, value in keel.config.parse(config).entries():
            if key == "script":
                if not isinstance(value, list):
                    raise ConfigError("%s: expected an array" % path)
                self.decisions = [_entry("%s[%d]" % (path, i), e) for i, e in enumerate(value)]
            else:
                raise ConfigError("config: unknown key %s" % jsontext.compact(key))
        if self.decisions is None:
            raise ConfigError("config.script: missing")

    def decide(self, view):
        i = view.decided_steps
        if i < len(self.decisions):
            return self.decisions[i]
        return Decision.fail("script exhausted after %d decisions" % len(self.decisions))
