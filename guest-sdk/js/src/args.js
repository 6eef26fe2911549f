// Typed tool arguments.
//
// decode(text, shape) reads a call's JSON arguments into a plain object,
// checking each key against `shape` and refusing keys it lacks; errors name
// the key (`arguments.path: expected a string`). A shape maps each key to a
// type: 'string', 'integer', 'number', 'boolean', 'object', 'array', 'any',
// with a trailing '?' when the key may be absent; `[type]` is an array of
// that type and a nested shape object is a nested object. read(text) gives
// the config's strict reader (Obj) over the arguments instead.

import { JsonNumber, JsonSyntaxError, parseJson } from './json.js';
import { Obj, parse } from './config.js';

export class ArgumentsError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ArgumentsError';
  }
}

/** An Obj over the arguments object, whose paths start at `arguments`. */
export function read(text) {
  return parse(text, 'arguments', ArgumentsError);
}

/** A parsed JSON value as plain JavaScript: objects, arrays, numbers. */
export function plain(v) {
  if (v instanceof JsonNumber) return Number(v.raw);
  if (Array.isArray(v)) return v.map(plain);
  if (v instanceof Map) return Object.fromEntries([...v].map(([k, x]) => [k, plain(x)]));
  return v;
}

const INTEGER = /^-?(?:0|[1-9][0-9]*)$/;
const NAMES = {
  string: 'a string',
  integer: 'an integer',
  number: 'a number',
  boolean: 'true or false',
  object: 'an object',
  array: 'an array',
};

function check(v, type, path) {
  if (Array.isArray(type)) {
    if (!Array.isArray(v)) throw new ArgumentsError(`${path}: expected an array`);
    return v.map((x, i) => check(x, type[0], `${path}[${i}]`));
  }
  if (type !== null && typeof type === 'object') return build(v, type, path);
  let ok;
  switch (type) {
    case 'any':
      return plain(v);
    case 'string':
      ok = typeof v === 'string';
      break;
    case 'boolean':
      ok = typeof v === 'boolean';
      break;
    case 'number':
      ok = v instanceof JsonNumber;
      break;
    case 'integer':
      ok = v instanceof JsonNumber && INTEGER.test(v.raw) && Number.isSafeInteger(Number(v.raw));
      break;
    case 'object':
      ok = v instanceof Map;
      break;
    case 'array':
      ok = Array.isArray(v);
      break;
    default:
      throw new TypeError(`${path}: ${JSON.stringify(type)} is not a type in an arguments shape`);
  }
  if (!ok) throw new ArgumentsError(`${path}: expected ${NAMES[type]}`);
  return plain(v);
}

function build(v, shape, path) {
  if (!(v instanceof Map)) throw new ArgumentsError(`${path}: expected an object`);
  for (const key of v.keys()) {
    if (!Object.prototype.hasOwnProperty.call(shape, key)) {
      throw new ArgumentsError(`${path}: unknown key ${JSON.stringify(key)}`);
    }
  }
  const out = {};
  for (const [key, spec] of Object.entries(shape)) {
    const optional = typeof spec === 'string' && spec.endsWith('?');
    const type = optional ? spec.slice(0, -1) : spec;
    if (v.has(key)) {
      const x = v.get(key);
      out[key] = optional && x === null ? undefined : check(x, type, `${path}.${key}`);
    } else if (!optional) {
      throw new ArgumentsError(`${path}.${key}: missing`);
    }
  }
  return out;
}

/** A plain object from JSON arguments `text`, checked against `shape`. */
export function decode(text, shape) {
  let value;
  try {
    value = parseJson(text);
  } catch (e) {
    if (!(e instanceof JsonSyntaxError)) throw e;
    throw new ArgumentsError(`arguments: invalid JSON: ${e.message}`);
  }
  return build(value, shape, 'arguments');
}

export { Obj };
