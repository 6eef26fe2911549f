// Pure logic of the agent-scripted plugin (no dependency on the bindings).
//
// The semantics are specified in ../README.md. Script.parse(configText) throws
// ConfigError with a "config...: why" message; View reassembles the host's
// view from deltas; script.decide(view) returns the next decision, already
// shaped as componentize-js lowers the WIT `decision` variant:
// {tag: 'call', val: {tool, arguments}}, {tag: 'complete', val: jsonText} or
// {tag: 'fail', val: reason}.

import { parseJson, stringify } from './json.js';

export const KINDS = ['call', 'complete', 'fail'];

export class ConfigError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** JSON text of a string, for quoting a config key in a message. */
const quote = (s) => JSON.stringify(s);

function parseEntry(entry, path) {
  if (!(entry instanceof Map) || entry.size !== 1 || !KINDS.includes([...entry.keys()][0])) {
    throw new ConfigError(`${path}: expected an object with exactly one of call, complete, fail`);
  }
  const [kind, value] = [...entry][0];
  const kpath = `${path}.${kind}`;
  if (kind === 'complete') return { tag: 'complete', val: stringify(value) };
  if (kind === 'fail') {
    if (typeof value !== 'string') throw new ConfigError(`${kpath}: expected a string`);
    return { tag: 'fail', val: value };
  }
  if (!(value instanceof Map)) throw new ConfigError(`${kpath}: expected an object`);
  let tool = null;
  let args = new Map(); // default {}
  for (const [key, v] of value) {
    if (key === 'tool') {
      if (typeof v !== 'string') throw new ConfigError(`${kpath}.tool: expected a string`);
      tool = v;
    } else if (key === 'arguments') {
      args = v;
    } else {
      throw new ConfigError(`${kpath}: unknown key ${quote(key)}`);
    }
  }
  if (tool === null) throw new ConfigError(`${kpath}.tool: missing`);
  return { tag: 'call', val: { tool, arguments: stringify(args) } };
}

/** A copy, so that callers can never change the script. */
function copy(decision) {
  return decision.tag === 'call'
    ? { tag: 'call', val: { tool: decision.val.tool, arguments: decision.val.arguments } }
    : { tag: decision.tag, val: decision.val };
}

export class Script {
  constructor(decisions) {
    this.decisions = decisions;
  }

  static parse(text) {
    let config;
    try {
      config = parseJson(text);
    } catch (err) {
      throw new ConfigError(`config: invalid JSON: ${err.message}`);
    }
    if (!(config instanceof Map)) throw new ConfigError('config: expected an object');
    let decisions = null;
    for (const [key, value] of config) {
      if (key === 'script') {
        if (!Array.isArray(value)) throw new ConfigError('config.script: expected an array');
        decisions = value.map((e, i) => parseEntry(e, `config.script[${i}]`));
      } else {
        throw new ConfigError(`config: unknown key ${quote(key)}`);
      }
    }
    if (decisions === null) throw new ConfigError('config.script: missing');
    return new Script(decisions);
  }

  /** script[i] where i is the number of steps in `view` that carry a decision. */
  decide(view) {
    const i = view.decidedCount();
    if (i < this.decisions.length) return copy(this.decisions[i]);
    return { tag: 'fail', val: `script exhausted after ${this.decisions.length} decisions` };
  }
}

/**
 * The host's view, reassembled from deltas: clear on reset, then replace each
 * delivered step by its index and each approval by its id. Steps and approvals
 * are the lifted WIT records ({index, version, state, decision, ...} and
 * {id, stepIndex, ...}); an absent option is undefined.
 */
export class View {
  constructor() {
    this.run = null;
    this.steps = new Map();
    this.approvals = new Map();
  }

  apply(delta) {
    if (delta.reset) {
      this.steps.clear();
      this.approvals.clear();
    }
    for (const step of delta.steps) this.steps.set(step.index, step);
    for (const approval of delta.approvals) this.approvals.set(approval.id, approval);
    this.run = delta.run;
  }

  decidedCount() {
    let n = 0;
    for (const step of this.steps.values()) {
      if (step.decision !== undefined && step.decision !== null) n++;
    }
    return n;
  }
}
