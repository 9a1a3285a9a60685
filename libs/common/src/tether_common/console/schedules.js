// The schedules view (the brain's console): each schedule within the token's reach, when
// it fires next and what its last run did, refreshed while shown. Read-only: schedules
// are changed with `tether schedules …` or the API.

function scheduleWhen(s) {
  return s.cron !== null ? s.cron + " (" + s.timezone + ")" : "every " + s.interval_s + " s";
}

function scheduleRow(s) {
  const row = el("tr", { "data-schedule-id": s.schedule_id });
  row.appendChild(el("td", { "class": "mono" }, s.schedule_id));
  row.appendChild(el("td", {}, s.name || ""));
  row.appendChild(el("td", {}, scheduleWhen(s)));
  row.appendChild(el("td", { "class": "next" }, s.enabled ? when(s.next_fire_at) : "paused"));
  const last = row.appendChild(el("td", { "class": "last" }));
  if (s.last_run_id && ID.test(s.last_run_id)) {
    last.appendChild(runLink(s.last_run_id, s.last_run_id.slice(0, 16)));
    const badge = last.appendChild(el("span", { "class": "badge" }, s.last_run_status || ""));
    badge.setAttribute("data-status", s.last_run_status || "");
  }
  row.appendChild(el("td", {}, s.run_as));
  row.appendChild(el("td", {}, s.fired + " / " + s.skipped));
  const state = s.enabled ? "" : (s.paused_reason || "paused");
  row.appendChild(el("td", { "class": "muted" }, s.last_error ? state + " " + s.last_error : state));
  return row;
}

function schedulesPage() {
  $("schedules-view").hidden = false;
  let timer = null;
  let stopped = false;

  async function refresh() {
    try {
      const list = await api("/v1/schedules");
      if (stopped) return;
      const body = $("schedule-rows");
      clear(body);
      for (const s of list.schedules) body.appendChild(scheduleRow(s));
      $("schedules-empty").hidden = list.schedules.length > 0;
      setText($("schedules-error"), "");
    } catch (err) {
      if (!stopped) setText($("schedules-error"), err.code + ": " + err.message);
    }
    if (!stopped) timer = setTimeout(refresh, POLL_MS);
  }

  refresh();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      $("schedules-view").hidden = true;
    },
  };
}
