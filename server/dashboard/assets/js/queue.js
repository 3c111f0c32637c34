// Queue page: counts, pause/resume, defaults, and the task list with
// filters, cursor paging and bulk actions.

import { api, get, query, enc, ApiError } from "./api.js";
import { chartView } from "./chart.js";
import { taskTable } from "./tasklist.js";
import {
  h, fill, num, STATUSES, PENDING, RETRYABLE, statusBadge, debounce, throttle, toast,
  confirmDialog, validDuration,
} from "./util.js";

const ORDERS = [["newest", "Newest first"], ["priority", "Highest priority"], ["oldest", "Oldest first"]];
const SIZES = [25, 50, 100, 200];
// The policy of a queue's tasks when the queue gives none (norn.DefaultRetry).
const DEFAULT_RETRY = { max_retries: 24, base: "1s", max: "1h", jitter: "equal" };

export function render(ctx, name) {
  const { main, bus, session, signal, params } = ctx;
  const href = "#/queues/" + enc(name);
  ctx.crumbs([{ text: "Overview", href: "#/" }, { text: name }]);

  // Filters live in the URL so a filtered view can be bookmarked and shared.
  const f = {
    status: (params.get("status") || "").split(",").filter((s) => STATUSES.includes(s)),
    labels: params.getAll("label").filter((l) => l.includes(":")),
    id: params.get("id") || "",
    order: ORDERS.some(([o]) => o === params.get("order")) ? params.get("order") : "newest",
    limit: SIZES.includes(Number(params.get("limit"))) ? Number(params.get("limit")) : 50,
  };
  // cursors[i] is the cursor of page i; "previous" pops the stack.
  let cursors = [""], nextCursor = "", info = null, admin = null;

  const title = h("h1", { class: "queue-title" }, name);
  const pausedBadge = h("span", { class: "badge paused", id: "paused-badge", hidden: true }, "paused");
  const pauseBtn = h("button", { type: "button", id: "pause", disabled: true }, "Pause");
  const roleNote = h("p", { class: "note", id: "role-note", hidden: true });
  const chips = h("div", { class: "chips", id: "status-chips", role: "group", "aria-label": "Filter by status" });
  const defaultsBox = h("div", { id: "defaults" });
  const search = h("input", { type: "search", id: "id-search", placeholder: "Search id…", value: f.id, "aria-label": "Search id" });
  const labelIn = h("input", { type: "text", id: "label-input", placeholder: "label key:value", "aria-label": "Label filter (key:value)" });
  const labelChips = h("span", { class: "labels", id: "label-filters" });
  const orderSel = h("select", { id: "order", "aria-label": "Order" }, ORDERS.map(([v, t]) => h("option", { value: v }, t)));
  orderSel.value = f.order;
  const sizeSel = h("select", { id: "page-size", "aria-label": "Page size" }, SIZES.map((s) => h("option", { value: s }, s + " / page")));
  sizeSel.value = String(f.limit);
  const matchEl = h("span", { id: "match-count", class: "muted" });
  const cancelAllBtn = h("button", { type: "button", id: "cancel-all" }, "Cancel matching…");
  const retryAllBtn = h("button", { type: "button", id: "retry-all" }, "Retry matching…");
  const deleteAllBtn = h("button", { type: "button", id: "delete-all", class: "danger-outline" }, "Delete matching…");
  const listEl = h("div", { id: "task-list" }, h("p", { class: "muted" }, "Loading…"));
  const prevBtn = h("button", { type: "button", id: "prev", disabled: true }, "‹ Previous");
  const nextBtn = h("button", { type: "button", id: "next", disabled: true }, "Next ›");
  const pageEl = h("span", { id: "page-no", class: "muted" });
  const err = h("p", { class: "error", id: "queue-error", hidden: true });
  const chart = chartView(ctx, name);
  // Halted sequences wait for an operator: listed here only when there are any.
  const haltedList = h("ul", { class: "halted-sequences" });
  const haltedCard = h("section", { class: "card", id: "halted-sequences", hidden: true },
    h("h2", {}, "Halted sequences"),
    h("p", { class: "note" }, "Each head ended aborted and holds its sequence: retry it, or delete it to move on."),
    haltedList);

  fill(main,
    h("div", { class: "page-head" }, h("div", { class: "title-row" }, title, pausedBadge), h("div", { class: "actions" }, pauseBtn)),
    roleNote, err, haltedCard, chips,
    h("section", { class: "card" },
      h("div", { class: "filters" },
        search,
        h("form", { class: "label-form", id: "label-form", onsubmit: (e) => { e.preventDefault(); addLabel(labelIn.value); } },
          labelIn, h("button", { type: "submit" }, "Add label")),
        orderSel, sizeSel),
      labelChips,
      h("div", { class: "bulk" }, matchEl, h("span", { class: "spacer" }), cancelAllBtn, retryAllBtn, deleteAllBtn),
      listEl,
      h("div", { class: "pager" }, prevBtn, pageEl, nextBtn)),
    chart.el,
    h("details", { class: "card defaults", id: "defaults-card" }, h("summary", {}, h("h2", {}, "Queue defaults")), defaultsBox));

  function apiFilter(over = {}) {
    return { queue: name, status: f.status, label: f.labels, id_contains: f.id, ...over };
  }
  function syncURL() {
    const q = query({ status: f.status, label: f.labels, id: f.id, order: f.order === "newest" ? "" : f.order, limit: f.limit === 50 ? "" : f.limit });
    history.replaceState(null, "", href + q);
  }
  function filtersChanged() {
    cursors = [""];
    syncURL();
    renderChips();
    renderLabelChips();
    loadList();
    loadCount();
  }
  function addLabel(v) {
    v = v.trim();
    const i = v.indexOf(":");
    if (i <= 0) { toast("A label filter is key:value, e.g. env:prod", "error"); return; }
    if (!f.labels.includes(v)) f.labels.push(v);
    labelIn.value = "";
    filtersChanged();
  }
  search.addEventListener("input", debounce(() => { f.id = search.value.trim(); filtersChanged(); }, 300));
  orderSel.addEventListener("change", () => { f.order = orderSel.value; filtersChanged(); });
  sizeSel.addEventListener("change", () => { f.limit = Number(sizeSel.value); filtersChanged(); });
  prevBtn.addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); loadList(); } });
  nextBtn.addEventListener("click", () => { if (nextCursor) { cursors.push(nextCursor); loadList(); } });

  function renderChips() {
    const c = (info && info.counts) || {};
    const total = STATUSES.reduce((a, s) => a + (c[s] || 0), 0);
    const chip = (s, label, n, on, click) => h("button", { type: "button", class: "chip status-chip" + (on ? " on" : "") + (s ? " st-" + s : ""),
      "aria-pressed": on ? "true" : "false", "data-status": s || "all", onclick: click }, label + " ", h("b", {}, num(n)));
    fill(chips,
      chip("", "all", total, f.status.length === 0, () => { f.status = []; filtersChanged(); }),
      STATUSES.map((s) => chip(s, s, c[s] || 0, f.status.includes(s), () => {
        f.status = f.status.includes(s) ? f.status.filter((x) => x !== s) : [...f.status, s];
        filtersChanged();
      })));
  }
  function renderLabelChips() {
    fill(labelChips, f.labels.map((l) => h("button", { type: "button", class: "chip removable", title: "Remove filter",
      onclick: () => { f.labels = f.labels.filter((x) => x !== l); filtersChanged(); } }, l + " ×")));
  }

  async function loadHalted() {
    const { sequences } = await get("v1/queues/" + enc(name) + "/sequences" + query({ halted: "true", limit: 20 }), { signal });
    haltedCard.hidden = sequences.length === 0;
    fill(haltedList, sequences.map((q) => h("li", {},
      h("a", { href: href + "/sequences/" + enc(q.key) }, q.key), " — head ",
      h("a", { href: "#/tasks/" + enc(q.head) }, q.head), " ", statusBadge(q.head_status),
      h("span", { class: "muted" }, ", " + num(q.waiting) + " waiting"))));
  }
  async function loadQueue() {
    loadHalted().catch(show);
    info = (await get("v1/queues/" + enc(name), { signal })).queue;
    pausedBadge.hidden = !info.paused;
    pauseBtn.textContent = info.paused ? "Resume" : "Pause";
    renderChips();
    if (!defaultsBox.dataset.editing) renderDefaults();
    if (admin === null) {
      admin = await session.canAdmin(name);
      applyRole();
    }
  }
  function applyRole() {
    pauseBtn.disabled = !admin;
    pauseBtn.title = admin ? "" : "Pausing needs an admin token";
    roleNote.hidden = admin;
    roleNote.textContent = "Read-only queue settings: your token cannot pause or reconfigure this queue (admin role needed).";
    renderDefaults();
  }
  pauseBtn.addEventListener("click", async () => {
    pauseBtn.disabled = true;
    try {
      info = (await api("PATCH", "v1/queues/" + enc(name), { paused: !info.paused })).queue;
      toast(info.paused ? "Queue paused: workers will not claim from it." : "Queue resumed.");
      loadQueue().catch(show);
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) { session.denied(name); admin = false; applyRole(); }
      toast(e instanceof ApiError ? e.describe() : e.message, "error");
    } finally {
      if (admin) pauseBtn.disabled = false;
    }
  });

  function retryText(r) {
    if (!r) return `default: ${DEFAULT_RETRY.max_retries}× backoff ${DEFAULT_RETRY.base} (max ${DEFAULT_RETRY.max}), ${DEFAULT_RETRY.jitter} jitter`;
    if (!r.max_retries) return "none";
    return `${r.max_retries}× backoff ${r.base || "0s"}${r.max ? " (max " + r.max + ")" : ""}${r.jitter && r.jitter !== "none" ? ", " + r.jitter + " jitter" : ""}`;
  }
  function renderDefaults() {
    if (!info) return;
    const d = info.defaults || {};
    const r = d.retry;
    const ret = d.retention || {};
    const forever = (v) => (!v || v === "0s" ? "forever" : v);
    fill(defaultsBox,
      h("dl", { class: "kv" },
        h("dt", {}, "Timeout"), h("dd", { id: "def-timeout" }, d.timeout || "—"),
        h("dt", {}, "Max runtime"), h("dd", { id: "def-max-runtime" }, d.max_runtime && d.max_runtime !== "0s" ? d.max_runtime : "none"),
        h("dt", {}, "Max attempts"), h("dd", { id: "def-max-attempts" }, d.max_attempts ? String(d.max_attempts) : "unlimited"),
        h("dt", {}, "Retry"), h("dd", { id: "def-retry" }, retryText(r)),
        h("dt", {}, "Keep completed"), h("dd", {}, forever(ret.completed)),
        h("dt", {}, "Keep aborted"), h("dd", {}, forever(ret.aborted)),
        h("dt", {}, "Keep cancelled"), h("dd", {}, forever(ret.cancelled)),
        // Flow limits are queue settings next to the defaults.
        h("dt", {}, "Max running"), h("dd", { id: "def-max-running" }, info.max_running ? String(info.max_running) : "no limit"),
        h("dt", {}, "Per-key limit"), h("dd", { id: "def-key-limit" }, info.key_limit ? String(info.key_limit) : "no limit"),
        h("dt", {}, "Fair by"), h("dd", { id: "def-fair-by" }, info.fair_by || "none (claim order)"),
        h("dt", {}, "Rate limit"), h("dd", { id: "def-rate-limit" }, rateText(info)),
        h("dt", {}, "Per-key rate limit"), h("dd", { id: "def-key-rate-limit" }, keyRateText(info.key_rate_limit, "no limit"))),
      info.keys && info.keys.length ? h("table", { class: "grid keys", id: "flow-keys" },
        h("thead", {}, h("tr", {}, h("th", {}, info.fair_by && info.fair_by.startsWith("label:") ? "Label value" : "Concurrency key"),
          h("th", { class: "num" }, "Limit"), h("th", { class: "num" }, "Weight"), h("th", { class: "num" }, "Rate"), h("th", { class: "num" }, "Running"))),
        h("tbody", {}, info.keys.map((k) => h("tr", { "data-key": k.key },
          h("td", { "data-label": "Key" }, h("code", {}, k.key)),
          h("td", { class: "num", "data-label": "Limit" }, k.limit ? String(k.limit) : "queue default"),
          h("td", { class: "num", "data-label": "Weight" }, String(k.weight || 1)),
          // A key without a rate of its own follows the queue's per-key rate.
          h("td", { class: "num", "data-label": "Rate" }, keyRateText(k.rate_limit, info.key_rate_limit && info.key_rate_limit.per_second ? "queue default" : "no limit")),
          h("td", { class: "num", "data-label": "Running" }, num(k.running)))))) : null,
      admin ? h("button", { type: "button", id: "edit-defaults", onclick: editDefaults }, "Edit defaults") : null);
  }
  // "5/s, burst 2 (1.5 tokens now)", or "no limit".
  function rateText(q) {
    const rl = q.rate_limit;
    if (!rl || !rl.per_second) return "no limit";
    const tokens = typeof q.rate_tokens === "number" ? ` (${q.rate_tokens.toFixed(1)} tokens now)` : "";
    return `${rl.per_second}/s, burst ${rl.burst}${tokens}`;
  }
  // "5/s, burst 10", or none when the key rate limit is absent.
  function keyRateText(rl, none) {
    if (!rl || !rl.per_second) return none;
    return `${rl.per_second}/s, burst ${rl.burst}`;
  }
  function editDefaults() {
    const d = info.defaults || {};
    // Without a policy the queue's tasks follow the server's default; the
    // form shows it, and sends a retry policy only when one is changed.
    const r = d.retry || DEFAULT_RETRY;
    const ret = d.retention || {};
    const rl = info.rate_limit || {};
    const krl = info.key_rate_limit || {};
    defaultsBox.dataset.editing = "1";
    const field = (id, label, value, hint) => h("label", { class: "field" }, h("span", {}, label),
      h("input", { id, name: id, value: value ?? "", autocomplete: "off" }), hint ? h("small", { class: "muted" }, hint) : null);
    const msg = h("p", { class: "error", hidden: true, id: "defaults-error" });
    const form = h("form", { class: "defaults-form", id: "defaults-form" },
      field("timeout", "Timeout", d.timeout, "Go duration, e.g. 30s"),
      field("max_runtime", "Max runtime", d.max_runtime || "0s", "per attempt, even while heartbeating; 0s = none"),
      field("max_attempts", "Max attempts", d.max_attempts || 0, "0 = unlimited"),
      field("max_retries", "Retries", r.max_retries || 0, d.retry ? "0 = never retry" : "the default; 0 = never retry"),
      field("retry_base", "Retry backoff base", r.base || "0s"),
      field("retry_max", "Retry backoff cap", r.max || "0s", "0s = no cap"),
      field("ret_completed", "Keep completed", ret.completed || "0s", "0s = forever"),
      field("ret_aborted", "Keep aborted", ret.aborted || "0s"),
      field("ret_cancelled", "Keep cancelled", ret.cancelled || "0s"),
      field("max_running", "Max running", info.max_running || 0, "running tasks in the queue; 0 = no limit"),
      field("key_limit", "Per-key limit", info.key_limit || 0, "running tasks per concurrency key; 0 = no limit"),
      field("fair_by", "Fair by", info.fair_by || "", "concurrency_key or label:NAME rotates claims across keys; empty = claim order"),
      field("rate_per_second", "Rate limit (tasks/s)", rl.per_second || 0, "claims hand out at most this many a second, cluster-wide; 0 = no limit"),
      field("rate_burst", "Rate burst", rl.burst || 0, "tasks at once after a quiet spell; 0 = one second's worth"),
      field("key_rate_per_second", "Per-key rate limit (tasks/s)", krl.per_second || 0, "each concurrency key's own bucket, cluster-wide; 0 = no limit"),
      field("key_rate_burst", "Per-key rate burst", krl.burst || 0, "a key's tasks at once after a quiet spell; 0 = one second's worth"),
      msg,
      h("div", { class: "actions" },
        h("button", { type: "button", onclick: () => { delete defaultsBox.dataset.editing; renderDefaults(); } }, "Cancel"),
        h("button", { type: "submit", class: "primary" }, "Save")));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const v = (id) => form.elements[id].value.trim();
      const ints = ["max_attempts", "max_retries", "max_running", "key_limit", "rate_burst", "key_rate_burst"];
      for (const id of ints) {
        if (!/^\d+$/.test(v(id))) { msg.hidden = false; msg.textContent = id + ": must be a whole number ≥ 0"; return; }
      }
      for (const id of ["rate_per_second", "key_rate_per_second"]) {
        if (!/^\d+(\.\d+)?$/.test(v(id))) { msg.hidden = false; msg.textContent = id + ": must be a number ≥ 0"; return; }
      }
      for (const id of ["timeout", "max_runtime", "retry_base", "retry_max", "ret_completed", "ret_aborted", "ret_cancelled"]) {
        if (!validDuration(v(id))) { msg.hidden = false; msg.textContent = id + ": not a duration like 10s, 5m or 24h"; return; }
      }
      const body = {
        timeout: v("timeout"),
        max_attempts: Number(v("max_attempts")),
        retention: { completed: v("ret_completed"), aborted: v("ret_aborted"), cancelled: v("ret_cancelled") },
      };
      // Sent only when changed, so a server without runtime limits is not
      // sent a setting it does not know.
      if (v("max_runtime") !== (d.max_runtime || "0s")) body.max_runtime = v("max_runtime");
      if (Number(v("max_retries")) !== (r.max_retries || 0) || v("retry_base") !== (r.base || "0s") || v("retry_max") !== (r.max || "0s")) {
        body.retry = { max_retries: Number(v("max_retries")), base: v("retry_base"), max: v("retry_max") };
      }
      for (const id of ["max_running", "key_limit"]) if (Number(v(id)) !== (info[id] || 0)) body[id] = Number(v(id));
      if (v("fair_by") !== (info.fair_by || "")) body.fair_by = v("fair_by");
      const rate = Number(v("rate_per_second")), burst = Number(v("rate_burst"));
      if (rate !== (rl.per_second || 0) || (rate > 0 && burst !== (rl.burst || 0))) {
        body.rate_limit = rate > 0 ? { per_second: rate, burst } : { per_second: 0 };
      }
      const keyRate = Number(v("key_rate_per_second")), keyBurst = Number(v("key_rate_burst"));
      if (keyRate !== (krl.per_second || 0) || (keyRate > 0 && keyBurst !== (krl.burst || 0))) {
        body.key_rate_limit = keyRate > 0 ? { per_second: keyRate, burst: keyBurst } : { per_second: 0 };
      }
      try {
        info = (await api("PATCH", "v1/queues/" + enc(name), body)).queue;
        delete defaultsBox.dataset.editing;
        renderDefaults();
        toast("Queue defaults saved.");
      } catch (e2) {
        if (e2 instanceof ApiError && e2.status === 403) { session.denied(name); admin = false; delete defaultsBox.dataset.editing; applyRole(); }
        msg.hidden = false;
        msg.textContent = e2 instanceof ApiError ? e2.describe() : e2.message;
      }
    });
    fill(defaultsBox, form);
  }

  let listSeq = 0;
  async function loadList() {
    const seq = ++listSeq;
    const cursor = cursors[cursors.length - 1];
    let page;
    try {
      page = await get("v1/tasks" + query({ ...apiFilter(), order: f.order === "oldest" ? "" : f.order, limit: f.limit, cursor, view: "summary" }), { signal });
    } catch (e) {
      if (seq === listSeq) show(e);
      return;
    }
    if (seq !== listSeq) return; // a newer request superseded this one
    err.hidden = true;
    nextCursor = page.next_cursor || "";
    prevBtn.disabled = cursors.length <= 1;
    nextBtn.disabled = !nextCursor;
    pageEl.textContent = "page " + cursors.length;
    renderList(page.tasks || []);
  }
  function renderList(tasks) {
    if (!tasks.length) {
      fill(listEl, h("p", { class: "muted empty", id: "no-tasks" }, cursors.length > 1 ? "No more tasks." : "No tasks match these filters."));
      return;
    }
    fill(listEl, taskTable(tasks, { onLabel: (k, v) => addLabel(k + ":" + v) }));
  }
  async function loadCount() {
    try {
      const { count } = await get("v1/tasks/count" + query(apiFilter()), { signal });
      matchEl.textContent = num(count) + (count === 1 ? " task matches" : " tasks match");
      matchEl.dataset.count = count;
    } catch (e) { show(e); }
  }
  function show(e) {
    if (e.name === "AbortError") return;
    err.hidden = false;
    err.textContent = e instanceof ApiError && e.status === 404 ? "Unknown queue." : "Could not load: " + (e instanceof ApiError ? e.describe() : e.message);
  }

  // --- bulk actions ---------------------------------------------------------

  function describe(filt) {
    const parts = ["queue " + name];
    if (filt.status && filt.status.length) parts.push("status " + filt.status.join(" or "));
    for (const l of filt.label || []) parts.push("label " + l);
    if (filt.id_contains) parts.push("id containing “" + filt.id_contains + "”");
    return "Tasks matching " + parts.join(", ") + ".";
  }

  cancelAllBtn.addEventListener("click", async () => {
    const statuses = f.status.length ? f.status.filter((s) => PENDING.includes(s)) : PENDING;
    if (!statuses.length) { toast("Only scheduled, blocked, ready or running tasks can be cancelled; the status filter selects none.", "error"); return; }
    const filt = apiFilter({ status: statuses });
    let count;
    try { ({ count } = await get("v1/tasks/count" + query(filt), { signal })); } catch (e) { show(e); return; }
    if (!count) { toast("No matching task can be cancelled."); return; }
    const ok = await confirmDialog("Cancel " + num(count) + (count === 1 ? " task?" : " tasks?"),
      [h("p", {}, describe(filt)), h("p", {}, "Running tasks are told to stop at their next heartbeat. This cannot be undone.")],
      "Cancel " + num(count) + (count === 1 ? " task" : " tasks"), true);
    if (!ok) return;
    await runBulk("Cancelling", count, async (prog) => {
      const tried = new Set();
      let cursor = "";
      while (!prog.stopped) {
        const page = await get("v1/tasks" + query({ ...filt, limit: 200, cursor, view: "summary" }));
        const ids = (page.tasks || []).map((t) => t.id).filter((id) => !tried.has(id));
        if (!ids.length) {
          if (!page.next_cursor) break;
          cursor = page.next_cursor;
          continue;
        }
        ids.forEach((id) => tried.add(id));
        try {
          // One transaction per page; if any task changed under us (409),
          // fall back to one call per task so the others still go through.
          await api("POST", "v1/transactions", { cancel: ids });
          prog.add(ids.length, 0);
        } catch (e) {
          if (e instanceof ApiError && (e.status === 403 || e.status === 401)) throw e;
          for (const id of ids) {
            if (prog.stopped) break;
            try { await api("POST", "v1/tasks/" + enc(id) + "/cancel", {}); prog.add(1, 0); } catch (e2) {
              if (e2 instanceof ApiError && e2.status === 403) throw e2;
              prog.add(0, 1);
            }
          }
        }
        // Cancelled tasks leave the filter, so the next page starts over
        // from the first one not yet tried.
        cursor = "";
      }
    });
  });

  retryAllBtn.addEventListener("click", async () => {
    const statuses = f.status.length ? f.status.filter((s) => RETRYABLE.includes(s)) : RETRYABLE;
    if (!statuses.length) { toast("Only aborted or cancelled tasks can be retried; the status filter selects none.", "error"); return; }
    const filt = apiFilter({ status: statuses });
    let count;
    try { ({ count } = await get("v1/tasks/count" + query(filt), { signal })); } catch (e) { show(e); return; }
    if (!count) { toast("No matching task can be retried."); return; }
    const ok = await confirmDialog("Retry " + num(count) + (count === 1 ? " task?" : " tasks?"),
      [h("p", {}, describe(filt)), h("p", {}, "They become ready again with their attempts back to 0; errors and history are kept. Tasks whose dependency failed are skipped.")],
      "Retry " + num(count) + (count === 1 ? " task" : " tasks"));
    if (!ok) return;
    await runBulk("Retrying", count, async (prog) => {
      const { retried } = await api("POST", "v1/tasks/retry" + query(filt), {});
      prog.add(retried, 0);
    });
  });

  deleteAllBtn.addEventListener("click", async () => {
    const filt = apiFilter();
    let count;
    try { ({ count } = await get("v1/tasks/count" + query(filt), { signal })); } catch (e) { show(e); return; }
    if (!count) { toast("No task matches."); return; }
    const ok = await confirmDialog("Delete " + num(count) + (count === 1 ? " task?" : " tasks?"),
      [h("p", {}, describe(filt)), h("p", {}, "Tasks are removed with their history and log, whatever their status. This cannot be undone.")],
      "Delete " + num(count) + (count === 1 ? " task" : " tasks"), true);
    if (!ok) return;
    await runBulk("Deleting", count, async (prog) => {
      const { deleted } = await api("DELETE", "v1/tasks" + query(filt));
      prog.add(deleted, 0);
    });
  });

  // runBulk shows a modal progress dialog while work(prog) runs.
  async function runBulk(verb, total, work) {
    const bar = h("progress", { max: total, value: 0, id: "bulk-progress" });
    const text = h("p", { id: "bulk-text" }, verb + "… 0 / " + num(total));
    const stop = h("button", { type: "button", id: "bulk-stop" }, "Stop");
    const d = h("dialog", { class: "modal", id: "bulk" }, h("h2", {}, verb + " tasks"), bar, text, h("div", { class: "actions" }, stop));
    d.addEventListener("cancel", (e) => e.preventDefault());
    document.body.append(d);
    d.showModal();
    const prog = {
      done: 0, failed: 0, stopped: false,
      add(ok, bad) {
        this.done += ok; this.failed += bad;
        bar.value = Math.min(total, this.done + this.failed);
        text.textContent = verb + "… " + num(this.done) + " / " + num(total) + (this.failed ? " (" + num(this.failed) + " failed)" : "");
      },
    };
    stop.addEventListener("click", () => { prog.stopped = true; stop.disabled = true; });
    let error = null;
    try { await work(prog); } catch (e) { error = e; }
    const past = { Cancelling: "Cancelled", Retrying: "Retried" }[verb] || "Deleted";
    const summary = past + " " + num(prog.done) + (prog.done === 1 ? " task" : " tasks") +
      (prog.failed ? ", " + num(prog.failed) + " could not be changed" : "") + (prog.stopped ? " (stopped)" : "") + ".";
    text.textContent = error ? summary + " Error: " + (error instanceof ApiError ? error.describe() : error.message) : summary;
    text.dataset.done = String(prog.done);
    bar.max = 1; bar.value = 1;
    fill(d.querySelector(".actions"), h("button", { type: "button", class: "primary", id: "bulk-close", onclick: () => { d.close(); d.remove(); } }, "Close"));
    toast(summary, error ? "error" : "info");
    cursors = [""];
    loadList(); loadCount(); loadQueue().catch(show);
  }

  // --- live updates ---------------------------------------------------------

  const refreshCounts = throttle(() => { loadQueue().catch(show); loadCount(); }, 1000);
  // Page 1 follows new tasks; later pages only restyle the rows they show,
  // so the list does not shift under the reader.
  const refreshFirst = throttle(() => { if (cursors.length === 1) loadList(); }, 2000);
  const unsub = bus.subscribe((ev) => {
    if (ev.kind === "Lagged") { refreshCounts(); refreshFirst(); return; }
    if (ev.queue !== name) return;
    if (ev.kind !== "TaskProgress") refreshCounts();
    if (cursors.length === 1) { refreshFirst(); return; }
    const row = listEl.querySelector(`tr[data-id="${CSS.escape(ev.task_id || "")}"]`);
    if (!row) return;
    if (ev.kind === "TaskDelete") row.classList.add("gone");
    else if (ev.status) row.querySelector("td.status").replaceChildren(statusBadge(ev.status));
  });

  renderChips();
  renderLabelChips();
  loadQueue().catch(show);
  loadList();
  loadCount();
  return () => { unsub(); chart.stop(); refreshCounts.cancel(); refreshFirst.cancel(); };
}
