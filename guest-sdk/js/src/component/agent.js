// The agent world's component entry: binds the host's log and model imports.
// Only a component build imports this module (node cannot resolve keel:plugin/*).
import { log as hostLog } from 'keel:plugin/log@0.1.0';
import { complete as hostComplete } from 'keel:plugin/model@0.1.0';

import { setSink } from '../log.js';
import { setClient } from '../model.js';
import { agentExports } from '../worlds.js';

setSink(hostLog);
setClient(hostComplete);

/** The agent world's exports ({init, decide}) serving class `cls`. */
export const exportAgent = agentExports;
