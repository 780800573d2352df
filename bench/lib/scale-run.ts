/**
 * One bench:scale scenario: a fresh coordinator (the real Fashion-MNIST, tiny-mlp, global batch 512, local
 * sync H = 8 with the int8 wire), N headless workers in processes of at most `perProcess` each (a process
 * per worker holds ~350–400 MiB, so 64 of them would not fit beside everything else on this machine), a
 * warm-up until the first outer commit by all N, then a measured window, quiet or with churn.
 *
 * Churn: failures at `ratePerWorkerMin` per worker-minute (0.2 = a mean lifetime of 5 minutes), evenly
 * spaced over the window, alternating crash and leave, each followed at once by a join in the same process,
 * so the swarm keeps N workers. Faults go to single workers over the process's control channel
 * (`tabswarm worker --control`): a leave says goodbye; a crash closes the worker's sockets and links with
 * no goodbye, which is what the coordinator and the peers see of a crashed tab (the process itself, and
 * the other workers in it, live on). What it records:
 *
 * - commits in the window (from the admin feed, server clock) and so samples/s;
 * - outer-step time split into compute, sync and waiting, from the workers' `--timings` lines (median per
 *   outer step over workers and steps); compute utilization as the coordinator measures it (`usage.total`
 *   over the window: a delta of its sums is not exposed, so the whole run's figure is read at the end);
 * - commits and committed samples from the commits' own counts (a partial outer commit, issue 22, commits
 *   fewer samples than its steps' global batches);
 * - work lost per failure: just before each fault, per member share × (its last reported step − the last
 *   committed step) are the steps in flight. What the failure then cost is read from the coordinator's
 *   events after it: if the next round opened carried (`round_open` with `carried`, no `carry_given_up`
 *   before the next commit) the survivors finished the outer step and only the dropped rank's own steps in
 *   flight are lost; otherwise the round was redone and every rank's steps in flight are lost. Both against
 *   the dropped rank's share of the steps in flight (goal: at most 1.5×);
 * - join-to-first-contribution: from a joiner's start to the first commit whose world it is in.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { STATUS_PAGE_MAX } from '../../core/protocol/views';
import { spawnCoordinator, type CoordinatorProcess } from '../../test/support/coordinator-process';
import { spawnHeadless, type HeadlessProcess } from '../../tools/swarm/headless-workers';
import { nameOfPeerId, secondsToFirstContribution, watchFirstRounds } from '../../tools/swarm/join-times';
import { FeedWatcher } from './admin-feed-watcher';
import { median } from './elastic-figures';

export interface ScaleScenario {
  n: number;
  /** Workers per process. */
  perProcess: number;
  churn: boolean;
  windowS: number;
  /** Failures per worker-minute under churn. */
  ratePerWorkerMin: number;
  /** How long to wait for all N to commit together. */
  warmupS: number;
  /** Where to write each scenario's admin-feed events, commits and faults as JSON (for reading why a round closed), or none. */
  eventsDir?: string;
  /** `--topology`, or undefined for the default job. Required, so that a caller that drops it does not compile. */
  topology: ScaleTopology | undefined;
  log(line: string): void;
}

export interface FaultRecord {
  kind: 'crash' | 'leave';
  atS: number;
  /** When it was sent (ms since the epoch; the coordinator runs on the same clock). */
  atMs?: number;
  /** Global steps of work in flight when it hit (Σ over the world of share × steps since the last commit). */
  inFlightSteps?: number;
  /** What the coordinator did with the outer step in flight (absent in runs from before partial commits). */
  outcome?: 'carried' | 'redone';
  /** Global steps of work the fault cost (see the file comment). */
  lostSteps: number;
  /** The dropped rank's share of them. */
  droppedShareSteps: number;
  /** Counted, but what it cost was not measured (the test bed's runs, scale-netbed.ts): no lost steps. */
  unmeasured?: true;
}

