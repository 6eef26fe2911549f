// The tool world's component entry: binds the host's log import.
// Only a component build imports this module (node cannot resolve keel:plugin/*).
import { log as hostLog } from 'keel:plugin/log@0.1.0';

import { setSink } from '../log.js';
import { toolExports } from '../worlds.js';

setSink(hostLog);

/** The tool world's exports ({init, specs, call}) serving class `cls`. */
export const exportTool = toolExports;
