// The values plugins and the host exchange, in the shapes componentize-js
// lifts and lowers: records are plain objects with camelCase fields, enums
// are their WIT names as strings ('read-only', 'done'), variants are
// {tag, val}, an absent option is undefined, JSON fields hold JSON text.
// The builders below make decisions and verdicts in those shapes, so what a
// plugin returns crosses the boundary as it is.

import { JsonNumber, parseJson, stringify } from './json.js';

export const EFFECTS = Object.freeze(['read-only', 'idempotent', 'local-mutation', 'remote-mutation', 'destructive']);
export const POLICY_VIEWS = Object.freeze(['full', 'call-only']);

/**
 * JSON text that is passed on as it is (checked to parse) where a plain
 * value would be encoded: `Decision.complete(new Json('{"a":1}'))`.
 */
export class Json {
  constructor(text) {
    parseJson(text);
    this.text = text;
  }
  toString() {
    return this.text;
  }
}

/** Compact JSON text of `value`; a Json is returned as it is, undefined is null. */
export function encode(value) {
  if (value instanceof Json) return value.text;
  return stringify(value);
}

const text = (v) => String(v);

/** What an agent wants next, as the WIT `decision` variant. */
export const Decision = Object.freeze({
  /** Run `tool` with `args` (an object, a Map, or Json text; none is {}). */
  call(tool, args) {
    return { tag: 'call', val: { tool: text(tool), arguments: args === undefined ? '{}' : encode(args) } };
  },
  /** End the run with `value` (any JSON value, or Json text) as its result. */
  complete(value = null) {
    return { tag: 'complete', val: encode(value) };
  },
  /** End the run as failed. */
  fail(reason) {
    return { tag: 'fail', val: text(reason) };
  },
  /** No usable decision this time; the agent sees `reason` next step. */
  invalid(reason) {
    return { tag: 'invalid', val: text(reason) };
  },
});

/** A policy's judgement, as the WIT `verdict` variant. */
export const Verdict = Object.freeze({
  allow() {
    return { tag: 'allow' };
  },
  deny(reason) {
    return { tag: 'deny', val: text(reason) };
  },
  abort(reason) {
    return { tag: 'abort', val: text(reason) };
  },
  /** Pause for an operator; `presentation` is any JSON value shown beside the call. */
  requireApproval(reason, presentation = null) {
    return { tag: 'require-approval', val: { reason: text(reason), presentation: encode(presentation) } };
  },
});

/** A tool as agents and policies see it; `parameters` may be a value or JSON text. */
export function toolSpec({ name, description = '', parameters = { type: 'object' }, effect = 'destructive' }) {
  if (!EFFECTS.includes(effect)) throw new TypeError(`${JSON.stringify(effect)} is not an effect class`);
  return {
    name: text(name),
    description: text(description),
    parameters: typeof parameters === 'string' ? new Json(parameters).text : encode(parameters),
    effect,
  };
}

const isString = (v) => typeof v === 'string';

/** Why `d` is not a decision the host can take, or null. */
export function decisionProblem(d) {
  if (d === null || typeof d !== 'object') return `expected a Decision, got ${d === null ? 'null' : typeof d}`;
  switch (d.tag) {
    case 'call':
      return d.val && isString(d.val.tool) && isString(d.val.arguments) ? null : 'a call needs {tool, arguments} strings';
    case 'complete':
    case 'fail':
    case 'invalid':
      return isString(d.val) ? null : `a ${d.tag} needs a string`;
    default:
      return `${JSON.stringify(d.tag)} is not a decision (call, complete, fail, invalid)`;
  }
}

/** Why `v` is not a verdict the host can take, or null. */
export function verdictProblem(v) {
  if (v === null || typeof v !== 'object') return `expected a Verdict, got ${v === null ? 'null' : typeof v}`;
  switch (v.tag) {
    case 'allow':
      return null;
    case 'deny':
    case 'abort':
      return isString(v.val) ? null : `a ${v.tag} needs a string reason`;
    case 'require-approval':
      return v.val && isString(v.val.reason) && isString(v.val.presentation)
        ? null
        : 'a require-approval needs {reason, presentation} strings';
    default:
      return `${JSON.stringify(v.tag)} is not a verdict (allow, deny, require-approval, abort)`;
  }
}

export { JsonNumber };