export interface ScaleResult {
  n: number;
  churn: boolean;
  /** Where the workers ran: absent for loopback, else the test bed's link profile (scale-netbed.ts). */
  network?: string;
  /** `--topology`: the job's topology, unverified (`JOB`); absent: the default job. */
  topology?: ScaleTopology;
  /** What the planner chose for the round at the window's end: its group sizes, or null (one ring). */
  groups?: number[] | null;
  windowS: number;
  commits: number;
  committedSteps: number;
  committedSamples: number;
  samplesPerSec: number;
  utilization: number | null;
  outerStep: { wallMs: number; computeMs: number; syncMs: number; waitingMs: number; samples: number } | null;
  faults: FaultRecord[];
  joinToContributionS: number[];
  restarts: number;
  auditOk: boolean;
  rssMiBPerWorker: number | null;
  warmupS: number;
}

/**
 * `--topology ring|auto` (issue 23's comparison): the job's `topology`, with `verify: false`, since a job
 * that verifies keeps the plain ring whatever it says (coordinator/machine/topology.ts): both sides of
 * the comparison then run unverified. Absent: the default job (an open swarm's: verified, ring).
 */
export type ScaleTopology = 'ring' | 'auto' | 'groups';

export const JOB = (n: number, topology?: ScaleTopology) => ({
  ...(topology ? { topology, verify: false } : {}),
  model: 'tiny-mlp',
  globalBatch: 512,
  epochs: 1000,
  // Half the swarm: a round starts once half have joined (the rest are admitted at its commits, and the
  // warm-up waits for a commit by all N), and a loss inside an outer step is carried by the survivors. With
  // minWorkers = N, as before partial commits, every loss left fewer survivors than minWorkers and so
  // redid the outer step (docs/local-steps.md), whatever the coordinator could carry.
  minWorkers: Math.max(2, Math.floor(n / 2)),
  maxWorkers: n + 16,
  lastCallMs: 1500,
  heartbeatMs: 2000,
  evalSamples: 0,
  checkpointEvery: 100_000,
  maxRestarts: 1_000_000,
  sync: { mode: 'local', innerSteps: 8, compression: 'int8' },
});

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resident memory of `pids` from /proc (MiB), or null where it cannot be read. */
function rssMiB(pids: number[]): number | null {
  let total = 0;
  for (const pid of pids) {
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) total += Number(m[1]) / 1024;
    } catch {
      return null;
    }
  }
  return total;
}

export class Swarm {
  readonly processes: HeadlessProcess[] = [];
  readonly timings: { wallMs: number; computeMs: number; syncMs: number; waitingMs: number }[] = [];
  private joins = 0;
  measuring = false;

  private stopping = false;

  constructor(
    private readonly url: string,
    private readonly log: (line: string) => void,
  ) {}

  /** Processes `g1`, `g2`, … of `count` workers each, named `gP-1` … `gP-count` (just `gP` when alone). */
  startGroup(count: number): HeadlessProcess {
    const w = spawnHeadless({
      url: this.url,
      name: `g${this.processes.length + 1}`,
      count,
      control: true,
      args: ['--quiet', '--timings'],
      onLine: (line) => {
        if (!this.measuring || !line.startsWith('{"timing"')) return;
        try {
          this.timings.push((JSON.parse(line) as { timing: Swarm['timings'][number] }).timing);
        } catch {
          // a partial line: skip it
        }
      },
    });
    this.processes.push(w);
    // A process that ends on its own (not at the end of the scenario) is worth its last words.
    void w.exited.then(({ code, signal }) => {
      if (!this.stopping) this.log(`${w.name} exited (${signal ?? code}): ${w.lines.slice(-5).join(' | ')}`);
    });
    return w;
  }

  /** The process that runs worker `name` (`gP-…`). */
  processOf(name: string): HeadlessProcess | undefined {
    return this.processes.find((p) => name === p.name || name.startsWith(`${p.name}-`));
  }

  /** A new worker in the same process as `name`; returns its name. */
  join(beside: string): string {
    const p = this.processOf(beside)!;
    const name = `${p.name}-j${++this.joins}`;
    p.send(`join ${name}`);
    return name;
  }

  async stopAll(): Promise<void> {
    this.stopping = true;
    for (const p of this.processes) p.crash();
    await Promise.all(this.processes.map((p) => p.exited));
  }
}

