// Unit tests of the pure logic: node --test plugins/policy-rules/js
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { policyExports } from './keel-guest/index.js';
import { ConfigError, EFFECTS, RulesPolicy, globMatch } from './rules.js';

// The exports exactly as plugin.js binds them, minus the host's log import.
const plugin = policyExports(RulesPolicy);

const policy = (config) => new RulesPolicy(typeof config === 'string' ? config : JSON.stringify(config));
const evaluate = (config, tool, args = {}, effect = 'read-only') =>
  policy(config).judge(tool, typeof args === 'string' ? args : JSON.stringify(args), effect);
const initError = (config) => {
  try {
    policy(config);
  } catch (e) {
    assert.ok(e instanceof ConfigError, `not a ConfigError: ${e}`);
    return e.message;
  }
  assert.fail(`no error for ${typeof config === 'string' ? config : JSON.stringify(config)}`);
};

const EXAMPLE = {
  rules: [
    { tool: 'fs_read', action: 'allow' },
    { tool: 'fs_*', args: { path: 'secrets/*' }, action: 'deny', reason: 'secrets are off limits' },
    { effect: ['local-mutation', 'remote-mutation'], action: 'require-approval', reason: 'writes need a human' },
    { effect: 'destructive', action: 'abort' },
  ],
  default: 'deny',
};

describe('actions', () => {
  test('allow', () => {
    assert.deepEqual(evaluate(EXAMPLE, 'fs_read', { path: 'secrets/key' }), { tag: 'allow' });
  });
  test('deny with the rule reason', () => {
    assert.deepEqual(evaluate(EXAMPLE, 'fs_write', { path: 'secrets/key' }, 'local-mutation'), {
      tag: 'deny',
      val: 'secrets are off limits',
    });
  });
  test('require-approval with presentation {"rule":N,"tool":name}', () => {
    assert.deepEqual(evaluate(EXAMPLE, 'http_post', {}, 'remote-mutation'), {
      tag: 'require-approval',
      val: { reason: 'writes need a human', presentation: '{"rule":2,"tool":"http_post"}' },
    });
  });
  test('abort with the default reason "matched rule N"', () => {
    assert.deepEqual(evaluate(EXAMPLE, 'rm_rf', {}, 'destructive'), { tag: 'abort', val: 'matched rule 3' });
  });
  test('deny with the default reason', () => {
    assert.deepEqual(evaluate({ rules: [{ tool: 'a', action: 'allow' }, { action: 'deny' }] }, 'b'), {
      tag: 'deny',
      val: 'matched rule 1',
    });
  });
  test('presentation escapes the tool name and is compact JSON', () => {
    const v = evaluate({ rules: [{ action: 'require-approval' }] }, 'a"b\u00e9');
    assert.equal(v.val.presentation, '{"rule":0,"tool":"a\\"b\u00e9"}');
    assert.equal(v.val.reason, 'matched rule 0');
    assert.deepEqual(JSON.parse(v.val.presentation), { rule: 0, tool: 'a"b\u00e9' });
  });
});

describe('order and default', () => {
  test('the first matching rule decides', () => {
    const config = { rules: [{ tool: 'x', action: 'deny', reason: 'first' }, { tool: 'x', action: 'allow' }] };
    assert.deepEqual(evaluate(config, 'x'), { tag: 'deny', val: 'first' });
    const swapped = { rules: [config.rules[1], config.rules[0]] };
    assert.deepEqual(evaluate(swapped, 'x'), { tag: 'allow' });
  });
  test('no rule matched: deny by default', () => {
    assert.deepEqual(evaluate(EXAMPLE, 'other'), { tag: 'deny', val: 'no rule matched' });
    assert.deepEqual(evaluate({ rules: [] }, 'anything'), { tag: 'deny', val: 'no rule matched' });
  });
  test('default overridden with each action', () => {
    assert.deepEqual(evaluate({ rules: [], default: 'allow' }, 't'), { tag: 'allow' });
    assert.deepEqual(evaluate({ rules: [], default: 'deny' }, 't'), { tag: 'deny', val: 'no rule matched' });
    assert.deepEqual(evaluate({ rules: [], default: 'abort' }, 't'), { tag: 'abort', val: 'no rule matched' });
    assert.deepEqual(evaluate({ rules: [], default: 'require-approval' }, 't'), {
      tag: 'require-approval',
      val: { reason: 'no rule matched', presentation: '{"rule":null,"tool":"t"}' },
    });
  });
  test('a rule with no conditions matches everything', () => {
    assert.deepEqual(evaluate({ rules: [{ action: 'allow' }] }, 'x', 'not an object'), { tag: 'allow' });
  });
});

