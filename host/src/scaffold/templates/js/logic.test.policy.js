// Unit tests, run without building: ./test.sh
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { ConfigError, EFFECTS, View, policyExports } from './keel-guest/index.js';
import { Plugin } from './logic.js';

const judge = (effect) => new Plugin('{}').evaluate({ tool: 'fs_write', arguments: '{}' }, effect, new View());

test('read-only calls are allowed', () => {
  assert.deepEqual(judge('read-only'), { tag: 'allow' });
});

test('other calls need an operator', () => {
  for (const effect of EFFECTS.slice(1)) assert.equal(judge(effect).tag, 'require-approval', effect);
});

test('an unknown key is refused', () => {
  assert.throws(() => new Plugin('{"x":1}'), (e) => e instanceof ConfigError && e.message === 'config: unknown key "x"');
});

test('init asks for the call-only view', () => {
  assert.deepEqual(policyExports(Plugin).init(''), { tag: 'ok', val: 'call-only' });
});
