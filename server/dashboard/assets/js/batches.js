// Batches: the list with a state filter, and a batch's page with its
// members' progress, its callbacks and the members themselves.

import { api, get, query, enc, ApiError } from "./api.js";
import { taskTable } from "./tasklist.js";
import {
  h, fill, num, STATUSES, TERMINAL, statusBadge, progressBar, timeEl, absTime, labelsEl, pretty, throttle, toast,
  isZeroTime,
} from "./util.js";

const STATES = ["open", "sealed", "done"];
const PAGE = 100; // batches per page of the list
const MEMBERS = 50; // members per page of a batch

// ended is how many of b's members have ended, whatever the outcome.
function ended(b) {
  const c = b.counts || {};
  return TERMINAL.reduce((a, s) => a + (c[s] || 0), 0);
}

function stateBadge(s) {
  return h("span", { class: "badge bs-" + s, "data-state": s }, s);
}

// progressEl is a bar of ended/total members with the numbers.
function progressEl(b) {
  const n = ended(b);
  return h("span", { class: "progress-row batch-progress" },
    progressBar(b.total ? n / b.total : 0, "members ended"), " " + num(n) + " / " + num(b.total) + " ended");
}

// callbacksText says which callbacks b has and which were submitted.
function callbacksText(b) {
  const out = [];
  if (b.on_complete) out.push(b.complete_task ? "complete ✓" : "complete");
  if (b.on_success) out.push(b.success_task ? "success ✓" : "success");
  return out.length ? out.join(", ") : "—";
}

function errorText(e) {
  return e instanceof ApiError ? e.describe() : e.message;
}

// --- the list ---------------------------------------------------------------

export function renderList(ctx) {
  const { main, bus, signal, params } = ctx;
  ctx.crumbs([{ text: "Overview", href: "#/" }, { text: "Batches" }]);
  let state = STATES.includes(params.get("state")) ? params.get("state") : "";
  // after[i] is where page i starts; "previous" pops the stack.
  let after = [""], more = false;
  const chips = h("div", { class: "chips", id: "state-chips", role: "group", "aria-label": "Filter by state" });
  const listEl = h("div", { id: "batches" }, h("p", { class: "muted" }, "Loading…"));
  const prevBtn = h("button", { type: "button", id: "prev", disabled: true }, "‹ Previous");
  const nextBtn = h("button", { type: "button", id: "next", disabled: true }, "Next ›");
  const err = h("p", { class: "error", id: "batches-error", hidden: true });
  fill(main,
    h("div", { class: "page-head" }, h("h1", {}, "Batches")),
    err, chips,
    h("section", { class: "card" }, listEl, h("div", { class: "pager" }, prevBtn, nextBtn)));

  function renderChips() {
    const chip = (s, label) => h("button", { type: "button", class: "chip state-chip" + (state === s ? " on" : ""),
      "aria-pressed": state === s ? "true" : "false", "data-state": s || "all",
      onclick: () => { state = s; after = [""]; history.replaceState(null, "", "#/batches" + query({ state })); renderChips(); load().catch(show); } }, label);
    fill(chips, chip("", "all"), STATES.map((s) => chip(s, s)));
  }
  prevBtn.addEventListener("click", () => { if (after.length > 1) { after.pop(); load().catch(show); } });
  nextBtn.addEventListener("click", () => { if (more) { after.push(listEl.dataset.last); load().catch(show); } });

  let seq = 0;
  async function load() {
    const n = ++seq;
    // One more than a page says whether there is a next one.
    const page = (await get("v1/batches" + query({ state, after: after[after.length - 1], limit: PAGE + 1 }), { signal })).batches || [];
    if (n !== seq) return;
    err.hidden = true;
    more = page.length > PAGE;
    const bs = page.slice(0, PAGE);
    prevBtn.disabled = after.length <= 1;
    nextBtn.disabled = !more;
    if (!bs.length) {
      fill(listEl, h("p", { class: "muted empty", id: "no-batches" }, after.length > 1 ? "No more batches."
        : state ? "No " + state + " batches." : "No batches yet. Create one with POST /v1/batches or norn batch create."));
      return;
    }
    listEl.dataset.last = bs[bs.length - 1].id;
    const c = (b, s) => num((b.counts || {})[s] || 0);
    fill(listEl, h("table", { class: "grid batches" },
      h("thead", {}, h("tr", {}, ["Batch", "State", "Members", "Completed", "Aborted", "Cancelled", "Callbacks", "Created", "Labels"].map((x) => h("th", {}, x)))),
      h("tbody", {}, bs.map((b) => h("tr", { "data-batch": b.id },
        h("td", { class: "name", "data-label": "Batch" }, h("a", { href: "#/batches/" + enc(b.id) }, b.id)),
        h("td", { class: "state", "data-label": "State" }, stateBadge(b.state)),
        h("td", { class: "members", "data-label": "Members" }, progressEl(b)),
        h("td", { class: "num", "data-label": "Completed" }, c(b, "completed")),
        h("td", { class: "num", "data-label": "Aborted" }, c(b, "aborted")),
        h("td", { class: "num", "data-label": "Cancelled" }, c(b, "cancelled")),
        h("td", { class: "callbacks", "data-label": "Callbacks" }, callbacksText(b)),
        h("td", { "data-label": "Created" }, timeEl(b.created)),
        h("td", { "data-label": "Labels" }, labelsEl(b.labels)))))));
  }
  function show(e) {
    if (e.name === "AbortError") return;
    err.hidden = false;
    err.textContent = "Could not load: " + errorText(e);
  }
  // Members' events move the counts; re-read at most every 2 s.
  const refresh = throttle(() => load().catch(show), 2000);
  const unsub = bus.subscribe((ev) => { if (ev.kind !== "TaskProgress") refresh(); });
  const timer = setInterval(refresh, 10000);
  renderChips();
  load().catch(show);
  return () => { unsub(); refresh.cancel(); clearInterval(timer); };
}

