"""{{name}}: a policy that allows read-only calls and asks an operator about
every other one."""

import keel_guest as keel


class Plugin(keel.Policy):
    # Judges each call alone: the host need not send the run's steps.
    view = "call-only"

    def __init__(self, config):
        super().__init__(config)
        # No keys yet: the strict reader refuses any, naming it.
        keel.config.parse(config).finish()

    def evaluate(self, call, effect, view):
        if effect == "read-only":
            return keel.Verdict.allow()
        return keel.Verdict.require_approval(
            "%s changes things (%s)" % (call.tool, effect), {"tool": call.tool}
        )
