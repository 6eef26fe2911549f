// {{name}}: a tool component with one tool, echo, that answers with its
// arguments.
import * as keel from './keel-guest/index.js';

export class Plugin extends keel.Tool {
  constructor(config) {
    super(config);
    // No keys yet: the strict reader refuses any, naming it.
    keel.config.parse(config).finish();
  }

  specs() {
    return [{ name: 'echo', description: 'Answers with its arguments.', parameters: { type: 'object' }, effect: 'read-only' }];
  }

  call(name, args) {
    if (name !== 'echo') throw new Error(`unknown tool ${JSON.stringify(name)}`);
    return new keel.Json(args);
  }
}
