// `npm test`: builds norn once (unless $NORN_BIN names a binary), then runs
// every test file against it, one file at a time (they time heartbeats and
// leases, and the machine may be shared).
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { here, repo } from "./server.mjs";

let tmp;
const env = { ...process.env };
if (!env.NORN_BIN) {
  tmp = mkdtempSync(path.join(os.tmpdir(), "norn-ts-bin-"));
  env.NORN_BIN = path.join(tmp, "norn");
  execFileSync("go", ["build", "-o", env.NORN_BIN, "./cmd/norn"], { cwd: repo, stdio: "inherit" });
}
const files = readdirSync(here).filter((f) => f.endsWith(".test.mjs")).sort().map((f) => path.join(here, f));
const r = spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...process.argv.slice(2), ...files], { stdio: "inherit", env });
if (tmp) rmSync(tmp, { recursive: true, force: true });
process.exit(r.status ?? 1);
