//! The statements of a group of writes, in one transaction: each kind of
//! row is written for the whole group by one statement over arrays
//! (`unnest`), so a group of hundreds of runs' transitions costs a handful
//! of round trips. Each transition keeps its own compare-and-set: the
//! run update returns the runs it matched, and only their rows are
//! written. Events are numbered last, under a lock held until commit, so
//! that their numbers follow commit order across processes.

use super::conn::Conn;
use super::rows::RUN_COLUMNS;
use crate::store::encode::{Prepared, Write, Written};
use crate::store::StoreError;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

/// Held from numbering a transaction's events until its commit: numbers
/// are then handed out in commit order.
const EVENTS_LOCK: i64 = 0x4B45_454C_0002;

static INSERT_RUNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO runs ({RUN_COLUMNS})
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
             $6::text[], $7::text[], $8::int8[], $9::int8[], $10::int8[], $11::int8[],
             $12::text[], $13::int8[], $14::int8[], $15::int8[], $16::int8[],
             $17::int8[], $18::text[])
         ON CONFLICT (id) DO NOTHING RETURNING id"
    )
});

const UPDATE_RUNS: &str = "UPDATE runs AS r SET status = v.status, reason = v.reason,
        result = v.result, limits = v.limits, step_count = v.step_count,
        model_calls = v.model_calls, tokens = v.tokens,
        consecutive_failures = v.consecutive_failures, lease_owner = v.lease_owner,
        lease_expires = v.lease_expires, updated_at = v.updated_at, retry_at = v.retry_at,
        chain_len = v.chain_len, chain_head = v.chain_head
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[],
             $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::int8[], $12::int8[],
             $13::int8[], $14::text[], $15::text[], $16::int8[], $17::text[], $18::int8[])
       AS v(id, status, reason, result, limits, step_count, model_calls, tokens,
            consecutive_failures, lease_owner, lease_expires, updated_at, retry_at,
            expect_status, expect_owner, chain_len, chain_head, expect_chain_len)
     WHERE r.id = v.id AND r.status = v.expect_status
       AND r.lease_owner IS NOT DISTINCT FROM v.expect_owner
       AND r.chain_len = v.expect_chain_len
     RETURNING r.id";

const UPSERT_STEPS: &str = "INSERT INTO steps (run_id, idx, version, state, decision,
        call_tool, call_args, effect, verdict, obs_kind, obs_content, started_at, updated_at)
     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::text[],
         $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
         $12::int8[], $13::int8[])
     ON CONFLICT (run_id, idx) DO UPDATE SET version = excluded.version,
       state = excluded.state, decision = excluded.decision, call_tool = excluded.call_tool,
       call_args = excluded.call_args, effect = excluded.effect, verdict = excluded.verdict,
       obs_kind = excluded.obs_kind, obs_content = excluded.obs_content,
       updated_at = excluded.updated_at";

const UPSERT_APPROVALS: &str = "INSERT INTO approvals (id, run_id, step_idx, kind, status,
        tool, arguments, reason, presentation, hash, created_at, expires_at, decided_by,
        note, decided_at, chain_head, tool_pin)
     SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[],
         $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[],
         $12::int8[], $13::text[], $14::text[], $15::int8[], $16::text[], $17::text[])
     ON CONFLICT (id) DO UPDATE SET status = excluded.status,
       decided_by = excluded.decided_by, note = excluded.note, decided_at = excluded.decided_at";

const INSERT_MODEL_CALLS: &str = "INSERT INTO model_calls (run_id, step_idx, provider,
        prompt_tokens, completion_tokens, outcome, error, latency_ms, at)
     SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[],
         $6::text[], $7::text[], $8::int8[], $9::int8[])";

const INSERT_EVENTS: &str = "INSERT INTO events (seq, run_id, step_idx, kind, data, at,
        pos, seals, hash)
     SELECT * FROM unnest($1::int8[], $2::text[], $3::int8[], $4::text[], $5::text[],
         $6::int8[], $7::int8[], $8::text[], $9::text[])";

