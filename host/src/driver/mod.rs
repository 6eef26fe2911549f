//! The durable agent loop.
//!
//! A step moves started → decided → (awaiting approval) → executing → done,
//! each move one store transition with its events. The loop keeps the run's
//! steps and approvals in memory from the moment it starts or resumes (the
//! step cache); what it keeps is decoded from what it wrote, so it always
//! equals a fresh load.

pub mod clock;
mod facade;
mod faults;
mod machine;
pub mod operator;
mod run_loop;

pub use clock::{Clock, Ids, RandomIds, SeqIds, StepClock, SystemClock};
pub use facade::{Operator, RunDetail};
pub use operator::cancel;

use crate::consumer::{Agent, EventSink, Policy};
use crate::model::{ModelGate, ModelProvider};
use crate::store::{Event, RunStore, StoreError};
use crate::tools::ToolSet;
use crate::types::*;
use std::sync::Arc;

/// Called with every event after its transition committed.
pub type Observer = Arc<dyn Fn(&Event) + Send + Sync>;

/// Drives runs against one store.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn Ids>,
    pub(crate) lease_ttl_ms: i64,
    pub(crate) observer: Option<Observer>,
    #[cfg(feature = "test-hooks")]
    pub(crate) reload_each_step: bool,
    pub(crate) faults: faults::Faults,
    /// Set by [`Runtime::stop_at_next_step`]; shared by the clones.
    pub(crate) stopping: Arc<std::sync::atomic::AtomicBool>,
    /// Where runs' spans go, if anywhere.
    pub(crate) telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

/// The consumers of one run, made by a [`ConsumersBuilder`]. They serve
/// this run only.
pub struct Consumers {
    /// Decides each step.
    pub agent: Box<dyn Agent>,
    /// Judges each call before it runs.
    pub policy: Box<dyn Policy>,
    /// The tools the agent may call.
    pub tools: ToolSet,
    pub(crate) model: Arc<ModelGate>,
    pub(crate) events: Arc<EventSink>,
}

impl Consumers {
    /// The run's model accounting: the gate the agent calls the model
    /// through and the loop drains into each transition.
    pub fn model(&self) -> &Arc<ModelGate> {
        &self.model
    }

    /// The consumers' log lines, stored with the run's next transition.
    pub fn events(&self) -> &Arc<EventSink> {
        &self.events
    }
}

/// Wires one run's consumers to one model gate and one event sink.
///
/// The agent must call the model through the very gate the loop drains
/// (or its calls are neither limited nor recorded), and the agent, policy
/// and tools must log into the sink the loop stores; built apart, they can
/// silently disagree. The builder owns both: plugins are constructed from
/// it ([`crate::wasm::WasmAgent::new`], [`crate::wasm::WasmPolicy::new`]),
/// a native agent takes [`ConsumersBuilder::model`], and
/// [`ConsumersBuilder::build`] is the only way to make [`Consumers`].
pub struct ConsumersBuilder {
    model: Arc<ModelGate>,
    events: Arc<EventSink>,
}

impl ConsumersBuilder {
    /// A run's wiring over `provider`: a fresh model gate and a fresh sink.
    pub fn new(provider: Arc<dyn ModelProvider>) -> ConsumersBuilder {
        ConsumersBuilder::with_gate(ModelGate::new(provider))
    }

    /// A run's wiring over a gate made for it, and a fresh sink.
    pub fn with_gate(gate: ModelGate) -> ConsumersBuilder {
        ConsumersBuilder {
            model: Arc::new(gate),
            events: Arc::new(EventSink::default()),
        }
    }

    /// The run's model gate, for an agent that calls the model.
    pub fn model(&self) -> Arc<ModelGate> {
        self.model.clone()
    }

    /// The run's event sink, for a consumer that logs.
    pub fn events(&self) -> Arc<EventSink> {
        self.events.clone()
    }

    /// The run's consumers, sharing this builder's gate and sink.
    pub fn build(
        self,
        agent: Box<dyn Agent>,
        policy: Box<dyn Policy>,
        tools: ToolSet,
    ) -> Consumers {
        Consumers {
            agent,
            policy,
            tools,
            model: self.model,
            events: self.events,
        }
    }
}

/// Where a loop left its run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run as the loop last stored it.
    pub run: Run,
    /// The approval the run waits for, when it paused.
    pub pending: Option<Approval>,
}

