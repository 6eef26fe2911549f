// The three worlds as base classes, and the exports that serve them.
//
// A plugin extends Agent, Policy or Tool; its component entry binds the
// exports (see README.md):
//
//   export const { init, evaluate } = exportPolicy(MyPolicy);
//
// One component instance serves one plugin instance: init builds the class
// from the config and keeps it, with the View rebuilt from the host's
// deltas, for the calls that follow. componentize-js lowers a returned
// {tag: 'ok' | 'err', val} as the WIT result, and a thrown Error would trap
// and poison the instance, so every export here catches everything and
// returns the error instead.

import { ConfigError } from './config.js';
import { encode, decisionProblem, POLICY_VIEWS, toolSpec, verdictProblem } from './types.js';
import { DeltaError, View } from './view.js';
import * as log from './log.js';

/**
 * Chooses the next step of a run. The constructor gets the operator's config
 * (JSON text; read it with config.parse) and the run's tools (tool-spec
 * records); a thrown ConfigError names the bad key and the run does not start.
 */
export class Agent {
  constructor(_config, tools = []) {
    this.tools = Object.freeze([...tools]);
  }

  /** The next decision (see Decision), given the whole run so far (a View). */
  decide(_view) {
    throw new Error(`${this.constructor.name}.decide is not implemented`);
  }
}

/**
 * Judges each tool call before it runs. `view` says how much of the run
 * evaluate needs: 'full' (every step and approval) or 'call-only' (the run's
 * info alone, so each call costs the same however long the run). Set it as a
 * class field.
 */
export class Policy {
  view = 'full';

  constructor(_config) {}

  /**
   * A verdict (see Verdict) on `call` ({tool, arguments}), whose tool has the
   * effect class `effect` ('read-only' ... 'destructive'). A throw fails the
   * run: a policy that cannot judge never allows.
   */
  evaluate(_call, _effect, _view) {
    throw new Error(`${this.constructor.name}.evaluate is not implemented`);
  }
}

/** Provides one or more tools. */
export class Tool {
  constructor(_config) {}

  /** The tools provided, as objects for toolSpec ({name, description, parameters, effect}). */
  specs() {
    throw new Error(`${this.constructor.name}.specs is not implemented`);
  }

  /**
   * Runs tool `name` with `args` (JSON text, already checked against its
   * schema by the host; args.decode types it). Returns any JSON value (or
   * Json text); a throw becomes the call's tool-error observation.
   */
  call(_name, _args) {
    throw new Error(`${this.constructor.name}.call is not implemented`);
  }
}

const ok = (val) => ({ tag: 'ok', val });
const err = (message) => ({ tag: 'err', val: String(message) });
const what = (e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));

function initError(cls, e) {
  if (e instanceof ConfigError) return e.message;
  return `config: ${cls.name}.constructor threw ${what(e)}`;
}

function callError(cls, method, e) {
  if (e instanceof DeltaError) return e.message;
  return `${cls.name}.${method}: ${what(e)}`;
}

/** The agent world's exports ({init, decide}) serving class `cls`. */
export function agentExports(cls) {
  let agent = null;
  let view = new View();
  return {
    init(config, tools) {
      agent = null;
      view = new View();
      try {
        agent = new cls(config, tools);
        return ok(undefined);
      } catch (e) {
        return err(initError(cls, e));
      }
    },
    decide(delta) {
      if (agent === null) return err('decide called before a successful init');
      try {
        view.apply(delta);
        const decision = agent.decide(view);
        const problem = decisionProblem(decision);
        return problem === null ? ok(decision) : err(`${cls.name}.decide: ${problem}`);
      } catch (e) {
        return err(callError(cls, 'decide', e));
      }
    },
  };
}

/** The policy world's exports ({init, evaluate}) serving class `cls`. */
export function policyExports(cls) {
  let policy = null;
  let view = new View();
  return {
    init(config) {
      policy = null;
      view = new View();
      let made;
      try {
        made = new cls(config);
      } catch (e) {
        return err(initError(cls, e));
      }
      if (!POLICY_VIEWS.includes(made.view)) {
        return err(`config: ${cls.name}.view is ${JSON.stringify(made.view)}, not "full" or "call-only"`);
      }
      policy = made;
      return ok(made.view);
    },
    evaluate(call, effect, delta) {
      if (policy === null) return err('evaluate called before a successful init');
      try {
        view.apply(delta);
        const verdict = policy.evaluate(Object.freeze({ tool: call.tool, arguments: call.arguments }), effect, view);
        const problem = verdictProblem(verdict);
        return problem === null ? ok(verdict) : err(`${cls.name}.evaluate: ${problem}`);
      } catch (e) {
        return err(callError(cls, 'evaluate', e));
      }
    },
  };
}

/** The tool world's exports ({init, specs, call}) serving class `cls`. */
export function toolExports(cls) {
  let tool = null;
  return {
    init(config) {
      tool = null;
      try {
        tool = new cls(config);
        return ok(undefined);
      } catch (e) {
        return err(initError(cls, e));
      }
    },
    specs() {
      // specs cannot fail in the WIT: a tool that cannot list its specs
      // offers none, and the host refuses a tool without specs.
      if (tool === null) return [];
      try {
        return [...tool.specs()].map(toolSpec);
      } catch (e) {
        log.error(`${cls.name}.specs: ${what(e)}`);
        return [];
      }
    },
    call(name, args) {
      if (tool === null) return err('call before a successful init');
      try {
        return ok(encode(tool.call(name, args)));
      } catch (e) {
        return err(callError(cls, 'call', e));
      }
    },
  };
}
