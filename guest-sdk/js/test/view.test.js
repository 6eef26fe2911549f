// The View rebuilt from deltas, by the same rules as the Rust SDK's.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { DeltaError, View } from '../src/index.js';

const run = { id: 'r1', goal: 'g', status: 'running', stepCount: 0, modelCalls: 0, tokens: 0n };
const CALL = { tag: 'call', val: { tool: 'echo', arguments: '{}' } };
const step = (index, decision, version = 1) => ({ index, version, state: decision ? 'done' : 'started', decision });
const approval = (id, status) => ({ id, stepIndex: 0, kind: 'policy', status, call: { tool: 't', arguments: '{}' }, reason: 'r' });
const delta = (reset, steps = [], approvals = []) => ({ reset, run, steps, approvals });

describe('view', () => {
  test('reset, upsert by index, decided steps counted once', () => {
    const v = new View();
    v.apply(delta(true, [step(0, CALL), step(1, undefined)]));
    assert.equal(v.decidedSteps, 1);
    v.apply(delta(false, [step(1, CALL, 2), step(2, null)]));
    assert.equal(v.decidedSteps, 2);
    assert.equal(v.steps.length, 3);
    v.apply(delta(false, [step(0, CALL, 3)]));
    assert.equal(v.decidedSteps, 2);
    v.apply(delta(true, [step(0, CALL, 3)]));
    assert.equal(v.decidedSteps, 1);
    assert.deepEqual(v.steps.map((s) => s.version), [3]);
    assert.equal(v.goal, 'g');
  });
  test('approvals are replaced by id, in creation order', () => {
    const v = new View();
    v.apply(delta(true, [], [approval('a1', 'pending'), approval('a2', 'pending')]));
    v.apply(delta(false, [], [approval('a1', 'approved')]));
    assert.deepEqual(v.approvals.map((x) => [x.id, x.status]), [['a1', 'approved'], ['a2', 'pending']]);
    v.apply(delta(true));
    assert.equal(v.approvals.length, 0);
  });
  test('the first delta must reset', () => {
    assert.throws(() => new View().apply(delta(false)), { name: 'DeltaError', message: 'view delta: the first delta did not reset the view' });
  });
  test('a gap is refused and nothing changes', () => {
    const v = new View();
    v.apply(delta(true, [step(0, CALL)]));
    assert.throws(() => v.apply(delta(false, [step(1, CALL), step(3, CALL)])), {
      message: 'view delta: step 3 arrived while only 2 steps are held',
    });
    assert.equal(v.steps.length, 1);
    assert.equal(v.decidedSteps, 1);
  });
  test('a step that does not move forward is refused and nothing changes', () => {
    const v = new View();
    v.apply(delta(true, [step(0, undefined, 2)]));
    for (const version of [1, 2]) {
      assert.throws(() => v.apply(delta(false, [step(0, CALL, version)])), {
        message: `view delta: step 0 arrived with version ${version}, not newer than the held version 2`,
      });
    }
    assert.equal(v.decidedSteps, 0);
    assert.equal(v.steps[0].version, 2);
  });
  test('a malformed delta is a DeltaError', () => {
    const v = new View();
    assert.throws(() => v.apply(null), DeltaError);
    assert.throws(() => v.apply({ reset: true, run, steps: null, approvals: [] }), DeltaError);
  });
  test('what plugin code gets is read-only', () => {
    const v = new View();
    v.apply(delta(true, [step(0, CALL)], [approval('a1', 'pending')]));
    assert.throws(() => v.steps.push(step(1)), TypeError);
    assert.throws(() => { v.steps[0].version = 9; }, TypeError);
    assert.throws(() => { v.steps[0].decision.val.tool = 'rm'; }, TypeError);
    assert.throws(() => { v.approvals[0].status = 'approved'; }, TypeError);
    assert.throws(() => { v.run.goal = 'other'; }, TypeError);
    assert.equal(v.steps[0].decision.val.tool, 'echo');
  });
  test('the arrays handed out are rebuilt only after a change', () => {
    const v = new View();
    v.apply(delta(true, [step(0, CALL)]));
    const first = v.steps;
    v.apply(delta(false));
    assert.equal(v.steps, first);
    v.apply(delta(false, [step(1, CALL)]));
    assert.notEqual(v.steps, first);
    assert.equal(first.length, 1);
  });
});
