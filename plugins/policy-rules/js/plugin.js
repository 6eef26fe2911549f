// policy-rules, JavaScript twin: the `policy` world's exports for
// componentize-js (see README.md). All logic lives in rules.js.
//
// componentize-js lowers a returned {tag: 'ok' | 'err', val} as the WIT
// result itself (any other return value becomes ok(value)). A thrown string
// would also become err(string), but a thrown Error instance traps and
// poisons the instance, so every export catches everything and returns
// {tag: 'err', val: message} instead of throwing.

import { ConfigError, Policy } from './rules.js';

// Module-level state: one component instance is one plugin instance.
let policy = null;

const ok = (val) => ({ tag: 'ok', val });
const err = (message) => ({ tag: 'err', val: String(message) });
const describe = (e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));

export function init(config) {
  policy = null;
  try {
    policy = Policy.parse(config);
    // Rules match the call alone: the host need not send the steps.
    return ok('call-only');
  } catch (e) {
    if (e instanceof ConfigError) return err(e.message);
    return err(`config: ${describe(e)}`); // never trap on a bad config
  }
}

export function evaluate(call, effect, _view) {
  if (policy === null) return err('evaluate called before a successful init');
  try {
    return ok(policy.evaluate(call.tool, call.arguments, effect));
  } catch (e) {
    // A policy that cannot judge never allows: the error ends the run.
    return err(`policy-rules: ${describe(e)}`);
  }
}
