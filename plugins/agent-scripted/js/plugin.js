// agent-scripted, JavaScript twin: the component entry (see README.md).
// The SDK serves the agent world; all logic lives in script.js.
import { exportAgent } from './keel-guest/component/agent.js';
import { Script } from './script.js';

export const { init, decide } = exportAgent(Script);
