// Throughput: submitted / completed / failed events per second over the last
// 15 minutes, counted in the browser from the event stream (the API has no
// history of rates; /metrics is the long-term source). The counts survive a
// reload within the tab through sessionStorage.

import { h, num } from "./util.js";

export const WINDOW = 900; // seconds
const STORE_KEY = "norn.throughput";

export const SERIES = [
  { key: "submitted", label: "submitted", kinds: ["TaskSubmit"], css: "--c-submitted" },
  { key: "completed", label: "completed", kinds: ["TaskComplete"], css: "--c-completed" },
  // A failed attempt shows up as a retry, a timeout or an abort.
  { key: "failed", label: "failed", kinds: ["TaskRetry", "TaskAbort", "TaskTimeout"], css: "--c-failed" },
];

const kindToSeries = new Map();
SERIES.forEach((s, i) => s.kinds.forEach((k) => kindToSeries.set(k, i)));

export class Throughput {
  constructor(now = Date.now) {
    this.now = now;
    // buckets[i] = [sec, submitted, completed, failed], a ring indexed by sec % WINDOW.
    this.buckets = new Array(WINDOW).fill(null);
    this.restore();
  }
  add(ev) {
    const i = kindToSeries.get(ev.kind);
    if (i === undefined) return;
    const sec = Math.floor(this.now() / 1000);
    const slot = sec % WINDOW;
    let b = this.buckets[slot];
    if (!b || b[0] !== sec) b = this.buckets[slot] = [sec, 0, 0, 0];
    b[i + 1]++;
  }
  // series returns per-second counts for the last WINDOW seconds, oldest first.
  series() {
    const end = Math.floor(this.now() / 1000);
    const out = SERIES.map(() => new Array(WINDOW).fill(0));
    for (let k = 0; k < WINDOW; k++) {
      const sec = end - WINDOW + 1 + k;
      const b = this.buckets[((sec % WINDOW) + WINDOW) % WINDOW];
      if (b && b[0] === sec) for (let s = 0; s < SERIES.length; s++) out[s][k] = b[s + 1];
    }
    return out;
  }
  save() {
    try { sessionStorage.setItem(STORE_KEY, JSON.stringify(this.buckets.filter(Boolean))); } catch { /* quota */ }
  }
  restore() {
    try {
      const min = Math.floor(this.now() / 1000) - WINDOW;
      for (const b of JSON.parse(sessionStorage.getItem(STORE_KEY) || "[]")) {
        if (Array.isArray(b) && b.length === 4 && b[0] > min) this.buckets[b[0] % WINDOW] = b;
      }
    } catch { /* ignore a corrupt entry */ }
  }
}

// chartView builds the chart card: a canvas redrawn every second and a
// legend with the current rate (last 10 s) and the 15-minute total.
export function chartView(tp) {
  const canvas = h("canvas", { id: "throughput", role: "img", "aria-label": "Throughput over the last 15 minutes" });
  const legend = h("div", { class: "legend" });
  const card = h("section", { class: "card chart" },
    h("div", { class: "card-head" }, h("h2", {}, "Throughput"), h("span", { class: "muted" }, "last 15 min, per second")),
    h("div", { class: "canvas-wrap" }, canvas), legend);
  const draw = () => {
    const data = tp.series();
    drawChart(canvas, data);
    legend.replaceChildren(...SERIES.map((s, i) => {
      const d = data[i];
      const rate = d.slice(-10).reduce((a, b) => a + b, 0) / 10;
      const total = d.reduce((a, b) => a + b, 0);
      return h("span", { class: "legend-item", "data-series": s.key },
        h("i", { class: "swatch sw-" + s.key }), s.label + " ",
        h("b", { class: "rate" }, rate.toFixed(rate < 10 ? 1 : 0) + "/s"),
        h("span", { class: "muted" }, " · " + num(total) + " in 15m"));
    }));
  };
  const ro = new ResizeObserver(draw);
  ro.observe(canvas.parentElement);
  const timer = setInterval(draw, 1000);
  draw();
  return { el: card, stop: () => { clearInterval(timer); ro.disconnect(); } };
}

function niceMax(v) {
  if (v <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function drawChart(canvas, data) {
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
  // Aggregate seconds into buckets of at least 2 px so narrow screens stay readable.
  const per = Math.max(1, Math.ceil(WINDOW / (w / 2)));
  const n = Math.ceil(WINDOW / per);
  const agg = data.map((d) => {
    const out = new Array(n).fill(0);
    for (let i = 0; i < WINDOW; i++) out[Math.floor(i / per)] += d[i] / per;
    return out;
  });
  const max = niceMax(Math.max(0, ...agg.flat()));
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
  for (const m of [15, 10, 5, 0]) {
    const x = padL + w * (1 - m * 60 / WINDOW);
    ctx.fillText(m === 0 ? "now" : "-" + m + "m", Math.min(Math.max(x, padL + 12), padL + w - 12), padT + hgt + 4);
  }
  SERIES.forEach((s, i) => {
    ctx.strokeStyle = cs.getPropertyValue(s.css).trim() || "#36c";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    agg[i].forEach((v, k) => {
      const x = padL + (w * (k + 0.5)) / n;
      const y = padT + hgt - (hgt * v) / max;
      if (k === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  });
}
