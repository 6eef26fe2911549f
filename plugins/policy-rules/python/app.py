"""policy-rules, Python twin: the `policy` world's exports.

Built by build.sh with componentize-py, which generates the `wit_world` and
`componentize_py_types` modules at build time (they are not committed). All
logic lives in rules.py.
"""

import wit_world
from wit_world.imports import types
from componentize_py_types import Err

import rules

# Module-level state: one component instance is one plugin instance.
_policy = None


def _effect_name(effect):
    # types.Effect.LOCAL_MUTATION -> "local-mutation"
    return effect.name.lower().replace("_", "-")


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global _policy
        try:
            _policy = rules.Policy.parse(config)
        except rules.ConfigError as err:
            _policy = None
            raise Err(str(err))
        except Exception as err:  # never trap on a bad config
            _policy = None
            raise Err("config: %s: %s" % (type(err).__name__, err))
        # Rules match the call alone: the host need not send the steps.
        return types.PolicyView.CALL_ONLY

    def evaluate(self, call, effect, view):
        if _policy is None:
            raise Err("evaluate called before a successful init")
        try:
            v = _policy.evaluate(call.tool, call.arguments, _effect_name(effect))
        except Exception as err:  # a policy that cannot judge never allows
            raise Err("policy-rules: %s: %s" % (type(err).__name__, err))
        if v.action == "allow":
            return types.Verdict_Allow()
        if v.action == "deny":
            return types.Verdict_Deny(v.reason)
        if v.action == "abort":
            return types.Verdict_Abort(v.reason)
        return types.Verdict_RequireApproval(types.ApprovalRequest(v.reason, v.presentation))
