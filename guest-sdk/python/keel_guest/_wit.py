"""The boundary: generated componentize-py bindings to and from the SDK's
own types. Imported only inside a component, where `wit_world` exists."""

from wit_world.imports import types as t

from . import types as k


def _names(enum):
    return {member: member.name.lower().replace("_", "-") for member in enum}


def _members(enum):
    return {name: member for member, name in _names(enum).items()}


EFFECT = _names(t.Effect)
EFFECT_OUT = _members(t.Effect)
STATE = _names(t.StepState)
OBS = _names(t.ObservationKind)
APPROVAL_KIND = _names(t.ApprovalKind)
APPROVAL_STATUS = _names(t.ApprovalStatus)
RUN_STATUS = _names(t.RunStatus)
POLICY_VIEW_OUT = _members(t.PolicyView)


def tool_spec(s):
    return k.ToolSpec(s.name, s.description, s.parameters, EFFECT[s.effect])


def tool_spec_out(s):
    if not isinstance(s, k.ToolSpec):
        raise TypeError("expected a ToolSpec, got %s" % type(s).__name__)
    if s.effect not in EFFECT_OUT:
        raise ValueError("tool %s: %r is not an effect class" % (s.name, s.effect))
    return t.ToolSpec(s.name, s.description, s.parameters, EFFECT_OUT[s.effect])


def decision(d):
    if d is None:
        return None
    if isinstance(d, t.Decision_Call):
        return k.Decision("call", call=k.ToolCall(d.value.tool, d.value.arguments))
    if isinstance(d, t.Decision_Complete):
        return k.Decision("complete", value=d.value)
    if isinstance(d, t.Decision_Fail):
        return k.Decision("fail", value=d.value)
    return k.Decision("invalid", value=d.value)


def decision_out(d):
    if not isinstance(d, k.Decision):
        raise TypeError("decide returned %s, not a Decision" % type(d).__name__)
    if d.kind == "call":
        return t.Decision_Call(t.ToolCall(d.call.tool, d.call.arguments))
    if d.kind == "complete":
        return t.Decision_Complete(d.value)
    if d.kind == "fail":
        return t.Decision_Fail(d.value)
    if d.kind == "invalid":
        return t.Decision_Invalid(d.value)
    raise ValueError("decision kind %r is not call, complete, fail or invalid" % d.kind)


def verdict(v):
    if v is None:
        return None
    if isinstance(v, t.Verdict_Allow):
        return k.Verdict("allow")
    if isinstance(v, t.Verdict_Deny):
        return k.Verdict("deny", v.value)
    if isinstance(v, t.Verdict_Abort):
        return k.Verdict("abort", v.value)
    return k.Verdict("require-approval", v.value.reason, v.value.presentation)


def verdict_out(v):
    if not isinstance(v, k.Verdict):
        raise TypeError("evaluate returned %s, not a Verdict" % type(v).__name__)
    if v.kind == "allow":
        return t.Verdict_Allow()
    if v.kind == "deny":
        return t.Verdict_Deny(v.reason)
    if v.kind == "abort":
        return t.Verdict_Abort(v.reason)
    if v.kind == "require-approval":
        return t.Verdict_RequireApproval(t.ApprovalRequest(v.reason, v.presentation))
    raise ValueError("verdict kind %r is not allow, deny, require-approval or abort" % v.kind)


def step(s):
    o = s.observation
    return k.Step(
        s.index,
        s.version,
        STATE[s.state],
        decision(s.decision),
        verdict(s.verdict),
        None if o is None else k.Observation(OBS[o.kind], o.content),
    )


def approval(a):
    return k.Approval(
        a.id,
        a.step_index,
        APPROVAL_KIND[a.kind],
        APPROVAL_STATUS[a.status],
        k.ToolCall(a.call.tool, a.call.arguments),
        a.reason,
        a.decided_by,
        a.note,
    )


def delta(d):
    r = d.run
    return k.ViewDelta(
        d.reset,
        k.RunInfo(r.id, r.goal, RUN_STATUS[r.status], r.step_count, r.model_calls, r.tokens),
        tuple(step(s) for s in d.steps),
        tuple(approval(a) for a in d.approvals),
    )
