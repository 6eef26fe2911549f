"""Unit tests of script.py: python3 -m unittest discover -s plugins/agent-scripted/python"""

import json
import unittest
from keel_guest import Approval, ConfigError, Decision, RunInfo, Step, ToolCall, View, ViewDelta
from script import Script


def step(index, decided, version=1):
    decision = Decision.fail("x") if decided else None
    return Step(index, version, "decided" if decided else "started", decision)


def approval(id_, status="pending"):
    return Approval(id_, 0, "policy", status, ToolCall("t"))


def apply(view, reset, steps, approvals):
    view.apply(ViewDelta(reset, RunInfo("r", "g"), tuple(steps), tuple(approvals)))


def call(tool, arguments):
    return Decision("call", call=ToolCall(tool, arguments))


def complete(text):
    return Decision("complete", value=text)


def approvals(view):
    return {a.id: a for a in view.approvals}


README_CONFIG = {
    "script": [
        {"call": {"tool": "fs_write", "arguments": {"path": "hello.txt", "content": "hi"}}},
        {"call": {"tool": "fs_read", "arguments": {"path": "hello.txt"}}},
        {"complete": {"wrote": "hello.txt"}},
    ]
}


class Order(unittest.TestCase):
    def setUp(self):
        self.script = Script(json.dumps(README_CONFIG))

    def test_parsed_decisions(self):
        self.assertEqual(
            self.script.decisions,
            [
                call("fs_write", '{"path":"hello.txt","content":"hi"}'),
                call("fs_read", '{"path":"hello.txt"}'),
                complete('{"wrote":"hello.txt"}'),
            ],
        )

    def test_position_is_decided_step_count(self):
        view = View()
        apply(view, True, [], [])
        self.assertEqual(self.script.decide(view).call.tool, "fs_write")
        apply(view, False, [step(0, True)], [])
        self.assertEqual(self.script.decide(view).call.tool, "fs_read")
        apply(view, False, [step(1, True)], [])
        self.assertEqual(self.script.decide(view), complete('{"wrote":"hello.txt"}'))

    def test_undecided_steps_do_not_count(self):
        view = View()
        apply(view, True, [step(0, True), step(1, False)], [])
        self.assertEqual(self.script.decide(view).call.tool, "fs_read")

    def test_delta_upserts_by_index(self):
        view = View()
        apply(view, True, [step(0, True), step(1, False)], [approval("a")])
        # step 1 changes (decided now), step 0 is not sent again
        apply(view, False, [step(1, True, version=2)], [approval("a", "approved"), approval("b")])
        self.assertEqual(view.decided_steps, 2)
        self.assertEqual([s.index for s in view.steps], [0, 1])
        self.assertEqual(approvals(view)["a"].status, "approved")
        self.assertEqual(sorted(approvals(view)), ["a", "b"])
        # re-sending a step replaces it, it does not add one
        apply(view, False, [step(1, True, version=3)], [])
        self.assertEqual(view.decided_steps, 2)
        self.assertEqual(self.script.decide(view).kind, "complete")

    def test_reset_clears(self):
        view = View()
        apply(view, True, [step(0, True), step(1, True)], [approval("a")])
        apply(view, True, [step(0, True)], [])
        self.assertEqual(view.decided_steps, 1)
        self.assertEqual(view.approvals, ())
        self.assertEqual(self.script.decide(view).call.tool, "fs_read")

    def test_resume_from_fresh_instance(self):
        # a fresh instance sees the whole run at once and continues where it is
        view = View()
        apply(view, True, [step(0, True), step(1, True)], [])
        self.assertEqual(self.script.decide(view).kind, "complete")

    def test_exhausted(self):
        view = View()
        apply(view, True, [step(i, True) for i in range(3)], [])
        self.assertEqual(self.script.decide(view), Decision.fail("script exhausted after 3 decisions"))
        apply(view, False, [step(3, True)], [])
        self.assertEqual(self.script.decide(view), Decision.fail("script exhausted after 3 decisions"))

    def test_empty_script(self):
        s = Script('{"script":[]}')
        self.assertEqual(s.decide(View()), Decision.fail("script exhausted after 0 decisions"))


