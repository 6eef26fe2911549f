//! One run's loop: the state machine of its steps.

use super::*;
use crate::consumer::{ConsumerError, RunView, ToolError};
use crate::store::{Expect, NewEvent, Transition};
use serde_json::json;

/// Why the loop stopped early: it was told to (cancel, lost lease), which is
/// an outcome, or something broke, which is an error.
enum Halt {
    Outcome(Outcome),
    Error(DriverError),
}

impl From<DriverError> for Halt {
    fn from(e: DriverError) -> Self {
        Halt::Error(e)
    }
}

type Flow<T> = Result<T, Halt>;

struct Loop<'r> {
    rt: &'r Runtime,
    owner: String,
    run: Run,
    steps: Vec<Step>,
    approvals: Vec<Approval>,
    c: Consumers,
    /// A step change kept in the cache but not yet written ([`Loop::hold`]):
    /// the step's index and its events. The next commit writes them, with
    /// the step's row as it then is.
    held: Option<(u32, Vec<NewEvent>)>,
    /// The run's trace, when the runtime has telemetry.
    trace: Option<crate::telemetry::RunTrace>,
}

/// Renews the lease every third of its TTL while the loop runs.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn heartbeat(rt: &Runtime, run_id: &str, owner: &str) -> Heartbeat {
    let (store, clock, ttl) = (rt.store.clone(), rt.clock.clone(), rt.lease_ttl_ms);
    let (run_id, owner) = (run_id.to_string(), owner.to_string());
    Heartbeat(tokio::spawn(async move {
        let every = std::time::Duration::from_millis((ttl / 3).max(1) as u64);
        loop {
            tokio::time::sleep(every).await;
            let (r, o, now) = (run_id.clone(), owner.clone(), clock.now_ms());
            match store.heartbeat(&r, &o, now, ttl).await {
                Ok(true) => {}
                // Lost the lease: the next transition's compare-and-set
                // stops the loop.
                Ok(false) => break,
                // The store is out of reach for now (a database restart):
                // beat again, so that the run keeps its lease if the store
                // is back before the lease runs out.
                Err(_) => {}
            }
        }
    }))
}

/// The new run `goal` with its first write ([`machine::create`]), leased
/// to `owner` (or to nobody).
fn new_run(
    rt: &Runtime,
    goal: &str,
    limits: Limits,
    meta: &str,
    owner: Option<&str>,
) -> Result<(Run, Vec<Step>, Vec<NewEvent>), DriverError> {
    if serde_json::from_str::<serde_json::Value>(meta).is_err() {
        return Err(DriverError::Invalid("run meta must be JSON".into()));
    }
    if goal.len() > MAX_GOAL_BYTES {
        return Err(DriverError::Invalid(format!(
            "the goal is {} bytes, over the limit of {MAX_GOAL_BYTES}",
            goal.len()
        )));
    }
    let now = rt.clock.now_ms();
    let mut run = Run::new(&rt.ids.next("run"), goal, limits, now);
    run.meta = match rt.telemetry {
        Some(_) => crate::telemetry::meta_with_trace(meta, &run.id),
        None => meta.to_string(),
    };
    if let Some(owner) = owner {
        run.lease_owner = Some(owner.to_string());
        run.lease_expires = Some(now + rt.lease_ttl_ms);
    }
    Ok(machine::create(run, now))
}

/// Stores a new run for a driver to claim: running, leased to nobody.
pub(super) async fn submit(
    rt: &Runtime,
    goal: &str,
    limits: Limits,
    meta: &str,
) -> Result<Run, DriverError> {
    let (run, steps, events) = new_run(rt, goal, limits, meta, None)?;
    let committed = rt.store.create_run(run, steps, events).await?;
    if let Some(obs) = &rt.observer {
        committed.events.iter().for_each(|e| obs(e));
    }
    Ok(committed.run)
}

