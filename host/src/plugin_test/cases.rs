//! The cases file of `keel plugin test`: recorded inputs for one world and
//! the answers expected, read strictly so a mistake names the case and key.
//!
//! ```json
//! { "config": { "rules": [] },
//!   "tools": [ { "name": "echo", "effect": "read-only" } ],
//!   "cases": [
//!     { "name": "reads are allowed", "call": { "tool": "fs_read", "arguments": {} },
//!       "effect": "read-only", "expect": { "verdict": "allow" } },
//!     { "name": "a bad rule", "config": { "rules": [{}] },
//!       "expect": { "init_error": "config.rules[0].action:" } } ] }
//! ```
//!
//! Agents get a view (`goal`, `steps`, `approvals`); policies a `call`, its
//! `effect` and the same view; tools a `tool` name and its `arguments`.
//! `expect` holds one of `decision`, `verdict`, `result` (the world's answer,
//! compared as JSON), `error` (the call fails with a message containing the
//! text) or `init_error` (init fails with a message starting with it).

use crate::types::*;
use crate::wasm::World;
use serde_json::{Map, Value};

/// At most this many bytes of cases file and this many cases.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
pub const MAX_CASES: usize = 10_000;

/// A malformed cases file: where (`cases[2] ("name").expect`) and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CasesError {
    pub path: String,
    pub message: String,
}

fn bad<T>(path: &str, message: impl Into<String>) -> Result<T, CasesError> {
    Err(CasesError {
        path: path.to_string(),
        message: message.into(),
    })
}

#[derive(Debug, Clone)]
pub struct CasesFile {
    pub config: String,
    pub tools: Vec<ToolSpec>,
    pub cases: Vec<Case>,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// The config for this case, when it has its own.
    pub config: Option<String>,
    pub input: Input,
    pub expect: Expect,
}

/// The view an agent or policy is handed.
#[derive(Debug, Clone, Default)]
pub struct ViewInput {
    pub goal: String,
    pub steps: Vec<Step>,
    pub approvals: Vec<Approval>,
}

#[derive(Debug, Clone)]
pub enum Input {
    /// Only `init` runs (the case expects an init error).
    InitOnly,
    Agent(ViewInput),
    Policy {
        call: ToolCall,
        effect: Effect,
        view: ViewInput,
    },
    Tool {
        name: String,
        arguments: String,
    },
}

/// What a case expects; answers are canonical JSON (see `answer_json`).
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    Answer(Value),
    Error(String),
    InitError(String),
}

/// A JSON object's keys, taken one by one; the rest are refused.
struct Obj<'a> {
    path: String,
    map: &'a Map<String, Value>,
    taken: Vec<&'a str>,
}

impl<'a> Obj<'a> {
    fn new(path: &str, v: &'a Value) -> Result<Obj<'a>, CasesError> {
        match v {
            Value::Object(map) => Ok(Obj {
                path: path.to_string(),
                map,
                taken: vec![],
            }),
            _ => bad(path, "expected an object"),
        }
    }

    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.path)
    }

    fn get(&mut self, k: &'a str) -> Option<&'a Value> {
        self.taken.push(k);
        self.map.get(k).filter(|v| !v.is_null())
    }

    fn str(&mut self, k: &'a str) -> Result<Option<String>, CasesError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => bad(&self.key(k), "expected a string"),
        }
    }

    fn finish(self) -> Result<(), CasesError> {
        match self.map.keys().find(|k| !self.taken.contains(&k.as_str())) {
            Some(k) => bad(&self.path, format!("unknown key {k:?}")),
            None => Ok(()),
        }
    }
}

/// A config as the plugin gets it: a string is passed as it is, any other
/// JSON value as its text.
fn config_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// JSON text of a value of the file (`"x"` is the JSON string "x").
fn json_text(v: &Value) -> String {
    v.to_string()
}

fn parse_enum<T: std::str::FromStr>(
    path: &str,
    v: &Value,
    what: &str,
    all: &[String],
) -> Result<T, CasesError> {
    let Value::String(s) = v else {
        return bad(
            path,
            format!("expected a string, one of {}", all.join(", ")),
        );
    };
    // Cases use the WIT spelling (`tool-result`); the store's is `tool_result`.
    s.replace('-', "_")
        .parse()
        .or_else(|_| s.parse())
        .or_else(|_| bad(path, format!("{s:?} is not {what} ({})", all.join(", "))))
}