const NEXT_SEQS: &str = "SELECT nextval('events_seq') FROM generate_series(1, $1::int8)";

const PENDING: &str = "SELECT 1 FROM approvals WHERE id = $1 AND run_id = $2
     AND status = 'pending' FOR UPDATE";

const CURRENT: &str =
    "SELECT id, status, lease_owner, chain_len, chain_head FROM runs WHERE id = ANY($1::text[])";

/// Commits `ws` in one transaction; each gets its own result. A write that
/// fails its compare-and-set has written nothing and the others go on.
/// Should the transaction fail otherwise (a row the server refuses), it is
/// rolled back and every write committed again in a transaction of its
/// own, so that only the faulty one fails. A lost connection fails them
/// all with [`StoreError::Unavailable`]. The caller has begun the first
/// transaction (see [`begin`]).
pub(super) async fn write_group(
    c: &Conn,
    ws: &[&Prepared],
) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
    match finish(c, ws).await {
        Ok(out) => Ok(out),
        Err(e @ StoreError::Unavailable { .. }) => Err(e),
        Err(_) if ws.len() == 1 => in_transaction(c, ws).await,
        Err(_) => {
            let mut out = Vec::with_capacity(ws.len());
            for w in ws {
                out.push(match in_transaction(c, &[*w]).await {
                    Ok(mut one) => one.pop().unwrap_or_else(|| {
                        Err(StoreError::Refused("a write returned no result".into()))
                    }),
                    Err(e) => Err(e),
                });
            }
            Ok(out)
        }
    }
}

/// Begins a transaction. Should it fail, the server has received nothing
/// of the writes that were to follow: they may be sent on a new connection.
pub(super) async fn begin(c: &Conn) -> Result<(), StoreError> {
    c.batch("BEGIN").await
}

async fn in_transaction(
    c: &Conn,
    ws: &[&Prepared],
) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
    begin(c).await?;
    finish(c, ws).await
}

/// Applies `ws` in the begun transaction and commits it, or rolls it back.
async fn finish(
    c: &Conn,
    ws: &[&Prepared],
) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
    match apply(c, ws).await {
        Ok(out) => {
            c.batch("COMMIT").await.map_err(|e| match e {
                StoreError::Unavailable { detail } => StoreError::Unavailable {
                    detail: format!(
                        "{detail} while committing (whether the last write was made is known \
                         only once the run is read again)"
                    ),
                },
                e => e,
            })?;
            Ok(out)
        }
        Err(e) => {
            let _ = c.batch("ROLLBACK").await;
            Err(e)
        }
    }
}

/// Runs the statements of `ws` inside the caller's transaction (a group
/// commit, or a claim). A run written twice in `ws` is written in order:
/// the group is cut into rounds in which each run appears once.
pub(super) async fn apply(
    c: &Conn,
    ws: &[&Prepared],
) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
    let mut failed: Vec<Option<StoreError>> = (0..ws.len()).map(|_| None).collect();
    let mut relinked: Vec<Option<Relinked>> = (0..ws.len()).map(|_| None).collect();
    for round in rounds(ws) {
        // An operator's decision expects its approval still pending: it is
        // checked with the approval's row locked, after the run's, under
        // a savepoint that undoes the run's update if it no longer is.
        let (decisions, batch): (Vec<usize>, Vec<usize>) = round
            .into_iter()
            .partition(|&i| matches!(&ws[i].write, Write::Transition(t) if t.expect.pending_approval.is_some()));
        let creates: Vec<usize> = batch
            .iter()
            .copied()
            .filter(|&i| matches!(ws[i].write, Write::Create { .. }))
            .collect();
        let moves: Vec<usize> = batch
            .iter()
            .copied()
            .filter(|&i| matches!(ws[i].write, Write::Transition(_)))
            .collect();
        insert_runs(c, ws, &creates, &mut failed).await?;
        update_runs(c, ws, &moves, &mut failed, &mut relinked).await?;
        for &i in &decisions {
            decide(c, ws, i, &mut failed, &mut relinked).await?;
        }
        let applied: Vec<usize> = batch
            .into_iter()
            .chain(decisions)
            .filter(|&i| failed[i].is_none())
            .collect();
        write_rows(c, ws, &applied).await?;
    }
    let seqs = insert_events(c, ws, &failed, &relinked).await?;
    Ok(failed
        .into_iter()
        .zip(seqs)
        .zip(relinked)
        .map(|((f, seqs), r)| match f {
            Some(e) => Err(e),
            None => Ok(Written {
                seqs,
                chain: r.map(|r| (r.len as u64, r.head)),
            }),
        })
        .collect())
}

