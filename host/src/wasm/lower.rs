//! The typed exports of agents and policies, called with the borrowed
//! records of [`super::shape`]; their types are checked against the
//! component's once, when the plugin's first instance is created
//! ([`Exports::agent`], [`Exports::policy`]), so a mismatch with the WIT is
//! an error there, never a bad call.

use super::bindings::wit;
use super::shape::run::ViewDeltaRef;
use super::shape::step::ToolCallRef;
use super::HostState;
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime::component::{
    Component, ComponentExportIndex, ComponentNamedList, Func, Instance, Lift, Lower, TypedFunc,
};
use wasmtime::Store;

type DecideParams<'a> = (ViewDeltaRef<'a>,);
type DecideResults = (Result<wit::Decision, String>,);
type EvaluateParams<'a> = (ToolCallRef<'a>, wit::Effect, ViewDeltaRef<'a>);
type EvaluateResults = (Result<wit::Verdict, String>,);
type AgentInitParams<'a> = (&'a str, &'a [wit::ToolSpec]);
type PolicyInitParams<'a> = (&'a str,);
type InitResults = (Result<(), String>,);
type PolicyInitResults = (Result<wit::PolicyView, String>,);

/// The two exports the host calls on an agent (`init`, `decide`) or a
/// policy (`init`, `evaluate`), found once per plugin. Per instance they
/// are then fetched by index, and their types, which are the component's
/// and so the same in every instance, are checked on the first instance
/// only: looking up and type-checking them by name cost each run ~7 µs.
pub struct Exports {
    init: ComponentExportIndex,
    main: ComponentExportIndex,
    main_name: &'static str,
    types_checked: AtomicBool,
}

impl Exports {
    /// `main` is `decide` or `evaluate`.
    pub fn find(component: &Component, main: &'static str) -> Result<Exports, String> {
        let index = |name: &str| {
            component
                .get_export_index(None, name)
                .ok_or_else(|| format!("the component exports no `{name}`"))
        };
        Ok(Exports {
            init: index("init")?,
            main: index(main)?,
            main_name: main,
            types_checked: AtomicBool::new(false),
        })
    }

    /// `instance`'s `init` and main export, checked against `init: IP -> IR`
    /// and `main: MP -> MR` unless an earlier instance of the plugin passed.
    fn checked<IP, IR, MP, MR>(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> Result<(Func, Func), String>
    where
        IP: ComponentNamedList + Lower,
        IR: ComponentNamedList + Lift,
        MP: ComponentNamedList + Lower,
        MR: ComponentNamedList + Lift,
    {
        let mut get = |index: &ComponentExportIndex, name: &str| {
            instance
                .get_func(&mut *store, index)
                .ok_or_else(|| format!("the component exports no `{name}`"))
        };
        let (init, main) = (get(&self.init, "init")?, get(&self.main, self.main_name)?);
        if !self.types_checked.load(Ordering::Acquire) {
            let wrong = |name: &str, e: wasmtime::Error| {
                format!("`{name}` does not have the signature of the WIT: {e:#}")
            };
            init.typed::<IP, IR>(&*store)
                .map_err(|e| wrong("init", e))?;
            main.typed::<MP, MR>(&*store)
                .map_err(|e| wrong(self.main_name, e))?;
            self.types_checked.store(true, Ordering::Release);
        }
        Ok((init, main))
    }

    /// An agent instance's `init` and `decide`.
    pub fn agent(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> Result<(AgentInit, Decide), String> {
        let (init, decide) = self
            .checked::<AgentInitParams<'static>, InitResults, DecideParams<'static>, DecideResults>(
                store, instance,
            )?;
        Ok((AgentInit(init), Decide(decide)))
    }

    /// A policy instance's `init` and `evaluate`.
    pub fn policy(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> Result<(PolicyInit, Evaluate), String> {
        let (init, evaluate) = self.checked::<
            PolicyInitParams<'static>,
            PolicyInitResults,
            EvaluateParams<'static>,
            EvaluateResults,
        >(store, instance)?;
        Ok((PolicyInit(init), Evaluate(evaluate)))
    }
}

/// An agent's `init`.
#[derive(Clone, Copy)]
pub struct AgentInit(Func);

impl AgentInit {
    pub async fn call(
        self,
        store: &mut Store<HostState>,
        config: &str,
        tools: &[wit::ToolSpec],
    ) -> wasmtime::Result<Result<(), String>> {
        // SAFETY: `Exports::agent` checked the component's export against
        // these types; a lifetime does not change a value's component type.
        let f = unsafe { TypedFunc::<AgentInitParams<'_>, InitResults>::new_unchecked(self.0) };
        let (out,) = f.call_async(&mut *store, (config, tools)).await?;
        Ok(out)
    }
}

/// A policy's `init`.
#[derive(Clone, Copy)]
pub struct PolicyInit(Func);

impl PolicyInit {
    pub async fn call(
        self,
        store: &mut Store<HostState>,
        config: &str,
    ) -> wasmtime::Result<Result<wit::PolicyView, String>> {
        // SAFETY: as in `AgentInit::call`.
        let f =
            unsafe { TypedFunc::<PolicyInitParams<'_>, PolicyInitResults>::new_unchecked(self.0) };
        let (out,) = f.call_async(&mut *store, (config,)).await?;
        Ok(out)
    }
}

/// An agent's `decide`, called with a borrowed view.
#[derive(Clone, Copy)]
pub struct Decide(Func);

impl Decide {
    pub async fn call(
        self,
        store: &mut Store<HostState>,
        view: ViewDeltaRef<'_>,
    ) -> wasmtime::Result<Result<wit::Decision, String>> {
        // SAFETY: `Exports::agent` checked the component's export against
        // these types; a lifetime does not change a value's component type.
        let f = unsafe { TypedFunc::<DecideParams<'_>, DecideResults>::new_unchecked(self.0) };
        let (out,) = f.call_async(&mut *store, (view,)).await?;
        Ok(out)
    }
}

/// A policy's `evaluate`, called with a borrowed call and view.
#[derive(Clone, Copy)]
pub struct Evaluate(Func);

impl Evaluate {
    pub async fn call(
        self,
        store: &mut Store<HostState>,
        call: ToolCallRef<'_>,
        effect: wit::Effect,
        view: ViewDeltaRef<'_>,
    ) -> wasmtime::Result<Result<wit::Verdict, String>> {
        // SAFETY: as in `Decide::call`.
        let f = unsafe { TypedFunc::<EvaluateParams<'_>, EvaluateResults>::new_unchecked(self.0) };
        let (out,) = f.call_async(&mut *store, (call, effect, view)).await?;
        Ok(out)
    }
}
