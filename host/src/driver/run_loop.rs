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

/// The new run `goal` with its first write: its creation, starting step 0
/// unless a limit forbids it, leased to `owner` (or to nobody).
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
    let mut events = vec![NewEvent::new(
        EventKind::RunStarted,
        None,
        json!({ "goal": goal, "limits": run.limits }),
    )];
    // The first step starts with the run, in the same write, unless a
    // limit forbids it (the loop then ends the run with that reason).
    let mut steps = vec![];
    if limit_hit(&run, now).is_none() {
        steps.push(Step::started(0, now));
        run.step_count = 1;
        events.push(NewEvent::new(EventKind::StepStarted, Some(0), json!({})));
    }
    Ok((run, steps, events))
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
    let mut lp = Loop {
        rt,
        owner,
        run: committed.run,
        steps: committed.steps,
        approvals: vec![],
        c,
        held: None,
        trace: None,
    };
    lp.trace_on();
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
    let run = match fresh {
        Some(run) => run,
        None => {
            let id = run_id.to_string();
            let taken = super::operator::take_lease_in(
                &*rt.store,
                &id,
                &owner,
                now,
                ttl,
                take_over.as_deref(),
            )
            .await;
            match taken {
                Ok(run) => run,
                // Finished by another process since it was read above.
                Err(StoreError::Terminal { run_id, status }) => {
                    return Err(DriverError::Terminal(run_id, status))
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let (steps, approvals) = rt.store.history(&run.id).await?;
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
    let _hb = heartbeat(rt, &lp.run.id, &lp.owner);
    let flow = match lp.recover().await {
        Ok(true) => lp.drive().await,
        Ok(false) => lp.pause_outcome().await,
        Err(h) => Err(h),
    };
    lp.finish(flow).await
}

impl<'r> Loop<'r> {
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

    fn notify(&self, events: &[crate::store::Event]) {
        if let Some(obs) = &self.rt.observer {
            for e in events {
                obs(e);
            }
        }
    }

    /// The run row as the next transition writes it.
    fn next_run(&self, now: i64) -> Run {
        let mut run = self.run.clone();
        run.updated_at = now;
        run.lease_expires = Some(now + self.rt.lease_ttl_ms);
        run
    }

    /// Commits one transition and takes what it wrote into the cache.
    async fn commit(
        &mut self,
        mut run: Run,
        steps: Vec<Step>,
        approvals: Vec<Approval>,
        events: Vec<NewEvent>,
    ) -> Flow<()> {
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
        // A `model.called` event per model call since the last write comes
        // first (the agent's calls come before its decision), then a held
        // step's events, then the plugins' log lines, then this write's own.
        let mut steps = steps;
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
        let mut events = if all.is_empty() && logs.is_empty() {
            events
        } else {
            all.extend(logs);
            all.extend(events);
            all
        };
        self.start_next_with(&mut run, &mut steps, &mut events);
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

    /// When `steps` finishes the run's last step and the run goes on within
    /// its limits, the next step starts in the same transition: one write
    /// instead of two, with the same rows and events. Nothing happens
    /// between the two, so nothing is lost; a crash after it leaves a
    /// started step, which the loop takes up as it would after a crash
    /// before a decision.
    fn start_next_with(&self, run: &mut Run, steps: &mut Vec<Step>, events: &mut Vec<NewEvent>) {
        let finishes_last = steps
            .iter()
            .any(|s| s.state == StepState::Done && s.index + 1 == run.step_count);
        if !finishes_last
            || run.status != RunStatus::Running
            || limit_hit(run, run.updated_at).is_some()
        {
            return;
        }
        let i = run.step_count;
        run.step_count += 1;
        steps.push(Step::started(i, run.updated_at));
        events.push(NewEvent::new(EventKind::StepStarted, Some(i), json!({})));
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

    /// Ends the run. `step`, when given, is written done with `observation`.
    async fn end(
        &mut self,
        status: RunStatus,
        reason: RunReason,
        result: Option<String>,
        step: Option<(u32, Observation)>,
        data: serde_json::Value,
    ) -> Flow<Outcome> {
        let now = self.now();
        let mut run = self.next_run(now);
        run.status = status;
        run.reason = Some(reason);
        run.result = result;
        let mut steps = vec![];
        let mut events = vec![];
        if let Some((i, obs)) = step {
            let mut s = self.steps[i as usize].clone();
            s.version += 1;
            s.state = StepState::Done;
            s.observation = Some(obs);
            s.updated_at = now;
            events.push(done_event(&s));
            steps.push(s);
        }
        let kind = match status {
            RunStatus::Completed => EventKind::RunCompleted,
            RunStatus::Cancelled => EventKind::RunCancelled,
            _ => EventKind::RunFailed,
        };
        let mut data = data;
        if let serde_json::Value::Object(m) = &mut data {
            m.insert("reason".into(), json!(reason));
        }
        events.push(NewEvent::new(kind, None, data));
        self.commit(run, steps, vec![], events).await?;
        Ok(Outcome {
            run: self.run.clone(),
            pending: None,
        })
    }

    /// Fails the run at step `i` with `{"error": message}` as the step's last word.
    async fn fail_at(&mut self, i: u32, reason: RunReason, message: &str) -> Flow<Outcome> {
        let obs = Observation::message(ObservationKind::Final, "error", message);
        let result = Some(json!({ "error": message }).to_string());
        self.end(
            RunStatus::Failed,
            reason,
            result,
            Some((i, obs)),
            json!({ "error": message }),
        )
        .await
    }

    async fn pause_outcome(&mut self) -> Flow<Outcome> {
        let pending = self
            .approvals
            .iter()
            .rev()
            .find(|a| a.status == ApprovalStatus::Pending)
            .cloned();
        Ok(Outcome {
            run: self.run.clone(),
            pending,
        })
    }

    /// Acts on what a resume finds. `Ok(true)`: continue driving;
    /// `Ok(false)`: stay paused.
    async fn recover(&mut self) -> Flow<bool> {
        if self.run.status == RunStatus::Parked {
            self.unpark().await?;
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
        let now = self.now();
        let mut s = self.steps[i as usize].clone();
        let (Some(call), Some(effect)) = (s.call.clone(), s.effect) else {
            return Err(Halt::Error(DriverError::Invalid(format!(
                "step {i} is executing without a call"
            ))));
        };
        let mut events = vec![];
        if s.state != StepState::Interrupted {
            s.version += 1;
            s.state = StepState::Interrupted;
            s.updated_at = now;
            events.push(NewEvent::new(
                EventKind::StepInterrupted,
                Some(i),
                json!({ "tool": call.tool, "effect": effect }),
            ));
        }
        if effect.safe_to_retry() {
            self.commit(self.next_run(now), vec![s], vec![], events)
                .await?;
            self.execute(i).await?;
            return Ok(true);
        }
        // A side effect may have happened: never run it again silently.
        let reason = format!(
            "the {} tool {:?} was running when its process stopped; it may or may not have taken effect. Approve to run it again.",
            effect, call.tool
        );
        let presentation = json!({ "step": i, "effect": effect }).to_string();
        let approval = self.new_approval(
            i,
            ApprovalKind::InterruptedSideEffect,
            call,
            reason,
            presentation,
            now,
        );
        events.push(NewEvent::new(
            EventKind::ApprovalRequested,
            Some(i),
            json!({ "approval": approval.id, "kind": approval.kind, "reason": approval.reason }),
        ));
        events.push(NewEvent::new(
            EventKind::RunPaused,
            Some(i),
            json!({ "approval": approval.id }),
        ));
        let mut run = self.next_run(now);
        run.status = RunStatus::WaitingForApproval;
        self.commit(run, vec![s], vec![approval], events).await?;
        Ok(false)
    }

    fn new_approval(
        &self,
        i: u32,
        kind: ApprovalKind,
        call: ToolCall,
        reason: String,
        presentation: String,
        now: i64,
    ) -> Approval {
        let chain_head = Some(self.run.chain_head.clone());
        let tool_pin = self.c.tools.pin(&call.tool).map(str::to_string);
        let hash = approval_hash(
            kind,
            &call,
            &reason,
            &presentation,
            chain_head.as_deref(),
            tool_pin.as_deref(),
        );
        Approval {
            id: self.rt.ids.next("appr"),
            run_id: self.run.id.clone(),
            step_index: i,
            kind,
            status: ApprovalStatus::Pending,
            call,
            reason,
            presentation,
            hash,
            created_at: now,
            expires_at: self.run.limits.approval_ttl_ms.map(|t| now + t as i64),
            decided_by: None,
            note: None,
            decided_at: None,
            chain_head,
            tool_pin,
        }
    }

    /// The run is paused on step `i`: apply the operator's word, if any.
    async fn act_on_approval(&mut self, i: u32) -> Flow<bool> {
        let Some(a) = self
            .approvals
            .iter()
            .rev()
            .find(|a| a.step_index == i)
            .cloned()
        else {
            return Err(Halt::Error(DriverError::Invalid(format!(
                "run {} waits for approval but step {i} has none",
                self.run.id
            ))));
        };
        let now = self.now();
        let step = self.steps[i as usize].clone();
        if let Some(t) = &self.trace {
            let expired =
                a.status == ApprovalStatus::Pending && a.expires_at.is_some_and(|e| e <= now);
            if expired {
                t.approval_wait(&a, ApprovalStatus::Expired.as_str(), now);
            } else if a.status != ApprovalStatus::Pending {
                t.approval_wait(&a, a.status.as_str(), now);
            }
        }
        match a.status {
            ApprovalStatus::Pending if a.expires_at.is_some_and(|e| e <= now) => {
                let mut a2 = a.clone();
                a2.status = ApprovalStatus::Expired;
                a2.decided_at = Some(now);
                let obs = Observation::message(
                    ObservationKind::Denied,
                    "reason",
                    "the approval expired before an operator answered",
                );
                self.close_paused_step(
                    step,
                    obs,
                    vec![a2],
                    EventKind::ApprovalExpired,
                    json!({ "approval": a.id }),
                )
                .await?;
                Ok(true)
            }
            ApprovalStatus::Pending => Ok(false),
            ApprovalStatus::Expired | ApprovalStatus::Denied | ApprovalStatus::Cancelled => {
                let why = match (&a.decided_by, &a.note) {
                    (Some(by), Some(n)) => format!("denied by {by}: {n}"),
                    (Some(by), None) => format!("denied by {by}"),
                    _ => "the approval expired".to_string(),
                };
                self.close_denied(step, &why, json!({ "approval": a.id, "status": a.status }))
                    .await?;
                Ok(true)
            }
            ApprovalStatus::Approved => {
                self.check_approval(&a, &step)?;
                let now_pin = self.c.tools.pin(&a.call.tool);
                if a.tool_pin.as_deref() != now_pin {
                    // Approved for one schema, the tool now has another:
                    // the call is not run; the agent may ask again.
                    let why = format!(
                        "the approval was given for the tool {:?} with its schemas pinned at {}, and they are now {}: the call is not run on it",
                        a.call.tool,
                        a.tool_pin.as_deref().unwrap_or("(no pin)"),
                        now_pin.unwrap_or("(no pin)")
                    );
                    let data = json!({ "approval": a.id, "status": a.status, "error": why });
                    self.close_denied(step, &why, data).await?;
                    return Ok(true);
                }
                let mut s = step;
                s.version += 1;
                s.state = StepState::Executing;
                s.updated_at = now;
                let mut run = self.next_run(now);
                run.status = RunStatus::Running;
                let events = vec![
                    NewEvent::new(
                        EventKind::RunResumed,
                        Some(i),
                        json!({ "approval": a.id, "by": a.decided_by }),
                    ),
                    NewEvent::new(
                        EventKind::StepExecuting,
                        Some(i),
                        json!({ "tool": a.call.tool }),
                    ),
                ];
                self.commit(run, vec![s], vec![], events).await?;
                self.execute(i).await?;
                Ok(true)
            }
        }
    }

    /// Refuses an approval whose row or step no longer match its hash.
    fn check_approval(&self, a: &Approval, step: &Step) -> Flow<()> {
        let tampered = |why: &str| {
            Halt::Error(DriverError::Tampered {
                id: a.id.clone(),
                why: why.into(),
            })
        };
        if approval_hash(
            a.kind,
            &a.call,
            &a.reason,
            &a.presentation,
            a.chain_head.as_deref(),
            a.tool_pin.as_deref(),
        ) != a.hash
        {
            return Err(tampered("its stored call, reason or presentation changed"));
        }
        if step.call.as_ref() != Some(&a.call) {
            return Err(tampered("the step's call differs from the approved call"));
        }
        if a.kind == ApprovalKind::Policy {
            match &step.verdict {
                Some(Verdict::RequireApproval(r))
                    if r.reason == a.reason && r.presentation == a.presentation => {}
                _ => {
                    return Err(tampered(
                        "the step's verdict differs from what was approved",
                    ))
                }
            }
        }
        Ok(())
    }

    /// Closes the paused step `s` as denied, saying `why`, and resumes.
    async fn close_denied(&mut self, s: Step, why: &str, data: serde_json::Value) -> Flow<()> {
        let obs = Observation::message(ObservationKind::Denied, "reason", why);
        self.close_paused_step(s, obs, vec![], EventKind::RunResumed, data)
            .await
    }

    async fn close_paused_step(
        &mut self,
        mut s: Step,
        obs: Observation,
        approvals: Vec<Approval>,
        kind: EventKind,
        data: serde_json::Value,
    ) -> Flow<()> {
        let now = self.now();
        let i = s.index;
        s.version += 1;
        s.state = StepState::Done;
        s.observation = Some(obs);
        s.updated_at = now;
        let mut run = self.next_run(now);
        run.status = RunStatus::Running;
        run.consecutive_failures += 1;
        let events = vec![NewEvent::new(kind, Some(i), data), done_event(&s)];
        self.commit(run, vec![s], approvals, events).await
    }

    /// Steps until the run ends or pauses.
    async fn drive(&mut self) -> Flow<Outcome> {
        loop {
            if self.run.status == RunStatus::WaitingForApproval {
                return self.pause_outcome().await;
            }
            if self.run.status.is_terminal() {
                return Ok(Outcome {
                    run: self.run.clone(),
                    pending: None,
                });
            }
            // A service shutting down: stop between two steps, at a
            // durable point; `finish` gives the lease back.
            if self.rt.stopping() {
                return Ok(Outcome {
                    run: self.run.clone(),
                    pending: None,
                });
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
                    if let Some(out) = self.check_limits().await? {
                        return Ok(out);
                    }
                    self.start_step().await?
                }
            };
            self.step(i).await?;
        }
    }

    async fn check_limits(&mut self) -> Flow<Option<Outcome>> {
        let hit = limit_hit(&self.run, self.now());
        match hit {
            None => Ok(None),
            Some((reason, msg)) => {
                let out = self
                    .end(
                        RunStatus::Failed,
                        reason,
                        Some(json!({ "error": msg }).to_string()),
                        None,
                        json!({ "error": msg }),
                    )
                    .await?;
                Ok(Some(out))
            }
        }
    }

    async fn start_step(&mut self) -> Flow<u32> {
        let now = self.now();
        let i = self.run.step_count;
        let step = Step::started(i, now);
        let mut run = self.next_run(now);
        run.step_count += 1;
        self.commit(
            run,
            vec![step],
            vec![],
            vec![NewEvent::new(EventKind::StepStarted, Some(i), json!({}))],
        )
        .await?;
        Ok(i)
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
        let l = &self.run.limits;
        self.c.model.arm(
            i,
            self.run.model_calls,
            self.run.tokens,
            l.max_model_calls,
            l.max_tokens,
        );
        let remaining = self.remaining();
        let decided = {
            let view = RunView {
                run: &self.run,
                steps: &self.steps[..i as usize],
                approvals: &self.approvals,
            };
            let started = self.trace_start();
            let fut = self.c.agent.decide(view);
            let w = wait(self.rt, &self.run.id, remaining, true, fut).await;
            if let (Some(t), Some(started)) = (&self.trace, started) {
                let (attrs, error) = match &w {
                    Waited::Done(Ok(d)) => (vec![decision_attr(d)], None),
                    Waited::Done(Err(e)) => (vec![], Some(e.to_string())),
                    Waited::Deadline => (vec![], Some("the run's deadline passed".to_string())),
                    Waited::Cancelled(_) => (vec![], Some("the run was cancelled".to_string())),
                };
                let name = self.c.agent.name();
                t.plugin_call(
                    "decide",
                    "agent",
                    name,
                    i,
                    started,
                    attrs,
                    vec![],
                    error.as_deref(),
                );
            }
            w
        };
        let decided = match decided {
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
            return Err(Halt::Outcome(self.park(i, o).await?));
        }
        let decision = match decided {
            None => {
                let out = self
                    .fail_at(
                        i,
                        RunReason::LimitDeadline,
                        "the run passed its wall-clock deadline while the agent was deciding",
                    )
                    .await?;
                return Err(Halt::Outcome(out));
            }
            Some(_) if limit_hit.is_some() => {
                let reason = limit_hit.unwrap_or(RunReason::LimitModelCalls);
                let out = self
                    .fail_at(i, reason, "the agent's model calls hit the run's limit")
                    .await?;
                return Err(Halt::Outcome(out));
            }
            Some(Err(e)) => {
                let reason = match &e {
                    ConsumerError::Trapped { .. } => RunReason::AgentTrapped,
                    ConsumerError::Failed(_) => RunReason::AgentError,
                    ConsumerError::ModelLimit(_) => RunReason::LimitModelCalls,
                };
                let out = self.fail_at(i, reason, &e.to_string()).await?;
                return Err(Halt::Outcome(out));
            }
            Some(Ok(d)) => d,
        };
        if let Some(out) = self.record_decision(i, decision).await? {
            return Err(Halt::Outcome(out));
        }
        if self.steps[i as usize].state != StepState::Decided {
            return Ok(()); // invalid decision: the step is done
        }
        if let Some(out) = self.judge(i).await? {
            return Err(Halt::Outcome(out));
        }
        if self.steps[i as usize].state == StepState::Executing {
            self.execute(i).await?;
        }
        Ok(())
    }

    /// Sets the run aside while its model server is down: `parked`, reason
    /// `model_unavailable`, with the time to try again. Step `i` stays
    /// started, with nothing charged to it; the lease is given back.
    async fn park(&mut self, i: u32, o: crate::model::Outage) -> Flow<Outcome> {
        let now = self.now();
        let retry_at = now.saturating_add(o.retry_in.as_millis() as i64);
        let mut run = self.next_run(now);
        run.status = RunStatus::Parked;
        run.reason = Some(RunReason::ModelUnavailable);
        run.retry_at = Some(retry_at);
        run.result = Some(json!({ "error": o.error }).to_string());
        let event = NewEvent::new(
            EventKind::RunParked,
            Some(i),
            json!({ "reason": "model_unavailable", "error": o.error, "attempts": o.attempts, "retry_at": retry_at }),
        );
        self.commit(run, vec![], vec![], vec![event]).await?;
        Ok(Outcome {
            run: self.run.clone(),
            pending: None,
        })
    }

    /// Takes a parked run back up: `running` again, its started step to be
    /// decided afresh.
    async fn unpark(&mut self) -> Flow<()> {
        let now = self.now();
        let mut run = self.next_run(now);
        run.status = RunStatus::Running;
        run.reason = None;
        run.result = None;
        run.retry_at = None;
        let event = NewEvent::new(
            EventKind::RunResumed,
            None,
            json!({ "from": "parked", "reason": self.run.reason }),
        );
        self.commit(run, vec![], vec![], vec![event]).await
    }

    /// Writes the decision verbatim, then what it means: the end of the run,
    /// an invalid decision, or a valid call waiting for the policy.
    async fn record_decision(&mut self, i: u32, decision: Decision) -> Flow<Option<Outcome>> {
        let now = self.now();
        let mut s = self.steps[i as usize].clone();
        s.version += 1;
        s.updated_at = now;
        let mut run = self.next_run(now);
        let mut events = vec![NewEvent::new(
            EventKind::StepDecided,
            Some(i),
            json!({ "decision": decision }),
        )];
        let invalid = match &decision {
            Decision::Complete(result) => match serde_json::from_str::<serde_json::Value>(result) {
                Ok(v) => {
                    s.state = StepState::Done;
                    s.observation = Some(Observation {
                        kind: ObservationKind::Final,
                        content: json!({ "result": v }).to_string(),
                    });
                    run.status = RunStatus::Completed;
                    run.reason = Some(RunReason::Completed);
                    run.result = Some(canonical_json(&v));
                    events.push(done_event(&s));
                    events.push(NewEvent::new(
                        EventKind::RunCompleted,
                        None,
                        json!({ "reason": "completed", "result": v }),
                    ));
                    None
                }
                Err(e) => Some(format!("the result of complete is not JSON: {e}")),
            },
            Decision::Fail(why) => {
                s.state = StepState::Done;
                s.observation = Some(Observation::message(ObservationKind::Final, "error", why));
                run.status = RunStatus::Failed;
                run.reason = Some(RunReason::AgentFailed);
                run.result = Some(json!({ "error": why }).to_string());
                events.push(done_event(&s));
                events.push(NewEvent::new(
                    EventKind::RunFailed,
                    None,
                    json!({ "reason": "agent_failed", "error": why }),
                ));
                None
            }
            Decision::Invalid(why) => Some(why.clone()),
            Decision::Call(call) => match self.c.tools.validate(call) {
                Ok((canonical, spec)) => {
                    s.effect = Some(spec.effect);
                    s.call = Some(canonical);
                    s.state = StepState::Decided;
                    None
                }
                Err(e) => Some(e.to_string()),
            },
        };
        if let Some(why) = invalid {
            s.state = StepState::Done;
            s.observation = Some(Observation::message(
                ObservationKind::InvalidDecision,
                "error",
                &why,
            ));
            events.push(done_event(&s));
            run.consecutive_failures += 1;
            self.limit_failures(&mut run, &mut events);
        }
        s.decision = Some(decision);
        if s.state == StepState::Decided {
            // A valid call: the policy judges it next, and the decision is
            // written with the verdict.
            self.hold(s, events);
            return Ok(None);
        }
        let ended = run.status.is_terminal();
        self.commit(run, vec![s], vec![], events).await?;
        Ok(ended.then(|| Outcome {
            run: self.run.clone(),
            pending: None,
        }))
    }

    /// Ends `run` in the same transition when it failed too often in a row.
    fn limit_failures(&self, run: &mut Run, events: &mut Vec<NewEvent>) {
        let max = run.limits.max_consecutive_failures;
        if max > 0 && run.consecutive_failures >= max && !run.status.is_terminal() {
            run.status = RunStatus::Failed;
            run.reason = Some(RunReason::LimitConsecutiveFailures);
            let msg = format!("{} consecutive failed steps", run.consecutive_failures);
            run.result = Some(json!({ "error": msg }).to_string());
            events.push(NewEvent::new(
                EventKind::RunFailed,
                None,
                json!({ "reason": "limit_consecutive_failures", "error": msg }),
            ));
        }
    }

    /// Asks the policy about the decided call of step `i` and records the
    /// verdict: executing, denied, paused for approval, or aborted.
    async fn judge(&mut self, i: u32) -> Flow<Option<Outcome>> {
        let s = self.steps[i as usize].clone();
        let (Some(call), Some(effect)) = (s.call.clone(), s.effect) else {
            return Err(Halt::Error(DriverError::Invalid(format!(
                "step {i} is decided without a valid call"
            ))));
        };
        let verdict = {
            let view = RunView {
                run: &self.run,
                steps: &self.steps[..i as usize],
                approvals: &self.approvals,
            };
            let started = self.trace_start();
            let v = self.c.policy.evaluate(&call, effect, view).await;
            if let (Some(t), Some(started)) = (&self.trace, started) {
                let (verdict, reason, error) = match &v {
                    Ok(Verdict::Allow) => ("allow", "", None),
                    Ok(Verdict::Deny(r)) => ("deny", r.as_str(), None),
                    Ok(Verdict::RequireApproval(r)) => {
                        ("require_approval", r.reason.as_str(), None)
                    }
                    Ok(Verdict::Abort(r)) => ("abort", r.as_str(), None),
                    Err(e) => ("error", "", Some(e.to_string())),
                };
                let mut ev = vec![
                    opentelemetry::KeyValue::new("keel.policy.verdict", verdict),
                    opentelemetry::KeyValue::new("gen_ai.tool.name", call.tool.clone()),
                ];
                if !reason.is_empty() {
                    ev.push(opentelemetry::KeyValue::new(
                        "keel.policy.reason",
                        reason.to_string(),
                    ));
                }
                t.plugin_call(
                    "evaluate",
                    "policy",
                    self.c.policy.name(),
                    i,
                    started,
                    vec![opentelemetry::KeyValue::new("keel.policy.verdict", verdict)],
                    vec![("policy.verdict", ev)],
                    error.as_deref(),
                );
            }
            v
        };
        let verdict = match verdict {
            Ok(Verdict::RequireApproval(r))
                if serde_json::from_str::<serde_json::Value>(&r.presentation).is_err() =>
            {
                Err(ConsumerError::Failed(
                    "the approval presentation is not JSON".into(),
                ))
            }
            v => v,
        };
        let verdict = match verdict {
            // The operator's config requires an approval for this tool,
            // whatever the policy allowed.
            Ok(Verdict::Allow) if self.c.tools.approval_required(&call.tool) => {
                Ok(Verdict::RequireApproval(ApprovalRequest {
                    reason: format!(
                        "the operator's config requires an approval for every call of {:?}",
                        call.tool
                    ),
                    presentation: json!({ "required_by": "config" }).to_string(),
                }))
            }
            v => v,
        };
        let verdict = match verdict {
            Ok(v) => v,
            Err(e) => {
                let reason = if matches!(e, ConsumerError::Trapped { .. }) {
                    RunReason::PolicyTrapped
                } else {
                    RunReason::PolicyError
                };
                return self.fail_at(i, reason, &e.to_string()).await.map(Some);
            }
        };
        let now = self.now();
        let mut s = s;
        s.version += 1;
        s.verdict = Some(verdict.clone());
        s.updated_at = now;
        let mut run = self.next_run(now);
        let mut approvals = vec![];
        let mut events = vec![NewEvent::new(
            EventKind::StepVerdict,
            Some(i),
            json!({ "verdict": verdict }),
        )];
        match &verdict {
            Verdict::Allow => {
                s.state = StepState::Executing;
                events.push(NewEvent::new(
                    EventKind::StepExecuting,
                    Some(i),
                    json!({ "tool": call.tool }),
                ));
            }
            Verdict::Deny(reason) => {
                s.state = StepState::Done;
                s.observation = Some(Observation::message(
                    ObservationKind::Denied,
                    "reason",
                    reason,
                ));
                run.consecutive_failures += 1;
                events.push(done_event(&s));
                self.limit_failures(&mut run, &mut events);
            }
            Verdict::RequireApproval(req) => {
                s.state = StepState::AwaitingApproval;
                let a = self.new_approval(
                    i,
                    ApprovalKind::Policy,
                    call.clone(),
                    req.reason.clone(),
                    req.presentation.clone(),
                    now,
                );
                events.push(NewEvent::new(EventKind::ApprovalRequested, Some(i), json!({ "approval": a.id, "kind": a.kind, "tool": call.tool, "arguments": serde_json::from_str::<serde_json::Value>(&call.arguments).unwrap_or_default(), "reason": a.reason })));
                events.push(NewEvent::new(
                    EventKind::RunPaused,
                    Some(i),
                    json!({ "approval": a.id }),
                ));
                run.status = RunStatus::WaitingForApproval;
                approvals.push(a);
            }
            Verdict::Abort(reason) => {
                s.state = StepState::Done;
                s.observation = Some(Observation::message(
                    ObservationKind::Final,
                    "aborted",
                    reason,
                ));
                run.status = RunStatus::Failed;
                run.reason = Some(RunReason::PolicyAbort);
                run.result = Some(json!({ "error": reason }).to_string());
                events.push(done_event(&s));
                events.push(NewEvent::new(
                    EventKind::RunFailed,
                    None,
                    json!({ "reason": "policy_abort", "error": reason }),
                ));
            }
        }
        self.commit(run, vec![s], approvals, events).await?;
        match self.run.status {
            RunStatus::WaitingForApproval => Ok(Some(self.pause_outcome().await?)),
            st if st.is_terminal() => Ok(Some(Outcome {
                run: self.run.clone(),
                pending: None,
            })),
            _ => Ok(None),
        }
    }

    /// Runs the tool of step `i` (already durably `executing`) and records
    /// its result.
    async fn execute(&mut self, i: u32) -> Flow<()> {
        let call = self.steps[i as usize]
            .call
            .as_ref()
            .ok_or_else(|| DriverError::Invalid(format!("step {i} has no call")))?;
        let started = self.trace_start();
        let result = {
            let tools = &self.c.tools;
            // A native tool that panics fails only its call. It runs here,
            // in the loop's task (borrowing the run's tools, not cloning
            // them): a task of its own cost a hop to another worker and
            // back on every step.
            let running = CatchPanic(Box::pin(async move { tools.call(call).await }));
            // A cancel does not interrupt a tool: its effect is under way.
            // The loop records its result on the cancelled run instead.
            match wait(self.rt, &self.run.id, self.remaining(), false, running).await {
                Waited::Deadline | Waited::Cancelled(_) => Err(ToolError::new(
                    "the run passed its wall-clock deadline while the tool ran",
                )),
                Waited::Done(Ok(r)) => r,
                Waited::Done(Err(e)) => Err(ToolError::new(format!(
                    "the tool panicked: {}",
                    panic_message(e)
                ))),
            }
        };
        if let (Some(t), Some(started)) = (&self.trace, started) {
            let e = result.as_ref().err().map(|e| e.to_string());
            t.tool_call(&call.tool, i, started, e.as_deref());
        }
        self.rt.faults.after_tool();
        let now = self.now();
        let mut s = self.steps[i as usize].clone();
        s.version += 1;
        s.state = StepState::Done;
        s.updated_at = now;
        let mut run = self.next_run(now);
        let mut fatal = None;
        s.observation = Some(match result {
            // Checked for being JSON without building it.
            Ok(text) => match serde_json::from_str::<serde::de::IgnoredAny>(&text) {
                Ok(_) => {
                    run.consecutive_failures = 0;
                    Observation {
                        kind: ObservationKind::ToolResult,
                        content: text,
                    }
                }
                Err(e) => {
                    run.consecutive_failures += 1;
                    Observation::message(
                        ObservationKind::ToolError,
                        "error",
                        &format!("the tool's result is not JSON: {e}"),
                    )
                }
            },
            Err(e) => {
                run.consecutive_failures += 1;
                if e.fatal {
                    fatal = Some(e.to_string());
                }
                Observation::message(ObservationKind::ToolError, "error", &e.to_string())
            }
        });
        let mut events = vec![done_event(&s)];
        if let Some(msg) = fatal {
            run.status = RunStatus::Failed;
            run.reason = Some(RunReason::ToolChanged);
            run.result = Some(json!({ "error": msg }).to_string());
            events.push(NewEvent::new(
                EventKind::RunFailed,
                None,
                json!({ "reason": "tool_changed", "error": msg }),
            ));
        }
        self.limit_failures(&mut run, &mut events);
        let max_same = run.limits.max_identical_calls;
        if max_same > 0 && !run.status.is_terminal() && self.identical_run(&s) >= max_same {
            run.status = RunStatus::Failed;
            run.reason = Some(RunReason::LimitIdenticalCalls);
            let msg = format!("the same call with the same result {max_same} times in a row");
            run.result = Some(json!({ "error": msg }).to_string());
            events.push(NewEvent::new(
                EventKind::RunFailed,
                None,
                json!({ "reason": "limit_identical_calls", "error": msg }),
            ));
        }
        // Kept to record the result should the run have been cancelled
        // while the tool ran (the commit then fails its compare-and-set).
        let done = s.clone();
        match self.commit(run, vec![s], vec![], events).await {
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

    /// How many steps in a row, ending with `last`, made the same call and
    /// got the same observation.
    fn identical_run(&self, last: &Step) -> u32 {
        let mut n = 1;
        for prev in self.steps[..last.index as usize].iter().rev() {
            if prev.call == last.call && prev.observation == last.observation && prev.call.is_some()
            {
                n += 1;
            } else {
                break;
            }
        }
        n
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

/// The limit that keeps `run` from starting another step at `now`, if any:
/// its reason and message.
fn limit_hit(run: &Run, now: i64) -> Option<(RunReason, String)> {
    let l = &run.limits;
    if run.step_count >= l.max_steps {
        Some((
            RunReason::LimitSteps,
            format!("the run reached its limit of {} steps", l.max_steps),
        ))
    } else if l
        .deadline_ms
        .is_some_and(|d| now - run.created_at >= d as i64)
    {
        Some((
            RunReason::LimitDeadline,
            "the run passed its wall-clock deadline".to_string(),
        ))
    } else {
        None
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

/// The `step.done` event of a step that was just finished.
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

fn done_event(s: &Step) -> NewEvent {
    NewEvent::new(
        EventKind::StepDone,
        Some(s.index),
        json!({ "observation": s.observation }),
    )
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
fn decision_attr(d: &Decision) -> opentelemetry::KeyValue {
    let kind = match d {
        Decision::Call(_) => "call",
        Decision::Complete(_) => "complete",
        Decision::Fail(_) => "fail",
        Decision::Invalid(_) => "invalid",
    };
    opentelemetry::KeyValue::new("keel.decision", kind)
}
