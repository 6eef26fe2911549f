"""The values plugins and the host exchange, as plain Python.

Enumerations are their WIT names as strings (`"read-only"`, `"done"`,
`"tool-result"`), JSON fields hold JSON text, and every record is frozen:
what the host sent cannot be changed by the plugin's own code. The SDK maps
these to and from the generated bindings at the boundary, so plugin logic
and its unit tests never import the bindings.
"""

from dataclasses import dataclass, field
from typing import Optional, Tuple

from . import jsontext

EFFECTS = ("read-only", "idempotent", "local-mutation", "remote-mutation", "destructive")
STEP_STATES = ("started", "decided", "awaiting-approval", "executing", "done", "interrupted")
OBSERVATION_KINDS = ("tool-result", "tool-error", "denied", "invalid-decision", "final")
APPROVAL_KINDS = ("policy", "interrupted-side-effect")
APPROVAL_STATUSES = ("pending", "approved", "denied", "expired")
RUN_STATUSES = ("running", "waiting-for-approval", "completed", "failed", "cancelled")
ROLES = ("system", "user", "assistant", "tool")
FINISH_REASONS = ("stop", "tool-calls", "length", "content-filter", "other")


class Json(str):
    """JSON text that the SDK passes on as it is (checked to parse), where a
    plain value would be encoded: `Decision.complete(Json('{"a":1}'))`."""

    def __new__(cls, text):
        jsontext.parse(text)
        return super().__new__(cls, text)


def encode(value):
    """Compact JSON text of `value`; a `Json` is returned as it is."""
    if isinstance(value, Json):
        return str(value)
    return jsontext.compact(value)


@dataclass(frozen=True)
class ToolSpec:
    """A tool as agents and policies see it; `parameters` is JSON Schema text."""

    name: str
    description: str = ""
    parameters: str = '{"type":"object"}'
    effect: str = "destructive"


@dataclass(frozen=True)
class ToolCall:
    """A request to run `tool` with `arguments` (JSON text of an object)."""

    tool: str
    arguments: str = "{}"

    def args(self):
        """The arguments as a Python dict."""
        return jsontext.parse(self.arguments)


@dataclass(frozen=True)
class Decision:
    """What an agent wants next. `kind` is `call`, `complete`, `fail` or
    `invalid`; `call` has `call`, `complete` has `value` (JSON text), `fail`
    and `invalid` have `value` (the reason)."""

    kind: str
    value: Optional[str] = None
    call: Optional[ToolCall] = None

    @staticmethod
    def call_tool(tool, arguments=None):
        """Run `tool` with `arguments` (a dict, or `Json` text; none is
        `{}`). Arguments that are not an object reach the host, which
        records an `invalid-decision` for the agent to see."""
        return Decision("call", call=ToolCall(tool, "{}" if arguments is None else encode(arguments)))

    @staticmethod
    def complete(value=None):
        """End the run with `value` (any JSON value, or `Json` text) as its
        result."""
        return Decision("complete", value=encode(value))

    @staticmethod
    def fail(reason):
        """End the run as failed."""
        return Decision("fail", value=str(reason))

    @staticmethod
    def invalid(reason):
        """No usable decision this time; the agent sees `reason` next step."""
        return Decision("invalid", value=str(reason))


@dataclass(frozen=True)
class Verdict:
    """A policy's judgement. `kind` is `allow`, `deny`, `require-approval` or
    `abort`; all but `allow` carry a `reason`, `require-approval` also a
    `presentation` (JSON text shown beside the call)."""

    kind: str
    reason: Optional[str] = None
    presentation: Optional[str] = None

    @staticmethod
    def allow():
        return Verdict("allow")

    @staticmethod
    def deny(reason):
        return Verdict("deny", str(reason))

    @staticmethod
    def abort(reason):
        return Verdict("abort", str(reason))

    @staticmethod
    def require_approval(reason, presentation=None):
        """Pause for an operator; `presentation` is any JSON value."""
        return Verdict("require-approval", str(reason), encode(presentation))


@dataclass(frozen=True)
class Observation:
    kind: str
    content: str


@dataclass(frozen=True)
class Step:
    """One step of the run as the host stored it."""

    index: int
    version: int
    state: str
    decision: Optional[Decision] = None
    verdict: Optional[Verdict] = None
    observation: Optional[Observation] = None


@dataclass(frozen=True)
class Approval:
    id: str
    step_index: int
    kind: str
    status: str
    call: ToolCall
    reason: str = ""
    decided_by: Optional[str] = None
    note: Optional[str] = None


@dataclass(frozen=True)
class RunInfo:
    id: str
    goal: str
    status: str = "running"
    step_count: int = 0
    model_calls: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class ViewDelta:
    """What changed since the instance's last call (see `View.apply`)."""

    reset: bool
    run: RunInfo
    steps: Tuple[Step, ...] = ()
    approvals: Tuple[Approval, ...] = ()


@dataclass(frozen=True)
class ModelToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    role: str
    content: str = ""
    tool_calls: Tuple[ModelToolCall, ...] = ()
    tool_call_id: Optional[str] = None


@dataclass(frozen=True)
class ModelRequest:
    messages: Tuple[Message, ...]
    tools: Tuple[ToolSpec, ...] = ()
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None


@dataclass(frozen=True)
class ModelResponse:
    message: Message
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ModelError(Exception):
    """The model call failed; `kind` is `limit-exceeded`, `transient`,
    `permanent` or `invalid-request`."""

    def __init__(self, kind, message):
        super().__init__("%s: %s" % (kind, message))
        self.kind = kind
        self.message = message
