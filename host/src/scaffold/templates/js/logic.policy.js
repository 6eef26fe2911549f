// {{name}}: a policy that allows read-only calls and asks an operator about
// every other one.
import * as keel from './keel-guest/index.js';

export class Plugin extends keel.Policy {
  // Judges each call alone: the host need not send the run's steps.
  view = 'call-only';

  constructor(config) {
    super(config);
    // No keys yet: the strict reader refuses any, naming it.
    keel.config.parse(config).finish();
  }

  evaluate(call, effect, _view) {
    if (effect === 'read-only') return keel.Verdict.allow();
    return keel.Verdict.requireApproval(`${call.tool} changes things (${effect})`, { tool: call.tool });
  }
}
