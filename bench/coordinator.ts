/**
 * Coordinator load test: `npm run bench:coordinator -- [--duration 60] [--workers 200] [--max-world 64]
 * [--leave-every-ms 1000] [--global-batch 256] [--train 10000]`.
 *
 * A real coordinator child process (fake IDX dataset, tiny-mlp job) and N simulated workers in this
 * process (plain WebSocket clients: joins, heartbeats, step reports, checkpoint uploads, random leaves
 * — half goodbyes, half dropped sockets, half of them hitting a round member — each replaced by a
 * newcomer). Afterwards the audit
 * invariants are checked (no index committed twice in an epoch, finished epochs complete, record
 * agrees with the commit log) and a table plus one JSON line `{"bench":"coordinator", ...}` are printed.
 *
 * Reference, measured side by side in the same run: there is no other coordinator to race, so the
 * floors of a commit are measured instead — one SQLite transaction of a commit row + durable state
 * with synchronous=FULL on the same disk (the fsync every commit pays), and a bare `ws` echo round
 * trip on loopback (the transport every report and `committed` pays). The commit latency is
 * report→committed: from the last rank's report of a step to the first `committed` of it.
 */
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket, { WebSocketServer } from 'ws';
import { SqliteStore } from '../coordinator/runtime/store';
import { CoordinatorProcess, spawnCoordinator } from '../test/support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../test/support/fake-dataset';
import { SimTrainer } from '../test/support/sim-trainer';

const { values: flags } = parseArgs({
  options: {
    duration: { type: 'string', default: '60' },
    workers: { type: 'string', default: '200' },
    'max-world': { type: 'string', default: '64' },
    'leave-every-ms': { type: 'string', default: '1000' },
    'global-batch': { type: 'string', default: '256' },
    train: { type: 'string', default: '10000' },
    'cpu-prof': { type: 'string' },
  },
});
const DURATION_S = Number(flags.duration);
const WORKERS = Number(flags.workers);
const MAX_WORLD = Number(flags['max-world']);
const LEAVE_EVERY_MS = Number(flags['leave-every-ms']);
const GLOBAL_BATCH = Number(flags['global-batch']);
const TRAIN = Number(flags.train);

function quantile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

async function storeFloor(samples = 200): Promise<number[]> {
  const store = new SqliteStore(makeTempDir('tabswarm-bench-store-'));
  const { runId } = store.openRun({}, 'bench', 1000);
  const times: number[] = [];
  for (let step = 1; step <= samples; step++) {
    const t0 = performance.now();
    store.apply(runId, [
      {
        kind: 'commit',
        commit: {
          step,
          firstStep: step,
          epoch: 0,
          cursorStart: step,
          count: 1,
          hash: 'ab'.repeat(32),
          round: 1,
          world: [],
          loss: 0,
        },
      },
      { kind: 'persist', durable: { step, record: 'x'.repeat(2000) } },
    ]);
    times.push(performance.now() - t0);
  }
  store.close();
  return times;
}

async function wsEchoFloor(samples = 500): Promise<number[]> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  wss.on('connection', (ws) => ws.on('message', (data) => ws.send(data.toString())));
  const port = (wss.address() as { port: number }).port;
  const client = new WebSocket(`ws://127.0.0.1:${port}`);
  await new Promise<void>((resolve) => client.once('open', () => resolve()));
  const times: number[] = [];
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      client.once('message', () => resolve());
      client.send(JSON.stringify({ v: 1, type: 'step_report', i }));
    });
    times.push(performance.now() - t0);
  }
  client.close();
  await new Promise<void>((resolve) => wss.close(() => resolve()));
  return times;
}

