// Starts real norn servers for the tests: each on a free port of 127.0.0.1
// with a fresh data directory. The binary is $NORN_BIN, else built once from
// the repository with `go build ./cmd/norn`.
//
// When $NORN_OAPROXY_BIN names the oaproxy binary (internal/oaproxy), every
// plain-HTTP server is reached through it: the proxy checks each request and
// response against server/openapi.json, and stop() throws the mismatches it
// logged. $NORN_OAPROXY_LOG, when set, also receives them (CI checks it is
// empty after the run).
import { execFileSync, spawn } from "node:child_process";
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, "../../..");

let built;

/** The norn binary to test against ($NORN_BIN, which `npm test` sets, else built for this process). */
export function nornBin() {
  if (process.env.NORN_BIN) return process.env.NORN_BIN;
  if (!built) {
    const dir = mkdtempSync(path.join(os.tmpdir(), "norn-ts-bin-"));
    built = path.join(dir, "norn");
    execFileSync("go", ["build", "-o", built, "./cmd/norn"], { cwd: repo, stdio: ["ignore", "inherit", "inherit"] });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

/**
 * Starts `norn server` with extra args; resolves to {url, dir, proc, stop}
 * once it printed the address it listens on.
 */
export async function startServer(args = [], { dir } = {}) {
  const data = dir ?? mkdtempSync(path.join(os.tmpdir(), "norn-ts-data-"));
  const proc = spawn(
    nornBin(),
    ["server", "--addr", "127.0.0.1:0", "--store", `embedded:${data}`, "--dashboard=false", ...args],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  proc.stderr.on("data", (b) => {
    stderr += b;
    if (stderr.length > 1 << 16) stderr = stderr.slice(-(1 << 15));
  });
  const url = await new Promise((resolve, reject) => {
    let out = "";
    const onData = (b) => {
      out += b;
      const m = /norn: listening on (\S+)/.exec(out);
      if (m) {
        proc.stdout.off("data", onData);
        resolve(m[1]);
      }
    };
    proc.stdout.on("data", onData);
    proc.once("exit", (code) => reject(new Error(`norn server exited (${code}) before listening:\n${stderr}`)));
  });
  proc.stdout.resume();
  let proxy;
  let proxyLog;
  let reached = url;
  if (process.env.NORN_OAPROXY_BIN && url.startsWith("http://")) {
    const logDir = mkdtempSync(path.join(os.tmpdir(), "norn-ts-oaproxy-"));
    proxyLog = path.join(logDir, "oaproxy.log");
    proxy = spawn(process.env.NORN_OAPROXY_BIN, ["-upstream", url, "-log", proxyLog], { stdio: ["ignore", "pipe", "inherit"] });
    reached = await listening(proxy, /oaproxy: listening on (\S+)/, () => "");
  }
  const stop = async () => {
    await kill(proc);
    if (!dir) rmSync(data, { recursive: true, force: true });
    if (!proxy) return;
    const p = proxy;
    proxy = undefined;
    await kill(p);
    const mismatches = existsSync(proxyLog) ? readFileSync(proxyLog, "utf8") : "";
    rmSync(path.dirname(proxyLog), { recursive: true, force: true });
    if (mismatches) {
      if (process.env.NORN_OAPROXY_LOG) appendFileSync(process.env.NORN_OAPROXY_LOG, mismatches);
      throw new Error(`the traffic does not match server/openapi.json:\n${mismatches}`);
    }
  };
  return { url: reached, upstream: url, dir: data, proc, stop, stderr: () => stderr };
}

/** Resolves to the URL a child process prints with re, once it has. */
function listening(child, re, stderr) {
  return new Promise((resolve, reject) => {
    let out = "";
    const onData = (b) => {
      out += b;
      const m = re.exec(out);
      if (m) {
        child.stdout.off("data", onData);
        child.stdout.resume();
        resolve(m[1]);
      }
    };
    child.stdout.on("data", onData);
    child.once("exit", (code) => reject(new Error(`${path.basename(child.spawnfile)} exited (${code}) before listening:\n${stderr()}`)));
  });
}

async function kill(child) {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  }
}

/** Polls cond every 20 ms until it returns a truthy value (returned) or ms pass. */
export async function eventually(cond, ms = 10_000, what = "condition") {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function cleanup(p) {
  rmSync(p, { recursive: true, force: true });
}

/** Registers a worker for queue and claims its one ready task: [worker id, task]. */
export async function claimOne(c, queue, name = "test-worker") {
  const wid = await c.registerWorker(name, [queue]);
  const got = await c.claim(wid, queue, { wait: 5000 });
  if (got.length !== 1) throw new Error(`claimed ${got.length} tasks from ${queue}, want one`);
  return [wid, got[0]];
}

/** Waits until task id is in one of the statuses want, and returns it. */
export async function waitStatus(c, id, ...want) {
  return eventually(async () => {
    const t = await c.get(id);
    return want.includes(t.status) ? t : undefined;
  }, 15_000, `task ${id} to be ${want.join("/")}`);
}

/** The types of a task's history entries, in order. */
export const historyTypes = (t) => (t.history ?? []).map((h) => h.type);
