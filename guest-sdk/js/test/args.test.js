// Typed tool arguments.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { ArgumentsError, args } from '../src/index.js';

const SHAPE = { path: 'string', lines: ['integer'], recursive: 'boolean?', opts: { depth: 'number?' }, extra: 'any?' };

describe('args', () => {
  test('decode checks and converts', () => {
    assert.deepEqual(args.decode('{"path":"a","lines":[1,2],"opts":{},"extra":{"x":[1]}}', SHAPE), {
      path: 'a',
      lines: [1, 2],
      opts: {},
      extra: { x: [1] },
    });
    assert.equal(args.decode('{"path":"a","lines":[],"opts":{"depth":2.5},"recursive":true}', SHAPE).recursive, true);
  });
  test('errors name the key', () => {
    const bad = [
      ['{"lines":[],"opts":{}}', 'arguments.path: missing'],
      ['{"path":1,"lines":[],"opts":{}}', 'arguments.path: expected a string'],
      ['{"path":"a","lines":[1,"2"],"opts":{}}', 'arguments.lines[1]: expected an integer'],
      ['{"path":"a","lines":[],"opts":{"depth":"x"}}', 'arguments.opts.depth: expected a number'],
      ['{"path":"a","lines":[],"opts":{},"force":true}', 'arguments: unknown key "force"'],
      ['[]', 'arguments: expected an object'],
      ['{', /^arguments: invalid JSON: /],
    ];
    for (const [text, message] of bad) {
      assert.throws(() => args.decode(text, SHAPE), (e) => e instanceof ArgumentsError && (message instanceof RegExp ? message.test(e.message) : e.message === message), text);
    }
  });
  test('read gives the strict reader with argument paths', () => {
    const a = args.read('{"n":"x"}');
    assert.throws(() => a.int('n'), { name: 'ArgumentsError', message: 'arguments.n: expected an integer' });
  });
});
