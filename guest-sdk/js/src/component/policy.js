// The policy world's component entry: binds the host's log import.
// Only a component build imports this module (node cannot resolve keel:plugin/*).
import { log as hostLog } from 'keel:plugin/log@0.1.0';

import { setSink } from '../log.js';
import { policyExports } from '../worlds.js';

setSink(hostLog);

/** The policy world's exports ({init, evaluate}) serving class `cls`. */
export const exportPolicy = policyExports;
