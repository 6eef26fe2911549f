"""agent-scripted, Python twin: the `agent` world's exports.

Built by build.sh with componentize-py, which generates the `wit_world` and
`componentize_py_types` modules at build time (they are not committed). All
logic lives in script.py.
"""

import wit_world
from wit_world.imports import types
from componentize_py_types import Err

import script

# Module-level state: one component instance is one plugin instance.
_script = None
_view = script.View()


class WitWorld(wit_world.WitWorld):
    def init(self, config, tools):
        global _script, _view
        _script = None
        _view = script.View()
        try:
            _script = script.Script.parse(config)
        except script.ConfigError as err:
            raise Err(str(err))
        except Exception as err:  # never trap on a bad config
            raise Err("config: %s: %s" % (type(err).__name__, err))

    def decide(self, view):
        if _script is None:
            raise Err("decide called before a successful init")
        try:
            _view.apply(view.reset, view.steps, view.approvals)
            d = _script.decide(_view)
        except Exception as err:  # an error fails the run; never trap
            raise Err("agent-scripted: %s: %s" % (type(err).__name__, err))
        if d.kind == "call":
            return types.Decision_Call(types.ToolCall(d.tool, d.arguments))
        if d.kind == "complete":
            return types.Decision_Complete(d.value)
        return types.Decision_Fail(d.value)
