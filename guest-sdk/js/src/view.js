// The run, rebuilt inside the plugin from the deltas the host sends.

export class DeltaError extends Error {
  constructor(message) {
    super(message);
    this.name = 'DeltaError';
  }
}

function freeze(value) {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) freeze(v);
  }
  return value;
}

const hasDecision = (step) => step.decision !== undefined && step.decision !== null;

/**
 * The whole run as the host has stored it, read-only to plugin code.
 *
 * apply() takes each delta in turn: a reset clears the view, steps replace
 * the step at their index (or extend the run by one), approvals replace the
 * approval with their id. A delta is checked whole before anything changes;
 * one that cannot be applied throws DeltaError and leaves the view as it was.
 * Steps and approvals are the records the host sent, frozen.
 */
export class View {
  #run = null;
  #steps = [];
  #approvals = new Map();
  #decided = 0;
  #stepsOut = Object.freeze([]);
  #approvalsOut = Object.freeze([]);

  apply(delta) {
    if (delta === null || typeof delta !== 'object' || !Array.isArray(delta.steps) || !Array.isArray(delta.approvals)) {
      throw new DeltaError('view delta: expected {reset, run, steps, approvals}');
    }
    if (this.#run === null && !delta.reset) throw new DeltaError('view delta: the first delta did not reset the view');
    let held = delta.reset ? 0 : this.#steps.length;
    for (const step of delta.steps) {
      if (step.index > held) {
        throw new DeltaError(`view delta: step ${step.index} arrived while only ${held} steps are held`);
      }
      if (step.index === held) held++;
      else if (!delta.reset) {
        const old = this.#steps[step.index];
        if (step.version <= old.version) {
          throw new DeltaError(
            `view delta: step ${step.index} arrived with version ${step.version}, not newer than the held version ${old.version}`,
          );
        }
      }
    }
    if (delta.reset) {
      this.#steps = [];
      this.#approvals = new Map();
      this.#decided = 0;
    }
    for (const step of delta.steps) {
      freeze(step);
      if (hasDecision(step)) this.#decided++;
      if (step.index === this.#steps.length) this.#steps.push(step);
      else {
        if (hasDecision(this.#steps[step.index])) this.#decided--;
        this.#steps[step.index] = step;
      }
    }
    for (const approval of delta.approvals) this.#approvals.set(approval.id, freeze(approval));
    this.#run = freeze(delta.run);
    // Arrays handed to plugin code are built on first read after a change,
    // so an agent that never reads them never pays for them.
    if (delta.reset || delta.steps.length > 0) this.#stepsOut = null;
    if (delta.reset || delta.approvals.length > 0) this.#approvalsOut = null;
  }

  /** The run's info ({id, goal, status, stepCount, modelCalls, tokens}); null before the first delta. */
  get run() {
    return this.#run;
  }

  get goal() {
    return this.#run === null ? '' : this.#run.goal;
  }

  /** Every step before the one being worked on, in order (a frozen array). */
  get steps() {
    if (this.#stepsOut === null) this.#stepsOut = Object.freeze([...this.#steps]);
    return this.#stepsOut;
  }

  /** Every approval, in the order they were created (a frozen array). */
  get approvals() {
    if (this.#approvalsOut === null) this.#approvalsOut = Object.freeze([...this.#approvals.values()]);
    return this.#approvalsOut;
  }

  /** How many steps carry a decision. */
  get decidedSteps() {
    return this.#decided;
  }
}
