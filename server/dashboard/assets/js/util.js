// Small DOM and formatting helpers. Everything that comes from the API is
// inserted as text (never as HTML), so a task spec or label cannot inject
// markup even if the Content-Security-Policy were weaker.

export const STATUSES = ["scheduled", "blocked", "ready", "running", "completed", "aborted", "cancelled"];
export const PENDING = ["scheduled", "blocked", "ready", "running"];
export const TERMINAL = ["completed", "aborted", "cancelled"];
// RETRYABLE: the statuses a retry (redrive) accepts.
export const RETRYABLE = ["aborted", "cancelled"];

// h builds an element: h("a", {href: "#/", class: "x", onclick: fn}, "text", child).
// Attributes starting with "on" become listeners; null/undefined/false are skipped.
export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "value" || k === "checked" || k === "disabled" || k === "hidden") e[k] = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  append(e, children);
  return e;
}

function append(e, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(e, c);
    else if (c instanceof Node) e.append(c);
    else e.append(document.createTextNode(String(c)));
  }
}

// clear empties an element and appends children.
export function fill(e, ...children) {
  e.replaceChildren();
  append(e, children);
  return e;
}

export function statusBadge(s) {
  return h("span", { class: "badge st-" + s, "data-status": s }, s);
}

export function progressBar(p, label) {
  const pct = Math.max(0, Math.min(1, Number(p) || 0)) * 100;
  const bar = h("span", { class: "progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100,
    "aria-valuenow": Math.round(pct), "aria-label": label || "progress" }, h("span", { class: "fill" }));
  // A CSS custom property set through the CSSOM is allowed under style-src 'self'
  // (only inline style attributes in markup are blocked).
  bar.firstChild.style.width = pct.toFixed(1) + "%";
  return bar;
}

const nf = new Intl.NumberFormat();
export const num = (n) => nf.format(Number(n) || 0);

export function isZeroTime(t) {
  return !t || t.startsWith("0001-01-01");
}

// ago formats a time relative to now ("3s ago", "in 2m").
export function ago(t, now = Date.now()) {
  if (isZeroTime(t)) return "—";
  const d = (new Date(t).getTime() - now) / 1000;
  const a = Math.abs(d);
  let s;
  if (a < 1) return "now";
  if (a < 60) s = Math.round(a) + "s";
  else if (a < 3600) s = Math.round(a / 60) + "m";
  else if (a < 86400) s = Math.round(a / 3600) + "h";
  else s = Math.round(a / 86400) + "d";
  return d < 0 ? s + " ago" : "in " + s;
}

export function absTime(t) {
  if (isZeroTime(t)) return "—";
  const d = new Date(t);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").replace(/Z$/, " UTC");
}

// timeEl shows a relative time with the absolute one as a tooltip.
export function timeEl(t) {
  if (isZeroTime(t)) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: t, title: absTime(t) }, ago(t));
}

// pretty renders a JSON value (as parsed from an API response) indented.
export function pretty(v) {
  if (v === undefined) return "";
  return JSON.stringify(v, null, 2);
}

// Go duration strings: "1h2m3.5s", "150ms", "0s".
const durRe = /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/;
export function validDuration(s) {
  return s === "0" || durRe.test(s);
}

export function labelsEl(labels, onClick) {
  const keys = Object.keys(labels || {}).sort();
  if (!keys.length) return h("span", { class: "muted" }, "—");
  return h("span", { class: "labels" }, keys.map((k) => {
    const text = k + ":" + labels[k];
    return onClick
      ? h("button", { class: "chip", type: "button", title: "Filter by " + text, onclick: () => onClick(k, labels[k]) }, text)
      : h("span", { class: "chip" }, text);
  }));
}

// debounce delays fn until calls stop for ms.
export function debounce(fn, ms) {
  let t;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}

// throttle runs fn at most once per ms, trailing call included, so a burst
// of events causes one refresh now and one after the burst.
export function throttle(fn, ms) {
  let last = 0, timer = null;
  const run = () => { last = Date.now(); timer = null; fn(); };
  const t = () => {
    if (timer) return;
    const wait = last + ms - Date.now();
    if (wait <= 0) run(); else timer = setTimeout(run, wait);
  };
  t.cancel = () => { clearTimeout(timer); timer = null; };
  return t;
}

export function toast(msg, kind = "info") {
  const box = document.getElementById("toasts");
  const t = h("div", { class: "toast " + kind, role: kind === "error" ? "alert" : "status" }, msg);
  box.append(t);
  setTimeout(() => t.remove(), kind === "error" ? 8000 : 4000);
  return t;
}

// confirmDialog shows a modal and resolves true when confirmed.
export function confirmDialog(title, body, okLabel = "Confirm", danger = false) {
  return new Promise((resolve) => {
    const ok = h("button", { class: danger ? "danger" : "primary", type: "button", id: "confirm-ok" }, okLabel);
    const cancel = h("button", { type: "button", id: "confirm-cancel" }, "Cancel");
    const d = h("dialog", { class: "modal", id: "confirm" },
      h("h2", {}, title), h("div", { class: "body" }, body), h("div", { class: "actions" }, cancel, ok));
    const done = (v) => { d.close(); d.remove(); resolve(v); };
    ok.addEventListener("click", () => done(true));
    cancel.addEventListener("click", () => done(false));
    d.addEventListener("cancel", (e) => { e.preventDefault(); done(false); });
    document.body.append(d);
    d.showModal();
    cancel.focus();
  });
}
