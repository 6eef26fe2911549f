// The component entry: componentize-js builds this module.
import { export{{World}} } from './keel-guest/component/{{world}}.js';
import { Plugin } from './logic.js';

export const { {{exports}} } = export{{World}}(Plugin);
