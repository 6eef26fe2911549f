"""Unit tests, run without building: ./test.sh"""

import json
import unittest

import keel_guest as keel

from plugin import Plugin


def view(goal):
    v = keel.View()
    v.apply(keel.ViewDelta(reset=True, run=keel.RunInfo(id="r1", goal=goal)))
    return v


class PluginTest(unittest.TestCase):
    def test_completes_with_the_goal(self):
        decision = Plugin("", []).decide(view("say hi"))
        self.assertEqual(decision.kind, "complete")
        self.assertEqual(json.loads(decision.value), {"goal": "say hi", "tools": 0})

    def test_an_unknown_key_is_refused(self):
        with self.assertRaisesRegex(keel.ConfigError, r'^config: unknown key "x"$'):
            Plugin('{"x":1}', [])


if __name__ == "__main__":
    unittest.main()
