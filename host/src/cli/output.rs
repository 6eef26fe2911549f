//! How the CLI prints runs and events, as text or JSON.
//!
//! Text output goes through [`safe`]: whatever a plugin or a model wrote
//! (a reason, a result, a goal, log lines) reaches the terminal with its
//! control characters made visible, so that it cannot move the cursor,
//! erase a line or fake one. `--json` output is exact (JSON escapes them).

use crate::driver::Outcome;
use crate::store::{Event, StoredModelCall};
use crate::types::*;
use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character (C0, DEL, C1: escape sequences,
/// carriage returns, newlines) and every bidirectional override written
/// as a visible escape such as `\u{1b}`.
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`safe`] line by line: keeps the line breaks of a multi-line message
/// (a config's parse error points at its line with a caret below it).
pub fn safe_lines(text: &str) -> String {
    text.split('\n').map(safe).collect::<Vec<_>>().join("\n")
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Prints one line of text output, made [`safe`].
macro_rules! say {
    ($($arg:tt)*) => { println!("{}", safe(&format!($($arg)*))) };
}
pub(crate) use say;

pub fn print_event(e: &Event, json: bool) {
    if json {
        println!("{}", serde_json::json!({ "event": e }));
        return;
    }
    let step = e
        .step_index
        .map(|i| format!(" step {i}"))
        .unwrap_or_default();
    let data = keel_vocab::render::cap(&e.data, 160);
    say!("#{:<5} {:<20}{step} {data}", e.seq, e.kind);
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
            say!(
                "run {} paused: approval {} waits for an operator",
                r.id,
                a.id
            );
            say!("  call:   {} {}", a.call.tool, a.call.arguments);
            say!("  reason: {}", a.reason);
            say!(
                "  approve: keel approve {}    deny: keel deny {}",
                a.id,
                a.id
            );
        }
        (None, RunStatus::Parked) => {
            say!(
                "run {} parked ({}): {}",
                r.id,
                r.reason.map(|r| r.as_str()).unwrap_or("-"),
                r.result.as_deref().unwrap_or("")
            );
            say!(
                "  the model server stayed unavailable; try again after {}: keel resume {}",
                r.retry_at.map(utc).unwrap_or_else(|| "-".into()),
                r.id
            );
        }
        (None, RunStatus::Completed) => say!(
            "run {} completed: {}",
            r.id,
            r.result.as_deref().unwrap_or("null")
        ),
        (None, s) => say!(
            "run {} {s} ({}): {}",
            r.id,
            r.reason.map(|r| r.as_str()).unwrap_or("-"),
            r.result.as_deref().unwrap_or("")
        ),
    }
}

/// `pending` maps a waiting run's id to its pending approval's.
pub fn print_runs(
    runs: &[Run],
    pending: &std::collections::HashMap<String, String>,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(runs)?);
        return Ok(());
    }
    if runs.is_empty() {
        println!("no runs");
    }
    for r in runs {
        let pending = if r.status == RunStatus::WaitingForApproval {
            pending
                .get(&r.id)
                .map(|a| format!(" (approval {a})"))
                .unwrap_or_default()
        } else if r.status == RunStatus::Parked {
            r.retry_at
                .map(|t| format!(" (retry after {})", utc(t)))
                .unwrap_or_default()
        } else {
            String::new()
        };
        say!(
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
    model_calls: &[StoredModelCall],
    json: bool,
) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::json!({ "run": run, "steps": steps, "approvals": approvals, "model_calls": model_calls })
        );
        return Ok(());
    }
    say!("run {}: {}", run.id, run.status);
    say!("  goal:   {}", run.goal);
    if let Some(reason) = &run.reason {
        say!("  reason: {reason}");
    }
    if let Some(result) = &run.result {
        say!("  result: {result}");
    }
    if let Some(t) = run.retry_at {
        say!("  retry:  after {} (keel resume {})", utc(t), run.id);
    }
    say!(
        "  steps: {}  model calls: {}  tokens: {}",
        run.step_count,
        run.model_calls,
        run.tokens
    );
    for s in steps {
        let what = match &s.decision {
            Some(Decision::Call(c)) => format!("call {} {}", c.tool, c.arguments),
            Some(Decision::Complete(r)) => format!("complete {r}"),
            Some(Decision::Fail(r)) => format!("fail {r}"),
            Some(Decision::Invalid(r)) => format!("invalid {r}"),
            None => "(deciding)".into(),
        };
        say!("  [{}] {:<17} {what}", s.index, s.state.as_str());
        if let Some(o) = &s.observation {
            say!(
                "        {} {}",
                o.kind.as_str(),
                keel_vocab::render::cap(&o.content, 200)
            );
        }
    }
    for a in approvals {
        let by = a
            .decided_by
            .as_deref()
            .map(|b| format!(" by {b}"))
            .unwrap_or_default();
        say!(
            "  approval {} ({}) step {}: {}{by}: {}",
            a.id,
            a.kind.as_str(),
            a.step_index,
            a.status.as_str(),
            a.reason
        );
    }
    for m in model_calls {
        say!(
            "  model call step {}: {} {} ms, {} + {} tokens{}",
            m.step_index,
            m.outcome,
            m.latency_ms,
            m.prompt_tokens,
            m.completion_tokens,
            m.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// `ms` since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{safe, safe_lines, utc};

    #[test]
    fn control_characters_and_bidi_overrides_are_made_visible() {
        assert_eq!(safe("plain text ✓"), "plain text ✓");
        assert_eq!(safe("a\u{1b}[1A\u{1b}[2Kb"), "a\\u{1b}[1A\\u{1b}[2Kb");
        assert_eq!(safe("x\ny\r\u{7f}\u{9b}"), "x\\ny\\r\\u{7f}\\u{9b}");
        assert_eq!(safe("\u{202e}evil"), "\\u{202e}evil");
        assert_eq!(safe_lines("a\n\u{1b}[2K b"), "a\n\\u{1b}[2K b");
    }

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_170_245_123), "2026-12-02 00:10:45 UTC");
    }
}
