"use strict";
//page_kit.js
// The operator console: runs and approvals, one sign-in. Everything shown comes from the
// authenticated API of the server that served the page (the brain answers the approvals
// routes too, with the caller's own token); every piece of text a model, a tool or a user
// wrote is put in the page with the kit's `el` or `setText` (as text, never as HTML, with
// invisible and reordering code points shown escaped), and links are built only from ids
// and the configured trace URL.
// The token lives in sessionStorage only: it leaves with the tab, never in a URL.
// Which views this server has (`tether_common.pages.console`): the brain "runs
// approvals", the approvals service alone "approvals".
const VIEWS = new Set(document.body.getAttribute("data-views").split(" "));
const KEY = "tether.console.token";
const ID = /^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,199}$/;
const TERMINAL = new Set(["completed", "stopped", "failed"]);
const POLL_MS = 2000;
let settings = { trace_url: null };
let view = null; // the page shown: { stop() }

const token = () => sessionStorage.getItem(KEY);
const auth = (extra) => Object.assign({ "Authorization": "Bearer " + token() }, extra || {});
const enc = encodeURIComponent;

function setStatus(text, isError) {
  setText($("status"), text);
  $("status").className = isError ? "error" : "";
}

class ApiError extends Error {
  constructor(status, error) {
    super(error.message);
    this.status = status;
    this.code = error.code;
  }
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ headers: auth() }, options || {}));
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = (body && body.error) || { code: "http_" + response.status, message: response.statusText };
    if (response.status === 401) signOut("that token is not valid (" + error.code + ")");
    throw new ApiError(response.status, error);
  }
  return body;
}

function post(path, body) {
  return api(path, {
    method: "POST",
    headers: auth({ "Content-Type": "application/json" }),
    body: JSON.stringify(body || {}),
  });
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

//runs.js
//approvals.js
//schedules.js

// ---- the kill switch: a banner while one applies to what this token may see ----------

let killTimer = null;

function killTarget(k) {
  if (k.scope === "all") return "all runs";
  if (k.scope === "tenant") return "the runs of tenant " + k.tenant;
  return "the runs of agent " + k.agent + " (tenant " + k.tenant + ")";
}

// A role that may not read kills (403) sees no banner; its starts still say `killed`.
async function showKills() {
  let kills = [];
  try {
    kills = (await api("/v1/kill")).kills;
  } catch (err) {
    if (err.status !== 403) return; // unreadable for now: the banner stays as it was
  }
  const banner = $("kill-banner");
  clear(banner);
  for (const k of kills) {
    const why = k.reason ? " (" + k.reason + ")" : "";
    banner.appendChild(el("p", { "class": "kill" },
      "Kill switch: " + killTarget(k) + " stopped by " + k.killed_by + " at " + when(k.killed_at) +
      why + "; no run starts until an admin lifts it."));
  }
  banner.hidden = kills.length === 0;
}

function startKills() {
  stopKills();
  showKills();
  killTimer = setInterval(showKills, POLL_MS);
}

function stopKills() {
  if (killTimer !== null) clearInterval(killTimer);
  killTimer = null;
  $("kill-banner").hidden = true;
}

// ---- signing in and routing ---------------------------------------------------------

function showNav(current) {
  $("nav-runs").hidden = !VIEWS.has("runs");
  $("nav-schedules").hidden = !VIEWS.has("runs"); // the brain's: it answers /v1/schedules
  const links = [["nav-runs", "runs"], ["nav-approvals", "approvals"], ["nav-schedules", "schedules"]];
  for (const [id, name] of links) {
    if (name === current) $(id).setAttribute("aria-current", "page");
    else $(id).removeAttribute("aria-current");
  }
}

// `#/approvals` (or `#/approvals/<id>`: that card marked), `#/schedules`, `#/runs/<id>`,
// else the list;
// a server without the runs views shows approvals whatever the address says.
function route() {
  if (view) view.stop();
  view = null;
  if (!token()) return;
  const asked = location.hash.match(/^#\/approvals(?:\/([^/?#]+))?$/);
  if (asked || !VIEWS.has("runs")) {
    const approvalId = asked && asked[1] ? decodeURIComponent(asked[1]) : null;
    showNav("approvals");
    view = approvalsPage(approvalId && ID.test(approvalId) ? approvalId : null);
    return;
  }
  if (location.hash === "#/schedules") {
    showNav("schedules");
    view = schedulesPage();
    return;
  }
  showNav("runs");
  const match = location.hash.match(/^#\/runs\/([^/?#]+)$/);
  const runId = match ? decodeURIComponent(match[1]) : null;
  view = runId && ID.test(runId) ? runPage(runId) : listPage();
}

async function start() {
  $("signin-form").hidden = true;
  $("signout").hidden = false;
  if (VIEWS.has("runs")) {
    try {
      settings = await api("/v1/console/settings");
    } catch (err) {
      if (err.status !== 401) setText($("signin-error"), err.code + ": " + err.message);
      return;
    }
  }
  $("nav").hidden = false;
  startApprovals();
  if (VIEWS.has("runs")) startKills(); // the brain's console: it answers /v1/kill
  route();
}

function signOut(message) {
  if (view) view.stop();
  view = null;
  stopApprovals();
  stopKills();
  sessionStorage.removeItem(KEY);
  $("signin-form").hidden = false;
  $("signout").hidden = true;
  $("nav").hidden = true;
  setText($("signin-error"), message || "");
  setStatus("signed out");
}

$("signin-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("token").value.trim());
  $("token").value = "";
  start();
});
$("signout").addEventListener("click", () => signOut());
window.addEventListener("hashchange", () => { if (token()) route(); });
setInterval(tickExpiries, 1000);
if (token()) start();
