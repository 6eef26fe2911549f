// Strict config reading with errors that name the key.
//
// A plugin gets its config as JSON text. parse(text) returns an Obj that
// hands out keys one by one, remembering where it is, so every error reads
// like `config.rules[2].action: missing`; finish() refuses the keys nobody
// asked for. Each error is a ConfigError, which the SDK returns to the host
// as the init error.

import { JsonNumber, JsonSyntaxError, parseJson, stringify } from './json.js';

export class ConfigError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** The config object of `text` (an empty text is {}); paths start at `root`. */
export function parse(text, root = 'config', Err = ConfigError) {
  if (typeof text !== 'string') throw new Err(`${root}: expected JSON text`);
  let value;
  if (text.trim() === '') {
    value = new Map();
  } else {
    try {
      value = parseJson(text);
    } catch (e) {
      if (!(e instanceof JsonSyntaxError)) throw e;
      throw new Err(`${root}: invalid JSON: ${e.message}`);
    }
  }
  return new Obj(root, value, Err);
}

const INTEGER = /^-?(?:0|[1-9][0-9]*)$/;
const quote = (v) => stringify(v);

/** The kind of JSON value `v` is, for messages. */
export function kindOf(v) {
  if (v === null) return 'null';
  if (typeof v === 'string') return 'a string';
  if (typeof v === 'boolean') return 'a boolean';
  if (v instanceof JsonNumber || typeof v === 'number') return 'a number';
  if (Array.isArray(v)) return 'an array';
  return 'an object';
}

/** One JSON object of the config (a Map from parseJson) and its path. */
export class Obj {
  constructor(path, value, Err = ConfigError) {
    this.Err = Err;
    if (value instanceof Map) this.map = new Map(value);
    else if (value !== null && typeof value === 'object' && !Array.isArray(value) && !(value instanceof JsonNumber)) {
      this.map = new Map(Object.entries(value));
    } else throw new Err(`${path}: expected an object`);
    this.path = path;
  }

  keyPath(key) {
    return `${this.path}.${key}`;
  }

  /** The value at `key`, taken out (undefined when absent). */
  take(key) {
    const v = this.map.get(key);
    this.map.delete(key);
    return v;
  }

  require(key) {
    if (!this.map.has(key)) throw new this.Err(`${this.keyPath(key)}: missing`);
    return this.take(key);
  }

  typed(key, required, check, what) {
    const v = required ? this.require(key) : this.take(key);
    if (v === undefined) return undefined;
    if (!check(v)) throw new this.Err(`${this.keyPath(key)}: expected ${what}`);
    return v;
  }

  /** A string; with `choices`, one of them. */
  str(key, { required = false, choices } = {}) {
    const v = this.typed(key, required, (x) => typeof x === 'string', 'a string');
    if (v !== undefined && choices && !choices.includes(v)) {
      throw new this.Err(`${this.keyPath(key)}: ${quote(v)} is not one of ${choices.join(', ')}`);
    }
    return v;
  }

  /** An integer written without a fraction or exponent, as a Number; at least `minimum` if given. */
  int(key, { required = false, minimum } = {}) {
    const v = this.typed(key, required, (x) => x instanceof JsonNumber && INTEGER.test(x.raw), 'an integer');
    if (v === undefined) return undefined;
    const n = Number(v.raw);
    if (!Number.isSafeInteger(n)) throw new this.Err(`${this.keyPath(key)}: ${v.raw} is too large`);
    if (minimum !== undefined && n < minimum) throw new this.Err(`${this.keyPath(key)}: must be at least ${minimum}`);
    return n;
  }

  number(key, { required = false } = {}) {
    const v = this.typed(key, required, (x) => x instanceof JsonNumber || typeof x === 'number', 'a number');
    return v === undefined ? undefined : Number(v);
  }

  bool(key, { required = false } = {}) {
    return this.typed(key, required, (x) => typeof x === 'boolean', 'true or false');
  }

  /** An array as [path, element] pairs, or undefined when absent. */
  array(key, { required = false } = {}) {
    const v = this.typed(key, required, Array.isArray, 'an array');
    if (v === undefined) return undefined;
    const path = this.keyPath(key);
    return v.map((x, i) => [`${path}[${i}]`, x]);
  }

  /** The object at `key` as an Obj, or undefined when absent. */
  obj(key, { required = false } = {}) {
    const v = this.typed(key, required, (x) => x instanceof Map, 'an object');
    return v === undefined ? undefined : new Obj(this.keyPath(key), v, this.Err);
  }

  /** Every key left, as [path, key, value], in document order; the object is empty afterwards. */
  entries() {
    const out = [...this.map].map(([k, v]) => [this.keyPath(k), k, v]);
    this.map.clear();
    return out;
  }

  /** Refuses the first key nobody took. */
  finish() {
    for (const key of this.map.keys()) throw new this.Err(`${this.path}: unknown key ${quote(key)}`);
  }
}
