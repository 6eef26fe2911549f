// The operators' page: plain DOM, no framework. Every value from the
// server is written as text (never as HTML). The token lives in
// sessionStorage: it is kept for this tab and gone when the tab closes.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { me: null, view: "", runId: null, stream: null, inboxTimer: null, page: { before: null, history: [] } };

function token() { return sessionStorage.getItem("keel-token") || ""; }

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c == null) continue;
    e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
  return e;
}

function showError(msg) {
  const p = $("error");
  p.textContent = msg || "";
  p.hidden = !msg;
}

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!r.ok) {
    const err = new Error((data && data.error && data.error.message) || ("HTTP " + r.status));
    err.status = r.status;
    err.code = data && data.error && data.error.code;
    throw err;
  }
  return data;
}

function pretty(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return String(text); }
}

function when(ms) { return ms ? new Date(ms).toLocaleString() : ""; }

function left(ms) {
  if (ms <= 0) return "expired";
  const s = Math.round(ms / 1000);
  if (s < 120) return s + " s left";
  const m = Math.round(s / 60);
  return m < 120 ? m + " min left" : Math.round(m / 60) + " h left";
}

function canAct() { return state.me && state.me.role === "operator"; }

async function whoami() {
  try {
    state.me = await api("GET", "/api/me");
    $("whoami").textContent = state.me.name + " (" + state.me.role + ")";
    showError("");
  } catch (e) {
    state.me = null;
    $("whoami").textContent = "";
    showError(e.status === 401 ? "Enter a token to see runs and approvals." : e.message);
  }
}

// ---- the approvals inbox -------------------------------------------------

async function loadInbox() {
  let data;
  try { data = await api("GET", "/api/approvals?status=pending&limit=100"); }
  catch (e) { if (e.status !== 401) showError(e.message); return; }
  const got = performance.now();
  const list = $("inbox");
  $("inbox-count").textContent = data.approvals.length ? String(data.approvals.length) : "";
  $("inbox-empty").hidden = data.approvals.length > 0;
  // Keep cards whose approval is still pending (and any note being typed).
  const keep = new Set(data.approvals.map((a) => a.id));
  for (const li of [...list.children]) if (!keep.has(li.dataset.id)) li.remove();
  for (const a of data.approvals) {
    let li = list.querySelector('li[data-id="' + CSS.escape(a.id) + '"]');
    if (!li) { li = approvalCard(a); list.append(li); }
    const t = li.querySelector(".expires");
    t.textContent = a.expires_at ? left(a.expires_at - data.now - (performance.now() - got)) : "no expiry";
  }
}

function approvalCard(a) {
  const note = el("input", { type: "text", class: "note", placeholder: "note (optional)", "aria-label": "Note" });
  const act = async (verb) => {
    try {
      await api("POST", "/api/approvals/" + encodeURIComponent(a.id) + "/" + verb, { note: note.value || null, hash: a.hash });
      li.remove();
      loadInbox();
    } catch (e) { showError(e.message); }
  };
  const buttons = canAct()
    ? el("div", { class: "row" }, note,
        el("button", { type: "button", class: "approve", onclick: () => act("approve") }, "Approve"),
        el("button", { type: "button", class: "deny", onclick: () => act("deny") }, "Deny"))
    : el("p", { class: "hint" }, "Viewers cannot answer approvals.");
  const li = el("li", { "data-id": a.id },
    el("div", { class: "row" },
      el("strong", {}, a.call.tool),
      el("span", { class: "label" }, "run "),
      el("a", { href: "#/runs/" + encodeURIComponent(a.run_id) }, a.run_id),
      el("span", { class: "label" }, "step " + a.step_index),
      el("span", { class: "expires label" })),
    el("div", { class: "label" }, "Reason"),
    el("p", { class: "reason" }, a.reason),
    el("div", { class: "label" }, "Arguments"),
    el("pre", { class: "arguments" }, pretty(a.call.arguments)),
    a.presentation && a.presentation !== "{}" && a.presentation !== "null"
      ? el("details", {}, el("summary", {}, "Shown with it"), el("pre", {}, pretty(a.presentation))) : null,
    buttons);
  return li;
}

