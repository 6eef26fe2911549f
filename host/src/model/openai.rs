//! An OpenAI-compatible chat-completions client: llama.cpp's server,
//! Ollama, vLLM and hosted APIs. Request timeouts, transient versus permanent
//! errors (the gate retries transient ones and parks the run when they run out), token
//! usage, and a bounded response size.

use super::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Settings of an [`OpenAiProvider`].
#[derive(Debug, Clone)]
pub struct OpenAiSettings {
    /// Up to and including `/v1`, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// The model name sent in each request's `model` field.
    pub model: String,
    /// The API key, read from the environment by the caller (never stored).
    pub api_key: Option<String>,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Retries of a transient error after the first attempt, at most.
    pub max_retries: u32,
    /// No retry starts later than this after the first attempt.
    pub retry_window: Duration,
    /// The largest response body read, in bytes; a larger one fails the call as permanent.
    pub max_response_bytes: usize,
    /// What this server's stricter rules need.
    pub profile: Profile,
}

/// A server's stricter rules, set per provider in the config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Profile {
    /// The field that carries the reply's token cap.
    pub max_tokens_field: MaxTokensField,
    /// How tool-call ids are sent.
    pub tool_call_ids: ToolCallIds,
}

/// `max_tokens` (most servers) or `max_completion_tokens` (reasoning models).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// Send the cap as `max_tokens`.
    #[default]
    MaxTokens,
    /// Send the cap as `max_completion_tokens`.
    MaxCompletionTokens,
}

/// Tool-call ids as the agent made them, or rewritten to nine letters and
/// digits (servers that accept nothing else); the same id always becomes
/// the same nine characters, so a call and its result still pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallIds {
    /// Send ids unchanged.
    #[default]
    AsIs,
    /// Send each id as [`alphanumeric9`] of it.
    Alphanumeric9,
}

/// `id` as nine letters and digits, derived from its sha256.
pub fn alphanumeric9(id: &str) -> String {
    use sha2::{Digest, Sha256};
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    Sha256::digest(id.as_bytes())
        .iter()
        .take(9)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// A [`ModelProvider`] that calls an OpenAI-compatible `/chat/completions` endpoint.
pub struct OpenAiProvider {
    settings: OpenAiSettings,
    agent: ureq::Agent,
}

impl OpenAiProvider {
    /// A client for `settings`; each attempt is bounded by `settings.timeout`.
    pub fn new(settings: OpenAiSettings) -> OpenAiProvider {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(settings.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        OpenAiProvider { settings, agent }
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.settings.model
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.settings.max_retries,
            window: self.settings.retry_window,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
            // Let a server that is still working on the abandoned request
            // finish it before the retry queues behind it.
            after_timeout: self.settings.timeout.min(Duration::from_secs(30)),
        }
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.attempt(request).await.result
    }

    async fn attempt(&self, request: &ModelRequest) -> Attempt {
        let hints = std::sync::Arc::new(std::sync::Mutex::new((None, false)));
        let result = self.call(request, hints.clone()).await;
        let (retry_after, timed_out) = *hints.lock().unwrap_or_else(|p| p.into_inner());
        Attempt {
            result,
            retry_after,
            timed_out,
        }
    }
}

/// How long the server asks us to wait: `retry-after-ms` (OpenAI) or
/// `retry-after` in seconds (the HTTP-date form is not used by model
/// servers and is ignored), or the same passed through by LiteLLM's proxy
/// under its `llm_provider-` prefix; at most an hour.
fn retry_after(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let v: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v)
    };
    let secs = number("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| number("retry-after"))
        .or_else(|| number("llm_provider-retry-after-ms").map(|ms| ms / 1000.0))
        .or_else(|| number("llm_provider-retry-after"))?;
    Some(Duration::from_secs_f64(secs.min(3600.0)))
}