/// Why a loop could not start, resume or go on driving a run.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The store failed or refused a read or a transition.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run had already ended when the loop tried to take its lease.
    #[error("run {0} is {1}: there is nothing to resume")]
    Terminal(String, RunStatus),
    /// A stored approval no longer matches its hash or its step's call; the run is left paused.
    #[error(
        "approval {id} does not match what was shown to the operator ({why}); the run stays paused"
    )]
    Tampered {
        /// The approval's id.
        id: String,
        /// Which check failed.
        why: String,
    },
    /// The input, or the stored run, is something the loop cannot act on (meta that is not JSON, a step without a call).
    #[error("{0}")]
    Invalid(String),
}

impl Runtime {
    /// A runtime on `store`: any engine behind [`RunStore`] (a SQLite
    /// [`crate::store::StoreHandle`] today).
    pub fn new(store: impl RunStore + 'static) -> Runtime {
        Runtime::on(Arc::new(store))
    }

    /// [`Runtime::new`] on a store already shared.
    pub fn on(store: Arc<dyn RunStore>) -> Runtime {
        Runtime {
            store,
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            lease_ttl_ms: 30_000,
            observer: None,
            #[cfg(feature = "test-hooks")]
            reload_each_step: false,
            faults: faults::Faults::from_env(),
            stopping: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            telemetry: None,
        }
    }

    /// Asks every loop of this runtime (and its clones) to stop at its
    /// next step boundary: the step in flight finishes and is committed,
    /// the lease is given back, and the run stays `running` for whoever
    /// claims it next. For a service that is shutting down.
    pub fn stop_at_next_step(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Uses `clock` instead of the wall clock for the runtime's timestamps and lease times.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Uses `ids` instead of random ids for new runs, leases and approvals.
    pub fn with_ids(mut self, ids: Arc<dyn Ids>) -> Self {
        self.ids = ids;
        self
    }

    /// Lease length; the loop renews it every third of this.
    pub fn with_lease_ttl_ms(mut self, ttl: i64) -> Self {
        self.lease_ttl_ms = ttl.max(3);
        self
    }

    /// Traces every run this runtime drives ([`crate::telemetry`]).
    pub fn with_telemetry(mut self, t: Arc<crate::telemetry::Telemetry>) -> Self {
        self.telemetry = Some(t);
        self
    }

    /// Calls `observer` with every event once its transition has committed.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Reload steps and approvals from the store at every step instead of
    /// keeping them (the old, slow path; tests compare the two).
    #[cfg(feature = "test-hooks")]
    pub fn reload_each_step(mut self, on: bool) -> Self {
        self.reload_each_step = on;
        self
    }

    /// The operator's API on this runtime's store and clock.
    pub fn operator(&self) -> Operator {
        Operator::writing(self.store.clone()).with_clock(self.clock.clone())
    }

    /// Where this runtime's runs' spans go, if anywhere.
    pub fn telemetry(&self) -> Option<&Arc<crate::telemetry::Telemetry>> {
        self.telemetry.as_ref()
    }

    /// The store this runtime drives runs against.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.store
    }

    /// Starts a new run and drives it until it ends or pauses.
    pub async fn start(
        &self,
        goal: &str,
        limits: Limits,
        meta: &str,
        consumers: Consumers,
    ) -> Result<Outcome, DriverError> {
        run_loop::start(self, goal, limits, meta, consumers).await
    }

    /// Takes the run's lease and drives it on from where it is: acts on a
    /// decided approval, recovers an interrupted step, or continues.
    pub async fn resume(&self, run_id: &str, consumers: Consumers) -> Result<Outcome, DriverError> {
        run_loop::resume(self, run_id, consumers, None, None).await
    }

    /// Stores a new run without driving it: running, its first step
    /// started, leased to nobody, for a driver to [`Runtime::claim`].
    pub async fn submit(&self, goal: &str, limits: Limits, meta: &str) -> Result<Run, DriverError> {
        run_loop::submit(self, goal, limits, meta).await
    }

    /// Claims up to `limit` runs that need a driver (submitted, left by a
    /// process that died, parked past their retry time, or whose approval
    /// was answered or expired), each leased to this runtime under an
    /// owner of its own, in one transaction: no run goes to two claimers,
    /// whatever the number of processes on the store. Drive each with
    /// [`Runtime::drive_claimed`] before its lease runs out.
    pub async fn claim(&self, limit: u32) -> Result<Vec<Run>, DriverError> {
        let now = self.clock.now_ms();
        Ok(self.store.claim(now, limit, self.claim_rule(now)).await?)
    }

    /// [`Runtime::claim`] for the runs `run_ids` names only: those of them
    /// that need a driver now (a run this process just submitted, or whose
    /// approval it answered), found by id instead of by a search.
    pub async fn claim_runs(&self, run_ids: &[String]) -> Result<Vec<Run>, DriverError> {
        let now = self.clock.now_ms();
        Ok(self
            .store
            .claim_runs(now, run_ids, self.claim_rule(now))
            .await?)
    }

