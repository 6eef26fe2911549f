// Unit tests of the pure logic: node --test plugins/agent-scripted/js
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { View, agentExports } from './keel-guest/index.js';
import { ConfigError, Script } from './script.js';

// The exports exactly as plugin.js binds them, minus the host's imports.
const plugin = agentExports(Script);

const parse = (config) => new Script(typeof config === 'string' ? config : JSON.stringify(config), []);
const initError = (config) => {
  try {
    parse(config);
  } catch (e) {
    assert.ok(e instanceof ConfigError, `not a ConfigError: ${e}`);
    return e.message;
  }
  assert.fail(`no error for ${config}`);
};

const run = { id: 'r1', goal: 'g', status: 'running', stepCount: 0, modelCalls: 0, tokens: 0n };
const CALL = { tag: 'call', val: { tool: 'echo', arguments: '{}' } };
const step = (index, decision, version = 1) => ({
  index,
  version,
  state: decision ? 'done' : 'started',
  decision,
  verdict: undefined,
  observation: undefined,
});
const delta = (reset, steps = [], approvals = []) => ({ reset, run, steps, approvals });

const EXAMPLE = {
  script: [
    { call: { tool: 'fs_write', arguments: { path: 'hello.txt', content: 'hi' } } },
    { call: { tool: 'fs_read', arguments: { path: 'hello.txt' } } },
    { complete: { wrote: 'hello.txt' } },
  ],
};

function viewWith(decided) {
  const v = new View();
  v.apply(delta(true, Array.from({ length: decided }, (_, i) => step(i, CALL))));
  return v;
}

describe('script order', () => {
  const script = parse(EXAMPLE);
  test('decision i is script[i], i = decided steps', () => {
    assert.deepEqual(script.decide(viewWith(0)), {
      tag: 'call',
      val: { tool: 'fs_write', arguments: '{"path":"hello.txt","content":"hi"}' },
    });
    assert.deepEqual(script.decide(viewWith(1)), { tag: 'call', val: { tool: 'fs_read', arguments: '{"path":"hello.txt"}' } });
    assert.deepEqual(script.decide(viewWith(2)), { tag: 'complete', val: '{"wrote":"hello.txt"}' });
  });
  test('exhausted script fails the run', () => {
    assert.deepEqual(script.decide(viewWith(3)), { tag: 'fail', val: 'script exhausted after 3 decisions' });
    assert.deepEqual(script.decide(viewWith(7)), { tag: 'fail', val: 'script exhausted after 3 decisions' });
    assert.deepEqual(parse({ script: [] }).decide(viewWith(0)), { tag: 'fail', val: 'script exhausted after 0 decisions' });
  });
  test('fail entries and default arguments', () => {
    const s = parse({ script: [{ call: { tool: 't' } }, { fail: 'because' }] });
    assert.deepEqual(s.decide(viewWith(0)), { tag: 'call', val: { tool: 't', arguments: '{}' } });
    assert.deepEqual(s.decide(viewWith(1)), { tag: 'fail', val: 'because' });
  });
  test('values are written back as compact JSON, exactly', () => {
    const s = parse('{"script":[{"call":{"tool":"t","arguments":{ "b" : [1.0, 12345678901234567890, -0, 1e400],\n"a":"\\u00e9\\ud83d\\ude00", "2":null}}},{"complete":"done"}]}');
    assert.deepEqual(s.decide(viewWith(0)), {
      tag: 'call',
      val: { tool: 't', arguments: '{"b":[1.0,12345678901234567890,-0,1e400],"a":"\u00e9\u{1F600}","2":null}' },
    });
    assert.deepEqual(s.decide(viewWith(1)), { tag: 'complete', val: '"done"' });
    assert.deepEqual(parse('{"script":[{"call":{"tool":"t","arguments":[1,"x"]}}]}').decide(viewWith(0)).val.arguments, '[1,"x"]');
    assert.deepEqual(parse('{"script":[{"complete":null}]}').decide(viewWith(0)), { tag: 'complete', val: 'null' });
  });
  test('returned decisions are copies', () => {
    const s = parse(EXAMPLE);
    s.decide(viewWith(0)).val.tool = 'changed';
    assert.equal(s.decide(viewWith(0)).val.tool, 'fs_write');
  });
});

