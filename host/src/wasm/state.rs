//! What a plugin's `Store` holds: its WASI context, its limits, and the
//! host side of its imports (`log`, `model`).

use super::bindings::wit;
use super::deadline::CallDeadline;
use super::limits::PluginLimits;
use crate::consumer::{EventSink, LogLine};
use crate::model::ModelGate;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The most bytes of a plugin's stdout/stderr kept (for panic messages).
const STDIO_CAPTURE: usize = 64 << 10;

/// The data of one plugin instance's `Store`: its WASI context, limits and the host side of its imports.
pub struct HostState {
    pub(crate) plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: StoreLimits,
    pub(crate) plugin_limits: PluginLimits,
    pub(crate) stderr: MemoryOutputPipe,
    /// Where log lines go as run events (none while loading a plugin).
    pub(crate) sink: Option<Arc<EventSink>>,
    pub(crate) model: Option<Arc<ModelGate>>,
    /// When the current call's wall-clock budget runs out; suspended while
    /// a host import (a model call) works. Shared with [`super::deadline::bounded`].
    pub(crate) deadline: Arc<CallDeadline>,
    pub(crate) logs_this_call: u32,
    pub(crate) step: Option<u32>,
}

impl HostState {
    /// `wasi` decides the capabilities; stdout and stderr are always captured.
    pub fn new(
        plugin: &str,
        limits: &PluginLimits,
        mut wasi: wasmtime_wasi::WasiCtxBuilder,
    ) -> HostState {
        let stderr = MemoryOutputPipe::new(STDIO_CAPTURE);
        wasi.stderr(stderr.clone()).stdout(stderr.clone());
        HostState {
            plugin: Arc::from(plugin),
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            plugin_limits: limits.clone(),
            stderr,
            sink: None,
            model: None,
            deadline: Arc::new(CallDeadline::new(Duration::from_millis(limits.deadline_ms))),
            logs_this_call: 0,
            step: None,
        }
    }

    /// Re-arms the per-call budgets before a call.
    pub(crate) fn arm(&mut self) {
        self.deadline
            .set_after(Duration::from_millis(self.plugin_limits.deadline_ms));
        self.logs_this_call = 0;
    }

    /// Reports the log lines the last call sent past its limit, as a
    /// `plugin.logs_dropped` event with the next transition.
    pub(crate) fn report_dropped_logs(&mut self) {
        let limit = self.plugin_limits.log_lines_per_call;
        if self.logs_this_call <= limit {
            return;
        }
        let dropped = self.logs_this_call - limit;
        self.logs_this_call = limit; // reported once
        if let Some(sink) = &self.sink {
            sink.push(crate::store::NewEvent::new(
                crate::types::EventKind::PluginLogsDropped,
                self.step,
                serde_json::json!({ "plugin": &*self.plugin, "dropped": dropped, "limit": limit }),
            ));
        }
    }

    /// What the guest wrote to stderr/stdout, lossily decoded.
    pub(crate) fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents()).into_owned()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wit::Host for HostState {}

impl super::bindings::agent::keel::plugin::log::Host for HostState {
    fn log(&mut self, level: wit::Level, message: String) -> wasmtime::Result<()> {
        self.logs_this_call = self.logs_this_call.saturating_add(1);
        if self.logs_this_call > self.plugin_limits.log_lines_per_call {
            return Ok(()); // counted; reported after the call
        }
        let mut message = message;
        if message.len() > self.plugin_limits.log_line_bytes {
            let mut end = self.plugin_limits.log_line_bytes;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        let level_s = match level {
            wit::Level::Trace => "trace",
            wit::Level::Debug => "debug",
            wit::Level::Info => "info",
            wit::Level::Warn => "warn",
            wit::Level::Error => "error",
        };
        match level {
            wit::Level::Error => tracing::error!(plugin = %self.plugin, "{message}"),
            wit::Level::Warn => tracing::warn!(plugin = %self.plugin, "{message}"),
            wit::Level::Info => tracing::info!(plugin = %self.plugin, "{message}"),
            wit::Level::Debug => tracing::debug!(plugin = %self.plugin, "{message}"),
            wit::Level::Trace => tracing::trace!(plugin = %self.plugin, "{message}"),
        }
        if let Some(sink) = &self.sink {
            sink.log(LogLine {
                plugin: self.plugin.clone(),
                step: self.step,
                level: level_s,
                message,
            });
        }
        Ok(())
    }
}

impl super::bindings::agent::keel::plugin::model::Host for HostState {
    async fn complete(
        &mut self,
        request: wit::ModelRequest,
    ) -> wasmtime::Result<Result<wit::ModelResponse, wit::ModelError>> {
        let Some(gate) = self.model.clone() else {
            return Ok(Err(wit::ModelError::Permanent(
                "this plugin has no model access".into(),
            )));
        };
        // Time spent waiting for the model is not the guest's.
        let left = self.deadline.suspend();
        let result = gate
            .complete(&super::shape::model::model_request_in(request))
            .await;
        self.deadline.resume(left);
        // An outage ends the agent's call: the run parks, and the server's
        // error is the operator's to read, not the model's.
        if gate.in_outage() {
            return Err(wasmtime::Error::msg(
                "the model server is unavailable; the run parks",
            ));
        }
        // The first refusal is the agent's to handle; calling again after
        // it is spending what nobody meters, and ends the call.
        if matches!(result, Err(crate::model::ModelError::LimitExceeded(_)))
            && gate.refused_calls() > 1
        {
            return Err(wasmtime::Error::msg(
                "the agent called the model again after the run's limit refused it",
            ));
        }
        Ok(result
            .map(super::shape::model::model_response_out)
            .map_err(super::shape::model::model_error_out))
    }
}
