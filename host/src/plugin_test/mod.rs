//! `keel plugin test`: runs a component against recorded inputs and compares
//! its answers with the expected ones, so a plugin in any language is tested
//! the same way (the conformance cases of the twins are such files).

pub mod cases;

use crate::consumer::{Agent, Policy, RunView, ToolProvider};
use crate::driver::ConsumersBuilder;
use crate::model::StubProvider;
use crate::types::{Limits, Run};
use crate::wasm::{
    Plugin, PluginLimits, ToolCaps, WasmAgent, WasmHost, WasmPolicy, WasmTools, World,
};
use cases::{answer_key, Case, CasesFile, Expect, Input, ViewInput};
use serde_json::Value;
use std::sync::Arc;

/// What one case gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Got {
    Answer(Value),
    Error(String),
    InitError(String),
    /// Init succeeded where the case expected it to fail.
    InitOk,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub passed: bool,
    pub expected: Expect,
    pub got: Got,
}

/// The part of an init error the plugin wrote (after the host's
/// `<plugin>: init: `).
fn init_message(e: &str) -> &str {
    e.split_once("init: ").map_or(e, |(_, m)| m)
}

fn matches(expected: &Expect, got: &Got) -> bool {
    match (expected, got) {
        (Expect::Answer(a), Got::Answer(b)) => a == b,
        (Expect::Error(want), Got::Error(e)) => e.contains(want.as_str()),
        (Expect::InitError(want), Got::InitError(e)) => init_message(e).starts_with(want.as_str()),
        _ => false,
    }
}

fn run_row(view: &ViewInput) -> Run {
    let mut run = Run::new("run_test", &view.goal, Limits::default(), 0);
    run.step_count = view.steps.len() as u32 + 1;
    run
}

async fn run_case(
    host: &Arc<WasmHost>,
    plugin: &Arc<Plugin>,
    file: &CasesFile,
    case: &Case,
) -> Got {
    let config = case.config.as_deref().unwrap_or(&file.config);
    let limits = PluginLimits::default();
    let wiring = ConsumersBuilder::new(Arc::new(StubProvider::default()));
    let init_failed = |e: String| Got::InitError(e);
    match (&case.input, plugin.world) {
        (Input::InitOnly, World::Agent) | (Input::Agent(_), World::Agent) => {
            let mut agent =
                match WasmAgent::new(host, plugin, config, &file.tools, &limits, &wiring).await {
                    Ok(a) => a,
                    Err(e) => return init_failed(e.to_string()),
                };
            let Input::Agent(view) = &case.input else {
                return Got::InitOk;
            };
            let run = run_row(view);
            let rv = RunView {
                run: &run,
                steps: &view.steps,
                approvals: &view.approvals,
            };
            match agent.decide(rv).await {
                Ok(d) => Got::Answer(cases::decision_json(&d)),
                Err(e) => Got::Error(e.to_string()),
            }
        }
        (Input::InitOnly, World::Policy) | (Input::Policy { .. }, World::Policy) => {
            let mut policy = match WasmPolicy::new(host, plugin, config, &limits, &wiring).await {
                Ok(p) => p,
                Err(e) => return init_failed(e.to_string()),
            };
            let Input::Policy { call, effect, view } = &case.input else {
                return Got::InitOk;
            };
            let run = run_row(view);
            let rv = RunView {
                run: &run,
                steps: &view.steps,
                approvals: &view.approvals,
            };
            match policy.evaluate(call, *effect, rv).await {
                Ok(v) => Got::Answer(cases::verdict_json(&v)),
                Err(e) => Got::Error(e.to_string()),
            }
        }
        (Input::InitOnly, World::Tool) | (Input::Tool { .. }, World::Tool) => {
            let tools = WasmTools::new(
                host.clone(),
                plugin.clone(),
                config,
                limits,
                ToolCaps::default(),
                false,
                Some(wiring.events()),
            )
            .await;
            let tools = match tools {
                Ok(t) => t,
                Err(e) => return init_failed(e.to_string()),
            };
            let Input::Tool { name, arguments } = &case.input else {
                return Got::InitOk;
            };
            match tools.call(name, arguments).await {
                Ok(r) => Got::Answer(cases::result_json(&r)),
                Err(e) => Got::Error(e.message),
            }
        }
        _ => Got::Error(format!("the case is not for a {} plugin", plugin.world)),
    }
}

