// agent-scripted, JavaScript twin: the `agent` world's exports for
// componentize-js (see README.md). All logic lives in script.js.
//
// componentize-js lowers a returned {tag: 'ok' | 'err', val} as the WIT
// result itself (any other return value becomes ok(value)). A thrown string
// would also become err(string), but a thrown Error instance traps and
// poisons the instance, so every export catches everything and returns
// {tag: 'err', val: message} instead of throwing.

import { ConfigError, Script, View } from './script.js';

// Module-level state: one component instance is one plugin instance.
let script = null;
let view = new View();

const ok = (val) => ({ tag: 'ok', val });
const err = (message) => ({ tag: 'err', val: String(message) });
const describe = (e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));

export function init(config, _tools) {
  script = null;
  view = new View();
  try {
    script = Script.parse(config);
    return ok(undefined);
  } catch (e) {
    if (e instanceof ConfigError) return err(e.message);
    return err(`config: ${describe(e)}`); // never trap on a bad config
  }
}

export function decide(delta) {
  if (script === null) return err('decide called before a successful init');
  try {
    view.apply(delta);
    return ok(script.decide(view));
  } catch (e) {
    // An error fails the run; it never traps.
    return err(`agent-scripted: ${describe(e)}`);
  }
}
