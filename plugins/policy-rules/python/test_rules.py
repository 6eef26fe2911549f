"""Unit tests of rules.py: python3 -m unittest discover -s plugins/policy-rules/python"""

import json
import unittest

from keel_guest import ConfigError, Verdict
from rules import RulesPolicy, glob_match


def policy(rules, **top):
    top["rules"] = rules
    return RulesPolicy(json.dumps(top))


def pres(rule, tool):
    return json.dumps({"rule": rule, "tool": tool}, separators=(",", ":"), ensure_ascii=False)


class Actions(unittest.TestCase):
    def test_allow(self):
        p = policy([{"tool": "t", "action": "allow"}])
        self.assertEqual(p.judge("t", "{}", "read-only"), Verdict("allow"))

    def test_deny_default_reason(self):
        p = policy([{"tool": "x", "action": "allow"}, {"tool": "t", "action": "deny"}])
        self.assertEqual(p.judge("t", "{}", "read-only"), Verdict("deny", "matched rule 1"))

    def test_deny_with_reason(self):
        p = policy([{"tool": "t", "action": "deny", "reason": "no"}])
        self.assertEqual(p.judge("t", "{}", "read-only"), Verdict("deny", "no"))

    def test_abort(self):
        p = policy([{"action": "abort", "reason": "stop"}])
        self.assertEqual(p.judge("t", "{}", "destructive"), Verdict("abort", "stop"))
        p = policy([{"action": "abort"}])
        self.assertEqual(p.judge("t", "{}", "destructive"), Verdict("abort", "matched rule 0"))

    def test_require_approval(self):
        p = policy([{"tool": "a", "action": "allow"}, {"tool": "fs_*", "action": "require-approval", "reason": "ask"}])
        v = p.judge("fs_write", "{}", "local-mutation")
        self.assertEqual(v, Verdict("require-approval", "ask", '{"rule":1,"tool":"fs_write"}'))
        self.assertEqual(json.loads(v.presentation), {"rule": 1, "tool": "fs_write"})

    def test_require_approval_default_reason_and_unicode_tool(self):
        p = policy([{"action": "require-approval"}])
        self.assertEqual(
            p.judge("écrire", "{}", "read-only"),
            Verdict("require-approval", "matched rule 0", pres(0, "écrire")),
        )


class Order(unittest.TestCase):
    def test_first_match_wins(self):
        p = policy(
            [
                {"tool": "fs_read", "action": "allow"},
                {"tool": "fs_*", "action": "deny", "reason": "fs"},
                {"action": "abort"},
            ]
        )
        self.assertEqual(p.judge("fs_read", "{}", "read-only").kind, "allow")
        self.assertEqual(p.judge("fs_write", "{}", "read-only"), Verdict("deny", "fs"))
        self.assertEqual(p.judge("net", "{}", "read-only"), Verdict("abort", "matched rule 2"))

    def test_all_conditions_must_match(self):
        p = policy([{"tool": "t", "effect": "destructive", "args": {"a": "x"}, "action": "abort"}])
        self.assertEqual(p.judge("t", '{"a":"x"}', "destructive").kind, "abort")
        self.assertEqual(p.judge("u", '{"a":"x"}', "destructive").kind, "deny")
        self.assertEqual(p.judge("t", '{"a":"x"}', "idempotent").kind, "deny")
        self.assertEqual(p.judge("t", '{"a":"y"}', "destructive").kind, "deny")


class Default(unittest.TestCase):
    def test_default_deny(self):
        p = policy([])
        self.assertEqual(p.judge("t", "{}", "read-only"), Verdict("deny", "no rule matched"))
        p = policy([{"tool": "x", "action": "allow"}])
        self.assertEqual(p.judge("t", "{}", "read-only"), Verdict("deny", "no rule matched"))

    def test_default_override(self):
        self.assertEqual(policy([], default="allow").judge("t", "{}", "read-only"), Verdict("allow"))
        self.assertEqual(
            policy([], default="abort").judge("t", "{}", "read-only"), Verdict("abort", "no rule matched")
        )
        self.assertEqual(
            policy([], default="deny").judge("t", "{}", "read-only"), Verdict("deny", "no rule matched")
        )

    def test_default_require_approval_has_null_rule(self):
        v = policy([], default="require-approval").judge("t", "{}", "read-only")
        self.assertEqual(v, Verdict("require-approval", "no rule matched", '{"rule":null,"tool":"t"}'))