/// Runs every case, each on a fresh instance, in order.
pub async fn run(host: &Arc<WasmHost>, plugin: &Arc<Plugin>, file: &CasesFile) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(file.cases.len());
    for case in &file.cases {
        let got = run_case(host, plugin, file, case).await;
        out.push(Outcome {
            name: case.name.clone(),
            passed: matches(&case.expect, &got),
            expected: case.expect.clone(),
            got,
        });
    }
    out
}

fn expected_lines(e: &Expect, world: World) -> Vec<String> {
    let key = answer_key(world);
    match e {
        Expect::Answer(v) => pretty(key, v),
        Expect::Error(s) => vec![format!("error containing {}", Value::String(s.clone()))],
        Expect::InitError(s) => vec![format!(
            "init error starting with {}",
            Value::String(s.clone())
        )],
    }
}

fn got_lines(g: &Got, world: World) -> Vec<String> {
    let key = answer_key(world);
    match g {
        Got::Answer(v) => pretty(key, v),
        Got::Error(s) => vec![format!("error {}", Value::String(s.clone()))],
        Got::InitError(s) => vec![format!(
            "init error {}",
            Value::String(init_message(s).to_string())
        )],
        Got::InitOk => vec!["init succeeded".into()],
    }
}

fn pretty(key: &str, v: &Value) -> Vec<String> {
    let text = serde_json::to_string_pretty(&serde_json::json!({ key: v })).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

/// A line diff of `a` (expected, `-`) and `b` (got, `+`), common lines kept
/// with a space: the longest common subsequence of two short texts.
pub fn diff(a: &[String], b: &[String]) -> Vec<String> {
    let (n, m) = (a.len(), b.len());
    if n * m > 1_000_000 {
        return a
            .iter()
            .map(|l| format!("-{l}"))
            .chain(b.iter().map(|l| format!("+{l}")))
            .collect();
    }
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, vec![]);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(format!(" {}", a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(format!("-{}", a[i]));
            i += 1;
        } else {
            out.push(format!("+{}", b[j]));
            j += 1;
        }
    }
    out
}

/// The report `keel plugin test` prints: a line per case, a diff under each
/// failure (`-` expected, `+` got), then `N passed, M failed`.
pub fn report(outcomes: &[Outcome], world: World) -> String {
    let mut s = String::new();
    for o in outcomes {
        if o.passed {
            s.push_str(&format!("ok   {}\n", o.name));
        } else {
            s.push_str(&format!("FAIL {}\n", o.name));
            for line in diff(
                &expected_lines(&o.expected, world),
                &got_lines(&o.got, world),
            ) {
                s.push_str(&format!("     {line}\n"));
            }
        }
    }
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    s.push_str(&format!(
        "{} passed, {failed} failed\n",
        outcomes.len() - failed
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn the_diff_marks_what_differs() {
        let d = diff(&lines("{\n  a\n  b\n}"), &lines("{\n  a\n  c\n}"));
        assert_eq!(d, lines(" {\n   a\n-  b\n+  c\n }"));
    }

    #[test]
    fn init_errors_match_on_the_plugins_own_words() {
        let got = Got::InitError("policy-rules-c.wasm: init: config.rules: missing".into());
        assert!(matches(&Expect::InitError("config.rules:".into()), &got));
        assert!(!matches(&Expect::InitError("config.default".into()), &got));
        assert!(!matches(&Expect::Answer(Value::Null), &got));
    }
}