pub(super) async fn start(
    rt: &Runtime,
    goal: &str,
    limits: Limits,
    meta: &str,
    c: Consumers,
) -> Result<Outcome, DriverError> {
    let owner = crate::store::lease::owner_id(&rt.ids.next("lease"));
    let (run, steps, events) = new_run(rt, goal, limits, meta, Some(&owner))?;
    let committed = rt.store.create_run(run, steps, events).await?;
    let crash_points = crash_points(rt, committed.events.iter().map(|e| &*e.kind));
    let mut lp = Loop::new(rt, owner, committed.run, committed.steps, vec![], c);
    lp.notify(&committed.events);
    lp.rt.faults.after_commit(&crash_points);
    let _hb = heartbeat(rt, &lp.run.id, &lp.owner);
    let flow = lp.drive().await;
    lp.finish(flow).await
}

pub(super) async fn resume(
    rt: &Runtime,
    run_id: &str,
    c: Consumers,
    take_over: Option<String>,
    claimed: Option<Run>,
) -> Result<Outcome, DriverError> {
    let (owner, run) = lease_for(rt, run_id, take_over, claimed).await?;
    let (steps, approvals) = rt.store.history(&run.id).await?;
    let mut lp = Loop::new(rt, owner, run, steps, approvals, c);
    let _hb = heartbeat(rt, &lp.run.id, &lp.owner);
    let flow = match lp.recover().await {
        Ok(true) => lp.drive().await,
        Ok(false) => Ok(lp.pause_outcome()),
        Err(h) => Err(h),
    };
    lp.finish(flow).await
}

/// The lease a resume drives run `run_id` under, and the run as the lease
/// left it: the claim's, while most of it is left, or one taken now.
async fn lease_for(
    rt: &Runtime,
    run_id: &str,
    take_over: Option<String>,
    claimed: Option<Run>,
) -> Result<(String, Run), DriverError> {
    let now = rt.clock.now_ms();
    let ttl = rt.lease_ttl_ms;
    let (owner, fresh) = match claimed {
        Some(run) => {
            let owner = run.lease_owner.clone().ok_or_else(|| {
                DriverError::Invalid(format!("run {} was not claimed: it has no lease", run.id))
            })?;
            // The claim took the lease in its own transaction. While most
            // of it is left (the run's plugins were instantiated at once),
            // taking it again would cost a read and a commit on the store's
            // writer only to extend it, which the heartbeat does. After a
            // slow start it is taken again, as an unclaimed run's is.
            let left = run.lease_expires.map_or(0, |e| e - now);
            (owner, (left >= ttl * 2 / 3).then_some(run))
        }
        None => (crate::store::lease::owner_id(&rt.ids.next("lease")), None),
    };
    if let Some(run) = fresh {
        return Ok((owner, run));
    }
    let id = run_id.to_string();
    let over = take_over.as_deref();
    match super::operator::take_lease_in(&*rt.store, &id, &owner, now, ttl, over).await {
        Ok(run) => Ok((owner, run)),
        // Finished by another process since it was read above.
        Err(StoreError::Terminal { run_id, status }) => Err(DriverError::Terminal(run_id, status)),
        Err(e) => Err(e.into()),
    }
}

