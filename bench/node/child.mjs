// One benchmark process for a Node peer (graphile-worker or pg-boss): the same roles and
// the same "@"-prefixed JSON lines on stdout as bench/child.py, so bench/run.py drives both
// alike. Installed and started by run.py (see bench/README.md, "Node peers").
//
//   node child.mjs setup SYSTEM DSN
//   node child.mjs worker SYSTEM DSN --settings JSON [--report-every N] [--per-job]
//   node child.mjs produce SYSTEM DSN --settings JSON --mode single|bulk|paced --n N
//                  [--batch B] [--rate R]
//   node child.mjs serve SYSTEM DSN --settings JSON
//        (run.py's own producer: one JSON command a line on stdin, {"op": "one"|"many",
//         "payloads": [...]}, answered by an {"ev": "ok"} line once committed)

import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

import { Logger, makeWorkerUtils, run } from "graphile-worker";
import PgBoss from "pg-boss";

const QUEUE = "bench";

function emit(event) {
  process.stdout.write("@" + JSON.stringify(event) + "\n");
}

function rss() {
  return process.memoryUsage().rss;
}

// The wall clock in seconds, below the millisecond (Date.now() stops at the millisecond).
const now = () => (performance.timeOrigin + performance.now()) / 1000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Errors and warnings only: a log line per job would be the bench's cost, not the peer's.
const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[${level}] ${message}`);
});

// --------------------------------------------------------------------- graphile-worker

const graphile = {
  async setup(dsn) {
    const utils = await makeWorkerUtils({ connectionString: dsn, logger: quietLogger });
    await utils.migrate();
    await utils.release();
  },

  async producer(dsn) {
    const utils = await makeWorkerUtils({ connectionString: dsn, logger: quietLogger });
    // No queue_name: graphile-worker runs a named queue's jobs one at a time, in order.
    return {
      addOne: (payload) => utils.addJob(QUEUE, payload),
      addMany: (payloads) => utils.addJobs(payloads.map((payload) => ({
        identifier: QUEUE, payload,
      }))),
      close: () => utils.release(),
    };
  },

  async work(dsn, settings, onJob, stopped) {
    const runner = await run({
      connectionString: dsn,
      concurrency: settings.concurrency,
      pollInterval: settings.poll_interval_ms,
      noHandleSignals: true,
      logger: quietLogger,
      taskList: { [QUEUE]: async (payload) => onJob(payload) },
      preset: {
        worker: {
          localQueue: { size: settings.local_queue_size },
          completeJobBatchDelay: settings.complete_batch_delay_ms,
          failJobBatchDelay: settings.complete_batch_delay_ms,
        },
      },
    });
    await stopped;
    await runner.stop();
  },
};

// --------------------------------------------------------------------- pg-boss

function makeBoss(dsn, settings) {
  return new PgBoss({ connectionString: dsn, max: settings.pool_max ?? 10, schedule: false });
}

const pgboss = {
  async setup(dsn) {
    const boss = makeBoss(dsn, {});
    await boss.start();
    await boss.createQueue(QUEUE);
    await boss.stop({ graceful: false, wait: true });
  },

  async producer(dsn, settings) {
    const boss = makeBoss(dsn, settings);
    boss.on("error", (err) => console.error(err));
    await boss.start();
    return {
      addOne: (payload) => boss.send(QUEUE, payload),
      addMany: (payloads) => boss.insert(payloads.map((data) => ({ name: QUEUE, data }))),
      close: () => boss.stop({ graceful: false, wait: true }),
    };
  },

  async work(dsn, settings, onJob, stopped) {
    const boss = makeBoss(dsn, settings);
    boss.on("error", (err) => console.error(err));
    await boss.start();
    // pg-boss polls (no LISTEN); each work() call is one fetch loop of batch_size jobs.
    for (let i = 0; i < settings.workers; i += 1) {
      await boss.work(QUEUE, {
        batchSize: settings.batch_size,
        pollingIntervalSeconds: settings.polling_interval_s,
      }, async (jobs) => {
        for (const job of jobs) onJob(job.data);
      });
    }
    await stopped;
    await boss.stop({ graceful: true, wait: true, timeout: 10000 });
  },
};

const SYSTEMS = { "graphile-worker": graphile, "pg-boss": pgboss };

// --------------------------------------------------------------------- roles

function recorder(reportEvery, perJob) {
  let count = 0;
  const onJob = (payload) => {
    const ts = now();
    count += 1;
    if (count === 1) emit({ ev: "first", ts, rss: rss() });
    if (perJob) emit({ ev: "job", seq: payload?.seq ?? null, ts });
    if (count % reportEvery === 0) emit({ ev: "progress", n: count, ts, rss: rss() });
  };
  return { onJob, count: () => count };
}

async function worker(system, dsn, settings, opts) {
  const rec = recorder(Number(opts["report-every"]), opts["per-job"]);
  let stop;
  const stopped = new Promise((resolve) => { stop = resolve; });
  process.on("SIGTERM", () => stop());
  emit({ ev: "ready", rss: rss() });
  await system.work(dsn, settings, rec.onJob, stopped);
  emit({ ev: "exit", n: rec.count(), rss: rss() });
}

async function produce(system, dsn, settings, opts) {
  const producer = await system.producer(dsn, settings);
  const n = Number(opts.n);
  const batch = Number(opts.batch);
  try {
    if (opts.mode === "single") {
      for (let i = 0; i < 20; i += 1) await producer.addOne({ seq: -1 - i });
      const start = performance.now();
      for (let i = 0; i < n; i += 1) await producer.addOne({ seq: i });
      emit({ ev: "result", seconds: (performance.now() - start) / 1000, n });
    } else if (opts.mode === "bulk") {
      await producer.addMany(Array.from({ length: batch }, (_, i) => ({ seq: -1 - i })));
      const batches = [];
      for (let s = 0; s < n; s += batch) {
        batches.push(Array.from({ length: Math.min(batch, n - s) }, (_, i) => ({ seq: s + i })));
      }
      const start = performance.now();
      for (const b of batches) await producer.addMany(b);
      emit({ ev: "result", seconds: (performance.now() - start) / 1000, n });
    } else if (opts.mode === "paced") {
      const rate = Number(opts.rate);
      const sent = [];
      const t0 = now() + 0.2;
      for (let i = 0; i < n; i += 1) {
        const delay = t0 + i / rate - now();
        if (delay > 0) await sleep(delay * 1000);
        const before = now();
        await producer.addOne({ seq: i, t: before });
        sent.push([before, now()]);
      }
      emit({ ev: "result", sent });
    }
  } finally {
    await producer.close();
  }
}

async function serve(system, dsn, settings) {
  const producer = await system.producer(dsn, settings);
  emit({ ev: "ready" });
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const command = JSON.parse(line);
    if (command.op === "one") await producer.addOne(command.payloads[0]);
    else await producer.addMany(command.payloads);
    emit({ ev: "ok" });
  }
  await producer.close();
}

async function main() {
  const { values: opts, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      settings: { type: "string", default: "{}" },
      "report-every": { type: "string", default: "200" },
      "per-job": { type: "boolean", default: false },
      mode: { type: "string" },
      n: { type: "string", default: "0" },
      batch: { type: "string", default: "1000" },
      rate: { type: "string", default: "100" },
    },
  });
  const [role, name, dsn] = positionals;
  const system = SYSTEMS[name];
  if (!system) throw new Error(`unknown system ${name}`);
  const settings = JSON.parse(opts.settings);
  if (role === "setup") await system.setup(dsn);
  else if (role === "worker") await worker(system, dsn, settings, opts);
  else if (role === "produce") await produce(system, dsn, settings, opts);
  else if (role === "serve") await serve(system, dsn, settings);
  else throw new Error(`unknown role ${role}`);
  // pg's pool and graphile-worker's timers may keep the loop alive after a clean stop.
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