    /// Each claimed run's lease, under an owner of its own.
    fn claim_rule(&self, now: i64) -> crate::store::ClaimRule {
        let (ids, ttl) = (self.ids.clone(), self.lease_ttl_ms);
        Arc::new(move |run: &Run| {
            let owner = crate::store::lease::owner_id(&ids.next("lease"));
            operator::lease_transition(run, &owner, now, ttl, None)
        })
    }

    /// Drives a run this runtime claimed ([`Runtime::claim`]) on, as
    /// [`Runtime::resume`] does, under the lease the claim took.
    pub async fn drive_claimed(
        &self,
        run: &Run,
        consumers: Consumers,
    ) -> Result<Outcome, DriverError> {
        run_loop::resume(self, &run.id, consumers, None, Some(run.clone())).await
    }

    /// [`Runtime::resume`], taking the run's lease at once even while
    /// another owner holds it: the operator `by` says that owner is gone.
    /// Recorded in the `lease.taken_over` event with `by`.
    pub async fn resume_taking_over(
        &self,
        run_id: &str,
        consumers: Consumers,
        by: &str,
    ) -> Result<Outcome, DriverError> {
        run_loop::resume(self, run_id, consumers, Some(by.to_string()), None).await
    }
}

/// The hash an approval is bound to: the call (tool and canonical
/// arguments), the reason, the presentation and the run's journal chain
/// head when it was asked for, canonically encoded. An approval asked for
/// before the chain existed has no head, and its hash leaves it out; so
/// does an approval of a tool without a pin (every tool but MCP ones).
pub fn approval_hash(
    kind: ApprovalKind,
    call: &ToolCall,
    reason: &str,
    presentation: &str,
    chain_head: Option<&str>,
    tool_pin: Option<&str>,
) -> String {
    use sha2::{Digest, Sha256};
    let parse = |s: &str| {
        serde_json::from_str::<serde_json::Value>(s).unwrap_or(serde_json::Value::String(s.into()))
    };
    let doc = serde_json::json!({
        "kind": kind.as_str(),
        "tool": call.tool,
        "arguments": parse(&call.arguments),
        "reason": reason,
        "presentation": parse(presentation),
    });
    let mut doc = doc;
    if let Some(head) = chain_head {
        doc["chain_head"] = serde_json::Value::String(head.to_string());
    }
    if let Some(pin) = tool_pin {
        doc["tool_pin"] = serde_json::Value::String(pin.to_string());
    }
    hex::encode(Sha256::digest(canonical_json(&doc).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::{ConsumerError, RunView};
    use crate::model::{ModelRequest, StubProvider};
    use async_trait::async_trait;

    /// An agent that asks the model once per step, through the gate it was
    /// built with.
    struct Asks(Arc<ModelGate>);

    #[async_trait]
    impl Agent for Asks {
        async fn decide(&mut self, _: RunView<'_>) -> Result<Decision, ConsumerError> {
            let req = ModelRequest {
                messages: vec![],
                tools: vec![],
                max_tokens: None,
                temperature: None,
            };
            let _ = self.0.complete(&req).await;
            Ok(Decision::Complete("1".into()))
        }
    }

    struct Allow;

    #[async_trait]
    impl Policy for Allow {
        async fn evaluate(
            &mut self,
            _: &ToolCall,
            _: Effect,
            _: RunView<'_>,
        ) -> Result<Verdict, ConsumerError> {
            Ok(Verdict::Allow)
        }
    }

    #[tokio::test]
    async fn the_agent_calls_through_the_gate_the_loop_drains_and_logs_into_its_sink() {
        let wiring = ConsumersBuilder::new(Arc::new(StubProvider::default()));
        let agent = Asks(wiring.model());
        let sink = wiring.events();
        let mut c = wiring.build(Box::new(agent), Box::new(Allow), ToolSet::new());
        c.model().arm(0, 0, 0, 10, 10_000);
        let run = Run::new("run-1", "g", Limits::default(), 0);
        let view = RunView {
            run: &run,
            steps: &[],
            approvals: &[],
        };
        c.agent.decide(view).await.unwrap();
        assert_eq!(
            c.model().drain().calls,
            1,
            "the call was counted where the loop looks"
        );
        sink.push(crate::types::NewEvent::new(
            EventKind::PluginLog,
            None,
            serde_json::json!({}),
        ));
        assert_eq!(
            c.events().drain().len(),
            1,
            "the log reached the loop's sink"
        );
    }
}
