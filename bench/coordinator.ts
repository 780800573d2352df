/**
 * Coordinator load test: `npm run bench:coordinator -- [--duration 60] [--workers 1000] [--max-world 256]
 * [--leave-every-ms 1000] [--global-batch 256] [--train 10000] [--runs 1] [--nice=N] [--cpu-prof DIR]`.
 *
 * A real coordinator child process (fake IDX dataset, tiny-mlp job) and N simulated workers in this
 * process (plain WebSocket clients, test/support/sim-trainer.ts: joins, heartbeats, step reports,
 * checkpoint uploads, random leaves — half goodbyes, half dropped sockets, half of them hitting a
 * round member — each replaced by a newcomer). The commit latency is report→committed: from the last
 * rank's report of a step to the first `committed` of it, over the `--duration` seconds after the last
 * worker joined. Afterwards the audit invariants are checked (no index committed twice in an epoch,
 * finished epochs complete, record agrees with the commit log).
 *
 * Memory per worker: the coordinator's RSS (/proc) with 0, ¼, ½, ¾ and all of the workers joined
 * (each the median of five readings), and the least-squares slope through them.
 *
 * Reference, measured side by side in each run: there is no other coordinator to race, so the floors
 * of a commit are measured instead — one SQLite transaction of a commit row + durable state with
 * synchronous=FULL on the same disk (the fsync every commit pays), and a bare `ws` echo round trip on
 * loopback (the transport every report and `committed` pays).
 *
 * The machine is shared: `--runs R` repeats the whole run (a fresh coordinator each) and reports the
 * median and spread; each run prints the load average and the share of the CPU other processes took.
 * `--nice=N` (with the `=`: N may start with a dash) runs the bench and the coordinator (every thread) at nice N, as bench:soak does (below 0
 * needs root): on a machine other jobs keep busy, a message waits behind them at every hand-off.
 * `--cpu-prof DIR` writes the coordinator's CPU profile there (node --cpu-prof).
 * Prints each run's table, the summary, and one JSON line `{"bench":"coordinator", ...}`.
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { CoordinatorProcess } from '../test/support/coordinator-process';
import { fitMemory, type MemoryPoint, othersShare, slowerThan } from './lib/coordinator-figures';
import {
  type LoadOptions,
  FeedMeter,
  LoadSwarm,
  memoryPoint,
  rssMbOf,
  startLoadCoordinator,
  storeFloor,
  tickReading,
  wsEchoFloor,
} from './lib/coordinator-load';
import { floorsOf, latencyOf, printReport, type RunResult } from './lib/coordinator-report';
import { descendants, renice, setOwnNice } from './lib/proc-sampler';

const { values: flags } = parseArgs({
  options: {
    duration: { type: 'string', default: '60' },
    workers: { type: 'string', default: '1000' },
    'max-world': { type: 'string', default: '256' },
    'leave-every-ms': { type: 'string', default: '1000' },
    'global-batch': { type: 'string', default: '256' },
    train: { type: 'string', default: '10000' },
    runs: { type: 'string', default: '1' },
    nice: { type: 'string' },
    'cpu-prof': { type: 'string' },
  },
});
const DURATION_S = Number(flags.duration);
const RUNS = Number(flags.runs);
const NICE = flags.nice === undefined ? undefined : Number(flags.nice);
if (NICE !== undefined && !(Number.isInteger(NICE) && NICE >= -20 && NICE <= 19))
  throw new Error(`--nice ${flags.nice}: expected an integer from -20 to 19`);
const options: LoadOptions = {
  workers: Number(flags.workers),
  maxWorld: Number(flags['max-world']),
  leaveEveryMs: Number(flags['leave-every-ms']),
  globalBatch: Number(flags['global-batch']),
  train: Number(flags.train),
  cpuProf: flags['cpu-prof'],
};

function messageErrorsOf(metrics: string): Record<string, number> {
  const errorsByCode: Record<string, number> = {};
  for (const line of metrics.split('\n')) {
    const match = /^tabswarm_message_errors_total\{code="([^"]+)"\} (\d+)/.exec(line);
    if (match) errorsByCode[match[1]] = Number(match[2]);
  }
  return errorsByCode;
}

const sleep = (msDelay: number) => new Promise((resolve) => setTimeout(resolve, msDelay));

/** Joins every worker, reading the coordinator's RSS at each quarter. Returns the readings and the join time without them. */
async function joinWithMemory(
  proc: CoordinatorProcess,
  swarm: LoadSwarm,
): Promise<{ points: MemoryPoint[]; joinMs: number }> {
  const pid = proc.child.pid!;
  const points: MemoryPoint[] = [];
  const first = await memoryPoint(pid, 0);
  if (first) points.push(first);
  const quarters = [1, 2, 3, 4].map((q) => Math.round((q * options.workers) / 4));
  let readingMs = 0;
  const started = performance.now();
  await swarm.joinAll(options.workers, quarters, async (joined) => {
    const t0 = performance.now();
    const point = await memoryPoint(pid, joined);
    if (point) points.push(point);
    readingMs += performance.now() - t0;
  });
  return { points, joinMs: performance.now() - started - readingMs };
}

