// Task page: every field, spec and result, history timeline, update log,
// the workflow (dependencies with their outcomes, children, dependents),
// and the cancel / retry / delete / resubmit actions.

import { api, get, query, enc, ndjson, ApiError } from "./api.js";
import {
  h, fill, num, PENDING, RETRYABLE, statusBadge, progressBar, timeEl, absTime, labelsEl, pretty, throttle, toast,
  confirmDialog, isZeroTime,
} from "./util.js";

const LOG_PAGE = 200;
// DEPENDENTS_PAGE: dependents listed without asking; more stream on request.
const DEPENDENTS_PAGE = 20;
// GRAPH_SIDE: nodes drawn on each side of the graph before "+N more".
const GRAPH_SIDE = 6;

export function render(ctx, id) {
  const { main, bus, signal } = ctx;
  ctx.crumbs([{ text: "Overview", href: "#/" }, { text: "Task" }]);
  let task = null, logAfter = 0, gone = false;

  const head = h("div", { class: "page-head" });
  const err = h("p", { class: "error", id: "task-error", hidden: true });
  const fields = h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Details")));
  const fieldsBody = h("dl", { class: "kv", id: "fields" });
  fields.append(fieldsBody);
  const specPre = h("pre", { class: "json", id: "spec" });
  const resultPre = h("pre", { class: "json", id: "result" });
  const errorsBox = h("div", { id: "errors" });
  const timeline = h("ol", { class: "timeline", id: "history" });
  const historyNote = h("p", { class: "muted", id: "history-note", hidden: true });
  const logList = h("ol", { class: "log", id: "log" });
  const logMore = h("button", { type: "button", id: "log-more", hidden: true }, "Load more");
  const policyBox = h("p", { id: "dep-policy" });
  const awaitNote = h("p", { class: "muted small", id: "await-note", hidden: true });
  const graphBox = h("div", { class: "wf-graph", id: "wf-graph", hidden: true, "aria-label": "dependencies, this task and its dependents" });
  const depsTitle = h("h3", { id: "deps-title" }, "Dependencies");
  const depsBox = h("div", { id: "deps" });
  const dependentsBox = h("div", { id: "dependents" });
  const waitLine = h("p", { id: "signal-wait", hidden: true });
  const signalList = h("ol", { class: "log", id: "signals" });
  const signalName = h("input", { type: "text", id: "signal-name", placeholder: "name", "aria-label": "signal name", maxlength: "128" });
  const signalData = h("input", { type: "text", id: "signal-data", placeholder: "data (JSON, optional)", "aria-label": "signal data" });
  const signalSend = h("button", { type: "button", id: "signal-send", onclick: sendSignal }, "Send signal");
  const signalForm = h("div", { class: "actions", id: "signal-form" }, signalName, signalData, signalSend);
  let dependents = null; // {tasks, more} once listed

  fill(main, head, err,
    h("div", { class: "cols" },
      h("div", { class: "col" },
        fields,
        h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Spec")), specPre),
        h("section", { class: "card", id: "result-card" }, h("div", { class: "card-head" }, h("h2", {}, "Result")), resultPre),
        h("section", { class: "card", id: "workflow" }, h("div", { class: "card-head" }, h("h2", {}, "Workflow")),
          policyBox, awaitNote, graphBox, depsTitle, depsBox, h("h3", {}, "Dependents"), dependentsBox)),
      h("div", { class: "col" },
        h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "History")), historyNote, timeline, errorsBox),
        h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Update log")), logList, logMore),
        h("section", { class: "card", id: "signals-card" }, h("div", { class: "card-head" }, h("h2", {}, "Signals")), waitLine, signalList, signalForm))));

  async function load() {
    let t;
    try {
      t = (await get("v1/tasks/" + enc(id), { signal })).task;
    } catch (e) {
      if (e.name === "AbortError") return;
      if (e instanceof ApiError && e.status === 404) {
        gone = true;
        renderGone();
        return;
      }
      err.hidden = false;
      err.textContent = "Could not load: " + (e instanceof ApiError ? e.describe() : e.message);
      return;
    }
    err.hidden = true;
    // A dependency ending changes the recorded results and the status;
    // only then are the dependencies' current statuses asked again.
    const wf = (x) => JSON.stringify([x.depends_on, x.dependency_results, x.on_dependency_failure, x.status])
    const depsChanged = !task || wf(task) !== wf(t);
    task = t;
    ctx.crumbs([{ text: "Overview", href: "#/" }, { text: t.queue, href: "#/queues/" + enc(t.queue) }, { text: t.id }]);
    renderHead();
    renderFields();
    specPre.textContent = t.spec === undefined ? "(none)" : pretty(t.spec);
    resultPre.textContent = t.result === undefined ? (t.status === "completed" ? "(none)" : "(not finished)") : pretty(t.result);
    renderHistory();
    renderSignals();
    if (depsChanged) renderWorkflow();
  }

  function renderGone() {
    fill(head, h("h1", { class: "task-id" }, id));
    fill(main, head, h("section", { class: "card", id: "task-gone" },
      h("p", {}, "This task does not exist (it may have been deleted or purged by retention)."),
      task ? h("p", {}, h("a", { href: "#/queues/" + enc(task.queue) }, "Back to queue " + task.queue)) : h("p", {}, h("a", { href: "#/" }, "Back to the overview"))));
  }

  function renderHead() {
    const t = task;
    const actions = [];
    if (PENDING.includes(t.status)) actions.push(h("button", { type: "button", id: "cancel", onclick: cancel }, "Cancel"));
    if (RETRYABLE.includes(t.status)) actions.push(h("button", { type: "button", id: "retry", class: "primary", onclick: retry }, "Retry"));
    if (!PENDING.includes(t.status)) actions.push(h("button", { type: "button", id: "resubmit", class: RETRYABLE.includes(t.status) ? "" : "primary", onclick: resubmit }, "Resubmit as new task"));
    actions.push(h("button", { type: "button", id: "delete", class: "danger-outline", onclick: del }, "Delete"));
    fill(head,
      h("div", { class: "title-row" }, h("h1", { class: "task-id" }, t.id), h("span", { id: "task-status" }, statusBadge(t.status))),
      h("div", { class: "actions" }, actions));
  }

  function renderFields() {
    const t = task;
    const row = (k, v, idAttr) => [h("dt", {}, k), h("dd", idAttr ? { id: idAttr } : {}, v)];
    // No policy: the queue's, or the server's default (24 retries).
    const retry = !t.retry ? "queue's policy, or the default" : t.retry.max_retries
      ? `${t.retry.max_retries}× backoff ${t.retry.base || "0s"}${t.retry.max ? " (max " + t.retry.max + ")" : ""}${t.retry.jitter && t.retry.jitter !== "none" ? ", " + t.retry.jitter + " jitter" : ""}`
      : "none";
    fill(fieldsBody,
      row("Queue", h("a", { href: "#/queues/" + enc(t.queue) }, t.queue)),
      row("Status", statusBadge(t.status)),
      row("Progress", h("span", { class: "progress-row" }, progressBar(t.progress, "task progress"), " " + Math.round((t.progress || 0) * 100) + "%"), "progress"),
      row("Priority", String(t.priority)),
      row("Labels", labelsEl(t.labels)),
      row("Attempts", t.attempts + " of " + (t.max_attempts ? t.max_attempts : "unlimited"), "attempts"),
      row("Lease", String(t.lease)),
      row("Owner", t.owner ? h("code", {}, t.owner) : "—"),
      row("Deadline", isZeroTime(t.deadline) ? "—" : h("span", {}, timeEl(t.deadline), " · " + absTime(t.deadline))),
      row("Run at", h("span", {}, timeEl(t.run_at), " · " + absTime(t.run_at))),
      row("Created", h("span", {}, timeEl(t.created), " · " + absTime(t.created))),
      row("Updated", h("span", {}, timeEl(t.updated), " · " + absTime(t.updated))),
      row("Timeout", t.timeout || "—"),
      // Fields of newer features, shown only when the task has them.
      t.max_runtime ? row("Max runtime", t.max_runtime, "max-runtime") : null,
      t.batch ? row("Batch", h("a", { href: "#/batches/" + enc(t.batch) }, t.batch), "batch") : null,
      t.sequence_key ? row("Sequence key", h("a", { href: "#/queues/" + enc(t.queue) + "/sequences/" + enc(t.sequence_key), title: "This task's sequence" },
        h("code", {}, t.sequence_key)), "sequence-key") : null,
      t.unique_key ? row("Unique key", h("code", {}, t.unique_key), "unique-key") : null,
      t.concurrency_key ? row("Concurrency key", h("code", {}, t.concurrency_key), "concurrency-key") : null,
      isZeroTime(t.started) ? null : row("Started", h("span", {}, timeEl(t.started), " · " + absTime(t.started)), "started"),
      isZeroTime(t.expires_at) ? null : row("Expires", h("span", {}, timeEl(t.expires_at), " · " + absTime(t.expires_at)), "expires-at"),
      row("Retry", retry),
      row("Version", String(t.version)));
  }

  function renderHistory() {
    const t = task;
    const hist = t.history || [];
    historyNote.hidden = !t.history_dropped;
    historyNote.textContent = t.history_dropped ? num(t.history_dropped) + " older entries were dropped (history is capped)." : "";
    const created = h("li", { class: "ev ev-created" }, h("span", { class: "dot" }),
      h("div", {}, h("b", {}, "Submitted"), " ", timeEl(t.created), h("div", { class: "muted small" }, absTime(t.created))));
    fill(timeline, t.history_dropped ? null : created, hist.map((e) => {
      const who = [];
      if (e.worker) who.push("worker ", h("code", {}, e.worker));
      if (e.lease) who.push(" · lease " + e.lease);
      if (e.progress) who.push(" · progress " + Math.round(e.progress * 100) + "%");
      return h("li", { class: "ev ev-" + e.type, "data-type": e.type }, h("span", { class: "dot" }),
        h("div", {},
          h("b", {}, label(e.type)), " ", timeEl(e.time),
          h("div", { class: "muted small" }, absTime(e.time)),
          who.length ? h("div", { class: "small" }, who) : null,
          e.error ? h("div", { class: "err small" }, h("code", {}, e.error.code), e.error.description ? " — " + e.error.description : "",
            e.error.args ? h("pre", { class: "json small" }, pretty(e.error.args)) : null) : null));
    }));
    const errs = t.errors || [];
    fill(errorsBox, errs.length ? [h("h3", {}, "Errors (" + errs.length + ")"), h("ol", { class: "errors" }, errs.map((e) =>
      h("li", {}, h("code", {}, e.code), e.description ? " — " + e.description : "", e.args ? h("pre", { class: "json small" }, pretty(e.args)) : null)))] : null);
  }

  async function loadLog(reset) {
    if (reset) { logAfter = 0; logList.replaceChildren(); }
    let entries;
    try {
      entries = (await get("v1/tasks/" + enc(id) + "/log" + query({ after: logAfter || "", limit: LOG_PAGE }), { signal })).entries || [];
    } catch (e) {
      if (e.name !== "AbortError" && !(e instanceof ApiError && e.status === 404)) {
        logList.replaceChildren(h("li", { class: "error" }, "Could not read the log: " + (e instanceof ApiError ? e.describe() : e.message)));
      }
      return;
    }
    if (!entries.length && !logAfter) logList.replaceChildren(h("li", { class: "muted empty", id: "log-empty" }, "No log entries."));
    else if (entries.length && !logAfter) logList.replaceChildren();
    for (const e of entries) {
      logList.append(h("li", { "data-seq": e.seq },
        h("div", { class: "log-head" }, h("b", {}, "#" + e.seq), " lease " + e.lease + " · ", timeEl(e.time)),
        h("pre", { class: "json" }, pretty(e.data))));
      logAfter = Math.max(logAfter, e.seq);
    }
    logMore.hidden = entries.length < LOG_PAGE;
  }
  logMore.addEventListener("click", () => loadLog(false));

  // renderWorkflow shows the policy, each dependency with its current
  // status and recorded outcome, the dependents and the graph.
  async function renderWorkflow() {
    const t = task;
    const deps = t.depends_on || [];
    const run = t.on_dependency_failure === "run";
    fill(policyBox, "If a dependency fails: ", h("b", {}, run ? "run" : "abort"),
      run ? " — this task runs once every dependency ended, whatever the outcome."
        : (t.on_dependency_failure ? "" : " (the default)") + " — this task is aborted with dependency_failed.");
    policyBox.hidden = !deps.length;
    // Children an await added are appended to depends_on, each labelled
    // norn.parent with this task's id (marked "child" below).
    const awaits = (t.history || []).filter((e) => e.type === "TaskAwait").length;
    awaitNote.hidden = !awaits;
    awaitNote.textContent = awaits ? "This task awaited children " + (awaits === 1 ? "once" : awaits + " times") +
      " while running; each await appended its children (marked child) to the dependencies and set the policy above from its on_child_failure." : "";
    depsTitle.textContent = awaits ? "Dependencies and children" : "Dependencies";
    const recorded = new Map((t.dependency_results || []).map((r) => [r.id, r]));
    if (!deps.length) {
      fill(depsBox, h("p", { class: "muted" }, "Depends on nothing."));
    } else {
      fill(depsBox, h("p", {}, recorded.size + " of " + deps.length + " ended."), h("ul", { class: "deps", id: "depends-on" }, deps.map((d) =>
        h("li", { "data-id": d }, h("a", { href: "#/tasks/" + enc(d) }, d), " ", h("span", { class: "dep-status" }),
          recorded.has(d) ? outcomeEl(recorded.get(d)) : h("span", { class: "dep-outcome muted small" }, " not ended")))));
    }
    const current = new Map();
    const children = new Set();
    const lookups = [deps.length ? statuses(deps, current, children) : null, loadDependents()];
    await Promise.all(lookups);
    for (const d of deps) {
      const el = depsBox.querySelector(`li[data-id="${CSS.escape(d)}"] .dep-status`);
      if (!el) continue;
      const st = current.get(d);
      if (children.has(d)) el.before(h("span", { class: "muted small", "data-child": "" }, "child "));
      if (st) el.replaceChildren(statusBadge(st));
      else if (st === null) {
        // Gone from the store: what is known of it is its recorded result.
        el.replaceChildren(h("span", { class: "muted", "data-gone": "" }, recorded.has(d) ? "no longer stored" : "not found"));
        const a = el.parentElement.querySelector("a");
        if (a) a.replaceWith(h("code", {}, d));
      }
    }
    renderGraph(deps, current, recorded);
  }

  // statuses fills into the current status of each of ids, null for one
  // not found, and children with those an await of this task submitted;
  // on an error it leaves them unknown (the links still work).
  async function statuses(ids, into, children) {
    const note = (x) => {
      into.set(x.id, x.status);
      if (x.labels && x.labels["norn.parent"] === id) children.add(x.id);
    };
    try {
      // One id uses the single-task path; the multi-get needs two or more.
      const uniq = [...new Set(ids)];
      for (let i = 0; i < uniq.length; i += 100) {
        const part = uniq.slice(i, i + 100);
        if (part.length === 1) {
          try { note((await get("v1/tasks/" + enc(part[0]), { signal })).task); } catch (e) {
            if (e instanceof ApiError && e.status === 404) into.set(part[0], null); else throw e;
          }
          continue;
        }
        const r = await get("v1/tasks/" + part.map(enc).join(","), { signal });
        for (const x of r.tasks || []) note(x);
        for (const m of r.missing || []) into.set(m, null);
      }
    } catch (e) { /* statuses stay unknown */ }
  }

  // loadDependents lists the first tasks depending on this one (the
  // depends_on filter is answered by index in both stores).
  async function loadDependents() {
    let r;
    try {
      r = await get("v1/tasks" + query({ depends_on: id, view: "summary", limit: DEPENDENTS_PAGE }), { signal });
    } catch (e) {
      if (e.name === "AbortError") return;
      dependents = null;
      fill(dependentsBox, h("p", { class: "error", id: "dependents-status" }, "Could not list them: " + (e instanceof ApiError ? e.describe() : e.message)));
      return;
    }
    dependents = { tasks: r.tasks || [], more: !!r.next_cursor };
    const list = h("ul", { class: "deps", id: "dependents-list" }, dependents.tasks.map(dependentEl));
    const n = dependents.tasks.length;
    fill(dependentsBox,
      h("p", { class: "muted", id: "dependents-status" }, !n ? "No task depends on this one."
        : dependents.more ? "The first " + n + " tasks that depend on this one:" : n + (n === 1 ? " task depends" : " tasks depend") + " on this one:"),
      n ? list : null,
      dependents.more ? h("button", { type: "button", id: "find-dependents", onclick: findDependents }, "List all tasks that depend on this one") : null);
  }

  function dependentEl(t) {
    return h("li", { "data-id": t.id }, h("a", { href: "#/tasks/" + enc(t.id) }, t.id), " ", statusBadge(t.status), " ", h("span", { class: "muted" }, t.queue));
  }

  async function findDependents() {
    const status = h("p", { class: "muted", id: "dependents-status" }, "Loading…");
    const list = h("ul", { class: "deps", id: "dependents-list" });
    fill(dependentsBox, status, list);
    let found = 0;
    try {
      await ndjson("v1/tasks" + query({ depends_on: id, view: "summary" }), (t) => {
        found++;
        list.append(dependentEl(t));
      }, signal);
      status.textContent = found ? num(found) + " task" + (found === 1 ? " depends" : "s depend") + " on this one:" : "No task depends on this one.";
    } catch (e) {
      if (e.name === "AbortError") return;
      status.textContent = "Could not list them: " + (e instanceof ApiError ? e.describe() : e.message);
    }
  }

  // renderGraph draws dependencies → this task → dependents as three
  // columns of boxes; it is left out when the task has neither.
  function renderGraph(deps, current, recorded) {
    const after = dependents ? dependents.tasks : [];
    graphBox.hidden = !deps.length && !after.length;
    if (graphBox.hidden) { graphBox.replaceChildren(); return; }
    const node = (nid, st, cls) => h("a", { class: "wf-node " + (cls || ""), href: "#/tasks/" + enc(nid), "data-id": nid, title: nid },
      h("span", { class: "wf-id" }, nid), st ? statusBadge(st) : null);
    const side = (items, extra, name) => {
      const shown = items.slice(0, GRAPH_SIDE);
      const more = items.length - shown.length + extra;
      return h("div", { class: "wf-col", "data-side": name }, shown, more > 0 ? h("span", { class: "muted small wf-more" }, "+" + num(more) + " more") : null,
        !items.length && !extra ? h("span", { class: "muted small" }, "none") : null);
    };
    const uniq = [...new Set(deps)];
    fill(graphBox,
      side(uniq.map((d) => {
        const st = current.get(d) || (recorded.get(d) || {}).status;
        return current.get(d) === null ? h("span", { class: "wf-node gone", "data-id": d, title: d }, h("span", { class: "wf-id" }, d),
          h("span", { class: "muted small" }, recorded.has(d) ? recorded.get(d).status : "not found")) : node(d, st);
      }), 0, "deps"),
      h("span", { class: "wf-arrow", "aria-hidden": "true" }, "→"),
      h("div", { class: "wf-col" }, h("span", { class: "wf-node self", "data-id": task.id, title: task.id }, h("span", { class: "wf-id" }, task.id), statusBadge(task.status))),
      h("span", { class: "wf-arrow", "aria-hidden": "true" }, "→"),
      side(after.map((x) => node(x.id, x.status)), dependents && dependents.more ? 1 : 0, "dependents"));
    if (dependents && dependents.more) graphBox.querySelector('[data-side="dependents"] .wf-more').textContent = "and more";
  }

  // renderSignals shows the task's last wait for a signal, the signals it
  // received, and (while it has not ended) a form to send one.
  function renderSignals() {
    const t = task;
    const w = t.signal_wait;
    waitLine.hidden = !w;
    if (w) {
      const waiting = !w.received && t.status === "scheduled";
      fill(waitLine, waiting ? "Waits for the signal " : w.received ? "Received the signal it waited for: " : "Timed out waiting for the signal ",
        h("code", {}, w.name), waiting ? h("span", {}, " until ", timeEl(w.until)) : "");
    }
    const sigs = t.signals || [];
    fill(signalList, sigs.length ? sigs.map((s) => h("li", {}, h("span", { class: "muted" }, "#" + s.seq + " "), timeEl(s.time), " ",
      h("code", {}, s.name), s.data === undefined ? "" : h("pre", {}, pretty(s.data)))) : [h("li", { class: "muted" }, "No signals.")]);
    signalForm.hidden = !PENDING.includes(t.status);
  }

  async function sendSignal() {
    const name = signalName.value.trim();
    const body = { name };
    if (signalData.value.trim() !== "") {
      try {
        body.data = JSON.parse(signalData.value);
      } catch (e) {
        toast("data must be JSON (quote a string: \"text\")", "error");
        return;
      }
    }
    signalSend.disabled = true;
    try {
      await api("POST", "v1/tasks/" + enc(id) + "/signals", body);
      toast("Signal sent.");
      signalName.value = "";
      signalData.value = "";
      await load();
    } catch (e) {
      toast(e instanceof ApiError ? e.describe() : e.message, "error");
    } finally {
      signalSend.disabled = false;
    }
  }

  async function cancel() {
    const b = document.getElementById("cancel");
    if (b) b.disabled = true;
    try {
      task = (await api("POST", "v1/tasks/" + enc(id) + "/cancel", {})).task;
      toast("Task cancelled.");
      await load();
    } catch (e) {
      toast(e instanceof ApiError ? e.describe() : e.message, "error");
      if (b) b.disabled = false;
    }
  }

  // retry runs this task again (a redrive: same id, attempts back to 0,
  // history kept), optionally with the dependents its failure aborted.
  async function retry() {
    const withDeps = h("input", { type: "checkbox", id: "retry-dependents" });
    const ok = await confirmDialog("Retry this task?", [
      h("p", {}, "Task ", h("code", {}, id), " becomes ready again (blocked while its dependencies are not completed); its attempts restart at 0 and its errors and history are kept."),
      h("label", {}, withDeps, " Also bring back the tasks that were aborted because this one failed"),
    ], "Retry");
    if (!ok) return;
    const b = document.getElementById("retry");
    if (b) b.disabled = true;
    try {
      task = (await api("POST", "v1/tasks/" + enc(id) + "/retry", withDeps.checked ? { with_dependents: true } : {})).task;
      toast("Task retried.");
      await load();
    } catch (e) {
      toast(e instanceof ApiError ? e.describe() : e.message, "error");
      if (b) b.disabled = false;
    }
  }

  async function del() {
    const ok = await confirmDialog("Delete this task?", h("p", {}, "Task ", h("code", {}, id), " is removed with its history and log. This cannot be undone."), "Delete", true);
    if (!ok) return;
    try {
      await api("DELETE", "v1/tasks/" + enc(id));
      toast("Task deleted.");
      location.hash = "#/queues/" + enc(task.queue);
    } catch (e) {
      toast(e instanceof ApiError ? e.describe() : e.message, "error");
    }
  }

  async function resubmit() {
    const t = task;
    const body = { queue: t.queue, priority: t.priority, max_attempts: t.max_attempts, timeout: t.timeout };
    if (t.max_runtime) body.max_runtime = t.max_runtime;
    if (t.spec !== undefined) body.spec = t.spec;
    if (t.labels) body.labels = t.labels;
    if (t.retry) body.retry = t.retry;
    try {
      const r = await api("POST", "v1/tasks", body);
      toast("Resubmitted as " + r.task.id + ".");
      location.hash = "#/tasks/" + enc(r.task.id);
    } catch (e) {
      toast(e instanceof ApiError ? e.describe() : e.message, "error");
    }
  }

  const refresh = throttle(() => { if (!gone) { load(); loadLog(false); } }, 500);
  const unsub = bus.subscribe((ev) => {
    if (ev.kind === "Lagged" || ev.task_id === id) refresh();
  });
  const ticker = setInterval(() => { if (task && !gone) renderFields(); }, 15000); // relative times
  load().then(() => { if (!gone) loadLog(true); });
  return () => { unsub(); refresh.cancel(); clearInterval(ticker); };
}

// outcomeEl is a dependency's recorded outcome: its status then and its
// result or error, cut short (the dependency's own page has all of it).
function outcomeEl(r) {
  const short = (x) => x.length > 120 ? x.slice(0, 120) + "…" : x;
  return h("span", { class: "dep-outcome small", "data-outcome": r.status }, " · recorded ", statusBadge(r.status),
    r.result !== undefined ? h("code", { class: "dep-result" }, " " + short(JSON.stringify(r.result))) : null,
    r.error ? h("span", { class: "err dep-error" }, " ", h("code", {}, r.error.code), r.error.description ? " — " + short(r.error.description) : "") : null);
}

function label(type) {
  return {
    TaskAssignment: "Assigned", TaskTimeout: "Timed out", TaskYield: "Yielded", TaskRetry: "Failed, will retry",
    TaskCancel: "Cancelled", TaskComplete: "Completed", TaskAbort: "Aborted", TaskRelease: "Released",
    TaskSnooze: "Snoozed", TaskRedrive: "Retried by hand", TaskAwait: "Awaits its children",
    TaskReplace: "Replaced by a later submit (new spec, labels, priority, run time)",
  }[type] || type;
}