describe('conditions', () => {
  test('tool glob', () => {
    const config = { rules: [{ tool: 'fs_*', action: 'allow' }] };
    assert.deepEqual(evaluate(config, 'fs_read'), { tag: 'allow' });
    assert.deepEqual(evaluate(config, 'fs_'), { tag: 'allow' });
    assert.equal(evaluate(config, 'xfs_read').tag, 'deny');
    assert.equal(evaluate({ rules: [{ tool: 'fs_read', action: 'allow' }] }, 'fs_read2').tag, 'deny');
  });
  test('effect as a string', () => {
    const config = { rules: [{ effect: 'read-only', action: 'allow' }] };
    assert.equal(evaluate(config, 't', {}, 'read-only').tag, 'allow');
    assert.equal(evaluate(config, 't', {}, 'idempotent').tag, 'deny');
  });
  test('effect as an array', () => {
    const config = { rules: [{ effect: ['idempotent', 'destructive'], action: 'allow' }] };
    for (const effect of EFFECTS) {
      const expected = effect === 'idempotent' || effect === 'destructive' ? 'allow' : 'deny';
      assert.equal(evaluate(config, 't', {}, effect).tag, expected, effect);
    }
  });
  test('every condition must match', () => {
    const config = { rules: [{ tool: 'w', effect: 'destructive', args: { p: '*' }, action: 'allow' }] };
    assert.equal(evaluate(config, 'w', { p: 'x' }, 'destructive').tag, 'allow');
    assert.equal(evaluate(config, 'v', { p: 'x' }, 'destructive').tag, 'deny');
    assert.equal(evaluate(config, 'w', { p: 'x' }, 'read-only').tag, 'deny');
    assert.equal(evaluate(config, 'w', { q: 'x' }, 'destructive').tag, 'deny');
  });
  test('args glob', () => {
    const config = { rules: [{ args: { path: 'secrets/*', mode: 'r?' }, action: 'allow' }] };
    assert.equal(evaluate(config, 't', { path: 'secrets/a/b', mode: 'rw', other: 1 }).tag, 'allow');
    assert.equal(evaluate(config, 't', { path: 'secrets/', mode: 'rx' }).tag, 'allow');
    assert.equal(evaluate(config, 't', { path: 'public/a', mode: 'rw' }).tag, 'deny');
    assert.equal(evaluate(config, 't', { path: 'secrets/a', mode: 'rwx' }).tag, 'deny');
  });
  test('a missing argument does not match', () => {
    const config = { rules: [{ args: { path: '*' }, action: 'allow' }] };
    assert.equal(evaluate(config, 't', {}).tag, 'deny');
    assert.equal(evaluate(config, 't', { Path: 'x' }).tag, 'deny');
  });
  test('a non-string argument does not match, even for "*"', () => {
    const config = { rules: [{ args: { v: '*' }, action: 'allow' }] };
    for (const v of [1, true, null, [], {}, ['x']]) {
      assert.equal(evaluate(config, 't', { v }).tag, 'deny', JSON.stringify(v));
    }
    assert.equal(evaluate(config, 't', { v: '' }).tag, 'allow');
  });
  test('arguments that are not an object do not match rules with args', () => {
    const config = { rules: [{ args: { v: '*' }, action: 'allow' }] };
    for (const text of ['[]', '"v"', '1', 'null', 'not json']) {
      assert.equal(evaluate(config, 't', text).tag, 'deny', text);
    }
  });
  test('args {} matches any arguments', () => {
    assert.equal(evaluate({ rules: [{ args: {}, action: 'allow' }] }, 't', '[1]').tag, 'allow');
  });
  test('only own keys count ("__proto__", "toString")', () => {
    const config = { rules: [{ args: { toString: '*' }, action: 'allow' }] };
    assert.equal(evaluate(config, 't', {}).tag, 'deny');
    assert.equal(evaluate(config, 't', '{"toString":"x"}').tag, 'allow');
    const proto = '{"rules":[{"args":{"__proto__":"a*"},"action":"allow"}]}';
    assert.equal(evaluate(proto, 't', '{"__proto__":"ab"}').tag, 'allow');
    assert.equal(evaluate(proto, 't', '{}').tag, 'deny');
  });
  test('unicode: ? is one scalar value, not one UTF-16 unit', () => {
    const one = { rules: [{ tool: '?', action: 'allow' }] };
    assert.equal(evaluate(one, '\u{1F600}').tag, 'allow'); // two UTF-16 units
    assert.equal(evaluate(one, '\u00e9').tag, 'allow');
    assert.equal(evaluate(one, 'e\u0301').tag, 'deny'); // two scalar values
    const two = { rules: [{ tool: '??', action: 'allow' }] };
    assert.equal(evaluate(two, '\u{1F600}').tag, 'deny');
    const arg = { rules: [{ args: { s: 'a?c' }, action: 'allow' }] };
    assert.equal(evaluate(arg, 't', { s: 'a\u{10FFFF}c' }).tag, 'allow');
    assert.equal(evaluate({ rules: [{ tool: '\u{1F600}*', action: 'allow' }] }, '\u{1F600}x').tag, 'allow');
  });
});