impl OpenAiProvider {
    /// One request; what the server said about retrying goes to `hints`.
    async fn call(
        &self,
        request: &ModelRequest,
        hints: std::sync::Arc<std::sync::Mutex<(Option<Duration>, bool)>>,
    ) -> Result<ModelResponse, ModelError> {
        let body = request_json_for(request, Some(&self.settings.model), self.settings.profile);
        let url = format!(
            "{}/chat/completions",
            self.settings.base_url.trim_end_matches('/')
        );
        let (agent, key, max) = (
            self.agent.clone(),
            self.settings.api_key.clone(),
            self.settings.max_response_bytes,
        );
        let text = tokio::task::spawn_blocking(move || -> Result<String, ModelError> {
            let mut req = agent.post(&url).header("content-type", "application/json");
            if let Some(k) = &key {
                req = req.header("authorization", &format!("Bearer {k}"));
            }
            let timed_out = || hints.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
            let mut resp = req.send(body.to_string()).map_err(|e| match e {
                ureq::Error::Timeout(_) => {
                    timed_out();
                    ModelError::Transient("the model server did not answer in time".into())
                }
                ureq::Error::Io(e) => {
                    ModelError::Transient(format!("cannot reach the model server: {e}"))
                }
                ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
                    ModelError::Transient(format!("cannot reach the model server: {e}"))
                }
                other => ModelError::Permanent(format!("model request failed: {other}")),
            })?;
            let status = resp.status().as_u16();
            hints.lock().unwrap_or_else(|p| p.into_inner()).0 = retry_after(resp.headers());
            let text = resp
                .body_mut()
                .with_config()
                .limit(max as u64)
                .read_to_string()
                .map_err(|e| match e {
                    ureq::Error::BodyExceedsLimit(_) => ModelError::Permanent(format!(
                        "the model's response is larger than {max} bytes"
                    )),
                    ureq::Error::Timeout(_) => {
                        timed_out();
                        ModelError::Transient("the model server stalled while answering".into())
                    }
                    other => {
                        ModelError::Transient(format!("reading the model's response: {other}"))
                    }
                })?;
            match status {
                200..=299 => Ok(text),
                408 | 409 | 425 | 429 | 500..=599 => Err(ModelError::Transient(format!(
                    "the model server answered {status}: {}",
                    snippet(&text)
                ))),
                400 | 404 | 413 | 422 => Err(ModelError::InvalidRequest(format!(
                    "the model server answered {status}: {}",
                    snippet(&text)
                ))),
                _ => Err(ModelError::Permanent(format!(
                    "the model server answered {status}: {}",
                    snippet(&text)
                ))),
            }
        })
        .await
        .map_err(|e| ModelError::Permanent(format!("model client task failed: {e}")))??;
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            ModelError::Permanent(format!(
                "the model server sent something that is not JSON ({e}): {}",
                snippet(&text)
            ))
        })?;
        let mut response = response_from_json(&v)?;
        if v.get("usage").is_none_or(Value::is_null) {
            response.prompt_tokens = estimate_prompt(request);
        }
        Ok(response)
    }
}

fn snippet(text: &str) -> String {
    keel_vocab::render::cap(text.trim(), 200)
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The chat-completions request body. Without `model`, the canonical form
/// the replay provider keys on.
pub fn request_json(r: &ModelRequest, model: Option<&str>) -> Value {
    request_json_for(r, model, Profile::default())
}

/// [`request_json`] for a server with `profile`'s rules.
pub fn request_json_for(r: &ModelRequest, model: Option<&str>, profile: Profile) -> Value {
    let id = |id: &str| match profile.tool_call_ids {
        ToolCallIds::AsIs => id.to_string(),
        ToolCallIds::Alphanumeric9 => alphanumeric9(id),
    };
    let messages: Vec<Value> = r
        .messages
        .iter()
        .map(|m| {
            let mut o = json!({ "role": role_name(m.role), "content": m.content });
            if !m.tool_calls.is_empty() {
                o["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({ "id": id(&c.id), "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
                    .collect();
            }
            if let Some(tc) = &m.tool_call_id {
                o["tool_call_id"] = json!(id(tc));
            }
            o
        })
        .collect();
    let mut body = json!({ "messages": messages });
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| {
                let params: Value = serde_json::from_str(&t.parameters).unwrap_or(json!({ "type": "object" }));
                json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": params } })
            })
            .collect();
        // Some servers (llama-cpp-python's function calling) show the model
        // no tools unless asked to choose; one call per reply is what a
        // step can hold.
        body["tool_choice"] = json!("auto");
        body["parallel_tool_calls"] = json!(false);
    }
    if let Some(n) = r.max_tokens {
        let field = match profile.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body[field] = json!(n);
    }
    if let Some(t) = r.temperature {
        body["temperature"] = exact_f32(t);
    }
    body
}