describe('init errors', () => {
  const SHAPE = 'expected an object with exactly one of call, complete, fail';
  const cases = [
    ['{', /^config: invalid JSON: /],
    ['{"script":[]}}', /^config: invalid JSON: /],
    ['[]', 'config: expected an object'],
    ['null', 'config: expected an object'],
    ['{"scrip":[]}', 'config: unknown key "scrip"'],
    ['{"script":[],"x":1}', 'config: unknown key "x"'],
    ['{}', 'config.script: missing'],
    ['{"script":{}}', 'config.script: expected an array'],
    ['{"script":[{"fail":"a"},{"fail":"b"},{"fail":"c"},{}]}', `config.script[3]: ${SHAPE}`],
    ['{"script":["call"]}', `config.script[0]: ${SHAPE}`],
    ['{"script":[{"call":{"tool":"t"},"fail":"x"}]}', `config.script[0]: ${SHAPE}`],
    ['{"script":[{"calls":{"tool":"t"}}]}', `config.script[0]: ${SHAPE}`],
    ['{"script":[{"call":"t"}]}', 'config.script[0].call: expected an object'],
    ['{"script":[{"call":{}}]}', 'config.script[0].call.tool: missing'],
    ['{"script":[{"call":{"arguments":{}}}]}', 'config.script[0].call.tool: missing'],
    ['{"script":[{"call":{"tool":1}}]}', 'config.script[0].call.tool: expected a string'],
    ['{"script":[{"call":{"tool":"a","args":{}}}]}', 'config.script[0].call: unknown key "args"'],
    ['{"script":[{"complete":1},{"complete":2},{"fail":3}]}', 'config.script[2].fail: expected a string'],
  ];
  for (const [config, expected] of cases) {
    test(config, () => {
      const message = initError(config);
      if (expected instanceof RegExp) assert.match(message, expected);
      else assert.equal(message, expected);
    });
  }
  test('the first problem in document order is reported', () => {
    assert.equal(initError('{"script":[{"call":{"args":1,"tool":2}}]}'), 'config.script[0].call: unknown key "args"');
    assert.equal(initError('{"script":[{"call":{"tool":2,"args":1}}]}'), 'config.script[0].call.tool: expected a string');
    assert.equal(initError('{"script":[{}],"x":1}'), `config.script[0]: ${SHAPE}`);
    assert.equal(initError('{"x":1,"script":[{}]}'), 'config: unknown key "x"');
  });
});

describe('the agent world exports (componentize-js shapes)', () => {
  const tools = [{ name: 'echo', description: '', parameters: '{}', effect: 'read-only' }];
  test('decide before init is an error result', () => {
    plugin.init('{', tools);
    assert.deepEqual(plugin.decide(delta(true)), { tag: 'err', val: 'decide called before a successful init' });
  });
  test('init returns ok or an error result, never throws', () => {
    assert.deepEqual(plugin.init('{"scrip":[]}', tools), { tag: 'err', val: 'config: unknown key "scrip"' });
    assert.equal(plugin.init(undefined, tools).tag, 'err');
    assert.deepEqual(plugin.init(JSON.stringify(EXAMPLE), tools), { tag: 'ok', val: undefined });
  });
  test('decide reassembles the view from deltas', () => {
    assert.deepEqual(plugin.init(JSON.stringify(EXAMPLE), tools), { tag: 'ok', val: undefined });
    assert.equal(plugin.decide(delta(true)).val.val.tool, 'fs_write');
    assert.equal(plugin.decide(delta(false, [step(0, undefined)])).val.val.tool, 'fs_write');
    assert.equal(plugin.decide(delta(false, [step(0, CALL, 2)])).val.val.tool, 'fs_read');
    assert.equal(plugin.decide(delta(false, [step(1, CALL)])).val.tag, 'complete');
    assert.deepEqual(plugin.decide(delta(false, [step(2, { tag: 'complete', val: '{}' })])), {
      tag: 'ok',
      val: { tag: 'fail', val: 'script exhausted after 3 decisions' },
    });
    // A fresh instance (or a resumed run) starts from a reset delta.
    assert.equal(plugin.decide(delta(true, [step(0, CALL)])).val.val.tool, 'fs_read');
  });
  test('a malformed delta becomes the SDK\'s error result', () => {
    assert.deepEqual(plugin.init(JSON.stringify(EXAMPLE), tools), { tag: 'ok', val: undefined });
    const r = plugin.decide({ reset: true, run, steps: null, approvals: [] });
    assert.equal(r.tag, 'err');
    assert.equal(r.val, 'view delta: expected {reset, run, steps, approvals}');
  });
});