describe('glob', () => {
  const cases = [
    ['', '', true],
    ['', 'a', false],
    ['*', '', true],
    ['*', 'a/b/c', true],
    ['a*', 'a', true],
    ['*a', 'ba', true],
    ['*a', 'ab', false],
    ['a*b*c', 'a//b//c', true],
    ['a*b*c', 'abcb', false],
    ['?', '', false],
    ['?', '/', true],
    ['a?c', 'abc', true],
    ['a?c', 'ac', false],
    ['**', 'x', true],
    ['*?', '', false],
    ['*?', 'x', true],
    ['a\\*', 'a\\bc', true], // no escapes: backslash is literal, * still a wildcard
    ['a\\*', 'a*', false],
    ['[ab]', 'a', false], // no character classes
    ['[ab]', '[ab]', true],
    ['*x*x*x*x*y', 'x'.repeat(200), false],
  ];
  for (const [pattern, text, expected] of cases) {
    test(`${JSON.stringify(pattern)} vs ${JSON.stringify(text)}`, () => {
      assert.equal(globMatch(pattern, text), expected);
    });
  }
});

describe('init errors', () => {
  const cases = [
    ['{', /^config: invalid JSON: /],
    ['', 'config.rules: missing'], // an empty config is {}, as in every SDK
    ['{"rules":[]} x', /^config: invalid JSON: /],
    ['[]', 'config: expected an object'],
    ['"x"', 'config: expected an object'],
    ['{"rule":[]}', 'config: unknown key "rule"'],
    ['{}', 'config.rules: missing'],
    ['{"default":"allow"}', 'config.rules: missing'],
    ['{"rules":{}}', 'config.rules: expected an array'],
    ['{"rules":[{"action":"allow"},{"action":"allow"},3]}', 'config.rules[2]: expected an object'],
    ['{"rules":[{"tools":"x","action":"allow"}]}', 'config.rules[0]: unknown key "tools"'],
    ['{"rules":[{"action":"allow"},{"tool":"x"}]}', 'config.rules[1].action: missing'],
    ['{"rules":[{"action":"allow"},{"action":"permit"}]}', 'config.rules[1].action: "permit" is not one of allow, deny, require-approval, abort'],
    ['{"rules":[{"action":true}]}', /^config\.rules\[0\]\.action: expected a string/],
    ['{"rules":[{"effect":"write","action":"allow"}]}', 'config.rules[0].effect: "write" is not an effect class'],
    ['{"rules":[{"effect":["read-only","write"],"action":"allow"}]}', 'config.rules[0].effect: "write" is not an effect class'],
    ['{"rules":[{"effect":[],"action":"allow"}]}', 'config.rules[0].effect: expected a string or a non-empty array of strings'],
    ['{"rules":[{"effect":3,"action":"allow"}]}', 'config.rules[0].effect: expected a string or a non-empty array of strings'],
    ['{"rules":[{"effect":["read-only",3],"action":"allow"}]}', 'config.rules[0].effect: expected a string or a non-empty array of strings'],
    ['{"rules":[{"args":{"path":1},"action":"allow"}]}', 'config.rules[0].args.path: expected a string'],
    ['{"rules":[{"args":["x"],"action":"allow"}]}', /^config\.rules\[0\]\.args: expected an object/],
    ['{"rules":[{"tool":1,"action":"allow"}]}', 'config.rules[0].tool: expected a string'],
    ['{"rules":[{"reason":1,"action":"deny"}]}', 'config.rules[0].reason: expected a string'],
    ['{"rules":[],"default":"maybe"}', 'config.default: "maybe" is not one of allow, deny, require-approval, abort'],
    ['{"rules":[],"default":null}', /^config\.default: expected a string/],
  ];
  for (const [config, expected] of cases) {
    test(config, () => {
      const message = initError(config);
      if (expected instanceof RegExp) assert.match(message, expected);
      else assert.equal(message, expected);
    });
  }

  test('the first problem in document order is reported', () => {
    assert.equal(initError('{"default":"maybe","rules":5}'), 'config.default: "maybe" is not one of allow, deny, require-approval, abort');
    assert.equal(initError('{"rules":5,"default":"maybe"}'), 'config.rules: expected an array');
    assert.equal(initError('{"rules":[{"action":"permit","bogus":1}]}'), 'config.rules[0].action: "permit" is not one of allow, deny, require-approval, abort');
    assert.equal(initError('{"rules":[{"bogus":1,"action":"permit"}]}'), 'config.rules[0]: unknown key "bogus"');
    assert.equal(initError('{"rules":[{"tool":"x"},{"action":"permit"}]}'), 'config.rules[0].action: missing');
    // Integer-like keys stay in document order (JSON.parse would move "0" first).
    assert.equal(initError('{"rules":5,"0":1}'), 'config.rules: expected an array');
    assert.equal(initError('{"rule":[]}'), 'config: unknown key "rule"');
  });
});

