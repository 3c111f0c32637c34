// Starts real norn servers for the tests: each on a free port of 127.0.0.1
// with a fresh data directory. The binary is $NORN_BIN, else built once from
// the repository with `go build ./cmd/norn`.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
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
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await exited;
    }
    if (!dir) rmSync(data, { recursive: true, force: true });
  };
  return { url, dir: data, proc, stop, stderr: () => stderr };
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
