// Throughput: submitted / completed / failed tasks per minute over the last
// hour, 6 hours or 24 hours, from the server's history
// (GET /v1/stats/throughput), so the chart is full on the first page load.
// The server counts from the store's events; the page only fetches: at
// once, then the last two minutes again after events (at most once a
// second) and every 15 seconds as the window slides.

import { get, query, ApiError } from "./api.js";
import { h, num, throttle } from "./util.js";

export const RANGES = [
  { key: "1h", label: "1 h", minutes: 60 },
  { key: "6h", label: "6 h", minutes: 360 },
  { key: "24h", label: "24 h", minutes: 1440 },
];
const RANGE_KEY = "norn.throughput.range";
const MINUTE = 60 * 1000;

export const SERIES = [
  { key: "submitted", label: "submitted", css: "--c-submitted" },
  { key: "completed", label: "completed", css: "--c-completed" },
  // A failed attempt shows up as a retry, a timeout or an abort.
  { key: "failed", label: "failed", css: "--c-failed" },
];

// The event kinds the server counts; other events cannot change the chart.
const COUNTED = new Set(["TaskSubmit", "TaskComplete", "TaskRetry", "TaskAbort", "TaskTimeout"]);

// History holds the fetched minutes: start of minute (ms) → [submitted,
// completed, failed].
export class History {
  constructor() {
    this.minutes = new Map();
    this.until = 0;
    this.recordingSince = 0;
  }
  // merge replaces every minute from the answer's since on with its points.
  merge(ans) {
    const since = Date.parse(ans.since);
    for (const k of this.minutes.keys()) if (k >= since) this.minutes.delete(k);
    for (const p of ans.points || []) this.minutes.set(Date.parse(p.t), [p.submitted, p.completed, p.failed]);
    this.until = Date.parse(ans.until);
    this.recordingSince = Date.parse(ans.recording_since);
    const oldest = this.until - 1440 * MINUTE;
    for (const k of this.minutes.keys()) if (k <= oldest) this.minutes.delete(k);
  }
  // series returns per-minute counts of the last n minutes, oldest first.
  series(n) {
    const out = SERIES.map(() => new Array(n).fill(0));
    for (let i = 0; i < n; i++) {
      const c = this.minutes.get(this.until - (n - 1 - i) * MINUTE);
      if (c) for (let s = 0; s < SERIES.length; s++) out[s][i] = c[s];
    }
    return out;
  }
}

// chartView builds the chart card for all visible queues, or one queue.
export function chartView({ bus, signal }, queue) {
  let range = RANGES.find((r) => r.key === sessionStorage.getItem(RANGE_KEY)) || RANGES[0];
  const hist = new History();
  const canvas = h("canvas", { id: "throughput", role: "img", "aria-label": "Tasks per minute" });
  const legend = h("div", { class: "legend" });
  const note = h("p", { class: "muted chart-note", id: "throughput-note", hidden: true });
  const buttons = RANGES.map((r) => h("button", { type: "button", class: "chip range-chip", "data-range": r.key,
    "aria-pressed": String(r === range), onclick: () => { range = r; sessionStorage.setItem(RANGE_KEY, r.key); draw(); } }, r.label));
  const card = h("section", { class: "card chart" },
    h("div", { class: "card-head" }, h("h2", {}, "Throughput"), h("span", { class: "muted" }, "per minute"),
      h("span", { class: "ranges", role: "group", "aria-label": "Time range" }, buttons)),
    h("div", { class: "canvas-wrap" }, canvas), legend, note);
  let loaded = false, stopped = false;

  async function fetchSince(since) {
    const q = { queue, since };
    try {
      hist.merge(await get("v1/stats/throughput" + query(q), { signal }));
      loaded = true;
      note.hidden = true;
    } catch (e) {
      if (e.name === "AbortError") return;
      note.hidden = false;
      note.textContent = "Could not load the history: " + (e instanceof ApiError ? e.describe() : e.message);
    }
    if (!stopped) draw();
  }
  // After the first answer only the last two minutes can still change.
  const refresh = throttle(() => fetchSince(loaded ? "2m" : "24h"), 1000);
  const unsub = bus.subscribe((ev) => { if (COUNTED.has(ev.kind) && (!queue || ev.queue === queue)) refresh(); });
  const timer = setInterval(refresh, 15000);

  function draw() {
    buttons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.range === range.key)));
    canvas.setAttribute("aria-label", "Tasks per minute over the last " + range.label);
    const n = range.minutes;
    const data = hist.series(n);
    drawChart(canvas, data, range, hist);
    legend.replaceChildren(...SERIES.map((s, i) => {
      const d = data[i];
      // The minute under way is still growing: the rate is the last whole minute's.
      const rate = n > 1 ? d[n - 2] : d[n - 1];
      const total = d.reduce((a, b) => a + b, 0);
      return h("span", { class: "legend-item", "data-series": s.key },
        h("i", { class: "swatch sw-" + s.key }), s.label + " ",
        h("b", { class: "rate" }, num(rate) + "/min"),
        h("span", { class: "muted" }, " · " + num(total) + " in " + range.label.replace(" ", "")));
    }));
  }
  const ro = new ResizeObserver(() => { if (!stopped) draw(); });
  ro.observe(canvas.parentElement);
  draw();
  fetchSince("24h");
  return { el: card, stop: () => { stopped = true; unsub(); refresh.cancel(); clearInterval(timer); ro.disconnect(); } };
}

