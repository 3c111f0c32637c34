// The dashboard shell: hash routing, the sign-in dialog, role discovery and
// the shared live event stream. Views live in their own modules and return
// a cleanup function that stops their timers and subscriptions.

import { api, get, auth, enc, EventBus, ApiError } from "./api.js";
import { h, fill, toast } from "./util.js";
import * as overview from "./overview.js";
import * as queueView from "./queue.js";
import * as taskView from "./task.js";
import * as schedulesView from "./schedules.js";
import * as batchesView from "./batches.js";
import * as sequenceView from "./sequence.js";

const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");
const liveEl = document.getElementById("live");
const logoutBtn = document.getElementById("logout");

const bus = new EventBus();
bus.onState((s) => {
  liveEl.textContent = s === "live" ? "live" : s === "denied" ? "no live updates" : s;
  liveEl.dataset.state = s;
});

// session remembers what the current token may do, as GET /v1/whoami
// reports it (role and queue scope), so admin-only controls are disabled
// up front instead of failing when pressed.
const session = {
  who: null,
  admin: new Map(),
  async canAdmin(queue) {
    if (this.admin.has(queue)) return this.admin.get(queue);
    if (!this.who) {
      try {
        this.who = await api("GET", "v1/whoami", undefined, { noAuthPrompt: true });
      } catch (e) {
        return false;
      }
    }
    const w = this.who;
    const ok = w.role === "admin" && (!w.queues || w.queues.includes(queue));
    this.admin.set(queue, ok);
    return ok;
  },
  // denied records a 403 seen on an admin action so the UI disables it.
  denied(queue) { this.admin.set(queue, false); },
  reset() { this.who = null; this.admin.clear(); },
};

let current = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const qi = raw.indexOf("?");
  const path = qi >= 0 ? raw.slice(0, qi) : raw;
  const params = new URLSearchParams(qi >= 0 ? raw.slice(qi + 1) : "");
  const parts = path.split("/").filter(Boolean).map((p) => {
    try { return decodeURIComponent(p); } catch { return p; }
  });
  return { parts, params };
}

function setCrumbs(items) {
  fill(crumbs, items.map((it, i) => [
    i ? h("span", { class: "sep" }, "/") : null,
    it.href ? h("a", { href: it.href }, it.text) : h("span", {}, it.text),
  ]));
}

function route() {
  if (current) {
    current.ctrl.abort();
    try { current.cleanup && current.cleanup(); } catch (e) { console.error(e); }
    current = null;
  }
  const { parts, params } = parseHash();
  const ctrl = new AbortController();
  const ctx = { main, bus, session, params, signal: ctrl.signal, crumbs: setCrumbs };
  let cleanup;
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  if (parts.length === 0) cleanup = overview.render(ctx);
  else if (parts[0] === "queues" && parts[1] && parts[2] === "sequences" && parts[3]) cleanup = sequenceView.render(ctx, parts[1], parts.slice(3).join("/"));
  else if (parts[0] === "queues" && parts[1]) cleanup = queueView.render(ctx, parts[1]);
  else if (parts[0] === "schedules") cleanup = schedulesView.render(ctx);
  else if (parts[0] === "batches" && parts[1]) cleanup = batchesView.renderBatch(ctx, parts.slice(1).join("/"));
  else if (parts[0] === "batches") cleanup = batchesView.renderList(ctx);
  else if (parts[0] === "tasks" && parts[1]) cleanup = taskView.render(ctx, parts.slice(1).join("/"));
  else {
    setCrumbs([{ text: "Not found" }]);
    fill(main, h("h1", {}, "Not found"), h("p", {}, "No page at ", h("code", {}, location.hash), ". ", h("a", { href: "#/" }, "Back to the overview")));
  }
  current = { ctrl, cleanup };
  document.title = "Norn" + (parts[1] ? " · " + parts[1] : "");
}

// --- authentication ---------------------------------------------------------

let signingIn = null;

// checkAccess verifies the token can read the dashboard's data. A worker
// token is refused: it may claim tasks but not list queues.
async function checkAccess() {
  try {
    await get("v1/queues", { noAuthPrompt: true });
    return "ok";
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return "unauthenticated";
    if (e instanceof ApiError && e.status === 403) return "forbidden";
    throw e;
  }
}

const REFUSED = "This token cannot read queues — it looks like a worker token. The dashboard needs a client or admin token.";

function signIn(message) {
  if (signingIn) return signingIn;
  bus.stop();
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true,
    placeholder: "Bearer token", "aria-label": "Token" });
  const msg = h("p", { class: "msg", id: "signin-msg", role: "alert" }, message || "");
  const form = h("form", { class: "signin", id: "signin" },
    h("h2", {}, "Sign in"),
    h("p", {}, "This Norn server requires a token. It is kept in this tab only (sessionStorage)."),
    input, msg,
    h("div", { class: "actions" }, h("button", { class: "primary", type: "submit", id: "signin-submit" }, "Sign in")));
  const d = h("dialog", { class: "modal", id: "signin-dialog" }, form);
  d.addEventListener("cancel", (e) => e.preventDefault());
  signingIn = new Promise((resolve) => {
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const tok = input.value.trim();
      if (!tok) return;
      const prev = auth.token;
      auth.token = tok;
      let res;
      try { res = await checkAccess(); } catch (err) { res = "error:" + err.message; }
      if (res === "ok") {
        d.close(); d.remove(); signingIn = null;
        resolve();
        return;
      }
      auth.token = prev;
      msg.textContent = res === "unauthenticated" ? "The server did not accept this token."
        : res === "forbidden" ? REFUSED : "Could not reach the server: " + res.slice(6);
      input.select();
    });
  });
  document.body.append(d);
  d.showModal();
  input.focus();
  return signingIn;
}

auth.onUnauthenticated = () => {
  if (signingIn) return;
  auth.token = "";
  signIn("Your token was not accepted; please sign in again.").then(started);
};

function started() {
  logoutBtn.hidden = !auth.token;
  session.reset();
  bus.restart();
  route();
}

logoutBtn.addEventListener("click", () => {
  auth.token = "";
  session.reset();
  location.hash = "#/";
  boot();
});

function refused() {
  bus.stop();
  setCrumbs([{ text: "Access refused" }]);
  fill(main, h("section", { class: "card refused", id: "refused" },
    h("h1", {}, "Access refused"), h("p", {}, REFUSED),
    h("button", { class: "primary", type: "button", onclick: () => { auth.token = ""; boot(); } }, "Use another token")));
}

async function boot() {
  let res;
  try { res = await checkAccess(); } catch (e) {
    fill(main, h("p", { class: "error" }, "Cannot reach the Norn API: " + e.message));
    setTimeout(boot, 3000);
    return;
  }
  if (res === "unauthenticated") { auth.token = ""; await signIn(); return started(); }
  if (res === "forbidden") return refused();
  started();
}

addEventListener("hashchange", () => { if (!signingIn) route(); });
addEventListener("unhandledrejection", (e) => {
  if (e.reason && e.reason.name === "AbortError") { e.preventDefault(); return; }
  if (e.reason instanceof ApiError) { toast(e.reason.describe(), "error"); e.preventDefault(); }
});
boot();
