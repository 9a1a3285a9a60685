// The Approvals view: every pending request the token may read, live. The board lives
// for the whole signed-in session, whichever view is shown: its event stream is what
// tells the approvals service that an operator is here (an interactive run asks before
// it parks), and it keeps the count on the Approvals tab. A run's page shows the same
// cards for its own requests.
const cards = new Map();     // approval_id -> {view, element}
const settled = new Set();   // decided ids: a late list reply must not bring them back
let board = null;            // { abort: AbortController, live, problem } while signed in
let shownBoard = null;       // the Approvals view while it is shown: { focus }

function countdown(expiresAt) {
  const left = Math.max(0, Math.round((Date.parse(expiresAt) - Date.now()) / 1000));
  return left > 0 ? "expires in " + left + " s" : "expired";
}

function tickExpiries() {
  for (const node of document.querySelectorAll(".expiry[data-expires]")) {
    setText(node, countdown(node.getAttribute("data-expires")));
  }
}

// One request as a card: what would run, why it asks, what approving changes (a staged
// effect's diff), the quorum so far, and the decisions. `onDecided(view)` gets the
// approvals service's answer.
function approvalCard(view, onDecided) {
  const card = el("div", { "class": "card", "data-id": view.approval_id, "data-status": view.status });
  card.appendChild(el("h2", { "class": "tool" }, view.tool));
  const meta = el("div", { "class": "meta" });
  meta.appendChild(el("span", { "class": "danger" }, "danger: " + view.danger));
  meta.appendChild(el("span", {}, "reach: " + view.reach));
  const run = meta.appendChild(el("span", { "class": "run" }, "run: "));
  if (VIEWS.has("runs") && ID.test(view.run_id)) run.appendChild(runLink(view.run_id));
  else run.appendChild(el("span", { "class": "mono" }, view.run_id));
  run.appendChild(el("span", {}, " · step " + view.step));
  if (view.agent) meta.appendChild(el("span", {}, "agent: " + view.agent));
  if (view.owner) meta.appendChild(el("span", {}, "owner: " + view.owner));
  meta.appendChild(el("span", { "class": "expiry", "data-expires": view.expires_at }, countdown(view.expires_at)));
  card.appendChild(meta);
  if (view.needed > 1 || view.group || view.escalate_to) card.appendChild(quorum(view));
  card.appendChild(el("p", { "class": "reason" }, view.reason));
  card.appendChild(el("pre", { "class": "args" }, JSON.stringify(view.args, null, 2)));
  if (view.changes) card.appendChild(changeSet(view.changes));
  card.appendChild(decisions(view, card, onDecided));
  return card;
}

// Two keys: "1 of 2 approved", by whom, and which group may decide now.
function quorum(view) {
  const votes = view.approvals || [];
  const allowed = votes.filter((v) => v.decision !== "deny").map((v) => v.by);
  const box = el("div", { "class": "meta quorum-box" });
  box.appendChild(el("span", { "class": "quorum" }, allowed.length + " of " + view.needed + " approved"));
  if (allowed.length) box.appendChild(el("span", { "class": "approvers" }, "by " + allowed.join(", ")));
  box.appendChild(el("span", { "class": "group" }, "group: " + (view.group || "any approver")));
  if (view.escalate_to && !view.escalated_at) {
    box.appendChild(el("span", {}, "escalates to " + view.escalate_to + " at " + new Date(view.escalate_at).toLocaleTimeString()));
  }
  if (view.escalated_at) box.appendChild(el("span", {}, "escalated"));
  return box;
}

function decisions(view, card, onDecided) {
  const box = el("div", { "class": "actions" });
  const note = el("input", { "class": "note", "placeholder": "note (optional)" });
  // Deletes are never remembered: only once or deny is offered.
  const isDelete = view.scope === "delete" || view.effect === "delete";
  const choices = [["allow_once", "Approve once"]];
  if (!isDelete) choices.push(["allow_run", "For this run"], ["allow_chat", "For this chat"]);
  choices.push(["deny", "Deny"]);
  const problem = el("span", { "class": "card-error error" });
  for (const [decision, label] of choices) {
    const button = el("button", { "type": "button", "data-decision": decision }, label);
    button.addEventListener("click", async () => {
      try {
        const path = "/v1/approvals/" + enc(view.approval_id) + "/decision";
        onDecided(await post(path, { decision, note: note.value || null }));
      } catch (err) {
        setText(problem, err.code + ": " + err.message);
      }
    });
    box.appendChild(button);
  }
  box.appendChild(note);
  box.appendChild(problem);
  // A quorum's or a group's request is allowed or denied by its people, never answered.
  if (!(view.needed > 1 || view.group || view.escalate_to)) box.appendChild(answers(view, note, problem, onDecided));
  return box;
}

