"""Unit tests of the SDK's pure parts: PYTHONPATH=guest-sdk/python python3 -m unittest discover -s guest-sdk/python/tests"""

import dataclasses
import unittest
from typing import List, Optional

import keel_guest as keel
from keel_guest import Decision, DeltaError, RunInfo, Step, ToolCall, Verdict, View, ViewDelta


def step(i, version=1, decided=True):
    return Step(i, version, "done" if decided else "started", Decision.fail("x") if decided else None)


def delta(reset, steps=(), approvals=()):
    return ViewDelta(reset, RunInfo("r1", "goal"), tuple(steps), tuple(approvals))


class ViewRules(unittest.TestCase):
    def test_first_delta_must_reset(self):
        with self.assertRaises(DeltaError):
            View().apply(delta(False))

    def test_upsert_by_index_and_count_decisions(self):
        v = View()
        v.apply(delta(True, [step(0), step(1, decided=False)]))
        v.apply(delta(False, [step(1, 2), step(2, 1)]))
        self.assertEqual([s.index for s in v.steps], [0, 1, 2])
        self.assertEqual(v.decided_steps, 3)
        self.assertEqual(v.goal, "goal")

    def test_gap_and_stale_version_are_refused_and_change_nothing(self):
        v = View()
        v.apply(delta(True, [step(0, 3)]))
        with self.assertRaisesRegex(DeltaError, "step 3 arrived while only 2"):
            v.apply(delta(False, [step(1), step(3)]))
        with self.assertRaisesRegex(DeltaError, "version 3, not newer"):
            v.apply(delta(False, [step(1), step(0, 3)]))
        self.assertEqual(len(v.steps), 1)

    def test_reset_clears_and_approvals_replace_by_id(self):
        a = keel.Approval("a", 0, "policy", "pending", ToolCall("t"))
        v = View()
        v.apply(delta(True, [step(0)], [a]))
        v.apply(delta(False, [], [dataclasses.replace(a, status="approved")]))
        self.assertEqual([x.status for x in v.approvals], ["approved"])
        v.apply(delta(True))
        self.assertEqual((v.steps, v.approvals, v.decided_steps), ((), (), 0))

    def test_view_is_read_only(self):
        v = View()
        v.apply(delta(True, [step(0)]))
        with self.assertRaises(dataclasses.FrozenInstanceError):
            v.steps[0].state = "started"
        with self.assertRaises(AttributeError):
            v.steps.append(step(1))


class Config(unittest.TestCase):
    def test_errors_name_the_path(self):
        c = keel.config.parse('{"rules":[{"action":1}],"extra":true}')
        (path, value), = c.array("rules")
        with self.assertRaisesRegex(keel.ConfigError, r"^config\.rules\[0\]\.action: expected a string$"):
            keel.config.Obj(path, value).str("action")
        with self.assertRaisesRegex(keel.ConfigError, '^config: unknown key "extra"$'):
            c.finish()

    def test_missing_invalid_empty_and_choices(self):
        with self.assertRaisesRegex(keel.ConfigError, "^config.x: missing$"):
            keel.config.parse("{}").int("x", required=True)
        with self.assertRaisesRegex(keel.ConfigError, "^config: invalid JSON"):
            keel.config.parse('{"a":NaN}')
        with self.assertRaisesRegex(keel.ConfigError, "^config: invalid JSON"):
            keel.config.parse("[" * 128 + "]" * 128)
        with self.assertRaisesRegex(keel.ConfigError, "^config: expected an object$"):
            keel.config.parse("[1]")
        keel.config.parse("  ").finish()
        with self.assertRaisesRegex(keel.ConfigError, r'^config.mode: "x" is not one of a, b$'):
            keel.config.parse('{"mode":"x"}').str("mode", choices=("a", "b"))
        with self.assertRaisesRegex(keel.ConfigError, "expected an integer"):
            keel.config.parse('{"n":true}').int("n")


@dataclasses.dataclass
class Write:
    path: str
    lines: List[int] = dataclasses.field(default_factory=list)
    append: bool = False
    mode: Optional[str] = None


class Args(unittest.TestCase):
    def test_typed_arguments(self):
        self.assertEqual(keel.args.decode('{"path":"a","lines":[1,2]}', Write), Write("a", [1, 2]))

    def test_errors_name_the_key(self):
        for text, want in [
            ("{}", "^arguments.path: missing$"),
            ('{"path":1}', "^arguments.path: expected a string$"),
            ('{"path":"a","lines":[1,"x"]}', r"^arguments.lines\[1\]: expected an integer$"),
            ('{"path":"a","mod":1}', '^arguments: unknown key "mod"$'),
            ("nope", "^arguments: invalid JSON"),
        ]:
            with self.assertRaisesRegex(keel.ArgumentsError, want):
                keel.args.decode(text, Write)


class Values(unittest.TestCase):
    def test_decisions_and_verdicts_encode_json(self):
        self.assertEqual(Decision.call_tool("t", {"é": 1}).call.arguments, '{"é":1}')
        self.assertEqual(Decision.call_tool("t").call.arguments, "{}")
        self.assertEqual(Decision.complete("done").value, '"done"')
        self.assertEqual(Decision.complete(keel.Json('{"a": 1}')).value, '{"a": 1}')
        self.assertEqual(Verdict.require_approval("r", {"rule": 0}).presentation, '{"rule":0}')
        with self.assertRaises(keel.JsonError):
            keel.Json("{")
        with self.assertRaises(keel.JsonError):
            Decision.complete(float("nan"))

    def test_log_outside_a_component_goes_to_stderr(self):
        keel.log.info("hello")
        with self.assertRaises(ValueError):
            keel.log.log("loud", "x")


if __name__ == "__main__":
    unittest.main()