/// A write's events linked again after the chain the store holds
/// ([`Prepared::relinked`]): another writer's transition of its run came
/// in between, with the status and owner this one expects.
struct Relinked {
    events: Vec<crate::store::encode::EncodedEvent>,
    /// The stored chain length they follow.
    expect: i64,
    len: i64,
    head: String,
}

fn run_id(w: &Prepared) -> &str {
    match &w.write {
        Write::Create { run, .. } => &run.id,
        Write::Transition(t) => &t.run.id,
    }
}

/// `ws`'s indices cut into rounds, in order, each naming a run at most once.
fn rounds(ws: &[&Prepared]) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, w) in ws.iter().enumerate() {
        let n = seen.entry(run_id(w)).or_insert(0);
        if rounds.len() <= *n {
            rounds.push(Vec::new());
        }
        rounds[*n].push(i);
        *n += 1;
    }
    rounds
}

async fn insert_runs(
    c: &Conn,
    ws: &[&Prepared],
    idx: &[usize],
    failed: &mut [Option<StoreError>],
) -> Result<(), StoreError> {
    if idx.is_empty() {
        return Ok(());
    }
    let mut cols = RunColumns::default();
    for &i in idx {
        if let Write::Create { run, .. } = &ws[i].write {
            cols.push(run, &ws[i].limits);
        }
    }
    let rows = c
        .query(
            INSERT_RUNS.as_str(),
            &[
                &cols.id,
                &cols.goal,
                &cols.status,
                &cols.reason,
                &cols.result,
                &cols.limits,
                &cols.meta,
                &cols.step_count,
                &cols.model_calls,
                &cols.tokens,
                &cols.consecutive_failures,
                &cols.lease_owner,
                &cols.lease_expires,
                &cols.created_at,
                &cols.updated_at,
                &cols.retry_at,
                &cols.chain_len,
                &cols.chain_head,
            ],
        )
        .await?;
    let made: HashSet<String> = rows.iter().filter_map(|r| r.try_get(0).ok()).collect();
    for &i in idx {
        let id = run_id(ws[i]);
        if !made.contains(id) {
            failed[i] = Some(StoreError::Refused(format!("run {id} already exists")));
        }
    }
    Ok(())
}

async fn update_runs(
    c: &Conn,
    ws: &[&Prepared],
    idx: &[usize],
    failed: &mut [Option<StoreError>],
    relinked: &mut [Option<Relinked>],
) -> Result<(), StoreError> {
    if idx.is_empty() {
        return Ok(());
    }
    let missed = update_batch(c, ws, idx, relinked).await?;
    if missed.is_empty() {
        return Ok(());
    }
    // Those whose chain alone moved on (status and owner as expected) are
    // linked after the stored head and updated again.
    let ids: Vec<&str> = missed.iter().map(|&i| run_id(ws[i])).collect();
    let rows = c.query(CURRENT, &[&ids]).await?;
    let mut again = Vec::new();
    for &i in &missed {
        let Write::Transition(t) = &ws[i].write else {
            continue;
        };
        for r in &rows {
            let (id, status, owner, len, head): (String, String, Option<String>, i64, String) = (
                r.try_get(0).map_err(bad)?,
                r.try_get(1).map_err(bad)?,
                r.try_get(2).map_err(bad)?,
                r.try_get(3).map_err(bad)?,
                r.try_get(4).map_err(bad)?,
            );
            if id == t.run.id && status == t.expect.status.as_str() && owner == t.expect.owner {
                let (events, head) = ws[i].relinked(len, &head);
                relinked[i] = Some(Relinked {
                    len: len + events.len() as i64,
                    events,
                    expect: len,
                    head,
                });
                again.push(i);
            }
        }
    }
    let still = update_batch(c, ws, &again, relinked).await?;
    let refused: Vec<usize> = missed
        .into_iter()
        .filter(|i| !again.contains(i) || still.contains(i))
        .collect();
    for &i in &refused {
        relinked[i] = None;
    }
    refuse(c, ws, &refused, failed).await
}

