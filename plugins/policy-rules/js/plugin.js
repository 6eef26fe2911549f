// policy-rules, JavaScript twin: the component entry (see README.md).
// The SDK serves the policy world; all logic lives in rules.js.
import { exportPolicy } from './keel-guest/component/policy.js';
import { RulesPolicy } from './rules.js';

export const { init, evaluate } = exportPolicy(RulesPolicy);