impl<'r> Loop<'r> {
    fn new(
        rt: &'r Runtime,
        owner: String,
        run: Run,
        steps: Vec<Step>,
        approvals: Vec<Approval>,
        c: Consumers,
    ) -> Loop<'r> {
        let mut lp = Loop {
            rt,
            owner,
            run,
            steps,
            approvals,
            c,
            held: None,
            trace: None,
        };
        lp.trace_on();
        lp
    }

    /// Starts tracing the run, if the runtime has telemetry: the model
    /// gate's calls too.
    fn trace_on(&mut self) {
        if let Some(t) = &self.rt.telemetry {
            let trace = t.run(&self.run, self.c.agent.name());
            self.c.model.trace(trace.clone());
            self.trace = Some(trace);
        }
    }

    /// When a traced call starts; no clock is read for an untraced run.
    fn trace_start(&self) -> Option<std::time::SystemTime> {
        self.trace.as_ref().map(|_| std::time::SystemTime::now())
    }

    async fn finish(&mut self, flow: Flow<Outcome>) -> Result<Outcome, DriverError> {
        let result = match flow {
            Ok(o) | Err(Halt::Outcome(o)) => Ok(o),
            Err(Halt::Error(e)) => Err(e),
        };
        if let (Some(t), Ok(o)) = (&self.trace, &result) {
            if o.run.status.is_terminal() {
                t.end_run(&o.run);
            }
        }
        // Whatever happened, give the lease back if we may still hold it (a
        // pause or the run's end already gave it back in its transition).
        if self.run.lease_owner.as_deref() == Some(self.owner.as_str()) {
            let (id, owner) = (self.run.id.clone(), self.owner.clone());
            let _ = self.rt.store.release_lease(&id, &owner).await;
        }
        result
    }

    fn now(&self) -> i64 {
        self.rt.clock.now_ms()
    }

    /// The run as the loop holds it now, for the rules of [`machine`].
    fn at(&self) -> machine::At<'_> {
        machine::At {
            run: &self.run,
            steps: &self.steps,
            approvals: &self.approvals,
            now: self.now(),
            lease_ttl_ms: self.rt.lease_ttl_ms,
        }
    }

    /// What a new approval for `tool` needs: an id and the tool's pin.
    fn ask(&self, tool: &str) -> machine::Ask {
        machine::Ask {
            id: self.rt.ids.next("appr"),
            tool_pin: self.c.tools.pin(tool).map(str::to_string),
        }
    }

    /// The run as it now is, not paused.
    fn outcome(&self) -> Outcome {
        Outcome {
            run: self.run.clone(),
            pending: None,
        }
    }

    fn notify(&self, events: &[crate::store::Event]) {
        if let Some(obs) = &self.rt.observer {
            for e in events {
                obs(e);
            }
        }
    }

    /// Commits one write and takes what it wrote into the cache.
    async fn commit(&mut self, w: machine::Write) -> Flow<()> {
        let (t, crash_points) = self.transition(w);
        match self.rt.store.commit(t).await {
            Ok(done) => {
                self.run = done.run;
                for s in done.steps {
                    let i = s.index as usize;
                    if i < self.steps.len() {
                        self.steps[i] = s;
                    } else {
                        self.steps.push(s);
                    }
                }
                for a in done.approvals {
                    match self.approvals.iter_mut().find(|x| x.id == a.id) {
                        Some(slot) => *slot = a,
                        None => self.approvals.push(a),
                    }
                }
                self.notify(&done.events);
                self.rt.faults.after_commit(&crash_points);
                Ok(())
            }
            Err(StoreError::Conflict { .. }) => {
                // Cancelled, or the lease was taken over: stop and report the
                // run as it now is.
                let id = self.run.id.clone();
                let run = self.rt.store.run(&id).await.map_err(DriverError::from)?;
                Err(Halt::Outcome(Outcome { run, pending: None }))
            }
            Err(e) => Err(Halt::Error(e.into())),
        }
    }

    /// The store's transition for `w`, with what happened since the last
    /// write, and the crash points it passes.
    fn transition(&mut self, w: machine::Write) -> (Transition, Vec<&'static str>) {
        let machine::Write {
            mut run,
            mut steps,
            approvals,
            events,
        } = w;
        let drained = self.c.model.drain();
        run.model_calls = drained.calls.max(run.model_calls);
        run.tokens = drained.tokens.max(run.tokens);
        if run.status.is_terminal()
            || matches!(
                run.status,
                RunStatus::WaitingForApproval | RunStatus::Parked
            )
        {
            run.lease_owner = None;
            run.lease_expires = None;
        }
        let mut events = self.with_earlier(&drained, &mut steps, events);
        machine::start_next(&mut run, &mut steps, &mut events);
        let crash_points = crash_points(self.rt, events.iter().map(|e| e.kind.as_str()));
        let t = Transition {
            expect: Expect {
                status: self.run.status,
                owner: Some(self.owner.clone()),
                pending_approval: None,
            },
            run,
            steps,
            approvals,
            events,
            model_calls: drained.records,
        };
        (t, crash_points)
    }

    /// `events` after what came before them: a `model.called` event per
    /// model call since the last write first (the agent's calls come
    /// before its decision), then a held step's events (its row joins
    /// `steps`), then the plugins' log lines.
    fn with_earlier(
        &mut self,
        drained: &crate::model::GateDrain,
        steps: &mut Vec<Step>,
        events: Vec<NewEvent>,
    ) -> Vec<NewEvent> {
        let mut all: Vec<NewEvent> = drained.records.iter().map(model_event).collect();
        if let Some((i, held)) = self.held.take() {
            if !steps.iter().any(|s| s.index == i) {
                steps.insert(0, self.steps[i as usize].clone());
            }
            // Without model calls, the held events are the write's start.
            if all.is_empty() {
                all = held;
            } else {
                all.extend(held);
            }
        }
        let logs = self.c.events.drain();
        if all.is_empty() && logs.is_empty() {
            return events;
        }
        all.extend(logs);
        all.extend(events);
        all
    }

    /// Takes `step` into the cache without writing it; the next commit
    /// writes it (as the cache then holds it) and `events`, after the
    /// plugins' log lines so far. A decision is held until its verdict:
    /// the policy's call has no effect outside its instance, so a crash
    /// before the verdict's write loses no more than a crash during the
    /// agent's call would (the step is decided again), and a valid call
    /// costs the run one write less. What must be durable before a tool
    /// runs, its `executing` state, is still written before it runs.
    fn hold(&mut self, step: Step, events: Vec<NewEvent>) {
        debug_assert!(self.held.is_none(), "one held step at a time");
        let i = step.index;
        let mut held = self.c.events.drain();
        held.extend(events);
        self.steps[i as usize] = step;
        self.held = Some((i, held));
    }

    /// The old path the step cache replaced, kept for tests that compare
    /// the two (`test-hooks`).
    #[cfg(feature = "test-hooks")]
    async fn reload_if_asked(&mut self) -> Flow<()> {
        if self.rt.reload_each_step {
            let id = self.run.id.clone();
            let steps = self.rt.store.steps(&id).await.map_err(DriverError::from)?;
            let approvals = self
                .rt
                .store
                .approvals(&id)
                .await
                .map_err(DriverError::from)?;
            self.steps = steps;
            self.approvals = approvals;
        }
        Ok(())
    }

    /// Commits `w`, which ends the run, and stops the loop with it.
    async fn end_with<T>(&mut self, w: machine::Write) -> Flow<T> {
        self.commit(w).await?;
        Err(Halt::Outcome(self.outcome()))
    }

    fn pause_outcome(&self) -> Outcome {
        let pending = self
            .approvals
            .iter()
            .rev()
            .find(|a| a.status == ApprovalStatus::Pending)
            .cloned();
        Outcome {
            run: self.run.clone(),
            pending,
        }
    }

    /// Acts on what a resume finds. `Ok(true)`: continue driving;
    /// `Ok(false)`: stay paused.
    async fn recover(&mut self) -> Flow<bool> {
        if self.run.status == RunStatus::Parked {
            let w = machine::unpark(self.at());
            self.commit(w).await?;
        }
        let Some(last) = self.steps.last().cloned() else {
            return Ok(true);
        };
        if self.run.status == RunStatus::WaitingForApproval {
            return self.act_on_approval(last.index).await;
        }
        match last.state {
            StepState::Started | StepState::Done => Ok(true),
            StepState::Decided => {
                // Crashed between the decision and the verdict: judge it now.
                if let Some(out) = self.judge(last.index).await? {
                    return Err(Halt::Outcome(out));
                }
                if self.steps[last.index as usize].state == StepState::Executing {
                    self.execute(last.index).await?;
                }
                Ok(true)
            }
            StepState::Executing | StepState::Interrupted => self.interrupted(last.index).await,
            StepState::AwaitingApproval => self.act_on_approval(last.index).await,
        }
    }

    /// A step found executing after a crash: the tool may or may not have run.
    async fn interrupted(&mut self, i: u32) -> Flow<bool> {
        match machine::interrupt(self.at(), i, |tool| self.ask(tool))? {
            machine::Interrupt::Retry(w) => {
                self.commit(w).await?;
                self.execute(i).await?;
                Ok(true)
            }
            machine::Interrupt::Ask(w) => {
                self.commit(w).await?;
                Ok(false)
            }
        }
    }

    /// The run is paused on step `i`: apply the operator's word, if any.
    async fn act_on_approval(&mut self, i: u32) -> Flow<bool> {
        let at = self.at();
        let a = machine::approval_of(at, i)?;
        self.trace_answer(a, at.now);
        let now_pin = self.c.tools.pin(&a.call.tool);
        match machine::answered(at, a, now_pin)? {
            machine::Answer::Wait => Ok(false),
            machine::Answer::Close(w) => {
                self.commit(w).await?;
                Ok(true)
            }
            machine::Answer::Execute(w) => {
                self.commit(w).await?;
                self.execute(i).await?;
                Ok(true)
            }
        }
    }

    /// Traces the wait for approval `a`, once it ended (answered, or
    /// expired at `now`).
    fn trace_answer(&self, a: &Approval, now: i64) {
        let Some(t) = &self.trace else { return };
        let expired = a.status == ApprovalStatus::Pending && a.expires_at.is_some_and(|e| e <= now);
        if expired {
            t.approval_wait(a, ApprovalStatus::Expired.as_str(), now);
        } else if a.status != ApprovalStatus::Pending {
            t.approval_wait(a, a.status.as_str(), now);
        }
    }

    /// Steps until the run ends or pauses.
    async fn drive(&mut self) -> Flow<Outcome> {
        loop {
            if self.run.status == RunStatus::WaitingForApproval {
                return Ok(self.pause_outcome());
            }
            // A run that ended, or a service shutting down: stop between
            // two steps, at a durable point; `finish` gives the lease back.
            if self.run.status.is_terminal() || self.rt.stopping() {
                return Ok(self.outcome());
            }
            #[cfg(feature = "test-hooks")]
            self.reload_if_asked().await?;
            // A started step is decided now: the write that ended the
            // previous step (or created the run) started it, or a crash
            // left it before its decision.
            let i = match self.steps.last() {
                Some(s) if s.state == StepState::Started => s.index,
                // Never start a step while the last one is unfinished.
                Some(s) if s.state != StepState::Done => {
                    return Err(Halt::Error(DriverError::Invalid(format!(
                        "step {} is {}; it must finish before the next one starts",
                        s.index, s.state
                    ))))
                }
                _ => {
                    if let Some(w) = machine::limit(self.at()) {
                        self.commit(w).await?;
                        return Ok(self.outcome());
                    }
                    let i = self.run.step_count;
                    let w = machine::start_step(self.at());
                    self.commit(w).await?;
                    i
                }
            };
            self.step(i).await?;
        }
    }

    /// Remaining wall-clock time before the run's deadline.
    fn remaining(&self) -> Option<std::time::Duration> {
        self.run.limits.deadline_ms.map(|d| {
            let left = self.run.created_at + d as i64 - self.now();
            std::time::Duration::from_millis(left.max(0) as u64)
        })
    }

    /// Decides, judges and executes step `i`.
    async fn step(&mut self, i: u32) -> Flow<()> {
        let decision = self.decide(i).await?;
        let checked = match &decision {
            Decision::Call(call) => Some(
                self.c
                    .tools
                    .validate(call)
                    .map(|(canonical, spec)| (canonical, spec.effect))
                    .map_err(|e| e.to_string()),
            ),
            _ => None,
        };
        match machine::decide(self.at(), i, decision, checked) {
            // A valid call: the policy judges it next, and the decision is
            // written with the verdict.
            machine::Decided::Hold(s, events) => self.hold(s, events),
            machine::Decided::Write(w) if w.run.status.is_terminal() => {
                return self.end_with(w).await
            }
            // An invalid decision: the step is done.
            machine::Decided::Write(w) => return self.commit(w).await,
        }
        if let Some(out) = self.judge(i).await? {
            return Err(Halt::Outcome(out));
        }
        if self.steps[i as usize].state == StepState::Executing {
            self.execute(i).await?;
        }
        Ok(())
    }

    /// Asks the agent to decide step `i`, within the run's deadline and
    /// model limits. What keeps it from a decision ends the loop: a cancel,
    /// the deadline, a limit, an error (the run fails), or a model outage
    /// (the run is parked).
    async fn decide(&mut self, i: u32) -> Flow<Decision> {
        let l = &self.run.limits;
        let (calls, tokens) = (self.run.model_calls, self.run.tokens);
        self.c
            .model
            .arm(i, calls, tokens, l.max_model_calls, l.max_tokens);
        let remaining = self.remaining();
        let view = RunView {
            run: &self.run,
            steps: &self.steps[..i as usize],
            approvals: &self.approvals,
        };
        let started = self.trace_start();
        let fut = self.c.agent.decide(view);
        let waited = wait(self.rt, &self.run.id, remaining, true, fut).await;
        self.trace_decided(i, started, &waited);
        let decided = match waited {
            Waited::Done(r) => Some(r),
            Waited::Deadline => None,
            // The agent's call (a slow model call, say) is dropped: the run
            // is over, and its instance is never called again.
            Waited::Cancelled(run) => return Err(Halt::Outcome(self.settle(run, None).await?)),
        };
        let limit_hit = self.c.model.drain_limit();
        // Whatever the agent made of a call the outage failed is dropped:
        // the step is decided again when the run is resumed.
        if let (Some(_), Some(o)) = (&decided, self.c.model.take_outage()) {
            let w = machine::park(self.at(), i, &o);
            return self.end_with(w).await;
        }
        let (reason, why) = match decided {
            None => (
                RunReason::LimitDeadline,
                "the run passed its wall-clock deadline while the agent was deciding".to_string(),
            ),
            Some(_) if limit_hit.is_some() => (
                limit_hit.unwrap_or(RunReason::LimitModelCalls),
                "the agent's model calls hit the run's limit".to_string(),
            ),
            Some(Err(e)) => (agent_failure(&e), e.to_string()),
            Some(Ok(d)) => return Ok(d),
        };
        let w = machine::fail_at(self.at(), i, reason, &why);
        self.end_with(w).await
    }

    /// Traces the agent's call on step `i`, begun at `started`.
    fn trace_decided(
        &self,
        i: u32,
        started: Option<std::time::SystemTime>,
        w: &Waited<Result<Decision, ConsumerError>>,
    ) {
        let (Some(t), Some(started)) = (&self.trace, started) else {
            return;
        };
        let (decision, error) = match w {
            Waited::Done(Ok(d)) => (Some(decision_name(d)), None),
            Waited::Done(Err(e)) => (None, Some(e.to_string())),
            Waited::Deadline => (None, Some("the run's deadline passed".to_string())),
            Waited::Cancelled(_) => (None, Some("the run was cancelled".to_string())),
        };
        t.decided(self.c.agent.name(), i, started, decision, error.as_deref());
    }

    /// Asks the policy about the decided call of step `i` and records the
    /// verdict: executing, denied, paused for approval, or aborted.
    async fn judge(&mut self, i: u32) -> Flow<Option<Outcome>> {
        let (call, effect) = machine::decided_call(self.at(), i)?;
        let call = call.clone();
        let view = RunView {
            run: &self.run,
            steps: &self.steps[..i as usize],
            approvals: &self.approvals,
        };
        let started = self.trace_start();
        let verdict = self.c.policy.evaluate(&call, effect, view).await;
        self.trace_verdict(i, &call, started, &verdict);
        let config = self.c.tools.approval_required(&call.tool);
        let w = machine::judge(self.at(), i, verdict, config, |tool| self.ask(tool))?;
        self.commit(w).await?;
        Ok(match self.run.status {
            RunStatus::WaitingForApproval => Some(self.pause_outcome()),
            st if st.is_terminal() => Some(self.outcome()),
            _ => None,
        })
    }

    /// Traces the policy's call on step `i`, begun at `started`.
    fn trace_verdict(
        &self,
        i: u32,
        call: &ToolCall,
        started: Option<std::time::SystemTime>,
        v: &Result<Verdict, ConsumerError>,
    ) {
        let (Some(t), Some(started)) = (&self.trace, started) else {
            return;
        };
        let (verdict, reason, error) = match v {
            Ok(Verdict::Allow) => ("allow", None, None),
            Ok(Verdict::Deny(r)) => ("deny", Some(r.as_str()), None),
            Ok(Verdict::RequireApproval(r)) => ("require_approval", Some(r.reason.as_str()), None),
            Ok(Verdict::Abort(r)) => ("abort", Some(r.as_str()), None),
            Err(e) => ("error", None, Some(e.to_string())),
        };
        let judged = crate::telemetry::Judged {
            verdict,
            tool: &call.tool,
            reason,
        };
        t.judged(self.c.policy.name(), i, started, judged, error.as_deref());
    }

    /// Runs the tool of step `i` (already durably `executing`) and records
    /// its result.
    async fn execute(&mut self, i: u32) -> Flow<()> {
        let call = self.steps[i as usize]
            .call
            .as_ref()
            .ok_or_else(|| DriverError::Invalid(format!("step {i} has no call")))?;
        let started = self.trace_start();
        let tools = &self.c.tools;
        // A native tool that panics fails only its call. It runs here, in
        // the loop's task (borrowing the run's tools, not cloning them): a
        // task of its own cost a hop to another worker and back on every
        // step.
        let running = CatchPanic(Box::pin(async move { tools.call(call).await }));
        // A cancel does not interrupt a tool: its effect is under way. The
        // loop records its result on the cancelled run instead.
        let result = match wait(self.rt, &self.run.id, self.remaining(), false, running).await {
            Waited::Deadline | Waited::Cancelled(_) => Err(ToolError::new(
                "the run passed its wall-clock deadline while the tool ran",
            )),
            Waited::Done(Ok(r)) => r,
            Waited::Done(Err(e)) => Err(ToolError::new(format!(
                "the tool panicked: {}",
                panic_message(e)
            ))),
        };
        if let (Some(t), Some(started)) = (&self.trace, started) {
            let e = result.as_ref().err().map(|e| e.to_string());
            t.tool_call(&call.tool, i, started, e.as_deref());
        }
        self.rt.faults.after_tool();
        let w = machine::executed(self.at(), i, result);
        // Kept to record the result should the run have been cancelled
        // while the tool ran (the commit then fails its compare-and-set).
        let done = w.steps[0].clone();
        match self.commit(w).await {
            Err(Halt::Outcome(o)) if o.run.status == RunStatus::Cancelled => {
                Err(Halt::Outcome(self.settle(o.run, Some(done)).await?))
            }
            other => other,
        }
    }

    /// Records what the loop still knows about a run an operator cancelled
    /// under it, while it still holds the lease: the result of the tool
    /// that was executing (its step, marked interrupted by the cancel, ends
    /// done with `settled: true`) and the model calls made since the last
    /// write. Then the lease is released. Should the lease be gone, the
    /// run is left as the cancel wrote it.
    async fn settle(&mut self, cancelled: Run, done: Option<Step>) -> Flow<Outcome> {
        let drained = self.c.model.drain();
        let now = self.now();
        let mut run = cancelled.clone();
        run.updated_at = now;
        run.lease_owner = None;
        run.lease_expires = None;
        let mut steps = vec![];
        let mut events: Vec<NewEvent> = drained.records.iter().map(model_event).collect();
        if let Some(mut s) = done {
            let (id, i) = (run.id.clone(), s.index);
            let stored = self.rt.store.steps(&id).await.map_err(DriverError::from)?;
            if let Some(cur) = stored.get(i as usize) {
                if cur.state == StepState::Interrupted {
                    s.version = cur.version + 1;
                    s.updated_at = now;
                    events.push(NewEvent::new(
                        EventKind::StepDone,
                        Some(i),
                        json!({ "observation": s.observation, "settled": true }),
                    ));
                    steps.push(s);
                }
            }
        }
        let t = Transition {
            expect: Expect {
                status: RunStatus::Cancelled,
                owner: Some(self.owner.clone()),
                pending_approval: None,
            },
            run,
            steps,
            approvals: vec![],
            events,
            model_calls: drained.records,
        };
        match self.rt.store.commit(t).await {
            Ok(c) => {
                self.notify(&c.events);
                self.run = c.run.clone();
                Ok(Outcome {
                    run: c.run,
                    pending: None,
                })
            }
            Err(StoreError::Conflict { .. }) => Ok(Outcome {
                run: cancelled,
                pending: None,
            }),
            Err(e) => Err(Halt::Error(e.into())),
        }
    }
}

