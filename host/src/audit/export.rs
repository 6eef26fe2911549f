//! A run's journal as JSON Lines, written so that `keel verify --file`
//! can check it without the store: one record a line, the run first, the
//! end record (with the event count and the chain head) last.

use crate::store::encode::{ApprovalRow, StepRow};
use crate::store::{ChainedEvent, Journal, StoredModelCall};
use crate::types::Run;
use std::io::{BufRead, Write};

/// The format's version, in the first record.
pub const EXPORT_VERSION: u32 = 1;

/// The largest line an export may hold (a step with a large observation).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// One line of an export.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "record", rename_all = "snake_case", deny_unknown_fields)]
enum Record {
    Run {
        version: u32,
        run: Box<Run>,
        limits: String,
    },
    Step(StepRow),
    Approval(ApprovalRow),
    Event(ChainedEvent),
    ModelCall(StoredModelCall),
    End {
        events: u64,
        head: String,
    },
}

/// Why an export file cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A line that is not a record of the format, or not in its place.
    #[error("line {line}: {why}")]
    Line {
        /// The line's number, counted from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The file ends before its end record.
    #[error("the file ends after line {lines} without its end record: it was truncated")]
    Truncated {
        /// How many whole lines it holds.
        lines: usize,
    },
    /// The file could not be read.
    #[error("reading the file: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes `j` to the file `path`, durably: beside it first, synced, then
/// renamed into place (and the folder synced), so that a crash leaves
/// either no file under that name or the whole export. A file already
/// there is replaced.
pub fn write_file(j: &Journal, path: &std::path::Path) -> std::io::Result<()> {
    let tmp = path.with_extension("partial");
    let written = (|| {
        let f = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::new(f);
        write(j, &mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Writes `j` to `out`.
pub fn write(j: &Journal, out: &mut impl Write) -> std::io::Result<()> {
    let mut line = |r: &Record| -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, r)?;
        out.write_all(b"\n")
    };
    line(&Record::Run {
        version: EXPORT_VERSION,
        run: Box::new(j.run.clone()),
        limits: j.limits.clone(),
    })?;
    for s in &j.steps {
        line(&Record::Step(s.clone()))?;
    }
    for a in &j.approvals {
        line(&Record::Approval(a.clone()))?;
    }
    for e in &j.events {
        line(&Record::Event(e.clone()))?;
    }
    for m in &j.model_calls {
        line(&Record::ModelCall(m.clone()))?;
    }
    line(&Record::End {
        events: j.events.len() as u64,
        head: j.run.chain_head.clone(),
    })?;
    out.flush()
}

/// Reads an export back; refuses a file that is not one whole export.
pub fn read(input: impl BufRead) -> Result<Journal, ExportError> {
    let mut j: Option<Journal> = None;
    let mut ended = false;
    let mut n = 0;
    let mut reader = input;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let got = std::io::Read::take(reader.by_ref(), MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if got == 0 {
            break;
        }
        n += 1;
        let bad = |why: String| ExportError::Line { line: n, why };
        if buf.len() > MAX_LINE_BYTES {
            return Err(bad(format!("longer than {MAX_LINE_BYTES} bytes")));
        }
        if !buf.ends_with(b"\n") {
            return Err(ExportError::Truncated { lines: n - 1 });
        }
        if ended {
            return Err(bad("a record after the end record".into()));
        }
        let r: Record = serde_json::from_slice(&buf).map_err(|e| bad(e.to_string()))?;
        match (r, &mut j) {
            (
                Record::Run {
                    version,
                    run,
                    limits,
                },
                None,
            ) => {
                if version != EXPORT_VERSION {
                    return Err(bad(format!(
                        "export version {version}; this keel reads version {EXPORT_VERSION}"
                    )));
                }
                j = Some(Journal {
                    run: *run,
                    limits,
                    steps: vec![],
                    approvals: vec![],
                    events: vec![],
                    model_calls: vec![],
                })
            }
            (Record::Run { .. }, Some(_)) => return Err(bad("a second run record".into())),
            (_, None) => return Err(bad("the first record must be the run".into())),
            (Record::Step(s), Some(j)) => j.steps.push(s),
            (Record::Approval(a), Some(j)) => j.approvals.push(a),
            (Record::Event(e), Some(j)) => j.events.push(e),
            (Record::ModelCall(m), Some(j)) => j.model_calls.push(m),
            (Record::End { events, head }, Some(j)) => {
                if events != j.events.len() as u64 || head != j.run.chain_head {
                    return Err(bad(format!(
                        "the end record says {events} events ending at {head}; the file holds {} ending at {}",
                        j.events.len(),
                        j.run.chain_head
                    )));
                }
                ended = true;
            }
        }
    }
    match j {
        Some(j) if ended => Ok(j),
        _ => Err(ExportError::Truncated { lines: n }),
    }
}