class Entries(unittest.TestCase):
    def one(self, entry):
        return Script(json.dumps({"script": [entry]})).decisions[0]

    def test_call_default_arguments(self):
        self.assertEqual(self.one({"call": {"tool": "t"}}), call("t", "{}"))

    def test_call_arguments_compact_any_json(self):
        self.assertEqual(self.one({"call": {"tool": "t", "arguments": {"a": [1, 2], "b": {"c": None}}}}).call.arguments,
                         '{"a":[1,2],"b":{"c":null}}')
        self.assertEqual(self.one({"call": {"tool": "t", "arguments": [1, "x"]}}).call.arguments, '[1,"x"]')
        self.assertEqual(self.one({"call": {"arguments": 5, "tool": "t"}}), call("t", "5"))

    def test_call_arguments_unicode(self):
        d = Script('{"script":[{"call":{"tool":"t","arguments":{"s":"\\u00e9\\ud83d\\ude00"}}}]}').decisions[0]
        self.assertEqual(d.call.arguments, '{"s":"\u00e9\U0001F600"}')
        # a lone surrogate cannot be a WIT string: it stays escaped
        d = Script('{"script":[{"call":{"tool":"t","arguments":{"s":"\\ud800"}}}]}').decisions[0]
        self.assertEqual(d.call.arguments, '{"s":"\\ud800"}')
        d.call.arguments.encode("utf-8")

    def test_complete_any_json(self):
        self.assertEqual(self.one({"complete": None}), complete("null"))
        self.assertEqual(self.one({"complete": "done"}), complete('"done"'))
        self.assertEqual(self.one({"complete": {"a": 1.5}}), complete('{"a":1.5}'))

    def test_fail(self):
        self.assertEqual(self.one({"fail": "because"}), Decision.fail("because"))


class InitErrors(unittest.TestCase):
    def check(self, config, prefix):
        text = config if isinstance(config, str) else json.dumps(config)
        with self.assertRaises(ConfigError) as cm:
            Script(text)
        msg = str(cm.exception)
        self.assertTrue(msg.startswith(prefix + ": "), "%r does not start with %r" % (msg, prefix))
        return msg

    def test_invalid_json(self):
        self.check("", "config.script")  # empty text is {}, as in every SDK
        for text in ("{", '{"script":[]}]', '{"script":[{"complete":Infinity}]}', "[" * 100000):
            self.check(text, "config: invalid JSON")

    def test_nesting_limit(self):
        entry = '{"script":[{"complete":%s}]}'
        Script(entry % ("[" * 124 + "]" * 124))  # 127 levels in all, as serde_json
        self.check(entry % ("[" * 125 + "]" * 125), "config: invalid JSON")
        Script(entry % ('"%s"' % ("[{" * 1000)))

    def test_not_an_object(self):
        for text in ("[]", '"x"', "1", "null", "true"):
            self.assertEqual(self.check(text, "config"), "config: expected an object")

    def test_unknown_key(self):
        self.assertEqual(self.check({"scrip": []}, "config"), 'config: unknown key "scrip"')
        self.check({"script": [], "extra": 1}, "config")

    def test_script_missing_or_wrong(self):
        self.assertEqual(self.check({}, "config.script"), "config.script: missing")
        self.assertEqual(self.check({"script": {}}, "config.script"), "config.script: expected an array")
        self.assertEqual(self.check({"script": None}, "config.script"), "config.script: expected an array")

    def test_entry_shape(self):
        good = {"fail": "x"}
        for bad in ({}, {"call": {"tool": "t"}, "fail": "x"}, {"calls": {}}, "call", [], None):
            msg = self.check({"script": [good, good, good, bad]}, "config.script[3]")
            self.assertEqual(msg, "config.script[3]: expected an object with exactly one of call, complete, fail")

    def test_call_not_object(self):
        for bad in ("t", ["t"], None, 1):
            self.assertEqual(self.check({"script": [{"call": bad}]}, "config.script[0].call"),
                             "config.script[0].call: expected an object")

    def test_call_tool(self):
        self.assertEqual(self.check({"script": [{"call": {}}]}, "config.script[0].call.tool"),
                         "config.script[0].call.tool: missing")
        self.assertEqual(self.check({"script": [{"call": {"arguments": {}}}]}, "config.script[0].call.tool"),
                         "config.script[0].call.tool: missing")
        self.assertEqual(self.check({"script": [{"call": {"tool": 1}}]}, "config.script[0].call.tool"),
                         "config.script[0].call.tool: expected a string")

    def test_call_unknown_key(self):
        self.assertEqual(self.check({"script": [{"call": {"tool": "t", "args": {}}}]}, "config.script[0].call"),
                         'config.script[0].call: unknown key "args"')

    def test_fail_not_string(self):
        for bad in (1, None, ["x"]):
            self.assertEqual(self.check({"script": [{"complete": 1}, {"fail": "x"}, {"fail": bad}]},
                                        "config.script[2].fail"),
                             "config.script[2].fail: expected a string")

    def test_first_problem_in_document_order(self):
        self.check('{"scrip":1,"script":3}', "config")
        self.check('{"script":3,"scrip":1}', "config.script")
        self.check('{"script":[{"fail":1},{}]}', "config.script[0].fail")
        self.check('{"script":[{"call":{"args":1,"tool":2}}]}', "config.script[0].call")
        self.check('{"script":[{"call":{"tool":2,"args":1}}]}', "config.script[0].call.tool")


if __name__ == "__main__":
    unittest.main()
