//! Host values as the WIT contract spells them, one module per concept.
//!
//! Each module holds the only mapping of its concept across the wasm
//! boundary, both ways: lowered into a plugin as records that borrow the
//! host's own rows (the generated bindings would take owned values, and
//! cloning an observation only to copy it again into guest memory cost more
//! than the call), and lifted from a plugin's answer. Owned WIT values are
//! built from the borrowed ones, so the two can never disagree. The engine
//! checks the borrowed records against the component's export types when a
//! plugin's first instance is created (`lower::Exports`), so a mismatch with
//! the WIT is an error there, never a bad call.

pub mod effect;
pub mod model;
pub mod run;
pub mod step;
