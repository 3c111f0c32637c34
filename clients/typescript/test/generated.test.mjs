// The committed generated files must be what their generators make now:
// src/openapi.ts from the server's OpenAPI document (so the SDK's types
// cannot drift from the API), and dist/ from src/ (so installing from the
// repository needs no build step).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { here } from "./server.mjs";

const pkg = path.resolve(here, "..");
const bin = (name) => path.join(pkg, "node_modules", ".bin", name);

test("src/openapi.ts is what openapi-typescript makes of server/openapi.json", () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), "norn-ts-gen-"));
  try {
    const out = path.join(tmp, "openapi.ts");
    execFileSync(bin("openapi-typescript"), ["../../server/openapi.json", "-o", out], { cwd: pkg, stdio: "pipe" });
    assert.ok(
      readFileSync(out, "utf8") === readFileSync(path.join(pkg, "src", "openapi.ts"), "utf8"),
      "src/openapi.ts is stale: run `npm run generate && npm run build` in clients/typescript",
    );
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test("dist/ is what tsc makes of src/", () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), "norn-ts-dist-"));
  try {
    execFileSync(bin("tsc"), ["-p", ".", "--outDir", tmp], { cwd: pkg, stdio: "pipe" });
    const want = readdirSync(tmp).sort();
    assert.deepEqual(readdirSync(path.join(pkg, "dist")).sort(), want, "dist/ has other files: run `npm run build`");
    for (const f of want) {
      assert.ok(
        readFileSync(path.join(tmp, f), "utf8") === readFileSync(path.join(pkg, "dist", f), "utf8"),
        `dist/${f} is stale: run \`npm run build\` in clients/typescript`,
      );
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
