// A Norn worker written with the TypeScript SDK (clients/typescript). It
// serves two queues of a running norn server:
//
// - "ts-greetings": spec {"name": "Ada"} -> result {"greeting": "Hello, Ada!"};
//   a spec without a name is aborted (retrying cannot fix it).
// - "ts-steps": spec {"steps": 5} does five slow steps, reporting progress,
//   checkpointing each step to the task log and resuming after the last
//   checkpoint when a previous attempt died; it stops early when the task is
//   cancelled (task.sleep rejects, and task.signal would abort a fetch).
//
// Run it (with `go run ./cmd/norn server` running elsewhere) from a project
// of its own, NORN being your checkout of the repository:
//
//     mkdir ts-worker && cd ts-worker && npm init -y && npm pkg set type=module
//     npm install $NORN/clients/typescript typescript @types/node   # the SDK is linked, not downloaded
//     cp $NORN/examples/typescript/worker.ts .
//     npx tsc worker.ts --strict --module nodenext --target es2022 --outDir build
//     node build/worker.js       # on Node >= 22.6 also: node --experimental-strip-types worker.ts
//     go -C $NORN run ./cmd/norn submit ts-greetings '{"name":"Ada"}'
//     go -C $NORN run ./cmd/norn submit ts-steps '{"steps":5}'
//
// Stop it with Ctrl-C or SIGTERM: running tasks get a few seconds to finish,
// the rest are yielded back to their queues for another worker.
import { Abort, type ActiveTask, Client, Worker } from "@nornq/client";

async function greet(task: ActiveTask): Promise<{ greeting: string }> {
  const spec = task.spec as { name?: unknown } | null;
  if (typeof spec?.name !== "string" || spec.name === "") {
    // A malformed spec fails the same way every time: abort, never retry.
    throw new Abort('spec must be {"name": "..."}', { code: "bad_spec" });
  }
  return { greeting: `Hello, ${spec.name}!` };
}

async function steps(task: ActiveTask): Promise<{ steps: number; resumedAt: number; lease: number }> {
  const total = Number((task.spec as { steps?: number } | null)?.steps ?? 3);
  // Resume after the last checkpoint an earlier attempt wrote.
  let done = 0;
  for (const entry of await task.previousLog()) {
    done = Math.max(done, (entry.data as { done?: number }).done ?? 0);
  }
  for (let i = done; i < total; i++) {
    await task.sleep(200); // the work; rejects with Cancelled if the task is cancelled
    await task.log({ done: i + 1 }); // checkpoint: a retry resumes from here
    task.setProgress((i + 1) / total); // sent with the next heartbeat
  }
  return { steps: total, resumedAt: done, lease: task.lease };
}

const client = new Client(); // $NORN_SERVER (default http://127.0.0.1:7070), $NORN_TOKEN
const worker = new Worker(client, {
  handlers: { "ts-greetings": greet, "ts-steps": steps },
  concurrency: Number(process.env.CONCURRENCY ?? 4),
  shutdownGrace: 5000,
  logger: console,
});
await worker.run(); // until SIGTERM or Ctrl-C: then a graceful shutdown
