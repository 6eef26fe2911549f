"""The host's model client, for agents.

The host holds the credentials, makes the request, retries what its config
allows and counts calls and tokens against the run's limits; past them it
answers `limit-exceeded`. Errors are raised as `ModelError`.
"""

from .types import Message, ModelError, ModelRequest, ModelResponse, ModelToolCall

_KINDS = {
    "ModelError_LimitExceeded": "limit-exceeded",
    "ModelError_Transient": "transient",
    "ModelError_Permanent": "permanent",
    "ModelError_InvalidRequest": "invalid-request",
}


def _message_out(t, m):
    if not isinstance(m, Message):
        raise TypeError("expected a Message, got %s" % type(m).__name__)
    role = getattr(t.Role, m.role.upper().replace("-", "_"), None)
    if role is None:
        raise ValueError("%r is not a role (system, user, assistant, tool)" % m.role)
    calls = [t.ModelToolCall(c.id, c.name, c.arguments) for c in m.tool_calls]
    return t.Message(role, m.content, calls, m.tool_call_id)


def _message(m):
    return Message(
        m.role.name.lower(),
        m.content,
        tuple(ModelToolCall(c.id, c.name, c.arguments) for c in m.tool_calls),
        m.tool_call_id,
    )


def complete(request):
    """A completion for `request` (a `ModelRequest`). Raises `ModelError`."""
    from componentize_py_types import Err
    from wit_world.imports import model as wit_model
    from wit_world.imports import types as t

    from . import _wit

    if not isinstance(request, ModelRequest):
        raise TypeError("expected a ModelRequest, got %s" % type(request).__name__)
    wire = t.ModelRequest(
        [_message_out(t, m) for m in request.messages],
        [_wit.tool_spec_out(s) for s in request.tools],
        request.max_tokens,
        request.temperature,
    )
    try:
        r = wit_model.complete(wire)
    except Err as err:
        raise ModelError(_KINDS.get(type(err.value).__name__, "permanent"), err.value.value) from None
    return ModelResponse(
        _message(r.message),
        r.finish_reason.name.lower().replace("_", "-"),
        r.prompt_tokens,
        r.completion_tokens,
    )
