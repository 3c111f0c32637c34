// The HTTP API client: every call is a fetch() with the bearer token in the
// Authorization header and JSON bodies. There are no cookies and no form
// posts, so another site cannot make the browser act on the user's behalf
// (CSRF): it can neither read the token nor send the header cross-origin.

const TOKEN_KEY = "norn.token";

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message || code || "HTTP " + status);
    this.status = status;
    this.code = code || "";
    this.field = field || "";
  }
  describe() {
    if (this.status === 403) return "Not allowed with this token: " + this.message;
    return (this.field ? this.field + ": " : "") + this.message;
  }
}

export const auth = {
  get token() { return sessionStorage.getItem(TOKEN_KEY) || ""; },
  set token(v) {
    if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY);
  },
  // onUnauthenticated is set by the app to ask for a token.
  onUnauthenticated: () => {},
};

function headers(extra) {
  const h = { Accept: "application/json", ...extra };
  if (auth.token) h.Authorization = "Bearer " + auth.token;
  return h;
}

async function errorFrom(resp) {
  let code = "", message = resp.statusText, field = "";
  try {
    const j = await resp.json();
    if (j && j.error) ({ code, message, field } = j.error);
  } catch { /* not JSON: keep the status text */ }
  return new ApiError(resp.status, code, message, field);
}

// api calls method path (relative, e.g. "v1/queues") with an optional JSON body.
export async function api(method, path, body, opts = {}) {
  const init = { method, headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}),
    signal: opts.signal, cache: "no-store", credentials: "omit" };
  if (body !== undefined) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  if (!resp.ok) {
    const err = await errorFrom(resp);
    if (resp.status === 401 && !opts.noAuthPrompt) auth.onUnauthenticated(err);
    throw err;
  }
  if (resp.status === 204) return {};
  return resp.json();
}

export const get = (path, opts) => api("GET", path, undefined, opts);

// query turns {queue: "q", status: ["a","b"], label: ["k:v"]} into a query string.
export function query(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    if (Array.isArray(v)) {
      if (k === "status") { if (v.length) u.set(k, v.join(",")); }
      else for (const x of v) u.append(k, x);
    } else u.set(k, String(v));
  }
  const s = u.toString();
  return s ? "?" + s : "";
}

export const enc = encodeURIComponent;

// lines reads a fetch response body line by line.
async function* lines(resp, signal) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      if (signal && signal.aborted) return;
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        let line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        yield line;
      }
    }
    if (buf) yield buf;
  } finally {
    reader.releaseLock();
  }
}

// ndjson streams every task matching params (Accept: application/x-ndjson),
// calling onTask for each; it returns the number read. An error line ends
// the stream with an ApiError.
export async function ndjson(path, onTask, signal) {
  const resp = await fetch(path, { headers: headers({ Accept: "application/x-ndjson" }), signal, cache: "no-store", credentials: "omit" });
  if (!resp.ok) {
    const err = await errorFrom(resp);
    if (resp.status === 401) auth.onUnauthenticated(err);
    throw err;
  }
  let n = 0;
  for await (const line of lines(resp, signal)) {
    if (!line.trim()) continue;
    const v = JSON.parse(line);
    if (v.error) throw new ApiError(500, v.error.code, v.error.message, v.error.field);
    n++;
    if (onTask(v) === false) break;
  }
  return n;
}

// EventBus keeps one connection to /v1/events and fans events out to
// subscribers. It reads the SSE stream with fetch() rather than EventSource
// because EventSource cannot send an Authorization header; it reconnects
// with backoff and tells subscribers (kind "Lagged") that they may have
// missed events after a reconnect.
export class EventBus {
  constructor() {
    this.subs = new Set();
    this.stateSubs = new Set();
    this.state = "offline";
    this.ctrl = null;
    this.stopped = true;
  }
  subscribe(fn) { this.subs.add(fn); return () => this.subs.delete(fn); }
  onState(fn) { this.stateSubs.add(fn); fn(this.state); return () => this.stateSubs.delete(fn); }
  setState(s) {
    if (s === this.state) return;
    this.state = s;
    for (const f of this.stateSubs) f(s);
  }
  emit(ev) {
    for (const f of this.subs) {
      try { f(ev); } catch (e) { console.error(e); }
    }
  }
  start() {
    if (!this.stopped) return;
    this.stopped = false;
    this.loop();
  }
  stop() {
    this.stopped = true;
    if (this.ctrl) this.ctrl.abort();
    this.setState("offline");
  }
  restart() { this.stop(); this.start(); }
  async loop() {
    let delay = 500, first = true;
    while (!this.stopped) {
      const ctrl = new AbortController();
      this.ctrl = ctrl;
      try {
        const resp = await fetch("v1/events", { headers: headers({ Accept: "text/event-stream" }), signal: ctrl.signal, cache: "no-store", credentials: "omit" });
        if (!resp.ok) {
          const err = await errorFrom(resp);
          if (resp.status === 401 || resp.status === 403) { this.setState("denied"); this.stopped = true; return; }
          throw err;
        }
        this.setState("live");
        if (!first) this.emit({ kind: "Lagged", time: new Date().toISOString() });
        first = false;
        delay = 500;
        let kind = "", data = [];
        for await (const line of lines(resp, ctrl.signal)) {
          if (line === "") {
            if (data.length) {
              try {
                const ev = JSON.parse(data.join("\n"));
                if (!ev.kind && kind) ev.kind = kind;
                this.emit(ev);
              } catch (e) { console.warn("bad event", e); }
            }
            kind = ""; data = [];
          } else if (line.startsWith(":")) {
            // keep-alive comment
          } else if (line.startsWith("event:")) kind = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
      } catch (e) {
        if (this.stopped) return;
      }
      if (this.stopped) return;
      this.setState("reconnecting");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }
}