/// The run rows' compare-and-set for the writes `idx`, each at its chain
/// (relinked or as prepared); returns the writes whose row it missed.
async fn update_batch(
    c: &Conn,
    ws: &[&Prepared],
    idx: &[usize],
    relinked: &[Option<Relinked>],
) -> Result<Vec<usize>, StoreError> {
    if idx.is_empty() {
        return Ok(Vec::new());
    }
    let mut cols = RunColumns::default();
    let mut expect_status = Vec::with_capacity(idx.len());
    let mut expect_owner = Vec::with_capacity(idx.len());
    let mut chain_len = Vec::with_capacity(idx.len());
    let mut chain_head = Vec::with_capacity(idx.len());
    let mut expect_chain_len = Vec::with_capacity(idx.len());
    for &i in idx {
        if let Write::Transition(t) = &ws[i].write {
            cols.push(&t.run, &ws[i].limits);
            expect_status.push(t.expect.status.as_str());
            expect_owner.push(t.expect.owner.as_deref());
            match &relinked[i] {
                Some(r) => {
                    chain_len.push(r.len);
                    chain_head.push(r.head.as_str());
                    expect_chain_len.push(r.expect);
                }
                None => {
                    chain_len.push(i64::try_from(t.run.chain_len).unwrap_or(i64::MAX));
                    chain_head.push(t.run.chain_head.as_str());
                    expect_chain_len.push(ws[i].expect_chain_len);
                }
            }
        }
    }
    let rows = c
        .query(
            UPDATE_RUNS,
            &[
                &cols.id,
                &cols.status,
                &cols.reason,
                &cols.result,
                &cols.limits,
                &cols.step_count,
                &cols.model_calls,
                &cols.tokens,
                &cols.consecutive_failures,
                &cols.lease_owner,
                &cols.lease_expires,
                &cols.updated_at,
                &cols.retry_at,
                &expect_status,
                &expect_owner,
                &chain_len,
                &chain_head,
                &expect_chain_len,
            ],
        )
        .await?;
    let matched: HashSet<String> = rows.iter().filter_map(|r| r.try_get(0).ok()).collect();
    Ok(idx
        .iter()
        .copied()
        .filter(|&i| !matched.contains(run_id(ws[i])))
        .collect())
}

/// Says why each of `idx`'s compare-and-sets matched no row: its run is
/// gone, or its status or owner moved on.
async fn refuse(
    c: &Conn,
    ws: &[&Prepared],
    idx: &[usize],
    failed: &mut [Option<StoreError>],
) -> Result<(), StoreError> {
    if idx.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = idx.iter().map(|&i| run_id(ws[i])).collect();
    let rows = c.query(CURRENT, &[&ids]).await?;
    let mut now: HashMap<String, (String, Option<String>)> = HashMap::new();
    for r in rows {
        let id: String = r.try_get(0).map_err(bad)?;
        now.insert(id, (r.try_get(1).map_err(bad)?, r.try_get(2).map_err(bad)?));
    }
    for &i in idx {
        let id = run_id(ws[i]);
        failed[i] = Some(match now.remove(id) {
            None => StoreError::RunNotFound(id.to_string()),
            Some((status, owner)) => match status.parse() {
                Ok(status) => StoreError::Conflict {
                    run_id: id.to_string(),
                    status,
                    owner,
                },
                Err(e) => StoreError::BadRow(e),
            },
        });
    }
    Ok(())
}

