// The world exports: errors are returned, never thrown, and what plugin code
// returns is checked before it reaches the host.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Agent, ConfigError, Decision, Json, Policy, Tool, Verdict, agentExports, config, log, policyExports, toolExports } from '../src/index.js';

const run = { id: 'r1', goal: 'say hi', status: 'running', stepCount: 1, modelCalls: 0, tokens: 0n };
const delta = (reset, steps = []) => ({ reset, run, steps, approvals: [] });

class Goal extends Agent {
  constructor(text, tools) {
    super(text, tools);
    const c = config.parse(text);
    this.prefix = c.str('prefix') ?? '';
    c.finish();
  }
  decide(view) {
    if (view.goal === 'bad') return 'not a decision';
    return Decision.complete({ answer: this.prefix + view.goal, tools: this.tools.length });
  }
}

describe('agent', () => {
  test('init errors are returned, the config error as it is', () => {
    const w = agentExports(Goal);
    assert.deepEqual(w.decide(delta(true)), { tag: 'err', val: 'decide called before a successful init' });
    assert.deepEqual(w.init('{"x":1}', []), { tag: 'err', val: 'config: unknown key "x"' });
    class Throws extends Agent {
      constructor() {
        super();
        throw new Error('boom');
      }
    }
    assert.deepEqual(agentExports(Throws).init('{}', []), { tag: 'err', val: 'config: Throws.constructor threw Error: boom' });
  });
  test('decide gets the view and returns the decision', () => {
    const w = agentExports(Goal);
    assert.deepEqual(w.init('{"prefix":">"}', [{ name: 't' }]), { tag: 'ok', val: undefined });
    assert.deepEqual(w.decide(delta(true)), { tag: 'ok', val: { tag: 'complete', val: '{"answer":">say hi","tools":1}' } });
  });
  test('a delta that cannot be applied and a returned non-decision are errors', () => {
    const w = agentExports(Goal);
    w.init('{}', []);
    assert.deepEqual(w.decide(delta(false)), { tag: 'err', val: 'view delta: the first delta did not reset the view' });
    const bad = { ...run, goal: 'bad' };
    assert.deepEqual(w.decide({ reset: true, run: bad, steps: [], approvals: [] }), {
      tag: 'err',
      val: 'Goal.decide: expected a Decision, got string',
    });
  });
  test('builders make the WIT shapes', () => {
    assert.deepEqual(Decision.call('t'), { tag: 'call', val: { tool: 't', arguments: '{}' } });
    assert.deepEqual(Decision.call('t', new Map([['b', 1], ['a', 2]])), { tag: 'call', val: { tool: 't', arguments: '{"b":1,"a":2}' } });
    assert.deepEqual(Decision.complete(new Json(' [1] ')), { tag: 'complete', val: ' [1] ' });
    assert.deepEqual(Decision.complete(), { tag: 'complete', val: 'null' });
    assert.deepEqual(Decision.invalid('x'), { tag: 'invalid', val: 'x' });
    assert.throws(() => new Json('{'), { name: 'JsonSyntaxError' });
  });
});

class ReadOnly extends Policy {
  view = 'call-only';
  evaluate(call, effect) {
    if (call.tool === 'throw') throw new RangeError('no');
    if (call.tool === 'bad') return { tag: 'permit' };
    return effect === 'read-only' ? Verdict.allow() : Verdict.requireApproval('writes need a human', { tool: call.tool });
  }
}

describe('policy', () => {
  test('init returns the view the class asks for', () => {
    assert.deepEqual(policyExports(ReadOnly).init(''), { tag: 'ok', val: 'call-only' });
    class Full extends Policy {}
    assert.deepEqual(policyExports(Full).init(''), { tag: 'ok', val: 'full' });
    class Odd extends Policy {
      view = 'some';
    }
    assert.deepEqual(policyExports(Odd).init(''), { tag: 'err', val: 'config: Odd.view is "some", not "full" or "call-only"' });
  });
  test('evaluate: verdicts, throws and non-verdicts', () => {
    const w = policyExports(ReadOnly);
    const call = (tool) => ({ tool, arguments: '{}' });
    assert.deepEqual(w.evaluate(call('a'), 'read-only', delta(true)), { tag: 'err', val: 'evaluate called before a successful init' });
    w.init('');
    assert.deepEqual(w.evaluate(call('a'), 'read-only', delta(true)), { tag: 'ok', val: { tag: 'allow' } });
    assert.deepEqual(w.evaluate(call('w'), 'destructive', delta(false)), {
      tag: 'ok',
      val: { tag: 'require-approval', val: { reason: 'writes need a human', presentation: '{"tool":"w"}' } },
    });
    assert.deepEqual(w.evaluate(call('throw'), 'read-only', delta(false)), { tag: 'err', val: 'ReadOnly.evaluate: RangeError: no' });
    assert.deepEqual(w.evaluate(call('bad'), 'read-only', delta(false)), {
      tag: 'err',
      val: 'ReadOnly.evaluate: "permit" is not a verdict (allow, deny, require-approval, abort)',
    });
  });
});

class Echo extends Tool {
  specs() {
    return [{ name: 'echo', description: 'says it back', parameters: { type: 'object' }, effect: 'read-only' }];
  }
  call(name, text) {
    if (name !== 'echo') throw new Error(`no tool ${name}`);
    return new Json(text);
  }
}

describe('tool', () => {
  test('specs, call and errors', () => {
    const w = toolExports(Echo);
    assert.deepEqual(w.specs(), []);
    assert.deepEqual(w.init(''), { tag: 'ok', val: undefined });
    assert.deepEqual(w.specs(), [{ name: 'echo', description: 'says it back', parameters: '{"type":"object"}', effect: 'read-only' }]);
    assert.deepEqual(w.call('echo', '{"a":1}'), { tag: 'ok', val: '{"a":1}' });
    assert.deepEqual(w.call('other', '{}'), { tag: 'err', val: 'Echo.call: Error: no tool other' });
  });
  test('specs that throw offer no tools and are logged', () => {
    class Broken extends Tool {
      specs() {
        return [{ name: 'x', effect: 'sometimes' }];
      }
    }
    const lines = [];
    log.setSink((level, message) => lines.push([level, message]));
    try {
      const w = toolExports(Broken);
      w.init('');
      assert.deepEqual(w.specs(), []);
    } finally {
      log.setSink();
    }
    assert.deepEqual(lines, [['error', 'Broken.specs: TypeError: "sometimes" is not an effect class']]);
  });
  test('a ConfigError thrown by hand is returned as it is', () => {
    class Strict extends Tool {
      constructor() {
        super();
        throw new ConfigError('config.root: must exist');
      }
    }
    assert.deepEqual(toolExports(Strict).init('{}'), { tag: 'err', val: 'config.root: must exist' });
  });
});
