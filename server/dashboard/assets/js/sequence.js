// A sequence's page: the tasks of one queue submitted with one
// sequence_key run one at a time in submit order; this shows the head,
// whether the sequence is halted (and how to go on), and how many wait.

import { get, enc, ApiError } from "./api.js";
import { h, fill, num, statusBadge, throttle } from "./util.js";

function errorText(e) {
  return e instanceof ApiError ? e.describe() : e.message;
}

export function render(ctx, queue, key) {
  const { main, bus, signal } = ctx;
  const path = "v1/queues/" + enc(queue) + "/sequences/" + enc(key);
  ctx.crumbs([{ text: "Overview", href: "#/" }, { text: queue, href: "#/queues/" + enc(queue) }, { text: "Sequence " + key }]);
  const err = h("p", { class: "error", id: "sequence-error", hidden: true });
  const fields = h("dl", { class: "kv", id: "sequence-fields" });
  const halt = h("div", { id: "sequence-halted", hidden: true });
  fill(main,
    h("div", { class: "page-head" }, h("div", { class: "title-row" }, h("h1", { class: "batch-id", id: "sequence-key" }, key))),
    err, halt,
    h("section", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Sequence")), fields,
      h("p", { class: "muted small" }, "The tasks of this queue submitted with this sequence key run one at a time, in the order they were "
        + "submitted, whatever their priority. The head is the one that may run now; the others wait, blocked.")));

  function renderSeq(s) {
    const row = (k, v, idAttr) => [h("dt", {}, k), h("dd", idAttr ? { id: idAttr } : {}, v)];
    const head = s.head
      ? h("span", {}, h("a", { href: "#/tasks/" + enc(s.head) }, s.head), " ", statusBadge(s.head_status))
      : h("span", { class: "muted" }, "none — the next task submitted with this key runs at once");
    fill(fields,
      row("Queue", h("a", { href: "#/queues/" + enc(queue) }, queue)),
      row("Key", h("code", {}, s.key)),
      row("Head", head, "sequence-head"),
      row("Halted", s.halted ? "yes" : "no", "sequence-halted-field"),
      row("Waiting", num(s.waiting), "sequence-waiting"));
    halt.hidden = !s.halted;
    if (s.halted) {
      fill(halt, h("p", { class: "note" },
        "Halted: the head ended aborted, so the ", num(s.waiting), " waiting ", s.waiting === 1 ? "task does" : "tasks do",
        " not run. To go on, open ", h("a", { href: "#/tasks/" + enc(s.head) }, "the head"),
        " and retry it (it runs again as the head) or delete it (the next task becomes the head). "
        + "A queue set with sequence_on_failure \"continue\" moves on past an aborted head instead."));
    }
  }

  async function load() {
    try {
      const s = (await get(path, { signal })).sequence;
      err.hidden = true;
      renderSeq(s);
    } catch (e) {
      if (e.name === "AbortError") return;
      err.hidden = false;
      err.textContent = "Could not load: " + errorText(e);
    }
  }

  // No event names a sequence: re-read on the queue's task events, throttled.
  const refresh = throttle(load, 1000);
  const unsub = bus.subscribe((ev) => { if (ev.kind !== "TaskProgress" && (!ev.queue || ev.queue === queue)) refresh(); });
  const timer = setInterval(refresh, 10000);
  load();
  return () => { unsub(); refresh.cancel(); clearInterval(timer); };
}
