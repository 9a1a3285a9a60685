// The runs views: the list and one run's page.

function runLink(runId, text) {
  return el("a", { "href": "#/runs/" + enc(runId), "class": "mono" }, text || runId);
}

function facts(dl, pairs) {
  clear(dl);
  for (const [name, value] of pairs) {
    if (value === null || value === undefined || value === "") continue;
    dl.appendChild(el("dt", {}, name));
    const dd = el("dd");
    if (value instanceof Node) dd.appendChild(value); else setText(dd, String(value));
    dl.appendChild(dd);
  }
}

// ---- the runs list ----------------------------------------------------------------

function listQuery() {
  const query = new URLSearchParams({ limit: "100" });
  const status = $("f-status").value;
  const agent = $("f-agent").value.trim();
  const parent = $("f-parent").value.trim();
  if (status) query.set("status", status);
  if (agent) query.set("agent", agent);
  if (parent) query.set("parent_id", parent);
  for (const [input, key] of [["f-since", "since"], ["f-until", "before"]]) {
    const value = $(input).value;
    if (value) query.set(key, new Date(value).toISOString());
  }
  return query;
}

function runRow(run) {
  const row = el("tr", { "data-run-id": run.run_id });
  const cells = {};
  for (const name of ["id", "status", "agent", "prompt", "model", "step", "owner", "created", "updated"]) {
    cells[name] = row.appendChild(el("td", { "class": name }));
  }
  cells.id.appendChild(runLink(run.run_id, run.run_id.slice(0, 16)));
  cells.status.appendChild(el("span", { "class": "badge" }));
  row.cells_ = cells;
  return row;
}

function fillRow(row, run) {
  const c = row.cells_;
  row.setAttribute("data-status", run.status);
  const badge = c.status.firstChild;
  badge.setAttribute("data-status", run.status);
  setText(badge, run.status + (run.stop_reason ? " · " + run.stop_reason : ""));
  setText(c.agent, run.agent || "");
  setText(c.prompt, run.prompt);
  c.prompt.title = shown(run.prompt);
  setText(c.model, run.provider + (run.model ? "/" + run.model : ""));
  setText(c.step, run.step);
  setText(c.owner, run.owner || "");
  setText(c.created, when(run.created_at));
  setText(c.updated, when(run.updated_at));
}

function listPage() {
  $("list-view").hidden = false;
  const rows = new Map();
  let timer = null;
  let stopped = false;
  let generation = 0;

  async function refresh() {
    const mine = ++generation;
    try {
      const list = await api("/v1/runs?" + listQuery().toString());
      if (stopped || mine !== generation) return;
      const body = $("run-rows");
      const seen = new Set();
      for (const run of list.runs) {
        seen.add(run.run_id);
        let row = rows.get(run.run_id);
        if (!row) rows.set(run.run_id, (row = runRow(run)));
        fillRow(row, run);
        body.appendChild(row); // in the listing's order (newest first)
      }
      for (const [runId, row] of rows) {
        if (!seen.has(runId)) { row.remove(); rows.delete(runId); }
      }
      $("runs-empty").hidden = list.runs.length > 0;
      setText($("list-error"), "");
      setStatus("live");
    } catch (err) {
      if (!stopped) setText($("list-error"), err.code + ": " + err.message);
    }
  }

  async function loop() {
    await refresh();
    if (!stopped) timer = setTimeout(loop, POLL_MS);
  }

  // Typing in a filter asks again once the typing pauses.
  let typing = null;
  const onChange = () => { clearTimeout(typing); typing = setTimeout(refresh, 300); };
  const onClear = () => {
    for (const id of ["f-status", "f-agent", "f-parent", "f-since", "f-until"]) $(id).value = "";
    refresh();
  };
  $("filters").addEventListener("input", onChange);
  $("filters").addEventListener("change", onChange);
  $("f-clear").addEventListener("click", onClear);
  loop();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      clearTimeout(typing);
      $("filters").removeEventListener("input", onChange);
      $("filters").removeEventListener("change", onChange);
      $("f-clear").removeEventListener("click", onClear);
      $("list-view").hidden = true;
    },
  };
}

// ---- one run ----------------------------------------------------------------------