/// The WIT spellings of an enumeration's cases.
fn names<T: Copy>(all: &[T], f: fn(T) -> &'static str) -> Vec<String> {
    all.iter().map(|x| f(*x).replace('_', "-")).collect()
}

fn effect(path: &str, v: &Value) -> Result<Effect, CasesError> {
    parse_enum(
        path,
        v,
        "an effect class",
        &names(Effect::ALL, Effect::as_str),
    )
}

fn tool_call(path: &str, v: &Value) -> Result<ToolCall, CasesError> {
    let mut o = Obj::new(path, v)?;
    let tool = o
        .str("tool")?
        .map_or_else(|| bad(&o.key("tool"), "missing"), Ok)?;
    let arguments = match o.get("arguments") {
        None => "{}".to_string(),
        Some(a @ Value::Object(_)) => json_text(a),
        Some(_) => return bad(&o.key("arguments"), "expected an object"),
    };
    o.finish()?;
    Ok(ToolCall { tool, arguments })
}

/// `{"call": {...}}`, `{"complete": value}`, `{"fail": "why"}`, `{"invalid": "why"}`.
fn decision(path: &str, v: &Value) -> Result<Decision, CasesError> {
    let one = single(path, v, &["call", "complete", "fail", "invalid"])?;
    let (k, val) = one;
    let kpath = format!("{path}.{k}");
    Ok(match k {
        "call" => Decision::Call(tool_call(&kpath, val)?),
        "complete" => Decision::Complete(json_text(val)),
        other => {
            let Value::String(s) = val else {
                return bad(&kpath, "expected a string");
            };
            if other == "fail" {
                Decision::Fail(s.clone())
            } else {
                Decision::Invalid(s.clone())
            }
        }
    })
}

/// `"allow"`, `{"deny": "why"}`, `{"abort": "why"}`,
/// `{"require-approval": {"reason": "why", "presentation": value}}`.
fn verdict(path: &str, v: &Value) -> Result<Verdict, CasesError> {
    if v.as_str() == Some("allow") {
        return Ok(Verdict::Allow);
    }
    let (k, val) = single(path, v, &["allow", "deny", "abort", "require-approval"])?;
    let kpath = format!("{path}.{k}");
    let reason = |val: &Value| match val {
        Value::String(s) => Ok(s.clone()),
        _ => bad(&kpath, "expected a string"),
    };
    Ok(match k {
        "allow" => Verdict::Allow,
        "deny" => Verdict::Deny(reason(val)?),
        "abort" => Verdict::Abort(reason(val)?),
        _ => {
            let mut o = Obj::new(&kpath, val)?;
            let r = o.str("reason")?.unwrap_or_default();
            let presentation = o.get("presentation").map_or("null".to_string(), json_text);
            o.finish()?;
            Verdict::RequireApproval(ApprovalRequest {
                reason: r,
                presentation,
            })
        }
    })
}

/// An object with exactly one of `keys`.
fn single<'a>(
    path: &str,
    v: &'a Value,
    keys: &[&'a str],
) -> Result<(&'a str, &'a Value), CasesError> {
    let shape = || format!("expected an object with exactly one of {}", keys.join(", "));
    let Value::Object(m) = v else {
        return bad(path, shape());
    };
    if m.len() != 1 {
        return bad(path, shape());
    }
    let (k, val) = m.iter().next().map_or_else(|| bad(path, shape()), Ok)?;
    match keys.iter().find(|x| **x == k.as_str()) {
        Some(key) => Ok((key, val)),
        None => bad(path, format!("{k:?} is not one of {}", keys.join(", "))),
    }
}

