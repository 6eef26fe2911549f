// Strict JSON (RFC 8259) that keeps what JSON.parse loses.
//
// * Objects become Maps, so keys stay in document order (JSON.parse moves
//   integer-like keys such as "0" to the front) and config errors can be
//   reported in document order. A repeated key keeps its first position and
//   takes the last value, like Python's json and serde_json's preserve_order.
// * Numbers become JsonNumber, which keeps the number's text, so integers
//   past 2^53 and forms like 1.0 are written back exactly.
//
// parseJson(text) returns the value or throws JsonSyntaxError;
// stringify(value) writes compact JSON text of such a value.

export class JsonSyntaxError extends Error {
  constructor(message) {
    super(message);
    this.name = 'JsonSyntaxError';
  }
}

export class JsonNumber {
  constructor(raw) {
    this.raw = raw;
  }
  valueOf() {
    return Number(this.raw);
  }
  toString() {
    return this.raw;
  }
}

/** Nesting deeper than this is refused (serde_json's default limit is 128). */
export const MAX_DEPTH = 512;

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const PLAIN_RUN = /[^"\\\u0000-\u001f]*/y;
const ESCAPES = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

export function parseJson(text) {
  if (typeof text !== 'string') throw new JsonSyntaxError('expected a string of JSON text');
  let pos = 0;

  function fail(what, at = pos) {
    let line = 1;
    let column = 1;
    for (let i = 0; i < at && i < text.length; i++) {
      if (text.charCodeAt(i) === 10) {
        line++;
        column = 1;
      } else {
        column++;
      }
    }
    throw new JsonSyntaxError(`${what} at line ${line} column ${column}`);
  }

  function skipWs() {
    for (;;) {
      const c = text.charCodeAt(pos);
      if (c === 32 || c === 9 || c === 10 || c === 13) pos++;
      else return;
    }
  }

  function literal(word, value) {
    if (text.startsWith(word, pos)) {
      pos += word.length;
      return value;
    }
    return fail('expected value');
  }

  function string() {
    // text[pos] is the opening quote.
    pos++;
    let out = '';
    for (;;) {
      PLAIN_RUN.lastIndex = pos;
      PLAIN_RUN.exec(text);
      out += text.slice(pos, PLAIN_RUN.lastIndex);
      pos = PLAIN_RUN.lastIndex;
      if (pos >= text.length) fail('EOF while parsing a string');
      const c = text[pos];
      if (c === '"') {
        pos++;
        return out;
      }
      if (c !== '\\') fail('control character in a string');
      const e = text[pos + 1];
      if (e === 'u') {
        const hex = text.slice(pos + 2, pos + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('invalid \\u escape', pos + 1);
        out += String.fromCharCode(parseInt(hex, 16));
        pos += 6;
      } else if (e !== undefined && Object.prototype.hasOwnProperty.call(ESCAPES, e)) {
        out += ESCAPES[e];
        pos += 2;
      } else {
        fail('invalid escape', pos + 1);
      }
    }
  }

  function number() {
    NUMBER.lastIndex = pos;
    const m = NUMBER.exec(text);
    if (!m || m[0] === '-') fail('invalid number');
    pos += m[0].length;
    return new JsonNumber(m[0]);
  }

  function value(depth) {
    skipWs();
    const c = text[pos];
    if (c === '{') return object(depth + 1);
    if (c === '[') return array(depth + 1);
    if (c === '"') return string();
    if (c === 't') return literal('true', true);
    if (c === 'f') return literal('false', false);
    if (c === 'n') return literal('null', null);
    if (c === '-' || (c >= '0' && c <= '9')) return number();
    if (c === undefined) return fail('EOF while parsing a value');
    return fail('expected value');
  }

  function object(depth) {
    if (depth > MAX_DEPTH) fail('nested too deeply');
    pos++;
    const map = new Map();
    skipWs();
    if (text[pos] === '}') {
      pos++;
      return map;
    }
    for (;;) {
      skipWs();
      if (text[pos] !== '"') fail(pos >= text.length ? 'EOF while parsing an object' : 'key must be a string');
      const key = string();
      skipWs();
      if (text[pos] !== ':') fail(pos >= text.length ? 'EOF while parsing an object' : "expected ':'");
      pos++;
      map.set(key, value(depth));
      skipWs();
      const c = text[pos];
      pos++;
      if (c === '}') return map;
      if (c !== ',') fail(c === undefined ? 'EOF while parsing an object' : "expected ',' or '}'", pos - 1);
    }
  }

  function array(depth) {
    if (depth > MAX_DEPTH) fail('nested too deeply');
    pos++;
    const list = [];
    skipWs();
    if (text[pos] === ']') {
      pos++;
      return list;
    }
    for (;;) {
      list.push(value(depth));
      skipWs();
      const c = text[pos];
      pos++;
      if (c === ']') return list;
      if (c !== ',') fail(c === undefined ? 'EOF while parsing a list' : "expected ',' or ']'", pos - 1);
    }
  }

  const result = value(0);
  skipWs();
  if (pos < text.length) fail('trailing characters');
  return result;
}

/** Compact JSON text of a value made by parseJson (plain JS values work too). */
export function stringify(v) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (v instanceof JsonNumber) return v.raw;
  if (typeof v === 'number') return Number.isFinite(v) ? JSON.stringify(v) : 'null';
  if (Array.isArray(v)) return '[' + v.map(stringify).join(',') + ']';
  const entries = v instanceof Map ? [...v] : Object.entries(v);
  return '{' + entries.map(([k, x]) => JSON.stringify(k) + ':' + stringify(x)).join(',') + '}';
}