class ToolGlob(unittest.TestCase):
    def test_glob(self):
        p = policy([{"tool": "fs_*", "action": "allow"}])
        self.assertEqual(p.judge("fs_", "{}", "read-only").kind, "allow")
        self.assertEqual(p.judge("fs_read", "{}", "read-only").kind, "allow")
        self.assertEqual(p.judge("xfs_read", "{}", "read-only").kind, "deny")

    def test_whole_string(self):
        p = policy([{"tool": "fs", "action": "allow"}])
        self.assertEqual(p.judge("fs", "{}", "read-only").kind, "allow")
        self.assertEqual(p.judge("fs_read", "{}", "read-only").kind, "deny")

    def test_absent_tool_matches_any(self):
        p = policy([{"action": "allow"}])
        self.assertEqual(p.judge("anything", "{}", "read-only").kind, "allow")

    def test_glob_function(self):
        cases = [
            ("*", "", True),
            ("*", "a/b/c", True),
            ("a*", "a", True),
            ("a*c", "abc/dc", True),
            ("a*c", "abcd", False),
            ("?", "", False),
            ("?", "a", True),
            ("?", "ab", False),
            ("a?c", "a/c", True),
            ("", "", True),
            ("", "a", False),
            ("[ab]", "a", False),
            ("[ab]", "[ab]", True),
            ("\\*", "\\x", True),
            ("\\*", "*", False),
            ("*.txt", "notes.txt", True),
            ("*.txt", "notes.txt.bak", False),
            ("**a**b**", "xxaxxbxx", True),
            ("*a*b", "ba", False),
            ("a" * 30 + "b", "a" * 31, False),
            ("*a" * 20 + "b", "a" * 200, False),
        ]
        for pattern, text, expected in cases:
            self.assertEqual(glob_match(pattern, text), expected, (pattern, text))

    def test_question_mark_is_one_scalar_value(self):
        self.assertTrue(glob_match("?", "é"))
        self.assertTrue(glob_match("?", "\U0001F600"))  # outside the BMP: one scalar, two UTF-16 units
        self.assertFalse(glob_match("??", "\U0001F600"))
        self.assertTrue(glob_match("a?b", "a\u65e5b"))
        self.assertFalse(glob_match("?", "e\u0301"))  # two scalar values
        p = policy([{"tool": "t?", "action": "allow"}])
        self.assertEqual(p.judge("t\U0001F600", "{}", "read-only").kind, "allow")
        p = policy([{"args": {"c": "??"}, "action": "allow"}])
        self.assertEqual(p.judge("t", '{"c":"\\ud83d\\ude00"}', "read-only").kind, "deny")
        self.assertEqual(p.judge("t", '{"c":"\\u00e9\\u00e9"}', "read-only").kind, "allow")


class Effect(unittest.TestCase):
    def test_string(self):
        p = policy([{"effect": "destructive", "action": "abort"}])
        self.assertEqual(p.judge("t", "{}", "destructive").kind, "abort")
        self.assertEqual(p.judge("t", "{}", "read-only").kind, "deny")

    def test_array(self):
        p = policy([{"effect": ["local-mutation", "remote-mutation"], "action": "require-approval"}])
        for e in ("local-mutation", "remote-mutation"):
            self.assertEqual(p.judge("t", "{}", e).kind, "require-approval")
        for e in ("read-only", "idempotent", "destructive"):
            self.assertEqual(p.judge("t", "{}", e).kind, "deny")

    def test_every_class_accepted(self):
        for e in ("read-only", "idempotent", "local-mutation", "remote-mutation", "destructive"):
            p = policy([{"effect": e, "action": "allow"}])
            self.assertEqual(p.judge("t", "{}", e).kind, "allow")


