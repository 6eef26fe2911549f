//! The tool world: perform calls.

use crate::ToolSpec;
use std::cell::RefCell;

/// One component's tools. The host validates arguments against each spec's
/// JSON Schema before `call`.
pub trait Tool: 'static {
    /// Builds the tool from its config (JSON text).
    fn init(config: &str) -> Result<Self, String>
    where
        Self: Sized;

    /// The tools this component provides.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Runs tool `name`; `Ok` is the JSON result, `Err` a message the agent
    /// will see as a tool error.
    fn call(&mut self, name: &str, arguments: &str) -> Result<String, String>;
}

thread_local! {
    static STATE: RefCell<Option<Box<dyn Tool>>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub fn __init<T: Tool>(config: String) -> Result<(), String> {
    let tool = T::init(&config)?;
    STATE.with(|s| *s.borrow_mut() = Some(Box::new(tool)));
    Ok(())
}

#[doc(hidden)]
pub fn __specs() -> Vec<ToolSpec> {
    STATE.with(|s| s.borrow().as_ref().map(|t| t.specs()).unwrap_or_default())
}

#[doc(hidden)]
pub fn __call(name: String, arguments: String) -> Result<String, String> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let tool = s.as_mut().ok_or("call before init")?;
        tool.call(&name, &arguments)
    })
}

/// Exports a type implementing [`Tool`] as the component's `tool` world.
#[macro_export]
macro_rules! export_tool {
    ($ty:ty) => {
        #[doc(hidden)]
        pub struct __KeelToolExport;
        impl $crate::bindings::tool::Guest for __KeelToolExport {
            fn init(config: String) -> Result<(), String> {
                $crate::tool::__init::<$ty>(config)
            }
            fn specs() -> Vec<$crate::ToolSpec> {
                $crate::tool::__specs()
            }
            fn call(name: String, arguments: String) -> Result<String, String> {
                $crate::tool::__call(name, arguments)
            }
        }
        $crate::bindings::tool::__export_tool_world!(__KeelToolExport);
    };
}
