// Tests of the SDK's JSON parser and writer.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { JsonNumber, JsonSyntaxError, MAX_DEPTH, parseJson, stringify } from '../src/json.js';

const roundTrip = (text) => stringify(parseJson(text));

test('objects keep document order, also for integer-like keys', () => {
  const v = parseJson('{"b":1,"2":2,"a":{"1":true,"0":false}}');
  assert.ok(v instanceof Map);
  assert.deepEqual([...v.keys()], ['b', '2', 'a']);
  assert.equal(stringify(v), '{"b":1,"2":2,"a":{"1":true,"0":false}}');
});

test('a repeated key keeps its first position and its last value', () => {
  const v = parseJson('{"a":1,"b":2,"a":3}');
  assert.deepEqual([...v.keys()], ['a', 'b']);
  assert.equal(stringify(v), '{"a":3,"b":2}');
});

test('numbers keep their text', () => {
  for (const n of ['0', '-0', '1.0', '1e5', '1E+05', '-1.5e-3', '12345678901234567890', '1e400']) {
    const v = parseJson(n);
    assert.ok(v instanceof JsonNumber);
    assert.equal(stringify(v), n);
    assert.equal(roundTrip(` [${n}] `), `[${n}]`);
  }
  assert.equal(Number(parseJson('1.5')), 1.5);
});

test('strings and escapes', () => {
  assert.equal(parseJson('"a\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00"'), 'a"\\/\b\f\n\r\t\u00e9\u{1F600}');
  assert.equal(parseJson('"\u{1F600}\u2028"'), '\u{1F600}\u2028');
  assert.equal(roundTrip('"\\u00e9"'), '"\u00e9"');
  assert.equal(roundTrip('"\\ud800"'), '"\\ud800"'); // a lone surrogate stays escaped: valid UTF-8 out
  assert.equal(roundTrip('"\\u001f"'), '"\\u001f"');
});

test('compact output matches JSON.stringify for plain values', () => {
  const samples = [
    '{}', '[]', 'null', 'true', 'false', '"x"', '[1,[2,[3,{}]],{"k":[]}]',
    ' { "a" : [ 1 , 2 ] ,\n\t"b" : { "c" : null } } ',
  ];
  for (const s of samples) assert.equal(roundTrip(s), JSON.stringify(JSON.parse(s)), s);
});

test('strict: invalid JSON is refused', () => {
  const bad = [
    '', ' ', '{', '}', '[1,]', '{"a":1,}', '{a:1}', "{'a':1}", '01', '1.', '.5', '-', '+1', '1e', 'NaN',
    'Infinity', 'tru', 'nul', '"abc', '"\\x"', '"\\u12"', '"a\nb"', '"\u0001"', '1 2', '{"a" 1}',
    '[1 2]', '{"a":1 "b":2}', '\u00a0{}', '{}x', '//c\n{}',
  ];
  for (const text of bad) {
    assert.throws(() => parseJson(text), JsonSyntaxError, JSON.stringify(text));
  }
});

test('errors say where', () => {
  assert.throws(() => parseJson('{\n  "a": x}'), { message: 'expected value at line 2 column 8' });
  assert.throws(() => parseJson('[1'), { message: /EOF while parsing a list/ });
});

test('nesting is limited, without a stack overflow', () => {
  assert.doesNotThrow(() => parseJson('['.repeat(MAX_DEPTH) + ']'.repeat(MAX_DEPTH)));
  assert.throws(() => parseJson('['.repeat(MAX_DEPTH + 1) + ']'.repeat(MAX_DEPTH + 1)), { message: /nested too deeply/ });
  assert.throws(() => parseJson('{"a":'.repeat(100000)), JsonSyntaxError);
});