/** A coordinator child process with a job that never ends within the run. */
async function startLoadCoordinator(): Promise<CoordinatorProcess> {
  const dataset = writeFakeIdxDataset(join(makeTempDir('tabswarm-bench-data-'), 'fake-mnist'), {
    trainCount: TRAIN,
    testCount: 100,
  });
  return spawnCoordinator({
    datasetDir: dataset,
    job: {
      model: 'tiny-mlp',
      globalBatch: GLOBAL_BATCH,
      epochs: 100_000,
      minWorkers: Math.min(8, MAX_WORLD),
      maxWorkers: MAX_WORLD,
      lastCallMs: 200,
      heartbeatMs: 2000,
      checkpointEvery: 100,
      maxRestarts: 1_000_000,
    },
    ...(flags['cpu-prof'] ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${flags['cpu-prof']}`] } : {}),
    // Every simulated volunteer connects from 127.0.0.1: lift the per-address defences (docs/threat-model.md)
    // so the load test measures the coordinator, not its abuse caps.
    extraArgs: [
      '--max-sockets-per-address',
      '1000000',
      '--joins-per-minute',
      '1000000',
      '--worker-restart-quota',
      '1000000',
      '--address-restart-quota',
      '1000000',
    ],
  });
}

/** The simulated workers: joins, a leave every LEAVE_EVERY_MS (goodbye or dropped socket), report→commit latencies. */
class LoadSwarm {
  readonly latencies: number[] = [];
  reports = 0;
  joins = 0;
  goodbyes = 0;
  drops = 0;
  readonly trainers = new Set<SimTrainer>();
  private readonly lastReportAt = new Map<string, number>();
  private readonly seenCommit = new Set<string>();
  private stopping = false;
  private churnTimer: NodeJS.Timeout | null = null;

  constructor(private readonly proc: CoordinatorProcess) {}

  private readonly options = {
    keepReceived: false,
    onReport: (step: number, at: number, round: number) => {
      this.reports += 1;
      const key = `${round}:${step}`;
      this.lastReportAt.set(key, Math.max(this.lastReportAt.get(key) ?? 0, at));
    },
    onCommitted: (step: number, at: number, round: number) => {
      const key = `${round}:${step}`;
      if (this.seenCommit.has(key)) return;
      this.seenCommit.add(key);
      const sent = this.lastReportAt.get(key);
      if (sent !== undefined) this.latencies.push(at - sent);
      this.lastReportAt.delete(key);
    },
  };

  async addWorker(): Promise<void> {
    if (this.stopping) return;
    const trainer = await SimTrainer.join(this.proc.wsUrl, { ...this.options, httpUrl: this.proc.url });
    this.joins += 1;
    this.trainers.add(trainer);
    void trainer.worker.closed.then(() => this.trainers.delete(trainer));
  }

  /** Joins `count` workers, 20 at a time. */
  async joinAll(count: number): Promise<void> {
    for (let i = 0; i < count; i += 20) {
      await Promise.all(Array.from({ length: Math.min(20, count - i) }, () => this.addWorker()));
    }
  }

  startChurn(): void {
    this.churnTimer = setInterval(() => this.leaveOne(), LEAVE_EVERY_MS);
  }

  /**
   * Half the leaves hit a round member (the interesting case: the round closes and re-forms), half
   * anyone (most workers wait, so most of those hit the wait list); a new worker replaces each.
   */
  private leaveOne(): void {
    const list = [...this.trainers];
    if (list.length === 0) return;
    const members = list.filter((t) => t.inRound);
    const pool = members.length > 0 && Math.random() < 0.5 ? members : list;
    const victim = pool[Math.floor(Math.random() * pool.length)];
    this.trainers.delete(victim);
    victim.stop();
    if (Math.random() < 0.5) {
      this.goodbyes += 1;
      victim.worker.goodbye();
      void victim.worker.close();
    } else {
      this.drops += 1;
      void victim.worker.terminate();
    }
    void this.addWorker().catch(() => {});
  }

  /** No more joins, leaves, reports or heartbeats (sockets stay open until `terminate`). */
  quiesce(): void {
    this.stopping = true;
    if (this.churnTimer) clearInterval(this.churnTimer);
    for (const t of this.trainers) t.stop();
  }

  async terminate(): Promise<void> {
    for (const t of this.trainers) await t.worker.terminate();
  }
}

function messageErrorsOf(metrics: string): Record<string, number> {
  const errorsByCode: Record<string, number> = {};
  for (const line of metrics.split('\n')) {
    const match = /^tabswarm_message_errors_total\{code="([^"]+)"\} (\d+)/.exec(line);
    if (match) errorsByCode[match[1]] = Number(match[2]);
  }
  return errorsByCode;
}

const ms = (values: number[], q: number, digits = 2) => Number(quantile(values, q).toFixed(digits));

interface Measured {
  elapsedS: number;
  joinedMs: number;
  framesIn: number;
  framesOut: number;
  status: Awaited<ReturnType<CoordinatorProcess['status']>>;
  audit: Awaited<ReturnType<CoordinatorProcess['audit']>>;
  errorsByCode: Record<string, number>;
  storeTimes: number[];
  echoTimes: number[];
}

function resultOf(m: Measured, swarm: LoadSwarm) {
  const { audit, status, elapsedS } = m;
  const duplicates = audit.epochs.reduce((sum: number, e: { duplicateCount: number }) => sum + e.duplicateCount, 0);
  const missing = audit.epochs.reduce(
    (sum: number, e: { neverCommittedCount: number | null }) => sum + (e.neverCommittedCount ?? 0),
    0,
  );
  return {
    bench: 'coordinator',
    durationS: Number(elapsedS.toFixed(1)),
    workers: WORKERS,
    maxWorld: MAX_WORLD,
    globalBatch: GLOBAL_BATCH,
    datasetSize: TRAIN,
    joinAllMs: Math.round(m.joinedMs),
    messagesInPerS: Math.round(m.framesIn / elapsedS),
    messagesOutPerS: Math.round(m.framesOut / elapsedS),
    stepReportsPerS: Math.round(swarm.reports / elapsedS),
    committedSteps: status.step,
    stepsPerS: Number((status.step / elapsedS).toFixed(1)),
    epochs: audit.epochs.length,
    commitLatencyMs: { p50: ms(swarm.latencies, 0.5), p99: ms(swarm.latencies, 0.99), n: swarm.latencies.length },
    reference: {
      sqliteCommitTxMs: { p50: ms(m.storeTimes, 0.5), p99: ms(m.storeTimes, 0.99) },
      wsEchoRttMs: { p50: ms(m.echoTimes, 0.5, 3), p99: ms(m.echoTimes, 0.99, 3) },
    },
    rounds: status.round,
    restarts: status.restarts,
    joins: swarm.joins,
    leaves: { goodbyes: swarm.goodbyes, drops: swarm.drops },
    messageErrors: m.errorsByCode,
    audit: {
      ok: audit.ok,
      duplicates,
      neverCommitted: missing,
      recordAgrees: audit.recordAgrees,
      rolledBackRows: audit.rolledBackRows,
    },
    invariantsOk: audit.ok && duplicates === 0 && missing === 0 && audit.lastRowStep === status.step,
  };
}

function printTable(result: ReturnType<typeof resultOf>): void {
  const a = result.audit;
  const rows: [string, string][] = [
    [
      'duration',
      `${result.durationS} s, ${WORKERS} workers (world ≤ ${MAX_WORLD}), a leave every ${LEAVE_EVERY_MS} ms`,
    ],
    ['messages in / out', `${result.messagesInPerS} /s  /  ${result.messagesOutPerS} /s`],
    ['step reports', `${result.stepReportsPerS} /s`],
    ['committed steps', `${result.committedSteps} (${result.stepsPerS} /s, ${result.epochs} epochs of ${TRAIN})`],
    [
      'report→committed p50 / p99',
      `${result.commitLatencyMs.p50} / ${result.commitLatencyMs.p99} ms (n=${result.commitLatencyMs.n})`,
    ],
    [
      '  ref: SQLite commit tx (FULL)',
      `${result.reference.sqliteCommitTxMs.p50} / ${result.reference.sqliteCommitTxMs.p99} ms`,
    ],
    ['  ref: bare ws echo RTT', `${result.reference.wsEchoRttMs.p50} / ${result.reference.wsEchoRttMs.p99} ms`],
    ['rounds / restarts', `${result.rounds} / ${result.restarts}`],
    ['joins / goodbyes / drops', `${result.joins} / ${result.leaves.goodbyes} / ${result.leaves.drops}`],
    ['message errors', JSON.stringify(result.messageErrors)],
    [
      'audit',
      `${result.invariantsOk ? 'OK' : 'FAILED'}: duplicates ${a.duplicates}, never committed ${a.neverCommitted}, record agrees ${a.recordAgrees}, rolled-back rows ${a.rolledBackRows}`,
    ],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  console.log('\ncoordinator load test');
  for (const [k, v] of rows) console.log(`  ${k.padEnd(width)}  ${v}`);
}

async function main(): Promise<void> {
  const storeTimes = await storeFloor();
  const echoTimes = await wsEchoFloor();
  const proc = await startLoadCoordinator();
  const swarm = new LoadSwarm(proc);
  const framesBefore = CoordinatorProcess.metricValue(await proc.metrics(), 'tabswarm_ws_frames_received_total');
  const sentBefore = CoordinatorProcess.metricValue(await proc.metrics(), 'tabswarm_ws_frames_sent_total');
  const started = performance.now();
  await swarm.joinAll(WORKERS);
  const joinedMs = performance.now() - started;
  swarm.startChurn();
  await new Promise((resolve) => setTimeout(resolve, DURATION_S * 1000));
  const elapsedS = (performance.now() - started) / 1000;
  // Quiesce first (no more reports or heartbeats), read the results, then drop the sockets: the
  // teardown's own disconnects must not count as the run's restarts.
  swarm.quiesce();
  const exitedEarly = await Promise.race([proc.exited, new Promise((resolve) => setTimeout(() => resolve(null), 10))]);
  if (exitedEarly)
    throw new Error(
      `the coordinator exited during the run: ${JSON.stringify(exitedEarly)}\n${proc.output.slice(-4000)}`,
    );
  const finalMetrics = await proc.metrics();
  const measured: Measured = {
    elapsedS,
    joinedMs,
    framesIn: CoordinatorProcess.metricValue(finalMetrics, 'tabswarm_ws_frames_received_total') - framesBefore,
    framesOut: CoordinatorProcess.metricValue(finalMetrics, 'tabswarm_ws_frames_sent_total') - sentBefore,
    status: await proc.status(),
    audit: await proc.audit(),
    errorsByCode: messageErrorsOf(finalMetrics),
    storeTimes,
    echoTimes,
  };
  await swarm.terminate();
  await proc.stop();
  if (process.env.BENCH_DEBUG) console.log(proc.stderr.slice(-6000));
  const result = resultOf(measured, swarm);
  printTable(result);
  console.log(JSON.stringify(result));
  if (!result.invariantsOk) process.exitCode = 1;
}

main().catch((error) => {
  console.error(`bench:coordinator failed: ${(error as Error).stack ?? error}`);
  process.exit(1);
});
