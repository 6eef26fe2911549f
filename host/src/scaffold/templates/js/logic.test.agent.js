// Unit tests, run without building: ./test.sh
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { ConfigError, View, agentExports } from './keel-guest/index.js';
import { Plugin } from './logic.js';

const run = { id: 'r1', goal: 'say hi', status: 'running', stepCount: 1, modelCalls: 0, tokens: 0n };

test('completes with the goal', () => {
  const view = new View();
  view.apply({ reset: true, run, steps: [], approvals: [] });
  assert.deepEqual(new Plugin('', []).decide(view), { tag: 'complete', val: '{"goal":"say hi","tools":0}' });
});

test('an unknown key is refused', () => {
  assert.throws(() => new Plugin('{"x":1}', []), (e) => e instanceof ConfigError && e.message === 'config: unknown key "x"');
});

test('the exports answer as the host expects', () => {
  const world = agentExports(Plugin);
  assert.deepEqual(world.init('{}', []), { tag: 'ok', val: undefined });
  assert.equal(world.decide({ reset: true, run, steps: [], approvals: [] }).tag, 'ok');
});