async fn decide(
    c: &Conn,
    ws: &[&Prepared],
    i: usize,
    failed: &mut [Option<StoreError>],
    relinked: &mut [Option<Relinked>],
) -> Result<(), StoreError> {
    let Write::Transition(t) = &ws[i].write else {
        return Ok(());
    };
    let Some(approval) = &t.expect.pending_approval else {
        return Ok(());
    };
    c.batch("SAVEPOINT decision").await?;
    update_runs(c, ws, &[i], failed, relinked).await?;
    if failed[i].is_none() {
        let pending = c.query(PENDING, &[approval, &t.run.id]).await?;
        if pending.is_empty() {
            c.batch("ROLLBACK TO SAVEPOINT decision").await?;
            relinked[i] = None;
            let mut why = [None];
            refuse(c, ws, &[i], &mut why).await?;
            failed[i] = why[0].take().or_else(|| {
                Some(StoreError::Refused(format!(
                    "approval {approval} is no longer pending"
                )))
            });
            return Ok(());
        }
    }
    c.batch("RELEASE SAVEPOINT decision").await
}

/// The step, approval and model-call rows of the writes `idx` (whose
/// compare-and-sets held).
async fn write_rows(c: &Conn, ws: &[&Prepared], idx: &[usize]) -> Result<(), StoreError> {
    let mut steps = StepColumns::default();
    let mut approvals = ApprovalColumns::default();
    let mut calls = CallColumns::default();
    for &i in idx {
        let w = ws[i];
        // A write naming one step twice keeps its last version.
        let mut last: HashMap<i64, usize> = HashMap::new();
        for (k, row) in w.step_rows.iter().enumerate() {
            last.insert(row.idx, k);
        }
        for (k, row) in w.step_rows.iter().enumerate() {
            if last.get(&row.idx) == Some(&k) {
                steps.push(row);
            }
        }
        for row in &w.approval_rows {
            approvals.push(row);
        }
        if let Write::Transition(t) = &w.write {
            for m in &t.model_calls {
                calls.push(&t.run.id, t.run.updated_at, m);
            }
        }
    }
    if !steps.run_id.is_empty() {
        c.execute(
            UPSERT_STEPS,
            &[
                &steps.run_id,
                &steps.idx,
                &steps.version,
                &steps.state,
                &steps.decision,
                &steps.call_tool,
                &steps.call_args,
                &steps.effect,
                &steps.verdict,
                &steps.obs_kind,
                &steps.obs_content,
                &steps.started_at,
                &steps.updated_at,
            ],
        )
        .await?;
    }
    if !approvals.id.is_empty() {
        c.execute(
            UPSERT_APPROVALS,
            &[
                &approvals.id,
                &approvals.run_id,
                &approvals.step_idx,
                &approvals.kind,
                &approvals.status,
                &approvals.tool,
                &approvals.arguments,
                &approvals.reason,
                &approvals.presentation,
                &approvals.hash,
                &approvals.created_at,
                &approvals.expires_at,
                &approvals.decided_by,
                &approvals.note,
                &approvals.decided_at,
                &approvals.chain_head,
                &approvals.tool_pin,
            ],
        )
        .await?;
    }
    if !calls.run_id.is_empty() {
        c.execute(
            INSERT_MODEL_CALLS,
            &[
                &calls.run_id,
                &calls.step_idx,
                &calls.provider,
                &calls.prompt_tokens,
                &calls.completion_tokens,
                &calls.outcome,
                &calls.error,
                &calls.latency_ms,
                &calls.at,
            ],
        )
        .await?;
    }
    Ok(())
}