/** `/api/status` with the whole world in one page (bench:scale runs up to 64 workers; a page holds 256). */
export const WHOLE_WORLD = `?limit=${STATUS_PAGE_MAX}`;

/** The worker name in a peer id (`NAME-<20 hex>`, headless-worker.ts). */

/**
 * Work in flight just before a fault on `name` (see the file comment), from the coordinator's status: the
 * last commit's step and each member's peer id, last reported step and share (the status's world items, or
 * the test bed's `WorldBeforeFault`).
 */
export function inFlight(
  step: number,
  members: readonly { peerId: string; lastStep: number; share: number }[],
  name: string,
): { lost: number; dropped: number } {
  let lost = 0;
  let dropped = 0;
  for (const w of members) {
    const steps = Math.max(0, w.lastStep - step) * w.share;
    lost += steps;
    if (w.peerId.startsWith(`${name}-`)) dropped = steps;
  }
  return { lost, dropped };
}

export async function runScaleScenario(s: ScaleScenario): Promise<ScaleResult> {
  // Every worker comes from 127.0.0.1 with two sockets: the per-address caps meant for strangers (64
  // sockets, 60 hellos a minute, 20 restarts charged to an address) would refuse more than 32 workers.
  const caps = ['--max-sockets-per-address', '1000', '--joins-per-minute', '1000', '--address-restart-quota', '1000'];
  const proc = await spawnCoordinator({
    job: JOB(s.n, s.topology),
    datasetDir: null,
    startTimeoutMs: 60_000,
    extraArgs: caps,
  });
  const swarm = new Swarm(proc.url, s.log);
  const feed = await FeedWatcher.open(proc.url, proc.adminToken!);
  try {
    const t0 = performance.now();
    for (let left = s.n; left > 0; left -= s.perProcess) swarm.startGroup(Math.min(s.perProcess, left));
    await feed.until(() => feed.commits.some((c) => c.worldSize >= s.n), `a commit by all ${s.n}`, s.warmupS * 1000);
    const warmupS = (performance.now() - t0) / 1000;
    s.log(
      `N=${s.n}${s.churn ? ' churn' : ''}: all ${s.n} committing after ${warmupS.toFixed(0)} s; measuring ${s.windowS} s`,
    );
    const rss = rssMiB(swarm.processes.map((p) => p.child.pid!));
    return await measure(s, proc, swarm, feed, warmupS, rss === null ? null : rss / s.n);
  } finally {
    feed.close();
    await swarm.stopAll();
    await proc.stop();
  }
}

async function measure(
  s: ScaleScenario,
  proc: CoordinatorProcess,
  swarm: Swarm,
  feed: FeedWatcher,
  warmupS: number,
  rssMiBPerWorker: number | null,
): Promise<ScaleResult> {
  const startAt = Date.now();
  const startCommits = feed.commits.length;
  const restarts0 = (await proc.status()).restarts;
  swarm.measuring = true;
  const faults: FaultRecord[] = [];
  const joins: Joiner[] = [];
  const poller = pollMembership(proc, joins);
  const failures = s.churn ? Math.max(1, Math.round((s.n * s.ratePerWorkerMin * s.windowS) / 60)) : 0;
  const period = failures > 0 ? (s.windowS * 1000) / (failures + 1) : 0;
  for (let k = 1; k <= failures; k++) {
    await sleep(startAt + k * period - Date.now());
    const status = await proc.status(WHOLE_WORLD);
    const victim = status.world.items.map((w) => nameOfPeerId(w.peerId)).find((name) => swarm.processOf(name));
    if (!victim) continue;
    const { lost, dropped } = inFlight(status.step, status.world.items, victim);
    const kind = k % 2 === 1 ? 'crash' : 'leave';
    swarm.processOf(victim)!.send(`${kind} ${victim}`);
    const atMs = Date.now();
    faults.push({
      kind,
      atS: (atMs - startAt) / 1000,
      atMs,
      inFlightSteps: lost,
      lostSteps: lost,
      droppedShareSteps: dropped,
    });
    joins.push({ name: swarm.join(victim), at: Date.now(), memberRound: null });
  }
  await sleep(startAt + s.windowS * 1000 - Date.now());
  swarm.measuring = false;
  await poller.stop();
  const endAt = Date.now();
  const inWindow = feed.commits.slice(startCommits).filter((c) => c.at <= endAt);
  for (const f of faults) settleFault(f, feed);
  if (s.eventsDir)
    writeFileSync(
      join(s.eventsDir, `scale-events-${s.n}-${s.churn ? 'churn' : 'quiet'}.json`),
      JSON.stringify({ events: feed.events, commits: feed.commits, faults }),
    );
  const committedSteps = inWindow.reduce((n, c) => n + c.step - c.firstStep + 1, 0);
  const committedSamples = inWindow.reduce((n, c) => n + c.count, 0);
  const status = await proc.status();
  const audit = await proc.audit();
  return {
    n: s.n,
    churn: s.churn,
    ...(s.topology ? { topology: s.topology } : {}),
    windowS: s.windowS,
    commits: inWindow.length,
    committedSteps,
    committedSamples,
    samplesPerSec: committedSamples / s.windowS,
    utilization: status.usage?.total.utilization ?? null,
    groups: status.topology?.groups ?? null,
    outerStep: outerStep(swarm.timings),
    faults,
    joinToContributionS: joinTimes(joins, feed, endAt),
    restarts: status.restarts - restarts0,
    auditOk: audit.ok,
    rssMiBPerWorker,
    warmupS,
  };
}

