/**
 * What one bench:coordinator run drives and reads: the simulated workers (`LoadSwarm`: plain
 * protocol clients from test/support joining, training, leaving), the coordinator child with a job
 * that never ends within the run, the floors every commit pays (one SQLite commit transaction, a `ws`
 * echo), and the coordinator's RSS and the machine's CPU ticks from Linux's /proc.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import WebSocket, { WebSocketServer } from 'ws';
import { SqliteStore } from '../../coordinator/runtime/store';
import { type CoordinatorProcess, spawnCoordinator } from '../../test/support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../../test/support/fake-dataset';
import { SimTrainer } from '../../test/support/sim-trainer';
import type { MemoryPoint, TickReading } from './coordinator-figures';
import { descendants } from './proc-sampler';

/** The run's shape, from the driver's options. */
export interface LoadOptions {
  workers: number;
  maxWorld: number;
  leaveEveryMs: number;
  globalBatch: number;
  train: number;
  /** Directory for the coordinator's CPU profile (`node --cpu-prof`), or undefined. */
  cpuProf?: string;
}

/** One SQLite transaction of a commit row and a durable state, as the executor writes per commit. */
export async function storeFloor(samples = 200): Promise<number[]> {
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

/** A bare `ws` round trip on loopback: the transport every report and `committed` pays. */
export async function wsEchoFloor(samples = 500): Promise<number[]> {
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
export async function startLoadCoordinator(o: LoadOptions): Promise<CoordinatorProcess> {
  const dataset = writeFakeIdxDataset(join(makeTempDir('tabswarm-bench-data-'), 'fake-mnist'), {
    trainCount: o.train,
    testCount: 100,
  });
  return spawnCoordinator({
    datasetDir: dataset,
    job: {
      model: 'tiny-mlp',
      globalBatch: o.globalBatch,
      epochs: 100_000,
      minWorkers: Math.min(8, o.maxWorld),
      maxWorkers: o.maxWorld,
      lastCallMs: 200,
      heartbeatMs: 2000,
      checkpointEvery: 100,
      maxRestarts: 1_000_000,
    },
    ...(o.cpuProf ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${o.cpuProf}`] } : {}),
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

/** The simulated workers: joins, a leave every `leaveEveryMs` (goodbye or dropped socket), report→commit latencies. */
export class LoadSwarm {
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

  constructor(
    private readonly proc: CoordinatorProcess,
    private readonly leaveEveryMs: number,
  ) {}

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

  /** Joins workers until `count` joined, 20 at a time; `atMilestone(joined)` after each of `milestones`. */
  async joinAll(
    count: number,
    milestones: readonly number[],
    atMilestone: (joined: number) => Promise<void>,
  ): Promise<void> {
    const due = [...milestones].sort((a, b) => a - b);
    for (let i = 0; i < count; i += 20) {
      await Promise.all(Array.from({ length: Math.min(20, count - i) }, () => this.addWorker()));
      while (due.length > 0 && this.joins >= due[0]) await atMilestone(due.shift()!);
    }
  }

  startChurn(): void {
    this.churnTimer = setInterval(() => this.leaveOne(), this.leaveEveryMs);
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

/** An admin page's share of the feed: bytes and messages of `/api/admin/feed` while it is open. */
export class FeedMeter {
  bytes = 0;
  messages = 0;
  /** Bytes of the first message (the snapshot). */
  snapshotBytes = 0;
  private readonly controller = new AbortController();

  static async open(proc: CoordinatorProcess): Promise<FeedMeter> {
    const meter = new FeedMeter();
    const res = await fetch(`${proc.url}/api/admin/feed?token=${proc.adminToken}`, { signal: meter.controller.signal });
    if (!res.ok || !res.body) throw new Error(`admin feed: HTTP ${res.status}`);
    void meter.pump(res.body.getReader());
    return meter;
  }

  private async pump(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
    let pending = '';
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        this.bytes += value.byteLength;
        pending += Buffer.from(value).toString('utf8');
        for (let end = pending.indexOf('\n\n'); end >= 0; end = pending.indexOf('\n\n')) {
          if (pending.startsWith('data:')) {
            if (this.messages === 0) this.snapshotBytes = Buffer.byteLength(pending.slice(0, end));
            this.messages += 1;
          }
          pending = pending.slice(end + 2);
        }
      }
    } catch {
      // closed
    }
  }

  close(): void {
    this.controller.abort();
  }
}

/** A process's resident set, MB, from /proc/PID/status (null when it is gone or this is not Linux). */
export function rssMbOf(pid: number): number | null {
  try {
    const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    return Number.isFinite(kb) ? kb / 1024 : null;
  } catch {
    return null;
  }
}

/**
 * The coordinator's RSS with `workers` connected: the median of five readings 300 ms apart, after a
 * second for the joins' garbage to be collected (a collected heap's RSS is a sawtooth).
 */
export async function memoryPoint(pid: number, workers: number): Promise<MemoryPoint | null> {
  const sleep = (msDelay: number) => new Promise((resolve) => setTimeout(resolve, msDelay));
  await sleep(1000);
  const readings: number[] = [];
  for (let i = 0; i < 5; i++) {
    const rss = rssMbOf(pid);
    if (rss !== null) readings.push(rss);
    await sleep(300);
  }
  if (readings.length === 0) return null;
  readings.sort((a, b) => a - b);
  return { workers, rssMb: Number(readings[readings.length >> 1].toFixed(1)) };
}

/** CPU ticks of `utime stime cutime cstime` of one /proc/PID/stat. */
function ticksOf(pid: number | 'self'): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i] ?? 0), 0);
  } catch {
    return 0;
  }
}

/** The machine's busy and total CPU ticks, and the bench's own (this process and its descendants). */
export function tickReading(): TickReading | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
    const busy = user + nice + system + irq + softirq + (steal || 0);
    const ours = ticksOf('self') + descendants(process.pid).reduce((sum, p) => sum + p.cpuTicks, 0);
    return { machineBusy: busy, machineTotal: busy + idle + (iowait || 0), ours };
  } catch {
    return null;
  }
}