class Timeline {
  constructor(runId, root) {
    this.runId = runId;
    this.root = root;
    this.calls = new Map(); // step:call_id -> card parts
    this.traceId = null;
  }

  item(event, title, extra) {
    const li = el("li", { "data-kind": event.kind, "data-seq": String(event.seq) });
    const head = el("div", { "class": "item-head" });
    head.appendChild(el("b", {}, title));
    if (event.data.step !== undefined) head.appendChild(el("span", {}, "step " + event.data.step));
    if (extra) head.appendChild(el("span", {}, extra));
    head.appendChild(el("span", { "class": "muted" }, when(event.ts)));
    li.appendChild(head);
    this.root.appendChild(li);
    return li;
  }

  call(data) {
    return this.calls.get(data.step + ":" + data.call_id);
  }

  add(event) {
    const d = event.data;
    switch (event.kind) {
      case "run.start":
        if (typeof d.trace_id === "string" && /^[0-9a-f]{32}$/.test(d.trace_id)) this.traceId = d.trace_id;
        this.item(event, "Run started", d.provider + (d.model ? "/" + d.model : ""));
        return;
      case "step": {
        if (d.thinking) {
          const li = this.item(event, "Thinking");
          li.appendChild(el("div", { "class": "text muted model-thinking" }, d.thinking));
        }
        if (d.text) {
          const li = this.item(event, "Model");
          li.appendChild(el("div", { "class": "text model-text" }, d.text));
        }
        return;
      }
      case "tool.call": return this.toolCall(event);
      case "tool.approval_needed": return this.gate(d, "ask", "asks an operator: " + d.code + " — " + d.reason + " (reach " + d.reach + ", danger " + d.danger + ")");
      case "tool.approved": return this.gate(d, "approved", "approved (" + d.decision + ") by " + (d.by || "?"));
      case "tool.denied": return this.gate(d, "denied", "denied: " + (d.code || d.decision) + (d.by ? " by " + d.by : ""));
      case "tool.result": return this.result(event);
      case "agent.start": {
        const li = this.item(event, "Sub-agent started");
        if (d.child_run_id && ID.test(d.child_run_id)) li.appendChild(runLink(d.child_run_id));
        if (d.task) li.appendChild(el("div", { "class": "text" }, d.task));
        return;
      }
      case "agent.end": {
        const li = this.item(event, "Sub-agent ended", d.ok ? "ok" : "failed");
        if (d.child_run_id && ID.test(d.child_run_id)) li.appendChild(runLink(d.child_run_id));
        return;
      }
      case "usage": return;
      case "run.end": {
        const li = this.item(event, "Run ended", d.status + (d.stop_reason ? " · " + d.stop_reason : ""));
        if (d.answer) li.appendChild(el("div", { "class": "text" }, d.answer));
        return;
      }
      default: {
        // guard, compaction, skill.used: what happened, as the event says it.
        const li = this.item(event, event.kind, d.kind || d.name || "");
        const rest = Object.assign({}, d);
        delete rest.step;
        li.appendChild(el("pre", { "class": "event-data" }, pretty(rest)));
      }
    }
  }

  toolCall(event) {
    const d = event.data;
    const li = this.item(event, "Tool call", d.name);
    li.setAttribute("data-call-id", d.call_id);
    li.appendChild(el("pre", { "class": "args" }, pretty(d.arguments)));
    const gate = li.appendChild(el("div", { "class": "gate", "data-gate": "" }, "gates: …"));
    const outcome = li.appendChild(el("div", { "class": "outcome" }));
    this.calls.set(d.step + ":" + d.call_id, { li, gate, outcome });
  }

  gate(d, kind, text) {
    const card = this.call(d);
    if (!card) return;
    card.gate.setAttribute("data-gate", kind);
    setText(card.gate, "gate: " + text);
  }

  result(event) {
    const d = event.data;
    const card = this.call(d) || { li: this.item(event, "Tool result", d.name) };
    if (card.gate && card.gate.getAttribute("data-gate") === "") {
      card.gate.setAttribute("data-gate", "allowed");
      setText(card.gate, "gate: allowed" + (d.cached ? " (answered from the run's cache)" : ""));
    }
    const box = card.outcome || card.li;
    clear(box);
    box.setAttribute("data-ok", String(Boolean(d.ok)));
    const head = d.ok ? "ok" : "failed: " + (d.error_code || "error");
    box.appendChild(el("div", { "class": "outcome-head" }, head + " · " + (d.duration_ms || 0) + " ms"));
    if (d.output_ref && ID.test(d.output_ref)) box.appendChild(this.offloaded(d.output_ref));
    box.appendChild(el("pre", { "class": "result" }, d.content));
  }

