//! Recorded responses, keyed by the canonical request, replayed in order.
//! Recording wraps another provider and appends every exchange to a JSON
//! lines file; replaying refuses any request that was not recorded.

use super::openai::{request_json, response_from_json, response_json};
use super::*;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;

/// The key of a request: sha256 of its canonical chat-completions JSON
/// (without the model name).
pub fn request_key(r: &ModelRequest) -> String {
    hex::encode(Sha256::digest(
        crate::types::canonical_json(&request_json(r, None)).as_bytes(),
    ))
}

/// A provider that either records another provider's exchanges to a file or answers from such a file.
pub struct ReplayProvider {
    recorded: Mutex<HashMap<String, VecDeque<serde_json::Value>>>,
    record: Option<(Arc<dyn ModelProvider>, PathBuf)>,
}

impl ReplayProvider {
    /// Replays `file` (JSON lines of `{"key", "request", "response"}`).
    pub fn replay(file: &std::path::Path) -> Result<ReplayProvider, String> {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut recorded: HashMap<String, VecDeque<serde_json::Value>> = HashMap::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| format!("{}: line {}: {e}", file.display(), i + 1))?;
            let key = v["key"]
                .as_str()
                .ok_or_else(|| format!("{}: line {}: no key", file.display(), i + 1))?;
            recorded
                .entry(key.to_string())
                .or_default()
                .push_back(v["response"].clone());
        }
        Ok(ReplayProvider {
            recorded: Mutex::new(recorded),
            record: None,
        })
    }

    /// Calls `upstream` and appends every exchange to `file`.
    pub fn recording(upstream: Arc<dyn ModelProvider>, file: PathBuf) -> ReplayProvider {
        ReplayProvider {
            recorded: Mutex::new(HashMap::new()),
            record: Some((upstream, file)),
        }
    }
}

#[async_trait]
impl ModelProvider for ReplayProvider {
    fn name(&self) -> &str {
        if self.record.is_some() {
            "record"
        } else {
            "replay"
        }
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let key = request_key(request);
        if let Some((upstream, file)) = &self.record {
            let r = upstream.complete(request).await?;
            let line = serde_json::json!({ "key": key, "request": request_json(request, None), "response": response_json(&r) });
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)
                .map_err(|e| ModelError::Permanent(format!("{}: {e}", file.display())))?;
            writeln!(f, "{line}")
                .map_err(|e| ModelError::Permanent(format!("{}: {e}", file.display())))?;
            return Ok(r);
        }
        let next = self
            .recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&key)
            .and_then(VecDeque::pop_front);
        match next {
            Some(v) => response_from_json(&v),
            None => Err(ModelError::Permanent(format!(
                "no recorded response for this request (key {key}); record it first"
            ))),
        }
    }
}
