//! Host-side bindings of the `keel:plugin` worlds. The `types` and `log`
//! interfaces are generated once (with the agent world) and shared.

pub mod agent {
    wasmtime::component::bindgen!({
        world: "keel:plugin/agent",
        path: "../wit",
        imports: { "keel:plugin/model.complete": async | trappable, default: trappable },
        exports: { default: async },
    });
}

pub mod policy {
    wasmtime::component::bindgen!({
        world: "keel:plugin/policy",
        path: "../wit",
        imports: { default: trappable },
        exports: { default: async },
        with: {
            "keel:plugin/types": crate::wasm::bindings::agent::keel::plugin::types,
            "keel:plugin/log": crate::wasm::bindings::agent::keel::plugin::log,
        },
    });
}

pub mod tool {
    wasmtime::component::bindgen!({
        world: "keel:plugin/tool",
        path: "../wit",
        imports: { default: trappable },
        exports: { default: async },
        with: {
            "keel:plugin/types": crate::wasm::bindings::agent::keel::plugin::types,
            "keel:plugin/log": crate::wasm::bindings::agent::keel::plugin::log,
        },
    });
}

pub use agent::keel::plugin::types as wit;
