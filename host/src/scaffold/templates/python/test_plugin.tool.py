"""Unit tests, run without building: ./test.sh"""

import unittest

import keel_guest as keel

from plugin import Plugin


class PluginTest(unittest.TestCase):
    def test_echoes_its_arguments(self):
        tool = Plugin("")
        self.assertEqual([s.name for s in tool.specs()], ["echo"])
        self.assertEqual(tool.call("echo", '{"a":1}'), '{"a":1}')
        with self.assertRaises(ValueError):
            tool.call("other", "{}")


if __name__ == "__main__":
    unittest.main()
