//! The agent world: choose the next step of a run.

use crate::{Decision, ToolSpec, View, ViewDelta};
use std::cell::RefCell;

/// An agent. The SDK keeps one value per plugin instance (one per run) and
/// the reassembled [`View`] beside it.
pub trait Agent: 'static {
    /// Builds the agent from its config (JSON text) and the run's tools. An
    /// error should name the bad key, e.g. `config.window: expected a number`.
    fn init(config: &str, tools: Vec<ToolSpec>) -> Result<Self, String>
    where
        Self: Sized;

    /// The next decision. An error ends the run as failed.
    fn decide(&mut self, view: &View) -> Result<Decision, String>;
}

struct State {
    agent: Box<dyn Agent>,
    view: View,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub fn __init<A: Agent>(config: String, tools: Vec<ToolSpec>) -> Result<(), String> {
    let agent = A::init(&config, tools)?;
    STATE.with(|s| {
        *s.borrow_mut() = Some(State {
            agent: Box::new(agent),
            view: View::default(),
        })
    });
    Ok(())
}

#[doc(hidden)]
pub fn __decide(delta: ViewDelta) -> Result<Decision, String> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let state = s.as_mut().ok_or("decide called before init")?;
        state.view.apply(delta).map_err(|e| e.to_string())?;
        state.agent.decide(&state.view)
    })
}

/// Exports a type implementing [`Agent`] as the component's `agent` world.
#[macro_export]
macro_rules! export_agent {
    ($ty:ty) => {
        #[doc(hidden)]
        pub struct __KeelAgentExport;
        impl $crate::bindings::agent::Guest for __KeelAgentExport {
            fn init(config: String, tools: Vec<$crate::ToolSpec>) -> Result<(), String> {
                $crate::agent::__init::<$ty>(config, tools)
            }
            fn decide(view: $crate::ViewDelta) -> Result<$crate::Decision, String> {
                $crate::agent::__decide(view)
            }
        }
        $crate::bindings::agent::__export_agent_world!(__KeelAgentExport);
    };
}
