"""The run, rebuilt inside the plugin from the deltas the host sends."""


class DeltaError(Exception):
    """A delta that cannot be applied; the view is left as it was."""


class View:
    """The whole run as the host has stored it, read-only to plugin code.

    `apply` takes each delta in turn: a reset clears the view, steps replace
    the step at their index (or extend the run by one), approvals replace
    the approval with their id. A delta is checked whole before anything
    changes.
    """

    __slots__ = ("_run", "_steps", "_approvals", "_order", "_decided", "_steps_t", "_approvals_t")

    def __init__(self):
        self._run = None
        self._steps = []
        self._approvals = {}
        self._order = []
        self._decided = 0
        # Tuples handed to plugin code, built on first read after a change,
        # so an agent that never reads them never pays for them.
        self._steps_t = ()
        self._approvals_t = ()

    def apply(self, delta):
        """Applies `delta` (a `ViewDelta`). Raises `DeltaError`."""
        if self._run is None and not delta.reset:
            raise DeltaError("view delta: the first delta did not reset the view")
        held = 0 if delta.reset else len(self._steps)
        for step in delta.steps:
            if step.index > held:
                raise DeltaError(
                    "view delta: step %d arrived while only %d steps are held" % (step.index, held)
                )
            if step.index == held:
                held += 1
            elif not delta.reset:
                old = self._steps[step.index]
                if step.version <= old.version:
                    raise DeltaError(
                        "view delta: step %d arrived with version %d, not newer than the held version %d"
                        % (step.index, step.version, old.version)
                    )
        if delta.reset:
            self._steps = []
            self._approvals = {}
            self._order = []
            self._decided = 0
        for step in delta.steps:
            self._decided += step.decision is not None
            if step.index == len(self._steps):
                self._steps.append(step)
            else:
                self._decided -= self._steps[step.index].decision is not None
                self._steps[step.index] = step
        for approval in delta.approvals:
            if approval.id not in self._approvals:
                self._order.append(approval.id)
            self._approvals[approval.id] = approval
        self._run = delta.run
        if delta.reset or delta.steps:
            self._steps_t = None
        if delta.reset or delta.approvals:
            self._approvals_t = None

    @property
    def run(self):
        """The run's `RunInfo`; None only before the first delta."""
        return self._run

    @property
    def goal(self):
        return self._run.goal if self._run is not None else ""

    @property
    def steps(self):
        """Every step before the one being worked on, in order (a tuple)."""
        if self._steps_t is None:
            self._steps_t = tuple(self._steps)
        return self._steps_t

    @property
    def approvals(self):
        """Every approval, in the order they were created (a tuple)."""
        if self._approvals_t is None:
            self._approvals_t = tuple(self._approvals[i] for i in self._order)
        return self._approvals_t

    @property
    def decided_steps(self):
        """How many steps carry a decision."""
        return self._decided