fn step(path: &str, index: usize, v: &Value) -> Result<Step, CasesError> {
    let mut o = Obj::new(path, v)?;
    let decision = o
        .get("decision")
        .map(|d| decision(&format!("{path}.decision"), d))
        .transpose()?;
    let verdict = o
        .get("verdict")
        .map(|d| verdict(&format!("{path}.verdict"), d))
        .transpose()?;
    let observation = match o.get("observation") {
        None => None,
        Some(ov) => {
            let opath = format!("{path}.observation");
            let mut ob = Obj::new(&opath, ov)?;
            let kind = match ob.get("kind") {
                None => return bad(&ob.key("kind"), "missing"),
                Some(k) => parse_enum(
                    &ob.key("kind"),
                    k,
                    "an observation kind",
                    &names(ObservationKind::ALL, ObservationKind::as_str),
                )?,
            };
            let content = ob.get("content").map_or("null".to_string(), json_text);
            ob.finish()?;
            Some(Observation { kind, content })
        }
    };
    let state = match o.get("state") {
        Some(s) => parse_enum(
            &o.key("state"),
            s,
            "a step state",
            &names(StepState::ALL, StepState::as_str),
        )?,
        None if decision.is_some() => StepState::Done,
        None => StepState::Started,
    };
    o.finish()?;
    let call = match &decision {
        Some(Decision::Call(c)) => Some(c.clone()),
        _ => None,
    };
    Ok(Step {
        index: index as u32,
        version: 1,
        state,
        decision,
        call,
        effect: None,
        verdict,
        observation,
        started_at: 0,
        updated_at: 0,
    })
}

fn approval(path: &str, v: &Value) -> Result<Approval, CasesError> {
    let mut o = Obj::new(path, v)?;
    let id = o
        .str("id")?
        .map_or_else(|| bad(&o.key("id"), "missing"), Ok)?;
    let step_index = match o.get("step") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n <= u32::MAX as u64) => {
            n.as_u64().unwrap_or(0) as u32
        }
        Some(_) => return bad(&o.key("step"), "expected a step index"),
        None => 0,
    };
    let status = match o.get("status") {
        Some(s) => parse_enum(
            &o.key("status"),
            s,
            "an approval status",
            &names(ApprovalStatus::ALL, ApprovalStatus::as_str),
        )?,
        None => ApprovalStatus::Pending,
    };
    let kind = match o.get("kind") {
        Some(s) => parse_enum(
            &o.key("kind"),
            s,
            "an approval kind",
            &names(ApprovalKind::ALL, ApprovalKind::as_str),
        )?,
        None => ApprovalKind::Policy,
    };
    let call = match o.get("call") {
        Some(c) => tool_call(&o.key("call"), c)?,
        None => return bad(&o.key("call"), "missing"),
    };
    let reason = o.str("reason")?.unwrap_or_default();
    let decided_by = o.str("decided_by")?;
    let note = o.str("note")?;
    o.finish()?;
    Ok(Approval {
        id,
        run_id: "run_test".into(),
        step_index,
        kind,
        status,
        call,
        reason,
        presentation: "null".into(),
        hash: String::new(),
        created_at: 0,
        expires_at: None,
        decided_by,
        note,
        decided_at: None,
        chain_head: None,
        tool_pin: None,
    })
}

fn view(o: &mut Obj<'_>) -> Result<ViewInput, CasesError> {
    let goal = o.str("goal")?.unwrap_or_else(|| "test".into());
    let steps = match o.get("steps") {
        None => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| step(&format!("{}[{i}]", o.key("steps")), i, s))
            .collect::<Result<_, _>>()?,
        Some(_) => return bad(&o.key("steps"), "expected an array"),
    };
    let approvals = match o.get("approvals") {
        None => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| approval(&format!("{}[{i}]", o.key("approvals")), s))
            .collect::<Result<_, _>>()?,
        Some(_) => return bad(&o.key("approvals"), "expected an array"),
    };
    Ok(ViewInput {
        goal,
        steps,
        approvals,
    })
}

/// The key of a world's answer in a case (`decision`, `verdict`, `result`).
pub fn answer_key(world: World) -> &'static str {
    match world {
        World::Agent => "decision",
        World::Policy => "verdict",
        World::Tool => "result",
    }
}

fn expect(path: &str, world: World, v: &Value) -> Result<Expect, CasesError> {
    let (k, val) = single(path, v, &[answer_key(world), "error", "init_error"])?;
    let kpath = format!("{path}.{k}");
    Ok(match k {
        "error" | "init_error" => {
            let Value::String(s) = val else {
                return bad(&kpath, "expected a string");
            };
            if k == "error" {
                Expect::Error(s.clone())
            } else {
                Expect::InitError(s.clone())
            }
        }
        "decision" => Expect::Answer(decision_json(&decision(&kpath, val)?)),
        "verdict" => Expect::Answer(verdict_json(&verdict(&kpath, val)?)),
        _ => Expect::Answer(val.clone()),
    })
}