class Args(unittest.TestCase):
    def setUp(self):
        self.p = policy([{"tool": "fs_*", "args": {"path": "secrets/*"}, "action": "deny", "reason": "secret"}],
                        default="allow")

    def test_glob_matches(self):
        self.assertEqual(self.p.judge("fs_read", '{"path":"secrets/a/b"}', "read-only"), Verdict("deny", "secret"))
        self.assertEqual(self.p.judge("fs_read", '{"path":"public/a"}', "read-only").kind, "allow")

    def test_missing_key(self):
        self.assertEqual(self.p.judge("fs_read", '{"file":"secrets/a"}', "read-only").kind, "allow")

    def test_non_string_value(self):
        for value in ('1', 'null', 'true', '["secrets/a"]', '{"x":"secrets/a"}'):
            args = '{"path":%s}' % value
            self.assertEqual(self.p.judge("fs_read", args, "read-only").kind, "allow", args)

    def test_non_object_arguments(self):
        for args in ('[]', '"secrets/a"', 'null', '3', 'not json'):
            self.assertEqual(self.p.judge("fs_read", args, "read-only").kind, "allow", args)

    def test_too_deep_arguments_are_not_an_object(self):
        p = policy([{"args": {"a": "*"}, "action": "allow"}])
        ok = '{"b":%s,"a":"z"}' % ("[" * 126 + "]" * 126)  # 127 levels in all
        deep = '{"b":%s,"a":"z"}' % ("[" * 127 + "]" * 127)
        self.assertEqual(p.judge("t", ok, "read-only").kind, "allow")
        self.assertEqual(p.judge("t", deep, "read-only").kind, "deny")
        in_string = '{"b":"%s","a":"z"}' % ("[{" * 1000)
        self.assertEqual(p.judge("t", in_string, "read-only").kind, "allow")

    def test_every_entry_must_match(self):
        p = policy([{"args": {"a": "1", "b": "2*"}, "action": "allow"}])
        self.assertEqual(p.judge("t", '{"a":"1","b":"22","c":3}', "read-only").kind, "allow")
        self.assertEqual(p.judge("t", '{"a":"1"}', "read-only").kind, "deny")
        self.assertEqual(p.judge("t", '{"a":"1","b":"3"}', "read-only").kind, "deny")

    def test_empty_args_matches_anything(self):
        p = policy([{"args": {}, "action": "allow"}])
        self.assertEqual(p.judge("t", "{}", "read-only").kind, "allow")
        self.assertEqual(p.judge("t", "[1]", "read-only").kind, "allow")