// --- one batch --------------------------------------------------------------

export function renderBatch(ctx, id) {
  const { main, bus, signal } = ctx;
  const base = "v1/batches/" + enc(id);
  ctx.crumbs([{ text: "Overview", href: "#/" }, { text: "Batches", href: "#/batches" }, { text: id }]);
  let batch = null, status = [], cursors = [""], nextCursor = "";
  const head = h("div", { class: "page-head" });
  const err = h("p", { class: "error", id: "batch-error", hidden: true });
  const fieldsBody = h("dl", { class: "kv", id: "batch-fields" });
  const countsEl = h("div", { class: "totals", id: "batch-counts", "aria-label": "Members by status" });
  const callbacksEl = h("div", { id: "callbacks" });
  const chips = h("div", { class: "chips", id: "status-chips", role: "group", "aria-label": "Filter members by status" });
  const listEl = h("div", { id: "task-list" }, h("p", { class: "muted" }, "Loading…"));
  const prevBtn = h("button", { type: "button", id: "prev", disabled: true }, "‹ Previous");
  const nextBtn = h("button", { type: "button", id: "next", disabled: true }, "Next ›");
  const pageEl = h("span", { id: "page-no", class: "muted" });
  fill(main, head, err,
    h("div", { class: "cols" },
      h("div", { class: "col" }, h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Details")), fieldsBody)),
      h("div", { class: "col" }, h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Callbacks")), callbacksEl))),
    countsEl,
    h("section", { class: "card", id: "members" }, h("div", { class: "card-head" }, h("h2", {}, "Members")),
      chips, listEl, h("div", { class: "pager" }, prevBtn, pageEl, nextBtn)));

  async function load() {
    let b;
    try {
      b = (await get(base, { signal })).batch;
    } catch (e) {
      if (e.name === "AbortError") return;
      if (e instanceof ApiError && e.status === 404) {
        fill(main, h("h1", { class: "batch-id" }, id), h("section", { class: "card", id: "batch-gone" },
          h("p", {}, "This batch does not exist (it may have been deleted)."), h("p", {}, h("a", { href: "#/batches" }, "All batches"))));
        stop();
        return;
      }
      show(e);
      return;
    }
    err.hidden = true;
    batch = b;
    renderHead();
    renderFields();
    renderCounts();
    renderCallbacks();
    renderChips();
  }
  function show(e) {
    if (e.name === "AbortError") return;
    err.hidden = false;
    err.textContent = "Could not load: " + errorText(e);
  }

  function renderHead() {
    const b = batch;
    const seal = b.state === "open" ? h("button", { type: "button", id: "seal", class: "primary", onclick: sealBatch }, "Seal") : null;
    fill(head,
      h("div", { class: "title-row" }, h("h1", { class: "batch-id" }, b.id), h("span", { id: "batch-state" }, stateBadge(b.state))),
      h("div", { class: "actions" }, seal));
  }
  async function sealBatch(e) {
    e.target.disabled = true;
    try {
      batch = (await api("POST", base + "/seal", {})).batch;
      toast("Batch " + id + " sealed: no more tasks may join it.");
      renderHead(); renderFields(); renderCallbacks();
    } catch (e2) {
      e.target.disabled = false;
      toast(errorText(e2), "error");
    }
  }

  function renderFields() {
    const b = batch;
    const row = (k, v, idAttr) => [h("dt", {}, k), h("dd", idAttr ? { id: idAttr } : {}, v)];
    const when = (t) => isZeroTime(t) ? "—" : h("span", {}, timeEl(t), " · " + absTime(t));
    fill(fieldsBody,
      row("State", stateBadge(b.state), "batch-state-field"),
      row("Members", progressEl(b), "batch-progress"),
      row("Labels", labelsEl(b.labels)),
      row("Created", when(b.created)),
      row("Sealed", when(b.sealed), "batch-sealed"),
      row("Done", when(b.done), "batch-done"),
      b.state === "open" ? row("Note", "Tasks may still join; the batch can be done only once sealed.", "batch-note") : null);
  }

  function renderCounts() {
    const c = batch.counts || {};
    const f = batch.final;
    fill(countsEl,
      h("div", { class: "stat total", "data-status": "total" }, h("span", { class: "k" }, "members"), h("b", { class: "v" }, num(batch.total))),
      STATUSES.map((s) => h("div", { class: "stat st-" + s, "data-status": s },
        h("span", { class: "k" }, s), h("b", { class: "v" }, num(c[s] || 0)),
        f && TERMINAL.includes(s) && (f[s] || 0) !== (c[s] || 0) ? h("span", { class: "muted", title: "when the batch became done" }, " (" + num(f[s] || 0) + " at done)") : null)));
  }

  function renderCallbacks() {
    const b = batch;
    const one = (kind, label, cb, taskId) => {
      if (!cb) return h("div", { class: "callback", "data-callback": kind }, h("h3", {}, label), h("p", { class: "muted" }, "None."));
      let state;
      if (taskId) state = h("p", { class: "cb-task" }, "Submitted as ", h("a", { href: "#/tasks/" + enc(taskId) }, taskId), ".");
      else if (b.state === "done") state = h("p", { class: "cb-task muted" }, kind === "success" ? "Not submitted: not every member completed." : "Not submitted.");
      else state = h("p", { class: "cb-task muted" }, b.state === "open" ? "Submitted once the batch is sealed and every member ended"
        + (kind === "success" ? " and completed." : ".") : "Submitted once every member has ended" + (kind === "success" ? " and completed." : "."));
      return h("div", { class: "callback", "data-callback": kind },
        h("h3", {}, label),
        h("p", {}, "Queue ", h("a", { href: "#/queues/" + enc(cb.queue) }, cb.queue), cb.priority ? " · priority " + cb.priority : ""),
        state,
        cb.spec === undefined ? null : h("pre", { class: "json" }, pretty(cb.spec)));
    };
    fill(callbacksEl,
      one("complete", "On complete", b.on_complete, b.complete_task),
      one("success", "On success", b.on_success, b.success_task));
  }

  function renderChips() {
    const c = (batch && batch.counts) || {};
    const chip = (s, label, n, on, click) => h("button", { type: "button", class: "chip status-chip" + (on ? " on" : "") + (s ? " st-" + s : ""),
      "aria-pressed": on ? "true" : "false", "data-status": s || "all", onclick: click }, label + " ", h("b", {}, num(n)));
    fill(chips,
      chip("", "all", batch ? batch.total : 0, status.length === 0, () => { status = []; membersChanged(); }),
      STATUSES.map((s) => chip(s, s, c[s] || 0, status.includes(s), () => {
        status = status.includes(s) ? status.filter((x) => x !== s) : [...status, s];
        membersChanged();
      })));
  }
  function membersChanged() {
    cursors = [""];
    renderChips();
    loadMembers();
  }
  prevBtn.addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); loadMembers(); } });
  nextBtn.addEventListener("click", () => { if (nextCursor) { cursors.push(nextCursor); loadMembers(); } });

  let listSeq = 0;
  async function loadMembers() {
    const seq = ++listSeq;
    let page;
    try {
      page = await get("v1/tasks" + query({ batch: id, status, limit: MEMBERS, cursor: cursors[cursors.length - 1], view: "summary" }), { signal });
    } catch (e) {
      if (seq === listSeq) show(e);
      return;
    }
    if (seq !== listSeq) return;
    nextCursor = page.next_cursor || "";
    prevBtn.disabled = cursors.length <= 1;
    nextBtn.disabled = !nextCursor;
    pageEl.textContent = "page " + cursors.length;
    const tasks = page.tasks || [];
    if (!tasks.length) {
      fill(listEl, h("p", { class: "muted empty", id: "no-tasks" }, cursors.length > 1 ? "No more members."
        : status.length ? "No member matches these statuses." : "No members yet. Tasks join with \"batch\": \"" + id + "\" at submit."));
      return;
    }
    fill(listEl, taskTable(tasks, { showQueue: true }));
  }

  // No event names a task's batch: re-read on task events, throttled.
  const refresh = throttle(() => { load(); if (cursors.length === 1) loadMembers(); }, 1000);
  const unsub = bus.subscribe((ev) => { if (ev.kind !== "TaskProgress") refresh(); });
  const timer = setInterval(refresh, 10000);
  function stop() { unsub(); refresh.cancel(); clearInterval(timer); }
  renderChips();
  load();
  loadMembers();
  return stop;
}
