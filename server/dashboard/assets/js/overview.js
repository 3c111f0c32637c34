// Overview: totals, throughput history, every queue with counts per status,
// and the registered workers.

import { get, enc, ApiError } from "./api.js";
import { chartView } from "./chart.js";
import { h, fill, num, STATUSES, timeEl, throttle } from "./util.js";

const ACTIVE_MS = 60 * 1000; // norn.ActiveWorkerWindow

export function render(ctx) {
  const { main, bus, signal } = ctx;
  ctx.crumbs([{ text: "Overview" }]);
  const totals = h("section", { class: "totals", id: "totals", "aria-label": "Totals" });
  const chart = chartView(ctx);
  const queuesBody = h("div", { id: "queues" }, h("p", { class: "muted" }, "Loading…"));
  const workersBody = h("div", { id: "workers" });
  const err = h("p", { class: "error", id: "overview-error", hidden: true });
  fill(main,
    h("h1", { class: "sr-only" }, "Overview"),
    err, totals, chart.el,
    h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Queues")), queuesBody),
    h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Workers")), workersBody));

  async function load() {
    const [qs, stats] = await Promise.all([get("v1/queues", { signal }), get("v1/stats", { signal })]);
    let workers = null, workersErr = null;
    try { workers = (await get("v1/workers", { signal })).workers || []; } catch (e) {
      if (e.name === "AbortError") throw e;
      workersErr = e;
    }
    err.hidden = true;
    renderTotals(totals, stats);
    renderQueues(queuesBody, qs.queues || []);
    renderWorkers(workersBody, workers, workersErr, stats);
  }
  const refresh = throttle(() => load().catch(show), 1000);
  function show(e) {
    if (e.name === "AbortError") return;
    err.hidden = false;
    err.textContent = "Could not load: " + (e instanceof ApiError ? e.describe() : e.message);
  }
  // Progress events change no count; everything else may.
  const unsub = bus.subscribe((ev) => { if (ev.kind !== "TaskProgress") refresh(); });
  // Worker "last seen" and "active" drift with time even without events.
  const timer = setInterval(refresh, 10000);
  load().catch(show);
  return () => { unsub(); chart.stop(); refresh.cancel(); clearInterval(timer); };
}

function renderTotals(el, stats) {
  const t = stats.totals || {};
  fill(el,
    h("div", { class: "stat total", "data-status": "total" }, h("span", { class: "k" }, "tasks"), h("b", { class: "v" }, num(stats.total))),
    STATUSES.map((s) => h("div", { class: "stat st-" + s, "data-status": s },
      h("span", { class: "k" }, s), h("b", { class: "v" }, num(t[s] || 0)))),
    h("div", { class: "stat workers", "data-status": "workers" }, h("span", { class: "k" }, "active workers"),
      h("b", { class: "v", id: "active-workers" }, num(stats.active_workers)),
      h("span", { class: "muted" }, " / " + num(stats.workers))));
}

function renderQueues(el, queues) {
  if (!queues.length) {
    fill(el, h("p", { class: "muted empty" }, "No queues yet. Submit a task, e.g. ",
      h("code", {}, "norn submit -q emails '{\"to\":\"a@example.com\"}'"), ", and it appears here."));
    return;
  }
  queues.sort((a, b) => a.name.localeCompare(b.name));
  const head = h("tr", {}, h("th", {}, "Queue"), STATUSES.map((s) => h("th", { class: "num" }, s)), h("th", { class: "num" }, "total"));
  const rows = queues.map((q) => {
    const c = q.counts || {};
    const total = STATUSES.reduce((a, s) => a + (c[s] || 0), 0);
    const href = "#/queues/" + enc(q.name);
    return h("tr", { "data-queue": q.name },
      h("td", { class: "name", "data-label": "Queue" }, h("a", { href }, q.name),
        q.paused ? h("span", { class: "badge paused" }, "paused") : null),
      STATUSES.map((s) => h("td", { class: "num" + (c[s] ? "" : " zero"), "data-label": s, "data-status": s },
        c[s] ? h("a", { href: href + "?status=" + s }, num(c[s])) : "0")),
      h("td", { class: "num", "data-label": "total" }, num(total)));
  });
  fill(el, h("table", { class: "grid queues" }, h("thead", {}, head), h("tbody", {}, rows)));
}

function renderWorkers(el, workers, err, stats) {
  if (err) {
    fill(el, h("p", { class: "muted" }, num(stats.active_workers) + " active of " + num(stats.workers) +
      " registered. " + (err.status === 403 ? "Listing workers needs a token with more rights." : "Could not list workers: " + err.message)));
    return;
  }
  if (!workers.length) {
    fill(el, h("p", { class: "muted empty" }, "No workers registered."));
    return;
  }
  const now = Date.now();
  workers.sort((a, b) => (b.last_seen || "").localeCompare(a.last_seen || ""));
  fill(el, h("table", { class: "grid workers" },
    h("thead", {}, h("tr", {}, ["Worker", "Name", "Queues", "Last seen", "State"].map((x) => h("th", {}, x)))),
    h("tbody", {}, workers.map((w) => {
      const active = w.last_seen && now - new Date(w.last_seen).getTime() < ACTIVE_MS;
      return h("tr", { "data-worker": w.id },
        h("td", { "data-label": "Worker" }, h("code", {}, w.id)),
        h("td", { "data-label": "Name" }, w.name || "—"),
        h("td", { "data-label": "Queues" }, (w.queues || []).map((q, i) => [i ? ", " : "", h("a", { href: "#/queues/" + enc(q) }, q)])),
        h("td", { "data-label": "Last seen" }, timeEl(w.last_seen)),
        h("td", { "data-label": "State" }, h("span", { class: "badge " + (active ? "active" : "idle") }, active ? "active" : "idle")));
    }))));
}
