// agent-scripted, JavaScript twin: the script (see ../README.md).
//
// Built on the Keel JavaScript SDK (guest-sdk/js, linked here as
// ./keel-guest): the SDK parses the config strictly, rebuilds the View from
// the host's deltas and serves the agent world from plugin.js. No bindings
// are imported, so node --test runs this as it is.

import * as keel from './keel-guest/index.js';

const { ConfigError, Decision, Json, stringify } = keel;
export { ConfigError };

export const KINDS = ['call', 'complete', 'fail'];

/** JSON text of a string, for quoting a config key in a message. */
const quote = (s) => JSON.stringify(s);

function parseEntry(entry, path) {
  if (!(entry instanceof Map) || entry.size !== 1 || !KINDS.includes([...entry.keys()][0])) {
    throw new ConfigError(`${path}: expected an object with exactly one of call, complete, fail`);
  }
  const [kind, value] = [...entry][0];
  const kpath = `${path}.${kind}`;
  if (kind === 'complete') return Decision.complete(new Json(stringify(value)));
  if (kind === 'fail') {
    if (typeof value !== 'string') throw new ConfigError(`${kpath}: expected a string`);
    return Decision.fail(value);
  }
  let tool = null;
  let args; // default {}
  // Keys in document order, so the first problem is the first one written.
  for (const [p, key, v] of new keel.config.Obj(kpath, value).entries()) {
    if (key === 'tool') {
      if (typeof v !== 'string') throw new ConfigError(`${p}: expected a string`);
      tool = v;
    } else if (key === 'arguments') {
      args = new Json(stringify(v));
    } else {
      throw new ConfigError(`${kpath}: unknown key ${quote(key)}`);
    }
  }
  if (tool === null) throw new ConfigError(`${kpath}.tool: missing`);
  return Decision.call(tool, args);
}

/** A copy, so that callers can never change the script. */
function copy(decision) {
  return decision.tag === 'call'
    ? { tag: 'call', val: { tool: decision.val.tool, arguments: decision.val.arguments } }
    : { tag: decision.tag, val: decision.val };
}

/** Decision i is script[i], where i is the number of steps that carry a decision. */
export class Script extends keel.Agent {
  constructor(text, tools) {
    super(text, tools);
    this.decisions = null;
    for (const [path, key, value] of keel.config.parse(text).entries()) {
      if (key !== 'script') throw new ConfigError(`config: unknown key ${quote(key)}`);
      if (!Array.isArray(value)) throw new ConfigError(`${path}: expected an array`);
      this.decisions = value.map((e, i) => parseEntry(e, `${path}[${i}]`));
    }
    if (this.decisions === null) throw new ConfigError('config.script: missing');
  }

  decide(view) {
    const i = view.decidedSteps;
    if (i < this.decisions.length) return copy(this.decisions[i]);
    return Decision.fail(`script exhausted after ${this.decisions.length} decisions`);
  }
}
