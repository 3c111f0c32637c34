// A worker process for the shutdown test: serves queue "sig" with handlers
// that run until told to stop, prints "holding N" as it claims, and relies on
// the SDK's own SIGTERM handling.
import { Client, Worker } from "../dist/index.js";

const client = new Client({ url: process.argv[2] });
let holding = 0;
const w = new Worker(client, {
  handlers: {
    sig: async (task) => {
      holding++;
      process.stdout.write(`holding ${holding}\n`);
      await new Promise((resolve) => task.signal.addEventListener("abort", resolve, { once: true }));
      process.stdout.write(`stopped ${task.id} ${task.reason?.name}\n`);
    },
  },
  concurrency: 3,
  shutdownGrace: 200,
  wait: 1000,
  logger: { info: (m) => process.stdout.write(m + "\n"), warn: (m) => process.stdout.write(m + "\n"), error: (m) => process.stdout.write(m + "\n") },
});
await w.run();
process.stdout.write("run returned\n");