/// The event kinds of a write that the crash hook may name; nothing is
/// collected unless the hook is set.
fn crash_points<'k>(rt: &Runtime, kinds: impl Iterator<Item = &'k str>) -> Vec<&'k str> {
    if rt.faults.armed() {
        kinds.filter(|k| !k.starts_with("plugin.")).collect()
    } else {
        Vec::new()
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// A future that turns a panic while it is polled into an error. Once it
/// has panicked it is never polled again.
struct CatchPanic<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchPanic<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(p) => std::task::Poll::Ready(Err(p)),
        }
    }
}

/// The journal's record of one model call (the `model_calls` row has the
/// same, for `keel show`).
fn model_event(m: &crate::store::ModelCallRecord) -> NewEvent {
    let mut data = json!({
        "provider": m.provider,
        "outcome": m.outcome,
        "prompt_tokens": m.prompt_tokens,
        "completion_tokens": m.completion_tokens,
        "latency_ms": m.latency_ms,
    });
    if let (Some(e), serde_json::Value::Object(map)) = (&m.error, &mut data) {
        map.insert("error".into(), json!(e));
    }
    NewEvent::new(EventKind::ModelCalled, Some(m.step_index), data)
}

/// The reason a run fails for when its agent's call failed with `e`.
fn agent_failure(e: &ConsumerError) -> RunReason {
    match e {
        ConsumerError::Trapped { .. } => RunReason::AgentTrapped,
        ConsumerError::Failed(_) => RunReason::AgentError,
        ConsumerError::ModelLimit(_) => RunReason::LimitModelCalls,
    }
}