// Instead of allow/deny: run the call with edited arguments (the diff against the
// model's arguments is shown as they are typed; the brain gates the edited call again),
// or answer the model in the tool's place (nothing runs).
function answers(view, note, problem, onDecided) {
  const box = el("details", { "class": "answers" });
  box.appendChild(el("summary", {}, "Edit or respond"));
  const path = "/v1/approvals/" + enc(view.approval_id) + "/decision";
  const send = async (body) => {
    try {
      onDecided(await post(path, Object.assign({ note: note.value || null }, body)));
    } catch (err) {
      setText(problem, err.code + ": " + err.message);
    }
  };
  const edit = el("textarea", { "class": "edit-args", "rows": "6", "spellcheck": "false" });
  edit.value = JSON.stringify(view.args, null, 2);
  const diff = el("pre", { "class": "args-diff" }, "(no change)");
  edit.addEventListener("input", () => setText(diff, argsDiff(view.args, parsedArgs(edit.value))));
  const run = el("button", { "type": "button", "data-answer": "edit" }, "Run edited");
  run.addEventListener("click", () => {
    const parsed = parsedArgs(edit.value);
    if (parsed === null) setText(problem, "arguments: not a JSON object");
    else send({ decision: "edit", arguments: parsed });
  });
  const text = el("textarea", { "class": "respond-text", "rows": "3", "placeholder": "your answer: the model reads it as the call's result, marked as yours" });
  const respond = el("button", { "type": "button", "data-answer": "respond" }, "Respond instead");
  respond.addEventListener("click", () => send({ decision: "respond", text: text.value }));
  [edit, diff, run, text, respond].forEach((node) => box.appendChild(node));
  return box;
}

function parsedArgs(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch (err) {
    return null;
  }
}

// The edited arguments against the model's, one line per changed key.
function argsDiff(before, after) {
  if (after === null) return "(not a JSON object yet)";
  const lines = [];
  for (const key of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const was = JSON.stringify(before[key]);
    const now = JSON.stringify(after[key]);
    if (was === now) continue;
    if (was !== undefined) lines.push("- " + key + ": " + was);
    if (now !== undefined) lines.push("+ " + key + ": " + now);
  }
  return lines.join("\n") || "(no change)";
}

function upsert(view) {
  const known = cards.get(view.approval_id);
  if (view.status !== "pending") {
    settled.add(view.approval_id);
    if (known) known.element.remove();
    cards.delete(view.approval_id);
  } else if (!known && !settled.has(view.approval_id)) {
    const element = approvalCard(view, upsert);
    $("cards").appendChild(element);
    cards.set(view.approval_id, { view, element });
  } else if (known && JSON.stringify(view) !== JSON.stringify(known.view)) {
    // A vote or an escalation changed a waiting card: draw it again, keeping the note.
    // (The list and the live stream both bring a card at sign-in: an unchanged one is
    // left alone, so nothing the operator is pointing at is swapped under them.)
    const element = approvalCard(view, upsert);
    element.querySelector(".note").value = known.element.querySelector(".note").value;
    known.element.replaceWith(element);
    cards.set(view.approval_id, { view, element });
  }
  showBoard();
}

// The count on the tab, the empty line, the card named in the address, and (while the
// view is shown) the page's status: what the stream is doing.
function showBoard() {
  setText($("pending-count"), cards.size ? String(cards.size) : "");
  $("empty").hidden = cards.size > 0;
  if (!shownBoard) return;
  for (const [approvalId, card] of cards) {
    const focus = approvalId === shownBoard.focus;
    if (focus && !card.element.classList.contains("focus")) card.element.scrollIntoView({ block: "center" });
    card.element.classList.toggle("focus", focus);
  }
  if (board && board.live) setStatus("live");
  else if (board && board.problem) setStatus(board.problem, true);
}

function boardProblem(text) {
  board.live = false;
  board.problem = text;
  setText($("board-state"), text);
  showBoard();
}

// Live events through the server that served the page (resumed with Last-Event-ID after
// a drop). A token that may not read approvals is told so once, not asked again.
async function followApprovals(state) {
  let lastId = null;
  while (!state.abort.signal.aborted) {
    try {
      const headers = auth();
      if (lastId) headers["Last-Event-ID"] = lastId;
      const response = await fetch("/v1/approvals/events", { headers, signal: state.abort.signal });
      if (response.status === 401) { signOut("that token is not valid"); return; }
      if (response.status === 403) { boardProblem("approvals: this token may not read them"); return; }
      if (!response.ok) throw new Error("event stream: HTTP " + response.status);
      state.live = true;
      state.problem = null;
      setText($("board-state"), "");
      showBoard();
      await readEvents(response, (event) => {
        if (event.id) lastId = event.id;
        upsert(JSON.parse(event.data).approval);
      });
      throw new Error("event stream ended");
    } catch (err) {
      if (state.abort.signal.aborted) return;
      boardProblem("reconnecting… (" + err.message + ")");
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

async function startApprovals() {
  board = { abort: new AbortController(), live: false, problem: null };
  const state = board;
  followApprovals(state);  // live first, so nothing created meanwhile is missed
  try {
    const list = await api("/v1/approvals?status=pending");
    if (state.abort.signal.aborted) return;
    list.approvals.forEach(upsert);
    showBoard();
  } catch (err) {
    if (err.status !== 401 && !state.abort.signal.aborted) setText($("board-state"), "approvals: " + err.code + ": " + err.message);
  }
}

function stopApprovals() {
  if (board) board.abort.abort();
  board = null;
  cards.forEach((c) => c.element.remove());
  cards.clear();
  settled.clear();
  showBoard();
}

function approvalsPage(focus) {
  $("board").hidden = false;
  shownBoard = { focus };
  showBoard();
  return {
    stop() {
      shownBoard = null;
      $("board").hidden = true;
    },
  };
}
