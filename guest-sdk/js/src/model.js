// The host's model client, for agents.
//
// The host holds the credentials, makes the request, retries what its config
// allows and counts calls and tokens against the run's limits; past them it
// answers limit-exceeded. complete(request) returns the model-response record
// ({message, finishReason, promptTokens, completionTokens}) or throws
// ModelError. Messages are {role, content, toolCalls, toolCallId}.

export const KINDS = Object.freeze(['limit-exceeded', 'transient', 'permanent', 'invalid-request']);

export class ModelError extends Error {
  constructor(kind, message) {
    super(`${kind}: ${message}`);
    this.name = 'ModelError';
    this.kind = kind;
    this.reason = message;
  }
}

let client = null;

/** Installs the function that calls the host (the agent component entry does). */
export function setClient(fn) {
  client = fn;
}

/** A message for a request; `toolCalls` only on assistant messages, `toolCallId` only on tool messages. */
export function message(role, content, { toolCalls = [], toolCallId } = {}) {
  return { role, content: String(content), toolCalls, toolCallId };
}

/** A completion for `{messages, tools = [], maxTokens, temperature}`. Throws ModelError. */
export function complete({ messages, tools = [], maxTokens, temperature }) {
  if (client === null) throw new ModelError('permanent', 'no model client: model.complete works only inside an agent component');
  try {
    return client({ messages, tools, maxTokens, temperature });
  } catch (e) {
    const wire = e !== null && typeof e === 'object' && 'payload' in e ? e.payload : e;
    if (wire && KINDS.includes(wire.tag)) throw new ModelError(wire.tag, String(wire.val));
    throw new ModelError('permanent', e instanceof Error ? e.message : String(e));
  }
}
