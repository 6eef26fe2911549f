"""The three worlds as base classes, and the exports that serve them.

A plugin subclasses `Agent`, `Policy` or `Tool` and, in the module it builds
as its component (`app.py`), binds the export:

    WitWorld = keel_guest.export_policy(MyPolicy)

One component instance serves one plugin instance: the export builds the
class from the config in `init` and keeps it, with the `View` rebuilt from
the host's deltas, for the calls that follow. Every exception raised by the
plugin's code is returned to the host as the call's error; nothing traps.
"""

from .config import ConfigError
from .types import ToolCall
from .view import DeltaError, View


class Agent:
    """Chooses the next step of a run.

    `__init__(config, tools)` gets the operator's config (JSON text; read it
    with `keel_guest.config.parse`) and the run's tools (`ToolSpec`s); a
    raised `ConfigError` names the bad key and the run does not start.
    """

    def __init__(self, config, tools):
        self.tools = tuple(tools)

    def decide(self, view):
        """The next `Decision`, given the whole run so far (`View`)."""
        raise NotImplementedError("decide")


class Policy:
    """Judges each tool call before it runs.

    `view` says how much of the run `evaluate` needs: `"full"` (every step
    and approval) or `"call-only"` (the run's info alone, so each call costs
    the same however long the run). Set it on the class or in `__init__`.
    """

    view = "full"

    def __init__(self, config):
        pass

    def evaluate(self, call, effect, view):
        """A `Verdict` on `call` (`ToolCall`), whose tool has effect class
        `effect` (`"read-only"` ... `"destructive"`). An exception fails the
        run: a policy that cannot judge never allows."""
        raise NotImplementedError("evaluate")


class Tool:
    """Provides one or more tools."""

    def __init__(self, config):
        pass

    def specs(self):
        """The tools provided, as `ToolSpec`s; asked once after `__init__`."""
        raise NotImplementedError("specs")

    def call(self, name, arguments):
        """Runs tool `name` with `arguments` (JSON text, already checked
        against its schema by the host; `keel_guest.args.decode` types it).
        Returns any JSON value (or `Json` text); an exception becomes the
        call's `tool-error` observation."""
        raise NotImplementedError("call")


def _what(err):
    return "%s: %s" % (type(err).__name__, err)


def _init_error(cls, err):
    if isinstance(err, ConfigError):
        return str(err)
    return "config: %s.__init__ raised %s" % (cls.__name__, _what(err))


def _call_error(cls, method, err):
    if isinstance(err, DeltaError):
        return str(err)
    return "%s.%s: %s" % (cls.__name__, method, _what(err))


def export_agent(cls):
    """The `WitWorld` class that serves agent class `cls`."""
    import wit_world
    from componentize_py_types import Err

    from . import _wit

    state = {"agent": None, "view": View()}

    class WitWorld(wit_world.WitWorld):
        def init(self, config, tools):
            state["agent"] = None
            state["view"] = View()
            try:
                state["agent"] = cls(config, tuple(_wit.tool_spec(s) for s in tools))
            except Exception as err:
                raise Err(_init_error(cls, err))

        def decide(self, delta):
            agent = state["agent"]
            if agent is None:
                raise Err("decide called before a successful init")
            try:
                state["view"].apply(_wit.delta(delta))
                return _wit.decision_out(agent.decide(state["view"]))
            except Exception as err:
                raise Err(_call_error(cls, "decide", err))

    return WitWorld


def export_policy(cls):
    """The `WitWorld` class that serves policy class `cls`."""
    import wit_world
    from componentize_py_types import Err

    from . import _wit

    state = {"policy": None, "view": View()}

    class WitWorld(wit_world.WitWorld):
        def init(self, config):
            state["policy"] = None
            state["view"] = View()
            try:
                policy = cls(config)
            except Exception as err:
                raise Err(_init_error(cls, err))
            view = _wit.POLICY_VIEW_OUT.get(getattr(policy, "view", "full"))
            if view is None:
                raise Err("config: %s.view is %r, not \"full\" or \"call-only\"" % (cls.__name__, policy.view))
            state["policy"] = policy
            return view

        def evaluate(self, call, effect, delta):
            policy = state["policy"]
            if policy is None:
                raise Err("evaluate called before a successful init")
            try:
                state["view"].apply(_wit.delta(delta))
                verdict = policy.evaluate(ToolCall(call.tool, call.arguments), _wit.EFFECT[effect], state["view"])
                return _wit.verdict_out(verdict)
            except Exception as err:
                raise Err(_call_error(cls, "evaluate", err))

    return WitWorld


def export_tool(cls):
    """The `WitWorld` class that serves tool class `cls`."""
    import wit_world
    from componentize_py_types import Err

    from . import _wit
    from .types import encode

    state = {"tool": None}

    class WitWorld(wit_world.WitWorld):
        def init(self, config):
            state["tool"] = None
            try:
                state["tool"] = cls(config)
            except Exception as err:
                raise Err(_init_error(cls, err))

        def specs(self):
            # `specs` cannot fail in the WIT: a tool that cannot list its
            # specs offers none, and the host refuses a tool without specs.
            tool = state["tool"]
            if tool is None:
                return []
            try:
                return [_wit.tool_spec_out(s) for s in tool.specs()]
            except Exception as err:
                from . import log

                log.error("%s.specs: %s" % (cls.__name__, _what(err)))
                return []

        def call(self, name, arguments):
            tool = state["tool"]
            if tool is None:
                raise Err("call before a successful init")
            try:
                return encode(tool.call(name, arguments))
            except Exception as err:
                raise Err(_call_error(cls, "call", err))

    return WitWorld