async function oneRun(): Promise<RunResult> {
  const loadStart = loadavg()[0];
  const reference = floorsOf(await storeFloor(), await wsEchoFloor());
  const proc = await startLoadCoordinator(options);
  if (NICE !== undefined) renice(descendants(process.pid), NICE);
  const swarm = new LoadSwarm(proc, options.leaveEveryMs);
  const { points, joinMs } = await joinWithMemory(proc, swarm);
  // From here on every worker is connected: what the run measures.
  swarm.latencies.length = 0;
  swarm.reports = 0;
  const before = { metrics: await proc.metrics(), status: await proc.status(), ticks: tickReading() };
  // An admin page watches the run (the feed sends it deltas; its cost is part of the coordinator's).
  const feed = await FeedMeter.open(proc);
  const started = performance.now();
  swarm.startChurn();
  await sleep(DURATION_S * 1000);
  const elapsedS = (performance.now() - started) / 1000;
  // Quiesce first (no more reports or heartbeats), read the results, then drop the sockets: the
  // teardown's own disconnects must not count as the run's restarts.
  swarm.quiesce();
  const ticks = tickReading();
  feed.close();
  const exitedEarly = await Promise.race([proc.exited, sleep(10).then(() => null)]);
  if (exitedEarly)
    throw new Error(
      `the coordinator exited during the run: ${JSON.stringify(exitedEarly)}\n${proc.output.slice(-4000)}`,
    );
  const metrics = await proc.metrics();
  const statusText = await (await proc.fetch('/api/status')).text();
  const status = await proc.status();
  const audit = await proc.audit();
  const endRssMb = rssMbOf(proc.child.pid!);
  await swarm.terminate();
  await proc.stop();
  if (process.env.BENCH_DEBUG) console.log(proc.stderr.slice(-6000));
  const delta = (name: string) =>
    CoordinatorProcess.metricValue(metrics, name) - CoordinatorProcess.metricValue(before.metrics, name);
  const duplicates = audit.epochs.reduce((sum, e) => sum + e.duplicateCount, 0);
  const neverCommitted = audit.epochs.reduce((sum, e) => sum + (e.neverCommittedCount ?? 0), 0);
  const steps = status.step - before.status.step;
  return {
    durationS: Number(elapsedS.toFixed(1)),
    joinAllMs: Math.round(joinMs),
    messagesInPerS: Math.round(delta('tabswarm_ws_frames_received_total') / elapsedS),
    messagesOutPerS: Math.round(delta('tabswarm_ws_frames_sent_total') / elapsedS),
    stepReportsPerS: Math.round(swarm.reports / elapsedS),
    committedSteps: steps,
    stepsPerS: Number((steps / elapsedS).toFixed(1)),
    epochs: audit.epochs.length,
    commitLatencyMs: latencyOf(swarm.latencies),
    reference,
    rounds: status.round,
    restarts: status.restarts,
    joins: swarm.joins,
    leaves: { goodbyes: swarm.goodbyes, drops: swarm.drops },
    messageErrors: messageErrorsOf(metrics),
    admin: {
      snapshotKiB: Number((feed.snapshotBytes / 1024).toFixed(1)),
      feedKiBPerS: Number(((feed.bytes - feed.snapshotBytes) / 1024 / elapsedS).toFixed(1)),
      feedMessagesPerS: Number((feed.messages / elapsedS).toFixed(1)),
      statusKiB: Number((Buffer.byteLength(statusText) / 1024).toFixed(1)),
    },
    slow: {
      events: slowerThan(before.metrics, metrics, 'tabswarm_event_handle_seconds'),
      eventCount: delta('tabswarm_event_handle_seconds_count'),
      storeTransactions: slowerThan(before.metrics, metrics, 'tabswarm_store_transaction_seconds'),
      commits: slowerThan(before.metrics, metrics, 'tabswarm_commit_handle_seconds'),
      commitCount: delta('tabswarm_commit_handle_seconds_count'),
    },
    memory: { fit: fitMemory(points), endRssMb: endRssMb === null ? null : Number(endRssMb.toFixed(1)) },
    machine: {
      loadStart,
      loadEnd: loadavg()[0],
      othersShare: before.ticks && ticks ? othersShare(before.ticks, ticks) : null,
    },
    audit: {
      ok: audit.ok,
      duplicates,
      neverCommitted,
      recordAgrees: audit.recordAgrees,
      rolledBackRows: audit.rolledBackRows,
    },
    invariantsOk: audit.ok && duplicates === 0 && neverCommitted === 0 && audit.lastRowStep === status.step,
  };
}

async function main(): Promise<void> {
  const runs: RunResult[] = [];
  // Children inherit the nice value of the thread that spawns them; their own threads are set after start.
  const niced = NICE === undefined ? null : setOwnNice(NICE);
  for (let i = 0; i < RUNS; i++) {
    runs.push(await oneRun());
    console.error(`run ${i + 1}/${RUNS}: p99 ${runs[i].commitLatencyMs.p99} ms, ${runs[i].stepsPerS} steps/s`);
  }
  printReport(runs, {
    workers: options.workers,
    maxWorld: options.maxWorld,
    leaveEveryMs: options.leaveEveryMs,
    globalBatch: options.globalBatch,
    datasetSize: options.train,
    durationS: DURATION_S,
    nice: niced === null ? null : (NICE ?? null),
  });
  if (!runs.every((r) => r.invariantsOk)) process.exitCode = 1;
}

main().catch((error) => {
  console.error(`bench:coordinator failed: ${(error as Error).stack ?? error}`);
  process.exit(1);
});