/** Event-log rows and commits, each with the coordinator's `at` (ms): the admin feed's, or the test bed's report. */
export interface FaultLog {
  events: readonly { at: number; event: string; data?: unknown }[];
  commits: readonly { at: number }[];
}

/**
 * What the fault cost, from the events after it (file comment): carried when the next round opened
 * carried and was not given up before the next commit; the lost steps are then the dropped rank's own.
 */
export function settleFault(f: FaultRecord, feed: FaultLog): void {
  const after = feed.events.filter((e) => e.at >= f.atMs!);
  const opened = after.find((e) => e.event === 'round_open');
  const nextCommit = feed.commits.find((c) => c.at >= (opened?.at ?? Number.POSITIVE_INFINITY));
  const givenUp = after.some(
    (e) => e.event === 'carry_given_up' && e.at >= opened!.at && e.at <= (nextCommit?.at ?? Number.POSITIVE_INFINITY),
  );
  const carried = (opened?.data as { carried?: unknown } | undefined)?.carried === true;
  f.outcome = carried && !givenUp ? 'carried' : 'redone';
  if (f.outcome === 'carried') f.lostSteps = f.droppedShareSteps;
}

/** Medians of the outer-step splits (`tabswarm worker --timings` lines), or null without any. */
export function outerStep(timings: Swarm['timings']): ScaleResult['outerStep'] {
  if (timings.length === 0) return null;
  return {
    wallMs: median(timings.map((t) => t.wallMs)),
    computeMs: median(timings.map((t) => t.computeMs)),
    syncMs: median(timings.map((t) => t.syncMs)),
    waitingMs: median(timings.map((t) => t.waitingMs)),
    samples: timings.length,
  };
}

export interface Joiner {
  name: string;
  /** When its process started (ms since the epoch). */
  at: number;
  /** The first round the coordinator's status showed it in, or null. */
  memberRound: number | null;
}

/** Polls the status twice a second, noting the round in which each joiner first appears in the world. */
export function pollMembership(proc: CoordinatorProcess, joins: Joiner[]): { stop(): Promise<void> } {
  const watch = watchFirstRounds(
    () => proc.status(WHOLE_WORLD).catch(() => null),
    500,
    () => {
      for (const j of joins) j.memberRound ??= watch.of(j.name);
    },
  );
  return watch;
}

/** Seconds from each joiner's start to the first commit of a round it was a member of (tools/swarm/join-times.ts). */
export function joinTimes(joins: Joiner[], feed: FeedWatcher, endAt: number): number[] {
  return secondsToFirstContribution(joins, feed.commits, endAt);
}
