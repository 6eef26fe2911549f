// policy-rules, JavaScript twin: the rules and their matching (see ../README.md).
//
// Built on the Keel JavaScript SDK (guest-sdk/js, linked here as
// ./keel-guest): the SDK parses the config strictly, names the key of every
// error and serves the policy world from plugin.js. No bindings are imported,
// so node --test runs this as it is.

import * as keel from './keel-guest/index.js';

const { ConfigError, EFFECTS, Verdict } = keel;
export { ConfigError, EFFECTS };

export const ACTIONS = ['allow', 'deny', 'require-approval', 'abort'];
/** JSON text of a string, for quoting a config value in a message. */
const quote = (s) => JSON.stringify(s);

/**
 * Glob match over Unicode scalar values: `*` any run (also empty, also '/'),
 * `?` exactly one scalar value, every other character itself, no escapes.
 * Both arguments are arrays of code points as strings (Array.from(string)) or
 * plain strings. Iterative with one backtrack point: O(|pattern| * |text|).
 */
export function globMatch(pattern, text) {
  const p = typeof pattern === 'string' ? Array.from(pattern) : pattern;
  const t = typeof text === 'string' ? Array.from(text) : text;
  let pi = 0;
  let ti = 0;
  let starP = -1;
  let starT = 0;
  while (ti < t.length) {
    if (pi < p.length && p[pi] === '*') {
      starP = pi;
      starT = ti;
      pi++;
    } else if (pi < p.length && (p[pi] === '?' || p[pi] === t[ti])) {
      pi++;
      ti++;
    } else if (starP >= 0) {
      pi = starP + 1;
      starT++;
      ti = starT;
    } else {
      return false;
    }
  }
  while (pi < p.length && p[pi] === '*') pi++;
  return pi === p.length;
}

function parseAction(value, path) {
  if (typeof value !== 'string') {
    throw new ConfigError(`${path}: expected a string, one of ${ACTIONS.join(', ')}`);
  }
  if (!ACTIONS.includes(value)) {
    throw new ConfigError(`${path}: ${quote(value)} is not one of ${ACTIONS.join(', ')}`);
  }
  return value;
}

function parseEffect(value, path) {
  const shape = () => new ConfigError(`${path}: expected a string or a non-empty array of strings`);
  let names;
  if (typeof value === 'string') names = [value];
  else if (Array.isArray(value) && value.length > 0) names = value;
  else throw shape();
  // In document order; an element's problem is reported at the `effect` path
  // itself (the README's messages name no element index), as the other twins do.
  for (const name of names) {
    if (typeof name !== 'string') throw shape();
    if (!EFFECTS.includes(name)) throw new ConfigError(`${path}: ${quote(name)} is not an effect class`);
  }
  return new Set(names);
}

function parseRule(value, path) {
  const rule = { tool: null, effects: null, args: null, action: null, reason: null };
  // Keys in document order, so the first problem is the first one written.
  for (const [kpath, key, v] of new keel.config.Obj(path, value).entries()) {
    switch (key) {
      case 'tool':
        if (typeof v !== 'string') throw new ConfigError(`${kpath}: expected a string`);
        rule.tool = Array.from(v);
        break;
      case 'effect':
        rule.effects = parseEffect(v, kpath);
        break;
      case 'args': {
        if (!(v instanceof Map)) throw new ConfigError(`${kpath}: expected an object of string to string`);
        const pairs = [];
        for (const [gpath, argKey, glob] of new keel.config.Obj(kpath, v).entries()) {
          if (typeof glob !== 'string') throw new ConfigError(`${gpath}: expected a string`);
          pairs.push([argKey, Array.from(glob)]);
        }
        rule.args = pairs.length > 0 ? pairs : null; // `{}`: any arguments
        break;
      }
      case 'action':
        rule.action = parseAction(v, kpath);
        break;
      case 'reason':
        if (typeof v !== 'string') throw new ConfigError(`${kpath}: expected a string`);
        rule.reason = v;
        break;
      default:
        throw new ConfigError(`${path}: unknown key ${quote(key)}`);
    }
  }
  if (rule.action === null) throw new ConfigError(`${path}.action: missing`);
  return rule;
}

/** The call's arguments as a plain object, or null when they are not a JSON object. */
function argumentsObject(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : null;
}

function verdict(action, reason, index, tool) {
  switch (action) {
    case 'allow':
      return Verdict.allow();
    case 'require-approval':
      return Verdict.requireApproval(reason, { rule: index, tool });
    case 'deny':
      return Verdict.deny(reason);
    default:
      return Verdict.abort(reason);
  }
}

/** The first matching rule decides; the default when none matches. */
export class RulesPolicy extends keel.Policy {
  // Rules match the call alone: the host need not send the steps.
  view = 'call-only';

  constructor(text) {
    super(text);
    this.rules = null;
    this.default = 'deny';
    for (const [path, key, value] of keel.config.parse(text).entries()) {
      if (key === 'rules') {
        if (!Array.isArray(value)) throw new ConfigError(`${path}: expected an array`);
        this.rules = value.map((r, i) => parseRule(r, `${path}[${i}]`));
      } else if (key === 'default') {
        this.default = parseAction(value, path);
      } else {
        throw new ConfigError(`config: unknown key ${quote(key)}`);
      }
    }
    if (this.rules === null) throw new ConfigError('config.rules: missing');
  }

  evaluate(call, effect, _view) {
    return this.judge(call.tool, call.arguments, effect);
  }

  /**
   * The verdict on a call of `tool` with `argumentsText` (JSON text) whose
   * effect class is `effect` (a WIT enum name such as "read-only"). Never
   * throws on any input.
   */
  judge(tool, argumentsText, effect) {
    const toolChars = Array.from(tool);
    let args; // undefined: not parsed yet; null: not an object
    for (let index = 0; index < this.rules.length; index++) {
      const rule = this.rules[index];
      if (rule.tool !== null && !globMatch(rule.tool, toolChars)) continue;
      if (rule.effects !== null && !rule.effects.has(effect)) continue;
      if (rule.args !== null) {
        if (args === undefined) args = argumentsObject(argumentsText);
        if (args === null) continue;
        const ok = rule.args.every(
          ([key, glob]) =>
            Object.prototype.hasOwnProperty.call(args, key) &&
            typeof args[key] === 'string' &&
            globMatch(glob, args[key]),
        );
        if (!ok) continue;
      }
      const reason = rule.reason !== null ? rule.reason : `matched rule ${index}`;
      return verdict(rule.action, reason, index, tool);
    }
    return verdict(this.default, 'no rule matched', null, tool);
  }
}
