// Schedules: every cron schedule with its cadence, next and last fire,
// pause/resume and trigger (admin), and the last tasks each one submitted.

import { api, get, query, enc, ApiError } from "./api.js";
import { h, fill, statusBadge, timeEl, throttle, toast } from "./util.js";

// LAST is how many recent tasks are shown per schedule.
const LAST = 5;

export function render(ctx) {
  const { main, bus, session, signal } = ctx;
  ctx.crumbs([{ text: "Overview", href: "#/" }, { text: "Schedules" }]);
  const listEl = h("div", { id: "schedules" }, h("p", { class: "muted" }, "Loading…"));
  const roleNote = h("p", { class: "note", id: "schedules-role-note", hidden: true },
    "Read-only: your token cannot pause or trigger these schedules (admin role needed).");
  const err = h("p", { class: "error", id: "schedules-error", hidden: true });
  fill(main,
    h("div", { class: "page-head" }, h("h1", {}, "Schedules")),
    roleNote, err,
    h("section", { class: "card" }, listEl));

  async function load() {
    const scheds = (await get("v1/schedules", { signal })).schedules || [];
    // The task lists are read in parallel; a failure there shows in that
    // row rather than hiding the table.
    const tasks = await Promise.all(scheds.map((s) =>
      get("v1/tasks" + query({ label: ["norn.schedule:" + s.name], order: "newest", limit: LAST, view: "summary" }), { signal })
        .then((p) => p.tasks || [], (e) => { if (e.name === "AbortError") throw e; return e; })));
    const admin = await Promise.all(scheds.map((s) => session.canAdmin(s.queue)));
    err.hidden = true;
    roleNote.hidden = !scheds.length || admin.some(Boolean);
    renderList(scheds, tasks, admin);
  }
  function show(e) {
    if (e.name === "AbortError") return;
    err.hidden = false;
    err.textContent = "Could not load: " + (e instanceof ApiError ? e.describe() : e.message);
  }
  const refresh = throttle(() => load().catch(show), 1000);

  async function act(btn, s, method, path, body, done) {
    btn.disabled = true;
    try {
      const res = await api(method, path, body);
      done(res);
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) session.denied(s.queue);
      toast(e instanceof ApiError ? e.describe() : e.message, "error");
    } finally {
      refresh();
    }
  }

  function renderList(scheds, tasks, admin) {
    if (!scheds.length) {
      fill(listEl, h("p", { class: "muted empty", id: "no-schedules" }, "No schedules yet. Create one with ",
        h("code", {}, "PUT /v1/schedules/NAME"), " (see the API documentation)."));
      return;
    }
    const head = h("tr", {}, ["Schedule", "Queue", "Cron", "Next fire", "Last fire", "State", "Last tasks", ""].map((x) => h("th", {}, x)));
    const rows = scheds.map((s, i) => {
      const path = "v1/schedules/" + enc(s.name);
      const pauseBtn = h("button", { type: "button", class: "pause" }, s.paused ? "Resume" : "Pause");
      pauseBtn.addEventListener("click", () => act(pauseBtn, s, "PATCH", path, { paused: !s.paused }, (r) =>
        toast(r.schedule.paused ? "Schedule " + s.name + " paused." : "Schedule " + s.name + " resumed.")));
      const trigBtn = h("button", { type: "button", class: "trigger" }, "Trigger now");
      trigBtn.addEventListener("click", () => act(trigBtn, s, "POST", path + "/trigger", {}, (r) =>
        toast("Submitted task " + r.task.id + ".")));
      const t = tasks[i];
      return h("tr", { "data-schedule": s.name },
        h("td", { class: "name", "data-label": "Schedule" }, s.name),
        h("td", { "data-label": "Queue" }, h("a", { href: "#/queues/" + enc(s.queue) }, s.queue)),
        h("td", { "data-label": "Cron", class: "cron" }, h("span", {}, h("code", {}, s.cron), " ", h("span", { class: "muted" }, s.timezone || "UTC"))),
        h("td", { "data-label": "Next fire", class: "next-fire" }, s.paused ? h("span", { class: "muted" }, "—") : timeEl(s.next_fire)),
        h("td", { "data-label": "Last fire", class: "last-fire" }, timeEl(s.last_fire)),
        h("td", { "data-label": "State", class: "state" },
          h("span", { class: "badge " + (s.paused ? "paused" : "active") }, s.paused ? "paused" : "active")),
        h("td", { "data-label": "Last tasks", class: "last-tasks" }, lastTasks(t)),
        h("td", { class: "row-actions" }, admin[i] ? h("div", { class: "actions" }, pauseBtn, trigBtn) : null));
    });
    fill(listEl, h("table", { class: "grid schedules" }, h("thead", {}, head), h("tbody", {}, rows)));
  }

  // Schedules submit tasks, so task events (and a reconnect) may change
  // last fire and the last tasks; the cadence drifts with time anyway.
  const unsub = bus.subscribe((ev) => { if (ev.kind !== "TaskProgress") refresh(); });
  const timer = setInterval(refresh, 10000);
  load().catch(show);
  return () => { unsub(); refresh.cancel(); clearInterval(timer); };
}

function lastTasks(t) {
  if (t instanceof Error) return h("span", { class: "error" }, t instanceof ApiError ? t.describe() : t.message);
  if (!t.length) return h("span", { class: "muted" }, "none yet");
  return h("ul", { class: "task-links" }, t.map((x) => h("li", { "data-id": x.id },
    h("a", { href: "#/tasks/" + enc(x.id) }, x.id), " ", statusBadge(x.status), " ", timeEl(x.created))));
}