/// Numbers and inserts the events of every write that held, in the
/// order of `ws`; returns each write's numbers.
async fn insert_events(
    c: &Conn,
    ws: &[&Prepared],
    failed: &[Option<StoreError>],
    relinked: &[Option<Relinked>],
) -> Result<Vec<Vec<i64>>, StoreError> {
    let events = |i: usize| match &relinked[i] {
        Some(r) => &r.events[..],
        None => &ws[i].events[..],
    };
    let total: usize = (0..ws.len())
        .filter(|&i| failed[i].is_none())
        .map(|i| events(i).len())
        .sum();
    let mut out: Vec<Vec<i64>> = vec![Vec::new(); ws.len()];
    if total == 0 {
        return Ok(out);
    }
    c.execute("SELECT pg_advisory_xact_lock($1)", &[&EVENTS_LOCK])
        .await?;
    let rows = c.query(NEXT_SEQS, &[&(total as i64)]).await?;
    let mut seqs: Vec<i64> = rows
        .iter()
        .map(|r| r.try_get(0).map_err(bad))
        .collect::<Result<_, _>>()?;
    seqs.sort_unstable();
    if seqs.len() != total {
        return Err(StoreError::Refused(format!(
            "the events sequence gave {} numbers for {total} events",
            seqs.len()
        )));
    }
    let mut next = seqs.into_iter();
    let mut pos = Vec::with_capacity(total);
    let mut seals: Vec<Option<&str>> = Vec::with_capacity(total);
    let mut hash = Vec::with_capacity(total);
    let (mut seq, mut run, mut step, mut kind, mut data, mut at) = (
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
        Vec::with_capacity(total),
    );
    for (i, w) in ws.iter().enumerate() {
        if failed[i].is_some() {
            continue;
        }
        let (id, when) = match &w.write {
            Write::Create { run, .. } => (&run.id, run.updated_at),
            Write::Transition(t) => (&t.run.id, t.run.updated_at),
        };
        for e in events(i) {
            let n = next.next().unwrap_or_default();
            out[i].push(n);
            seq.push(n);
            run.push(id.as_str());
            step.push(e.step_index.map(i64::from));
            kind.push(e.kind);
            data.push(e.data.as_str());
            at.push(when);
            pos.push(e.pos);
            seals.push(e.seals.as_deref());
            hash.push(e.hash.as_str());
        }
    }
    c.execute(
        INSERT_EVENTS,
        &[&seq, &run, &step, &kind, &data, &at, &pos, &seals, &hash],
    )
    .await?;
    Ok(out)
}

fn bad(e: tokio_postgres::Error) -> StoreError {
    StoreError::BadRow(e.to_string())
}

/// A run row per write, column by column.
#[derive(Default)]
struct RunColumns<'a> {
    id: Vec<&'a str>,
    goal: Vec<&'a str>,
    status: Vec<&'a str>,
    reason: Vec<Option<&'a str>>,
    result: Vec<Option<&'a str>>,
    limits: Vec<&'a str>,
    meta: Vec<&'a str>,
    step_count: Vec<i64>,
    model_calls: Vec<i64>,
    tokens: Vec<i64>,
    consecutive_failures: Vec<i64>,
    lease_owner: Vec<Option<&'a str>>,
    lease_expires: Vec<Option<i64>>,
    created_at: Vec<i64>,
    updated_at: Vec<i64>,
    retry_at: Vec<Option<i64>>,
    chain_len: Vec<i64>,
    chain_head: Vec<&'a str>,
}

impl<'a> RunColumns<'a> {
    fn push(&mut self, run: &'a crate::types::Run, limits: &'a str) {
        self.id.push(&run.id);
        self.goal.push(&run.goal);
        self.status.push(run.status.as_str());
        self.reason.push(run.reason.map(|r| r.as_str()));
        self.result.push(run.result.as_deref());
        self.limits.push(limits);
        self.meta.push(&run.meta);
        self.step_count.push(run.step_count.into());
        self.model_calls.push(run.model_calls.into());
        self.tokens
            .push(i64::try_from(run.tokens).unwrap_or(i64::MAX));
        self.consecutive_failures
            .push(run.consecutive_failures.into());
        self.lease_owner.push(run.lease_owner.as_deref());
        self.lease_expires.push(run.lease_expires);
        self.created_at.push(run.created_at);
        self.updated_at.push(run.updated_at);
        self.retry_at.push(run.retry_at);
        self.chain_len
            .push(i64::try_from(run.chain_len).unwrap_or(i64::MAX));
        self.chain_head.push(&run.chain_head);
    }
}

