// Unit tests, run without building: ./test.sh
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { toolExports } from './keel-guest/index.js';
import { Plugin } from './logic.js';

test('echoes its arguments', () => {
  const world = toolExports(Plugin);
  assert.deepEqual(world.init(''), { tag: 'ok', val: undefined });
  assert.deepEqual(world.specs().map((s) => s.name), ['echo']);
  assert.deepEqual(world.call('echo', '{"a":1}'), { tag: 'ok', val: '{"a":1}' });
  assert.equal(world.call('other', '{}').tag, 'err');
});
