//! How the CLI prints runs and events, as text or JSON.

use crate::driver::Outcome;
use crate::store::{Event, Store};
use crate::types::*;

pub fn print_event(e: &Event, json: bool) {
    if json {
        println!("{}", serde_json::json!({ "event": e }));
        return;
    }
    let step = e
        .step_index
        .map(|i| format!(" step {i}"))
        .unwrap_or_default();
    let data = keel_guest::render::cap(&e.data, 160);
    println!("#{:<5} {:<20}{step} {data}", e.seq, e.kind);
}

pub fn print_outcome(o: &Outcome, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({ "run": o.run, "pending": o.pending })
        );
        return;
    }
    let r = &o.run;
    match (&o.pending, r.status) {
        (Some(a), _) => {
            println!(
                "run {} paused: approval {} waits for an operator",
                r.id, a.id
            );
            println!("  call:   {} {}", a.call.tool, a.call.arguments);
            println!("  reason: {}", a.reason);
            println!(
                "  approve: keel approve {}    deny: keel deny {}",
                a.id, a.id
            );
        }
        (None, RunStatus::Completed) => println!(
            "run {} completed: {}",
            r.id,
            r.result.as_deref().unwrap_or("null")
        ),
        (None, s) => println!(
            "run {} {s} ({}): {}",
            r.id,
            r.reason.as_deref().unwrap_or("-"),
            r.result.as_deref().unwrap_or("")
        ),
    }
}

pub fn print_runs(runs: &[Run], store: &Store, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(runs)?);
        return Ok(());
    }
    if runs.is_empty() {
        println!("no runs");
    }
    for r in runs {
        let pending = if r.status == RunStatus::WaitingForApproval {
            store
                .load_approvals(&r.id)?
                .into_iter()
                .find(|a| a.status == ApprovalStatus::Pending)
                .map(|a| format!(" (approval {})", a.id))
                .unwrap_or_default()
        } else {
            String::new()
        };
        println!(
            "{}  {:<21} {:>3} steps  {}{pending}",
            r.id,
            r.status.as_str(),
            r.step_count,
            r.goal
        );
    }
    Ok(())
}

pub fn print_run_detail(
    run: &Run,
    steps: &[Step],
    approvals: &[Approval],
    json: bool,
) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::json!({ "run": run, "steps": steps, "approvals": approvals })
        );
        return Ok(());
    }
    println!("run {}: {}", run.id, run.status);
    println!("  goal:   {}", run.goal);
    if let Some(reason) = &run.reason {
        println!("  reason: {reason}");
    }
    if let Some(result) = &run.result {
        println!("  result: {result}");
    }
    println!(
        "  steps: {}  model calls: {}  tokens: {}",
        run.step_count, run.model_calls, run.tokens
    );
    for s in steps {
        let what = match &s.decision {
            Some(Decision::Call(c)) => format!("call {} {}", c.tool, c.arguments),
            Some(Decision::Complete(r)) => format!("complete {r}"),
            Some(Decision::Fail(r)) => format!("fail {r}"),
            Some(Decision::Invalid(r)) => format!("invalid {r}"),
            None => "(deciding)".into(),
        };
        println!("  [{}] {:<17} {what}", s.index, s.state.as_str());
        if let Some(o) = &s.observation {
            println!(
                "        {} {}",
                o.kind.as_str(),
                keel_guest::render::cap(&o.content, 200)
            );
        }
    }
    for a in approvals {
        let by = a
            .decided_by
            .as_deref()
            .map(|b| format!(" by {b}"))
            .unwrap_or_default();
        println!(
            "  approval {} ({}) step {}: {}{by}: {}",
            a.id,
            a.kind.as_str(),
            a.step_index,
            a.status.as_str(),
            a.reason
        );
    }
    Ok(())
}