class InitErrors(unittest.TestCase):
    def err(self, text):
        with self.assertRaises(ConfigError) as cm:
            RulesPolicy(text)
        return str(cm.exception)

    def check(self, config, prefix):
        text = config if isinstance(config, str) else json.dumps(config)
        msg = self.err(text)
        self.assertTrue(msg.startswith(prefix + ": "), "%r does not start with %r" % (msg, prefix))
        return msg

    def test_invalid_json(self):
        self.check("{", "config: invalid JSON")
        self.check("", "config.rules")  # empty text is {}, as in every SDK
        self.check('{"rules":[]} x', "config: invalid JSON")
        self.check('{"rules":[NaN]}', "config: invalid JSON")
        self.check("[" * 100000 + "]" * 100000, "config: invalid JSON")
        deep = '{"rules":[{"action":"allow","reason":"x"}],"x":%s}'
        self.check(deep % ("[" * 127 + "]" * 127), "config: invalid JSON")
        # 127 levels in all parse (as serde_json); then the unknown key is found
        self.assertEqual(self.err(deep % ("[" * 126 + "]" * 126)), 'config: unknown key "x"')

    def test_not_an_object(self):
        for c in ("[]", "\"x\"", "1", "null"):
            self.assertEqual(self.check(c, "config"), "config: expected an object")

    def test_unknown_top_key(self):
        self.assertEqual(self.check({"rule": []}, "config"), 'config: unknown key "rule"')

    def test_rules_missing_or_wrong(self):
        self.assertEqual(self.check({}, "config.rules"), "config.rules: missing")
        self.assertEqual(self.check({"default": "allow"}, "config.rules"), "config.rules: missing")
        self.assertEqual(self.check({"rules": {}}, "config.rules"), "config.rules: expected an array")

    def test_rule_not_object(self):
        self.assertEqual(
            self.check({"rules": [{"action": "allow"}, {"action": "deny"}, "x"]}, "config.rules[2]"),
            "config.rules[2]: expected an object",
        )

    def test_rule_unknown_key(self):
        self.assertEqual(
            self.check({"rules": [{"tools": "x", "action": "allow"}]}, "config.rules[0]"),
            'config.rules[0]: unknown key "tools"',
        )

    def test_action_missing(self):
        self.check({"rules": [{"action": "allow"}, {"tool": "x"}]}, "config.rules[1].action")

    def test_action_bad(self):
        msg = self.check({"rules": [{"action": "allow"}, {"action": "permit"}]}, "config.rules[1].action")
        self.assertEqual(msg, 'config.rules[1].action: "permit" is not one of allow, deny, require-approval, abort')
        self.check({"rules": [{"action": 1}]}, "config.rules[0].action")

    def test_effect_bad_class(self):
        msg = self.check({"rules": [{"effect": "write", "action": "deny"}]}, "config.rules[0].effect")
        self.assertEqual(msg, 'config.rules[0].effect: "write" is not an effect class')
        self.check({"rules": [{"effect": ["read-only", "write"], "action": "deny"}]}, "config.rules[0].effect")

    def test_effect_bad_shape(self):
        for effect in ([], [1], ["read-only", None], 3, {"a": "read-only"}, None):
            msg = self.check({"rules": [{"effect": effect, "action": "deny"}]}, "config.rules[0].effect")
            self.assertIn("expected a string or a non-empty array of strings", msg)

    def test_tool_not_string(self):
        self.check({"rules": [{"tool": 3, "action": "deny"}]}, "config.rules[0].tool")

    def test_reason_not_string(self):
        self.check({"rules": [{"reason": ["x"], "action": "deny"}]}, "config.rules[0].reason")

    def test_args_bad(self):
        self.check({"rules": [{"args": {"path": 1}, "action": "deny"}]}, "config.rules[0].args.path")
        self.check({"rules": [{"args": {"a": "x", "path": None}, "action": "deny"}]}, "config.rules[0].args.path")
        self.check({"rules": [{"args": ["path"], "action": "deny"}]}, "config.rules[0].args")

    def test_default_bad(self):
        msg = self.check({"rules": [], "default": "maybe"}, "config.default")
        self.assertEqual(msg, 'config.default: "maybe" is not one of allow, deny, require-approval, abort')
        self.check({"rules": [], "default": None}, "config.default")

    def test_first_problem_in_document_order(self):
        # top level: the key that comes first
        self.assertEqual(self.check('{"default":"maybe","rules":3}', "config.default")[:15], "config.default:")
        self.check('{"rules":3,"default":"maybe"}', "config.rules")
        self.check('{"bogus":1,"rules":3}', "config")
        # within a rule: keys in order, `action: missing` only after all present keys
        self.check('{"rules":[{"effect":"write","action":"permit"}]}', "config.rules[0].effect")
        self.check('{"rules":[{"action":"permit","effect":"write"}]}', "config.rules[0].action")
        self.check('{"rules":[{"tool":1}]}', "config.rules[0].tool")
        self.check('{"rules":[{"nope":1}]}', "config.rules[0]")
        # rules in order
        self.check('{"rules":[{"action":"allow"},{"x":1},{"y":2}]}', "config.rules[1]")
        self.check('{"rules":[{"effect":[1,"write"],"action":"deny"}]}', "config.rules[0].effect")

    def test_valid_example_from_readme(self):
        p = policy(
            [
                {"tool": "fs_read", "action": "allow"},
                {"tool": "fs_*", "args": {"path": "secrets/*"}, "action": "deny", "reason": "secrets are off limits"},
                {"effect": ["local-mutation", "remote-mutation"], "action": "require-approval",
                 "reason": "writes need a human"},
                {"effect": "destructive", "action": "abort"},
            ],
            default="deny",
        )
        self.assertEqual(p.judge("fs_read", '{"path":"secrets/x"}', "read-only"), Verdict("allow"))
        self.assertEqual(
            p.judge("fs_write", '{"path":"secrets/x"}', "local-mutation"),
            Verdict("deny", "secrets are off limits"),
        )
        self.assertEqual(
            p.judge("fs_write", '{"path":"a"}', "local-mutation"),
            Verdict("require-approval", "writes need a human", '{"rule":2,"tool":"fs_write"}'),
        )
        self.assertEqual(p.judge("rm", "{}", "destructive"), Verdict("abort", "matched rule 3"))
        self.assertEqual(p.judge("ls", "{}", "read-only"), Verdict("deny", "no rule matched"))


if __name__ == "__main__":
    unittest.main()