/// `t` as the JSON number its shortest text says (0.7, not the
/// 0.699999988079071 that widening the f32 to f64 gives).
fn exact_f32(t: f32) -> Value {
    t.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// A message's `content`: text, or a list of parts whose text parts are
/// joined (servers that speak the newer content-parts form); none is "".
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(_) => p.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Tokens of `text` when a server reports no usage: one per four bytes,
/// rounded up (about right for English and code with common tokenizers),
/// so that `max_tokens` still binds.
pub fn estimate_tokens(text: &str) -> u32 {
    (text.len().div_ceil(4)).min(u32::MAX as usize) as u32
}

/// Reads a chat-completions response; anything malformed is a permanent error.
pub fn response_from_json(v: &Value) -> Result<ModelResponse, ModelError> {
    let bad = |what: &str| ModelError::Permanent(format!("malformed model response: {what}"));
    if let Some(err) = v.get("error") {
        return Err(ModelError::Permanent(format!(
            "the model server reported an error: {}",
            snippet(&err.to_string())
        )));
    }
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| bad("no choices"))?;
    let msg = choice.get("message").ok_or_else(|| bad("no message"))?;
    let mut content = content_text(msg.get("content"));
    let refusal = msg.get("refusal").and_then(Value::as_str);
    let mut tool_calls = vec![];
    // `"tool_calls": null` is how some serializers say "none".
    if let Some(calls) = msg.get("tool_calls").filter(|c| !c.is_null()) {
        for c in calls
            .as_array()
            .ok_or_else(|| bad("tool_calls is not a list"))?
        {
            let f = c
                .get("function")
                .ok_or_else(|| bad("a tool call without a function"))?;
            // Some servers send arguments as an object instead of a string.
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            tool_calls.push(ModelToolCall {
                id: c
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name: f
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                arguments,
            });
        }
    }
    let mut finish_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") | None => FinishReason::Stop,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(_) => FinishReason::Other,
    };
    if let Some(r) = refusal {
        finish_reason = FinishReason::ContentFilter;
        content = r.to_string();
    }
    let usage = v.get("usage");
    let tokens = |k: &str| {
        usage
            .and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(u32::MAX as u64) as u32
    };
    let (mut prompt_tokens, mut completion_tokens) =
        (tokens("prompt_tokens"), tokens("completion_tokens"));
    if usage.is_none_or(Value::is_null) {
        // No usage: charge an estimate, so that the run's token limit binds.
        completion_tokens = estimate_tokens(&content)
            + tool_calls
                .iter()
                .map(|c| estimate_tokens(&c.name) + estimate_tokens(&c.arguments))
                .sum::<u32>();
        prompt_tokens = 0; // estimated by the caller from the request, see `estimate_prompt`
    }
    Ok(ModelResponse {
        message: Message {
            role: Role::Assistant,
            content,
            tool_calls,
            tool_call_id: None,
        },
        finish_reason,
        prompt_tokens,
        completion_tokens,
    })
}

/// Estimated prompt tokens of a request (its messages and tool specs),
/// charged when the server reports no usage.
pub fn estimate_prompt(r: &ModelRequest) -> u32 {
    let messages: u32 = r
        .messages
        .iter()
        .map(|m| {
            estimate_tokens(&m.content)
                + m.tool_calls
                    .iter()
                    .map(|c| estimate_tokens(&c.arguments) + estimate_tokens(&c.name))
                    .sum::<u32>()
        })
        .sum();
    let tools: u32 = r
        .tools
        .iter()
        .map(|t| {
            estimate_tokens(&t.name)
                + estimate_tokens(&t.description)
                + estimate_tokens(&t.parameters)
        })
        .sum();
    messages.saturating_add(tools)
}

