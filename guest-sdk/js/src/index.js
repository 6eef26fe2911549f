// Write Keel agents, policies and tools in JavaScript (see ../README.md).
//
// Everything here runs without the component bindings, so plugin logic is
// tested with node --test; the component entry imports
// keel-guest/component/<world>.js, which binds the host's imports.

export const VERSION = '0.1.0';

export * as args from './args.js';
export * as config from './config.js';
export * as json from './json.js';
export * as log from './log.js';
export * as model from './model.js';
export { ArgumentsError } from './args.js';
export { ConfigError } from './config.js';
export { JsonNumber, JsonSyntaxError, parseJson, stringify } from './json.js';
export { ModelError } from './model.js';
export { Decision, EFFECTS, Json, Verdict, encode, toolSpec } from './types.js';
export { DeltaError, View } from './view.js';
export { Agent, Policy, Tool, agentExports, policyExports, toolExports } from './worlds.js';
