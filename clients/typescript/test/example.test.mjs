// examples/typescript/worker.ts, installed the way its README says: the SDK
// linked from the repository by npm (offline), the example type-checked and
// compiled by tsc, then run as a process against a real server.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";
import { eventually, here, repo, startServer } from "./server.mjs";

const pkg = path.resolve(here, "..");
let srv;
let dir;

before(async () => {
  srv = await startServer();
  dir = mkdtempSync(path.join(os.tmpdir(), "norn-ts-example-"));
});
after(async () => {
  await srv?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the example worker installs, compiles and serves both queues", async () => {
  writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "example", private: true, type: "module" }));
  execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", pkg], { cwd: dir, stdio: "pipe" });
  copyFileSync(path.join(repo, "examples", "typescript", "worker.ts"), path.join(dir, "worker.ts"));
  execFileSync(
    path.join(pkg, "node_modules", ".bin", "tsc"),
    ["worker.ts", "--strict", "--module", "nodenext", "--target", "es2022", "--outDir", "build", "--typeRoots", path.join(pkg, "node_modules", "@types")],
    { cwd: dir, stdio: "pipe" },
  );

  const c = new Client({ url: srv.url });
  await c.submitBatch([
    { id: "ex-ada", queue: "ts-greetings", spec: { name: "Ada" } },
    { id: "ex-bad", queue: "ts-greetings", spec: {} },
    { id: "ex-steps", queue: "ts-steps", spec: { steps: 4 } },
  ]);
  const proc = spawn(process.execPath, ["build/worker.js"], {
    cwd: dir,
    env: { ...process.env, NORN_SERVER: srv.url, CONCURRENCY: "2" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  proc.stdout.on("data", (b) => (out += b));
  proc.stderr.on("data", (b) => (out += b));
  const exited = new Promise((r) => proc.once("exit", (code) => r(code)));
  try {
    const done = async (id) =>
      eventually(async () => {
        const t = await c.get(id);
        return ["completed", "aborted"].includes(t.status) ? t : undefined;
      }, 20_000, id);
    assert.deepEqual((await done("ex-ada")).result, { greeting: "Hello, Ada!" });
    const bad = await done("ex-bad");
    assert.equal(bad.status, "aborted");
    assert.equal(bad.errors[0].code, "bad_spec");
    const steps = await done("ex-steps");
    assert.deepEqual(steps.result, { steps: 4, resumedAt: 0, lease: 1 });
    assert.deepEqual((await c.readLog("ex-steps")).map((e) => e.data), [{ done: 1 }, { done: 2 }, { done: 3 }, { done: 4 }]);
    proc.kill("SIGTERM");
    assert.equal(await exited, 0, out);
  } finally {
    if (proc.exitCode === null) proc.kill("SIGKILL");
  }
});