/// A response as chat-completions JSON (what the replay file stores).
pub fn response_json(r: &ModelResponse) -> Value {
    let finish = match r.finish_reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other => "other",
    };
    let mut msg = json!({ "role": "assistant", "content": r.message.content });
    if !r.message.tool_calls.is_empty() {
        msg["tool_calls"] = r
            .message
            .tool_calls
            .iter()
            .map(|c| json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
            .collect();
    }
    json!({ "choices": [{ "message": msg, "finish_reason": finish }],
            "usage": { "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_hints_are_read_in_every_form_servers_send() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = ureq::http::HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    ureq::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            retry_after(&m)
        };
        assert_eq!(h(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(
            h(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            h(&[("llm_provider-retry-after", "3")]),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            h(&[("retry-after", "99999")]),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(h(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]), None);
        assert_eq!(h(&[("retry-after", "-1")]), None);
        assert_eq!(h(&[]), None);
    }

    fn request(temperature: Option<f32>, tools: bool) -> ModelRequest {
        ModelRequest {
            messages: vec![Message {
                role: Role::User,
                content: "hello there".into(),
                tool_calls: vec![],
                tool_call_id: None,
            }],
            tools: if tools {
                vec![keel_vocab::ToolSpec {
                    name: "fs_read".into(),
                    description: "reads".into(),
                    parameters: r#"{"type":"object"}"#.into(),
                    effect: keel_vocab::Effect::ReadOnly,
                }]
            } else {
                vec![]
            },
            max_tokens: None,
            temperature,
        }
    }

    #[test]
    fn requests_say_tool_choice_and_keep_the_temperature_exact() {
        let body = request_json(&request(Some(0.7), true), Some("m"));
        assert_eq!(body["temperature"].to_string(), "0.7");
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["parallel_tool_calls"], false);
        let plain = request_json(&request(None, false), None);
        assert!(plain.get("tool_choice").is_none() && plain.get("temperature").is_none());
        assert_eq!(
            request_json(&request(Some(1.0), false), None)["temperature"].to_string(),
            "1.0"
        );
    }

    #[test]
    fn a_profile_renames_the_token_cap_and_reshapes_tool_call_ids_consistently() {
        let mut r = request(None, true);
        r.max_tokens = Some(64);
        r.messages.push(Message {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: vec![keel_vocab::ModelToolCall {
                id: "call_step_0".into(),
                name: "fs_read".into(),
                arguments: "{}".into(),
            }],
            tool_call_id: None,
        });
        r.messages.push(Message {
            role: Role::Tool,
            content: "{}".into(),
            tool_calls: vec![],
            tool_call_id: Some("call_step_0".into()),
        });
        let plain = request_json(&r, Some("m"));
        assert_eq!(plain["max_tokens"], 64);
        assert_eq!(plain["messages"][1]["tool_calls"][0]["id"], "call_step_0");
        let strict = request_json_for(
            &r,
            Some("m"),
            Profile {
                max_tokens_field: MaxTokensField::MaxCompletionTokens,
                tool_call_ids: ToolCallIds::Alphanumeric9,
            },
        );
        assert!(strict.get("max_tokens").is_none());
        assert_eq!(strict["max_completion_tokens"], 64);
        let id = strict["messages"][1]["tool_calls"][0]["id"]
            .as_str()
            .unwrap();
        assert_eq!(id.len(), 9);
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
        assert_eq!(
            strict["messages"][2]["tool_call_id"], id,
            "the call and its result still pair"
        );
    }

    #[test]
    fn null_tool_calls_content_parts_and_missing_usage_are_read_as_servers_send_them() {
        let v = serde_json::json!({ "choices": [{ "message": { "role": "assistant", "content": "hi", "tool_calls": null }, "finish_reason": "stop" }],
                                    "usage": { "prompt_tokens": 3, "completion_tokens": 1 } });
        let r = response_from_json(&v).unwrap();
        assert!(r.message.tool_calls.is_empty());
        assert_eq!((r.prompt_tokens, r.completion_tokens), (3, 1));
        let v = serde_json::json!({ "choices": [{ "message": { "role": "assistant",
            "content": [{ "type": "text", "text": "part one, " }, { "type": "text", "text": "part two" }] } }] });
        let r = response_from_json(&v).unwrap();
        assert_eq!(r.message.content, "part one, part two");
        assert_eq!(
            r.completion_tokens,
            estimate_tokens("part one, part two"),
            "no usage: estimated"
        );
        assert!(r.completion_tokens > 0);
        assert!(estimate_prompt(&request(None, true)) > 0);
    }
}
