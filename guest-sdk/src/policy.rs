//! The policy world: judge each tool call before it runs.

use crate::{Effect, PolicyView, ToolCall, Verdict, View, ViewDelta};
use std::cell::RefCell;

/// A policy. The SDK keeps one value per plugin instance (one per run) and
/// the reassembled [`View`] beside it.
pub trait Policy: 'static {
    /// Builds the policy from its config (JSON text).
    fn init(config: &str) -> Result<Self, String>
    where
        Self: Sized;

    /// A verdict on `call`, whose tool has the effect class `effect`. An error
    /// ends the run as failed: a policy that cannot judge never allows.
    fn evaluate(&mut self, call: &ToolCall, effect: Effect, view: &View)
        -> Result<Verdict, String>;

    /// How much of the run `evaluate` needs, asked once after `init`.
    /// [`PolicyView::Full`] (the default) hands it every step and approval.
    /// [`PolicyView::CallOnly`] is for a policy that judges each call by
    /// itself: the host then sends no steps and no approvals, `view` holds
    /// the run's info alone, and a call costs the same however long the run
    /// and however large its observations.
    fn view(&self) -> PolicyView {
        PolicyView::Full
    }
}

struct State {
    policy: Box<dyn Policy>,
    view: View,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub fn __init<P: Policy>(config: String) -> Result<PolicyView, String> {
    let policy = P::init(&config)?;
    let scope = policy.view();
    STATE.with(|s| {
        *s.borrow_mut() = Some(State {
            policy: Box::new(policy),
            view: View::default(),
        })
    });
    Ok(scope)
}

#[doc(hidden)]
pub fn __evaluate(call: ToolCall, effect: Effect, delta: ViewDelta) -> Result<Verdict, String> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let state = s.as_mut().ok_or("evaluate called before init")?;
        state.view.apply(delta).map_err(|e| e.to_string())?;
        state.policy.evaluate(&call, effect, &state.view)
    })
}

/// Exports a type implementing [`Policy`] as the component's `policy` world.
#[macro_export]
macro_rules! export_policy {
    ($ty:ty) => {
        #[doc(hidden)]
        pub struct __KeelPolicyExport;
        impl $crate::bindings::policy::Guest for __KeelPolicyExport {
            fn init(config: String) -> Result<$crate::PolicyView, String> {
                $crate::policy::__init::<$ty>(config)
            }
            fn evaluate(
                call: $crate::ToolCall,
                effect: $crate::Effect,
                view: $crate::ViewDelta,
            ) -> Result<$crate::Verdict, String> {
                $crate::policy::__evaluate(call, effect, view)
            }
        }
        $crate::bindings::policy::__export_policy_world!(__KeelPolicyExport);
    };
}
