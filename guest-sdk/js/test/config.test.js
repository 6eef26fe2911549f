// The strict config reader: every error starts with the key path.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { ConfigError, config } from '../src/index.js';

const fails = (fn, message) => assert.throws(fn, (e) => e instanceof ConfigError && (message instanceof RegExp ? message.test(e.message) : e.message === message));

describe('config', () => {
  test('typed getters take keys out, finish refuses the rest', () => {
    const c = config.parse('{"name":"a","n":3,"x":1.5,"on":true,"list":[1,2],"sub":{"k":"v"}}');
    assert.equal(c.str('name', { required: true }), 'a');
    assert.equal(c.int('n', { minimum: 1 }), 3);
    assert.equal(c.number('x'), 1.5);
    assert.equal(c.bool('on'), true);
    assert.deepEqual(c.array('list').map(([p]) => p), ['config.list[0]', 'config.list[1]']);
    const sub = c.obj('sub');
    assert.equal(sub.str('k'), 'v');
    sub.finish();
    c.finish();
    assert.equal(c.str('absent'), undefined);
  });
  test('an empty text is {}', () => {
    config.parse('').finish();
    config.parse('  \n').finish();
  });
  test('errors name the key path', () => {
    fails(() => config.parse('{').finish(), /^config: invalid JSON: EOF while parsing an object at line 1 column 2$/);
    fails(() => config.parse('[]'), 'config: expected an object');
    fails(() => config.parse('{}').str('name', { required: true }), 'config.name: missing');
    fails(() => config.parse('{"name":1}').str('name'), 'config.name: expected a string');
    fails(() => config.parse('{"m":"x"}').str('m', { choices: ['a', 'b'] }), 'config.m: "x" is not one of a, b');
    fails(() => config.parse('{"n":1.0}').int('n'), 'config.n: expected an integer');
    fails(() => config.parse('{"n":true}').int('n'), 'config.n: expected an integer');
    fails(() => config.parse('{"n":0}').int('n', { minimum: 1 }), 'config.n: must be at least 1');
    fails(() => config.parse('{"n":12345678901234567890}').int('n'), 'config.n: 12345678901234567890 is too large');
    fails(() => config.parse('{"b":"yes"}').bool('b'), 'config.b: expected true or false');
    fails(() => config.parse('{"l":{}}').array('l'), 'config.l: expected an array');
    fails(() => config.parse('{"s":{"t":{"u":1}}}').obj('s').obj('t').str('u'), 'config.s.t.u: expected a string');
    fails(() => config.parse('{"a":1,"b":2}').finish(), 'config: unknown key "a"');
  });
  test('entries keep document order and empty the object', () => {
    const c = config.parse('{"b":1,"0":2,"a":3}');
    assert.deepEqual(c.entries().map(([p, k]) => [p, k]), [['config.b', 'b'], ['config.0', '0'], ['config.a', 'a']]);
    c.finish();
  });
});