/// How a wait on a consumer ended.
enum Waited<T> {
    Done(T),
    /// The run's wall-clock deadline passed first.
    Deadline,
    /// An operator cancelled the run meanwhile (the cancelled row).
    Cancelled(Run),
}

/// Awaits `fut` until the run's deadline (`remaining`), and, when
/// `interruptible`, until an operator cancels the run: after a second, the
/// run's status is read every half second, so a cancel from any process
/// ends a slow wait (a model call, say) within about that. One timer
/// serves both, and a consumer that answers at once sets none.
async fn wait<F: std::future::Future>(
    rt: &Runtime,
    run_id: &str,
    remaining: Option<std::time::Duration>,
    interruptible: bool,
    fut: F,
) -> Waited<F::Output> {
    use tokio::time::{Duration, Instant};
    let now = Instant::now();
    let deadline = remaining.map(|left| now + left);
    let mut poll_at = interruptible.then(|| now + Duration::from_secs(1));
    tokio::pin!(fut);
    loop {
        let wake = match (deadline, poll_at) {
            (Some(d), Some(p)) => Some(d.min(p)),
            (d, p) => d.or(p),
        };
        let timer = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            r = &mut fut => return Waited::Done(r),
            () = timer => {}
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Waited::Deadline;
        }
        if poll_at.is_some_and(|p| now >= p) {
            let id = run_id.to_string();
            if let Ok(run) = rt.store.run(&id).await {
                if run.status == RunStatus::Cancelled {
                    return Waited::Cancelled(run);
                }
            }
            poll_at = Some(Instant::now() + Duration::from_millis(500));
        }
    }
}

/// What an agent decided, as a span attribute.
fn decision_name(d: &Decision) -> &'static str {
    match d {
        Decision::Call(_) => "call",
        Decision::Complete(_) => "complete",
        Decision::Fail(_) => "fail",
        Decision::Invalid(_) => "invalid",
    }
}