  offloaded(ref) {
    const line = el("div", { "class": "offloaded", "data-ref": ref });
    line.appendChild(el("span", {}, "Stored output"));
    line.appendChild(el("span", { "class": "mono" }, ref));
    line.appendChild(el("span", { "class": "muted" }, "(digest below)"));
    const button = el("button", { "type": "button", "class": "download" }, "Download");
    const note = el("span", { "class": "download-note muted" });
    button.addEventListener("click", () => download(this.runId, ref, note));
    line.appendChild(button);
    line.appendChild(note);
    return line;
  }
}

// A download needs the bearer header, so it is fetched and handed to the browser as a
// blob (a plain link could not authenticate without the token in its URL).
async function download(runId, ref, note) {
  setText(note, "downloading…");
  try {
    const response = await fetch("/v1/runs/" + enc(runId) + "/outputs/" + enc(ref), { headers: auth() });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const blob = await response.blob();
    const link = el("a", { "download": ref });
    link.href = URL.createObjectURL(blob);
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    setText(note, blob.size + " bytes");
  } catch (err) {
    setText(note, "download failed: " + err.message);
  }
}

function traceLink(runId, traceId) {
  const box = $("trace");
  clear(box);
  const template = settings.trace_url;
  if (!template || !/^https?:\/\//.test(template)) {
    box.appendChild(el("span", { "class": "muted" }, "no trace link configured"));
    return;
  }
  if (template.includes("{trace_id}") && !traceId) {
    box.appendChild(el("span", { "class": "muted" }, "no trace recorded yet"));
    return;
  }
  const href = template.split("{trace_id}").join(enc(traceId || "")).split("{run_id}").join(enc(runId));
  const link = el("a", { "id": "trace-link", "target": "_blank", "rel": "noopener noreferrer" }, traceId || runId);
  link.href = href;
  box.appendChild(link);
}