function niceMax(v) {
  if (v <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function drawChart(canvas, data, range, hist) {
  const wrap = canvas.parentElement;
  const cssW = Math.max(100, wrap.clientWidth), cssH = Math.max(120, wrap.clientHeight);
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  const cs = getComputedStyle(document.documentElement);
  const fg = cs.getPropertyValue("--muted").trim() || "#888";
  const grid = cs.getPropertyValue("--border").trim() || "#ddd";
  const padL = 36, padR = 8, padT = 8, padB = 20;
  const w = cssW - padL - padR, hgt = cssH - padT - padB;
  const n = range.minutes;
  // Minutes per drawn point: at least 2 px per point so narrow screens stay
  // readable; a point is the mean per minute of the minutes it covers.
  const per = Math.max(1, Math.ceil(n / (w / 2)));
  const m = Math.ceil(n / per);
  // The minute under way is still growing: it is left out, so the line
  // does not dip at its end (null: a point with no whole minute).
  const agg = data.map((d) => {
    const sum = new Array(m).fill(0), cnt = new Array(m).fill(0);
    for (let i = 0; i < n - 1; i++) { sum[Math.floor(i / per)] += d[i]; cnt[Math.floor(i / per)]++; }
    return sum.map((v, b) => (cnt[b] ? v / cnt[b] : null));
  });
  const max = niceMax(Math.max(0, ...agg.flat().filter((v) => v !== null)));
  // Minutes before the server started recording are unknown, not idle.
  if (hist.until && hist.recordingSince) {
    const known = (hist.recordingSince - (hist.until - (n - 1) * MINUTE)) / (n * MINUTE);
    if (known > 0) {
      const x = padL + w * Math.min(1, known);
      ctx.fillStyle = grid;
      ctx.globalAlpha = 0.35;
      ctx.fillRect(padL, padT, x - padL, hgt);
      ctx.globalAlpha = 1;
    }
  }
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = fg;
  ctx.strokeStyle = grid;
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let g = 0; g <= 4; g++) {
    const y = padT + hgt - (hgt * g) / 4;
    ctx.beginPath(); ctx.moveTo(padL, Math.round(y) + 0.5); ctx.lineTo(padL + w, Math.round(y) + 0.5); ctx.stroke();
    const v = (max * g) / 4;
    ctx.fillText(Number.isInteger(v) ? String(v) : String(+v.toFixed(2)), padL - 4, y);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const ticks = n <= 60 ? [60, 45, 30, 15, 0] : n <= 360 ? [360, 240, 120, 0] : [1440, 1080, 720, 360, 0];
  for (const t of ticks) {
    const x = padL + w * (1 - t / n);
    const label = t === 0 ? "now" : t % 60 === 0 ? "-" + t / 60 + "h" : "-" + t + "m";
    ctx.fillText(label, Math.min(Math.max(x, padL + 12), padL + w - 12), padT + hgt + 4);
  }
  canvas.dataset.lastPoint = JSON.stringify(agg.map((a) => a.filter((v) => v !== null).at(-1) ?? null));
  SERIES.forEach((s, i) => {
    ctx.strokeStyle = cs.getPropertyValue(s.css).trim() || "#36c";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    agg[i].forEach((v, k) => {
      if (v === null) return;
      const x = padL + (w * (k + 0.5)) / m;
      const y = padT + hgt - (hgt * v) / max;
      if (k === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  });
}
