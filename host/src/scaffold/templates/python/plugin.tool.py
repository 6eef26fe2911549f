"""{{name}}: a tool component with one tool, `echo`, that answers with its
arguments."""

import keel_guest as keel


class Plugin(keel.Tool):
    def __init__(self, config):
        super().__init__(config)
        # No keys yet: the strict reader refuses any, naming it.
        keel.config.parse(config).finish()

    def specs(self):
        return [keel.ToolSpec("echo", "Answers with its arguments.", '{"type":"object"}', "read-only")]

    def call(self, name, arguments):
        if name != "echo":
            raise ValueError("unknown tool %r" % name)
        return keel.Json(arguments)