function runPage(runId) {
  $("run-view").hidden = false;
  for (const id of ["timeline", "approvals", "run-facts", "run-usage"]) clear($(id));
  for (const id of ["run-prompt", "run-answer", "run-reason", "steer-result", "approvals-error", "timeline-state"]) setText($(id), "");
  $("answer-panel").hidden = true;
  $("approvals-panel").hidden = true;
  setText($("run-title"), runId);
  setText($("audit-state"), "checking…");
  const timeline = new Timeline(runId, $("timeline"));
  const asked = new Map(); // approval_id -> the card of a pending request
  const streamAbort = new AbortController();
  const base = "/v1/runs/" + enc(runId);
  let stopped = false;
  let timer = null;
  let status = null;
  traceLink(runId, null);

  async function loadRun() {
    const run = await api(base);
    if (stopped) return;
    const was = status;
    status = run.status;
    setText($("run-status"), run.status);
    $("run-status").setAttribute("data-status", run.status);
    setText($("run-reason"), run.stop_reason || "");
    setText($("run-prompt"), run.prompt);
    $("answer-panel").hidden = !run.answer;
    setText($("run-answer"), run.answer || "");
    facts($("run-facts"), [
      ["provider", run.provider], ["model", run.model], ["owner", run.owner], ["tenant", run.tenant],
      ["parent", run.parent_id ? runLink(run.parent_id) : null], ["depth", run.depth],
      ["started", when(run.created_at)], ["updated", when(run.updated_at)],
    ]);
    facts($("run-usage"), [
      ["input tokens", run.usage.input_tokens], ["output tokens", run.usage.output_tokens],
      ["cost", "$" + Number(run.usage.cost).toFixed(6) + (run.usage.estimated ? " (estimated)" : "")],
      ["steps", run.steps.length],
    ]);
    $("stop-run").disabled = TERMINAL.has(run.status);
    if (was !== run.status) { loadApprovals(); if (TERMINAL.has(run.status)) loadAudit(); }
  }

  async function loadApprovals() {
    try {
      const list = await api(base + "/approvals");
      if (stopped) return;
      // A card stays while its request is pending (an operator may be typing a note in
      // it); new ones are added, settled ones removed.
      const pending = new Map();
      list.approvals.filter((a) => a.status === "pending").forEach((a) => pending.set(a.approval_id, a));
      for (const [approvalId, card] of asked) {
        if (!pending.has(approvalId)) { card.remove(); asked.delete(approvalId); }
      }
      for (const [approvalId, approval] of pending) {
        if (asked.has(approvalId)) continue;
        // The Approvals view's own card: decided here, it leaves there too.
        const card = approvalCard(approval, (decided) => { upsert(decided); loadApprovals(); });
        asked.set(approvalId, card);
        $("approvals").appendChild(card);
      }
      $("approvals-panel").hidden = asked.size === 0;
      setText($("approvals-error"), "");
    } catch (err) {
      if (stopped) return;
      // A role that may not read approvals sees the run without them.
      $("approvals-panel").hidden = status !== "awaiting_approval";
      setText($("approvals-error"), "approvals: " + err.code + ": " + err.message);
    }
  }

  async function loadAudit() {
    const box = $("audit-state");
    try {
      const report = await api("/v1/audit/" + enc(runId));
      if (stopped) return;
      clear(box);
      box.className = "";
      if (report.intact) {
        box.appendChild(el("span", { "class": "audit-ok" }, "verified: intact"));
      } else {
        box.appendChild(el("span", { "class": "audit-bad" }, "BROKEN: " + report.problems.length + " problem(s)"));
        for (const p of report.problems) box.appendChild(el("div", { "class": "mono" }, p.kind + (p.seq !== null ? " @" + p.seq : "") + ": " + p.detail));
      }
      if (report.head) box.appendChild(el("div", { "class": "mono muted" }, "head " + report.head.slice(0, 16) + "…"));
    } catch (err) {
      if (stopped) return;
      box.className = "muted";
      setText(box, err.status === 403 ? "not shown: verifying needs the audit.read permission (admins)" : "could not verify: " + err.code);
    }
  }

  async function follow() {
    let lastId = null;
    while (!stopped) {
      try {
        const headers = auth();
        if (lastId) headers["Last-Event-ID"] = lastId;
        // The durable events only: the timeline shows what happened, not text being written.
        const response = await fetch(base + "/events?deltas=false", { headers, signal: streamAbort.signal });
        if (!response.ok) throw new Error("HTTP " + response.status);
        setStatus("live");
        let ended = false;
        await readEvents(response, (event) => {
          lastId = event.id || lastId;
          const parsed = JSON.parse(event.data);
          timeline.add(parsed);
          if (parsed.kind === "run.start") traceLink(runId, timeline.traceId);
          if (parsed.kind.startsWith("tool.approv") || parsed.kind === "tool.denied") loadApprovals();
          if (parsed.kind === "run.end") ended = true;
          loadRun().catch(() => {});
        });
        if (ended) { setText($("timeline-state"), "the run has ended"); return; }
      } catch (err) {
        if (stopped) return;
        setStatus("reconnecting… (" + err.message + ")", true);
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  async function poll() {
    try { await loadRun(); } catch (err) { if (!stopped) setText($("run-reason"), err.code + ": " + err.message); }
    if (!stopped && !TERMINAL.has(status)) timer = setTimeout(poll, POLL_MS);
  }

  const steer = (promise, done) => promise.then(
    (r) => { setText($("steer-result"), done + " (status " + r.status + ")"); poll(); },
    (err) => { setText($("steer-result"), err.code + ": " + err.message); },
  );
  const onStop = () => steer(post(base + "/stop"), "stop requested");
  const onSend = () => {
    const text = $("message-text").value;
    if (!text.trim()) return;
    steer(post(base + "/messages", { text }), "message queued");
    $("message-text").value = "";
  };
  $("stop-run").addEventListener("click", onStop);
  $("send-message").addEventListener("click", onSend);
  poll();
  loadAudit();
  follow();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      streamAbort.abort();
      $("stop-run").removeEventListener("click", onStop);
      $("send-message").removeEventListener("click", onSend);
      $("run-view").hidden = true;
    },
  };
}