fn tool_spec(path: &str, v: &Value) -> Result<ToolSpec, CasesError> {
    let mut o = Obj::new(path, v)?;
    let name = o
        .str("name")?
        .map_or_else(|| bad(&o.key("name"), "missing"), Ok)?;
    let description = o.str("description")?.unwrap_or_default();
    let parameters = o
        .get("parameters")
        .map_or(r#"{"type":"object"}"#.to_string(), json_text);
    let effect = match o.get("effect") {
        Some(e) => effect(&o.key("effect"), e)?,
        None => Effect::Destructive,
    };
    o.finish()?;
    Ok(ToolSpec {
        name,
        description,
        parameters,
        effect,
    })
}

/// Reads a cases file's text for `world`.
pub fn parse(text: &str, world: World) -> Result<CasesFile, CasesError> {
    let root: Value =
        serde_json::from_str(text).or_else(|e| bad("cases", format!("invalid JSON: {e}")))?;
    let mut o = Obj::new("cases file", &root)?;
    let config = o.get("config").map_or("{}".to_string(), config_text);
    let tools = match o.get("tools") {
        None => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| tool_spec(&format!("tools[{i}]"), t))
            .collect::<Result<_, _>>()?,
        Some(_) => return bad("tools", "expected an array"),
    };
    let list = match o.get("cases") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return bad("cases", "has no cases"),
        Some(_) => return bad("cases", "expected an array"),
        None => return bad("cases", "missing"),
    };
    o.finish()?;
    if list.len() > MAX_CASES {
        return bad(
            "cases",
            format!("{} cases; at most {MAX_CASES}", list.len()),
        );
    }
    let mut cases = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let named = c
            .get("name")
            .and_then(Value::as_str)
            .map_or(format!("cases[{i}]"), |n| format!("cases[{i}] ({n:?})"));
        let mut co = Obj::new(&named, c)?;
        let Some(name) = co.str("name")? else {
            return bad(&co.key("name"), "missing");
        };
        let case_config = co.get("config").map(config_text);
        let expect = match co.get("expect") {
            Some(e) => expect(&co.key("expect"), world, e)?,
            None => return bad(&co.key("expect"), "missing"),
        };
        let input = if let Expect::InitError(_) = expect {
            Input::InitOnly
        } else {
            match world {
                World::Agent => Input::Agent(view(&mut co)?),
                World::Policy => {
                    let call = match co.get("call") {
                        Some(v) => tool_call(&co.key("call"), v)?,
                        None => return bad(&co.key("call"), "missing"),
                    };
                    let effect = match co.get("effect") {
                        Some(v) => effect(&co.key("effect"), v)?,
                        None => return bad(&co.key("effect"), "missing"),
                    };
                    Input::Policy {
                        call,
                        effect,
                        view: view(&mut co)?,
                    }
                }
                World::Tool => {
                    let Some(name) = co.str("tool")? else {
                        return bad(&co.key("tool"), "missing");
                    };
                    let arguments = match co.get("arguments") {
                        None => "{}".to_string(),
                        Some(a) => json_text(a),
                    };
                    Input::Tool { name, arguments }
                }
            }
        };
        co.finish()?;
        cases.push(Case {
            name,
            config: case_config,
            input,
            expect,
        });
    }
    Ok(CasesFile {
        config,
        tools,
        cases,
    })
}

/// JSON of a text that should hold JSON; text that does not parse stays a
/// string, so a diff shows it.
fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// A decision as a case writes it, with its JSON parsed (so spacing and key
/// order do not matter).
pub fn decision_json(d: &Decision) -> Value {
    match d {
        Decision::Call(c) => {
            serde_json::json!({ "call": { "tool": c.tool, "arguments": parsed(&c.arguments) } })
        }
        Decision::Complete(r) => serde_json::json!({ "complete": parsed(r) }),
        Decision::Fail(r) => serde_json::json!({ "fail": r }),
        Decision::Invalid(r) => serde_json::json!({ "invalid": r }),
    }
}

/// A verdict as a case writes it, with its presentation parsed.
pub fn verdict_json(v: &Verdict) -> Value {
    match v {
        Verdict::Allow => Value::String("allow".into()),
        Verdict::Deny(r) => serde_json::json!({ "deny": r }),
        Verdict::Abort(r) => serde_json::json!({ "abort": r }),
        Verdict::RequireApproval(a) => serde_json::json!({
            "require-approval": { "reason": a.reason, "presentation": parsed(&a.presentation) }
        }),
    }
}

/// A tool's result as a case writes it.
pub fn result_json(text: &str) -> Value {
    parsed(text)
}
