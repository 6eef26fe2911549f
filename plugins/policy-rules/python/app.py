"""policy-rules, Python twin: the component's entry module.

componentize-py builds this module (see build.sh); the SDK serves the
`policy` world from the class in rules.py.
"""

import keel_guest

from rules import RulesPolicy

WitWorld = keel_guest.export_policy(RulesPolicy)