describe('the policy world exports (componentize-js shapes)', () => {
  const view = { reset: true, run: {}, steps: [], approvals: [] };
  test('evaluate before init is an error result', () => {
    plugin.init('not json');
    assert.deepEqual(plugin.evaluate({ tool: 't', arguments: '{}' }, 'read-only', view), {
      tag: 'err',
      val: 'evaluate called before a successful init',
    });
  });
  test('init returns ok (with the call-only view: rules match the call alone) or an error result, never throws', () => {
    assert.deepEqual(plugin.init('{"rules":[]}'), { tag: 'ok', val: 'call-only' });
    assert.deepEqual(plugin.init('{"rules":[],"x":1}'), { tag: 'err', val: 'config: unknown key "x"' });
    assert.equal(plugin.init(undefined).tag, 'err');
  });
  test('evaluate goes through the class and returns the verdict inside ok', () => {
    assert.deepEqual(plugin.init(JSON.stringify(EXAMPLE)), { tag: 'ok', val: 'call-only' });
    assert.deepEqual(plugin.evaluate({ tool: 'fs_read', arguments: '{}' }, 'read-only', view), {
      tag: 'ok',
      val: { tag: 'allow' },
    });
  });
  test('an unexpected failure becomes an error result', () => {
    assert.deepEqual(plugin.init('{"rules":[]}'), { tag: 'ok', val: 'call-only' });
    const r = plugin.evaluate(null, 'read-only', view);
    assert.equal(r.tag, 'err');
    assert.match(r.val, /^RulesPolicy\.evaluate: TypeError/);
  });
});
