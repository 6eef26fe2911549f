"""Unit tests, run without building: ./test.sh"""

import unittest

import keel_guest as keel

from plugin import Plugin


def judge(effect):
    return Plugin("{}").evaluate(keel.ToolCall("fs_write"), effect, keel.View())


class PluginTest(unittest.TestCase):
    def test_read_only_calls_are_allowed(self):
        self.assertEqual(judge("read-only"), keel.Verdict.allow())

    def test_other_calls_need_an_operator(self):
        for effect in keel.EFFECTS[1:]:
            self.assertEqual(judge(effect).kind, "require-approval", effect)

    def test_an_unknown_key_is_refused(self):
        with self.assertRaisesRegex(keel.ConfigError, r'^config: unknown key "x"$'):
            Plugin('{"x":1}')


if __name__ == "__main__":
    unittest.main()