#[derive(Default)]
struct StepColumns<'a> {
    run_id: Vec<&'a str>,
    idx: Vec<i64>,
    version: Vec<i64>,
    state: Vec<&'a str>,
    decision: Vec<Option<&'a str>>,
    call_tool: Vec<Option<&'a str>>,
    call_args: Vec<Option<&'a str>>,
    effect: Vec<Option<&'a str>>,
    verdict: Vec<Option<&'a str>>,
    obs_kind: Vec<Option<&'a str>>,
    obs_content: Vec<Option<&'a str>>,
    started_at: Vec<i64>,
    updated_at: Vec<i64>,
}

impl<'a> StepColumns<'a> {
    fn push(&mut self, r: &'a crate::store::encode::StepRow) {
        self.run_id.push(&r.run_id);
        self.idx.push(r.idx);
        self.version.push(r.version);
        self.state.push(&r.state);
        self.decision.push(r.decision.as_deref());
        self.call_tool.push(r.call_tool.as_deref());
        self.call_args.push(r.call_args.as_deref());
        self.effect.push(r.effect.as_deref());
        self.verdict.push(r.verdict.as_deref());
        self.obs_kind.push(r.obs_kind.as_deref());
        self.obs_content.push(r.obs_content.as_deref());
        self.started_at.push(r.started_at);
        self.updated_at.push(r.updated_at);
    }
}

#[derive(Default)]
struct ApprovalColumns<'a> {
    id: Vec<&'a str>,
    run_id: Vec<&'a str>,
    step_idx: Vec<i64>,
    kind: Vec<&'a str>,
    status: Vec<&'a str>,
    tool: Vec<&'a str>,
    arguments: Vec<&'a str>,
    reason: Vec<&'a str>,
    presentation: Vec<&'a str>,
    hash: Vec<&'a str>,
    created_at: Vec<i64>,
    expires_at: Vec<Option<i64>>,
    decided_by: Vec<Option<&'a str>>,
    note: Vec<Option<&'a str>>,
    decided_at: Vec<Option<i64>>,
    chain_head: Vec<Option<&'a str>>,
    tool_pin: Vec<Option<&'a str>>,
}

impl<'a> ApprovalColumns<'a> {
    fn push(&mut self, r: &'a crate::store::encode::ApprovalRow) {
        self.id.push(&r.id);
        self.run_id.push(&r.run_id);
        self.step_idx.push(r.step_idx);
        self.kind.push(&r.kind);
        self.status.push(&r.status);
        self.tool.push(&r.tool);
        self.arguments.push(&r.arguments);
        self.reason.push(&r.reason);
        self.presentation.push(&r.presentation);
        self.hash.push(&r.hash);
        self.created_at.push(r.created_at);
        self.expires_at.push(r.expires_at);
        self.decided_by.push(r.decided_by.as_deref());
        self.note.push(r.note.as_deref());
        self.decided_at.push(r.decided_at);
        self.chain_head.push(r.chain_head.as_deref());
        self.tool_pin.push(r.tool_pin.as_deref());
    }
}

#[derive(Default)]
struct CallColumns<'a> {
    run_id: Vec<&'a str>,
    step_idx: Vec<i64>,
    provider: Vec<&'a str>,
    prompt_tokens: Vec<i64>,
    completion_tokens: Vec<i64>,
    outcome: Vec<&'a str>,
    error: Vec<Option<&'a str>>,
    latency_ms: Vec<i64>,
    at: Vec<i64>,
}

impl<'a> CallColumns<'a> {
    fn push(&mut self, run_id: &'a str, at: i64, m: &'a crate::store::ModelCallRecord) {
        self.run_id.push(run_id);
        self.step_idx.push(m.step_index.into());
        self.provider.push(&m.provider);
        self.prompt_tokens.push(m.prompt_tokens.into());
        self.completion_tokens.push(m.completion_tokens.into());
        self.outcome.push(m.outcome);
        self.error.push(m.error.as_deref());
        self.latency_ms
            .push(i64::try_from(m.latency_ms).unwrap_or(i64::MAX));
        self.at.push(at);
    }
}