// ---- the run list ----------------------------------------------------------

async function loadRuns() {
  const q = new URLSearchParams({ limit: "25" });
  if ($("filter-status").value) q.set("status", $("filter-status").value);
  if ($("filter-q").value) q.set("q", $("filter-q").value);
  if (state.page.before) q.set("before", state.page.before);
  let data;
  try { data = await api("GET", "/api/runs?" + q); } catch (e) { showError(e.message); return; }
  const body = $("runs").querySelector("tbody");
  body.replaceChildren(...data.runs.map((r) => el("tr", {},
    el("td", {}, el("a", { href: "#/runs/" + encodeURIComponent(r.id) }, r.id)),
    el("td", { class: "status " + r.status }, r.status),
    el("td", { class: "goal" }, r.goal.length > 160 ? r.goal.slice(0, 160) + "…" : r.goal),
    el("td", {}, r.step_count),
    el("td", {}, when(r.updated_at)))));
  state.page.next = data.next_before;
  $("page-next").disabled = !data.next_before;
  $("page-first").disabled = !state.page.before;
}

// ---- one run's timeline ----------------------------------------------------

function stepCard(s, calls, approvals) {
  const li = el("li", { "data-step": s.index, class: "step " + s.state },
    el("div", { class: "row" }, el("strong", {}, "Step " + s.index), el("span", { class: "label" }, s.state)));
  if (s.decision) {
    if (s.decision.call) {
      li.append(el("div", { class: "label" }, "Decided: call " + s.decision.call.tool),
        el("pre", {}, pretty(s.decision.call.arguments)));
    } else if (s.decision.complete !== undefined) {
      li.append(el("div", { class: "label" }, "Decided: complete"), el("pre", {}, pretty(s.decision.complete)));
    } else {
      li.append(el("pre", {}, JSON.stringify(s.decision, null, 2)));
    }
  }
  if (s.verdict) {
    const v = typeof s.verdict === "string" ? s.verdict : Object.keys(s.verdict)[0];
    const why = typeof s.verdict === "object" ? s.verdict[v] : null;
    li.append(el("div", { class: "verdict" }, el("span", { class: "label" }, "Verdict: "), v,
      why ? " — " + (typeof why === "string" ? why : why.reason || JSON.stringify(why)) : ""));
  }
  for (const a of approvals) {
    li.append(el("div", { class: "approval" }, el("span", { class: "label" }, "Approval: "),
      a.status + (a.decided_by ? " by " + a.decided_by : "") + (a.note ? ": " + a.note : "")));
  }
  if (s.observation) {
    li.append(el("div", { class: "label" }, "Observation (" + s.observation.kind + ")"),
      el("pre", {}, pretty(s.observation.content)));
  }
  for (const c of calls) {
    li.append(el("div", { class: "model label" }, "Model call " + c.provider + ": " + c.outcome + ", " +
      c.prompt_tokens + " + " + c.completion_tokens + " tokens, " + c.latency_ms + " ms"));
  }
  return li;
}

async function renderRun(id) {
  let d;
  try { d = await api("GET", "/api/runs/" + encodeURIComponent(id)); } catch (e) { showError(e.message); return; }
  if (state.runId !== id) return;
  const r = d.run;
  $("run-id").textContent = r.id;
  const st = $("run-status");
  st.textContent = r.status + (r.reason && r.reason !== r.status ? " (" + r.reason + ")" : "");
  st.className = "status " + r.status;
  $("run-goal").textContent = r.goal;
  $("run-usage").textContent = r.model_calls + " calls, " + r.tokens + " tokens";
  $("run-outcome").textContent = r.result ? pretty(r.result) : "";
  $("run-cancel").hidden = !canAct() || ["completed", "failed", "cancelled"].includes(r.status);
  $("timeline").replaceChildren(...d.steps.map((s) => stepCard(s,
    d.model_calls.filter((c) => c.step_index === s.index),
    d.approvals.filter((a) => a.step_index === s.index))));
}

