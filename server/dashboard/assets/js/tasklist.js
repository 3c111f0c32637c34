// The task table shared by the queue page and the batch page: one row a
// task (summary view), the id a link to its page.

import { enc } from "./api.js";
import { h, statusBadge, progressBar, timeEl, labelsEl } from "./util.js";

// taskTable renders tasks; showQueue adds a queue column (a batch's members
// span queues), onLabel makes labels clickable filters.
export function taskTable(tasks, { showQueue = false, onLabel } = {}) {
  const cols = ["ID", showQueue ? "Queue" : null, "Status", "Priority", "Progress", "Attempts", "Labels", "Created", "Updated"].filter(Boolean);
  return h("table", { class: "grid tasks" },
    h("thead", {}, h("tr", {}, cols.map((x) => h("th", {}, x)))),
    h("tbody", {}, tasks.map((t) => h("tr", { "data-id": t.id },
      h("td", { class: "id", "data-label": "ID" }, h("a", { href: "#/tasks/" + enc(t.id) }, t.id)),
      showQueue ? h("td", { class: "queue", "data-label": "Queue" }, h("a", { href: "#/queues/" + enc(t.queue) }, t.queue)) : null,
      h("td", { "data-label": "Status", class: "status" }, statusBadge(t.status)),
      h("td", { class: "num", "data-label": "Priority" }, String(t.priority)),
      h("td", { "data-label": "Progress" }, progressBar(t.progress)),
      h("td", { class: "num", "data-label": "Attempts" }, t.attempts + (t.max_attempts ? "/" + t.max_attempts : "")),
      h("td", { "data-label": "Labels" }, labelsEl(t.labels, onLabel)),
      h("td", { "data-label": "Created" }, timeEl(t.created)),
      h("td", { "data-label": "Updated" }, timeEl(t.updated))))));
}
