"""agent-scripted, Python twin: the component's entry module.

componentize-py builds this module (see build.sh); the SDK serves the
`agent` world from the class in script.py.
"""

import keel_guest

from script import Script

WitWorld = keel_guest.export_agent(Script)