// Follows the run's events with fetch (an EventSource cannot send the
// token); reconnects from the last event seen until the run ends.
async function follow(id) {
  const ctl = new AbortController();
  state.stream = ctl;
  let last = 0;
  let ended = false;
  while (!ended && !ctl.signal.aborted) {
    try {
      const headers = { "Accept": "text/event-stream" };
      if (token()) headers["Authorization"] = "Bearer " + token();
      if (last) headers["Last-Event-ID"] = String(last);
      const r = await fetch("/api/runs/" + encodeURIComponent(id) + "/events", { headers, signal: ctl.signal });
      if (!r.ok) { showError("event stream: HTTP " + r.status); return; }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
          if (!data) continue;
          const e = JSON.parse(data);
          last = e.seq;
          onEvent(id, e);
          if (["run.completed", "run.failed", "run.cancelled"].includes(e.kind)) ended = true;
        }
      }
      if (!ended) {
        // The server closed the stream early (it restarted, say): pick up after the last event.
        await new Promise((res) => setTimeout(res, 1000));
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
      await new Promise((res) => setTimeout(res, 1000));
    }
  }
  if (state.runId === id) renderRun(id);
}

let renderQueued = false;
function onEvent(id, e) {
  if (state.runId !== id) return;
  const list = $("events");
  list.append(el("li", {}, el("code", {}, "#" + e.seq + " " + e.kind), " ",
    el("span", { class: "label" }, e.step_index == null ? "" : "step " + e.step_index)));
  $("event-count").textContent = String(list.children.length);
  if (!renderQueued) {
    renderQueued = true;
    setTimeout(() => { renderQueued = false; renderRun(id); }, 50);
  }
}

// ---- navigation ------------------------------------------------------------

function show(view) {
  for (const v of ["inbox", "runs", "run", "start"]) $("view-" + v).hidden = v !== view;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.id === "nav-" + (view === "run" ? "runs" : view));
  state.view = view;
}

function route() {
  if (state.stream) { state.stream.abort(); state.stream = null; }
  state.runId = null;
  const h = location.hash || "#/inbox";
  const m = h.match(/^#\/runs\/(.+)$/);
  if (m) {
    const id = decodeURIComponent(m[1]);
    state.runId = id;
    show("run");
    $("timeline").replaceChildren();
    $("events").replaceChildren();
    $("event-count").textContent = "0";
    renderRun(id);
    follow(id);
  } else if (h === "#/runs") {
    show("runs");
    loadRuns();
  } else if (h === "#/start") {
    show("start");
  } else {
    show("inbox");
    $("inbox").replaceChildren();
    loadInbox();
  }
}

function init() {
  $("token").value = token();
  $("token-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("keel-token", $("token").value.trim());
    await whoami();
    route();
  });
  $("run-filter").addEventListener("submit", (ev) => { ev.preventDefault(); state.page = { before: null, history: [] }; loadRuns(); });
  $("page-next").addEventListener("click", () => { state.page.history.push(state.page.before); state.page.before = state.page.next; loadRuns(); });
  $("page-first").addEventListener("click", () => { state.page = { before: null, history: [] }; loadRuns(); });
  $("run-cancel").addEventListener("click", async () => {
    if (!state.runId || !confirm("Cancel run " + state.runId + "?")) return;
    try { await api("POST", "/api/runs/" + encodeURIComponent(state.runId) + "/cancel", {}); renderRun(state.runId); }
    catch (e) { showError(e.message); }
  });
  $("start-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { goal: $("start-goal").value };
    if ($("start-config").value.trim()) body.config = $("start-config").value.trim();
    try {
      const run = await api("POST", "/api/runs", body);
      showError("");
      location.hash = "#/runs/" + encodeURIComponent(run.id);
    } catch (e) { showError(e.message); }
  });
  window.addEventListener("hashchange", route);
  state.inboxTimer = setInterval(() => { if (state.me) loadInbox(); }, 1000);
  whoami().then(route);
}

document.addEventListener("DOMContentLoaded", init);
