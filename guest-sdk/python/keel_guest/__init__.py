"""Write Keel agents, policies and tools in Python.

Subclass `Agent`, `Policy` or `Tool`, then bind the export in the module
componentize-py builds (see README.md):

    import keel_guest as keel

    class ReadOnly(keel.Policy):
        view = "call-only"

        def evaluate(self, call, effect, view):
            if effect == "read-only":
                return keel.Verdict.allow()
            return keel.Verdict.require_approval("writes need a human")

    WitWorld = keel.export_policy(ReadOnly)

Everything but the export runs without the generated bindings, so plugin
logic is tested with plain `unittest`.
"""

__version__ = "0.1.0"

from . import args, config, jsontext, log, model
from .args import ArgumentsError
from .config import ConfigError
from .jsontext import JsonError
from .types import (
    EFFECTS,
    Approval,
    Decision,
    Json,
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    Observation,
    RunInfo,
    Step,
    ToolCall,
    ToolSpec,
    Verdict,
    ViewDelta,
)
from .view import DeltaError, View
from .worlds import Agent, Policy, Tool, export_agent, export_policy, export_tool

__all__ = [
    "args", "config", "jsontext", "log", "model",
    "ArgumentsError", "ConfigError", "JsonError", "DeltaError",
    "EFFECTS", "Approval", "Decision", "Json", "Message", "ModelError", "ModelRequest",
    "ModelResponse", "ModelToolCall", "Observation", "RunInfo", "Step", "ToolCall",
    "ToolSpec", "Verdict", "ViewDelta", "View",
    "Agent", "Policy", "Tool", "export_agent", "export_policy", "export_tool",
]
