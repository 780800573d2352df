/**
 * `npm run bench:elastic` (tsx bench/elastic.ts): two parts, one JSON line `{"bench":"elastic", …}`.
 *
 * 1. Allreduce bus bandwidth between headless Chromium tabs over WebRTC, against the raw data-channel
 *    throughput between two of the same tabs measured in the same run (before and after the
 *    allreduces, to expose drift). Bus bandwidth follows NCCL's definition: the bytes each rank must
 *    send, 2·(P−1)/P·size, over the time from the common start instant to the last rank's finish —
 *    directly comparable with the throughput of one link. Configurations (frame sizes) are
 *    interleaved run by run so that the machine's drift (other processes, SwiftShader) hits them
 *    alike; medians are reported.
 *
 * 2. Recovery: a real coordinator process (small job: tiny-mlp, global batch 64, a 2,048-image
 *    subset, heartbeat 1 s) and `--world` volunteer tabs (the built web app, `?autostart=1`) train;
 *    one tab at a time is taken away, and a fresh tab replaces it before the next event. Three ways
 *    to go, interleaved event by event so load drift hits them alike:
 *      goodbye — `page.close()`: `pagehide` sends a goodbye, the coordinator closes the round at once;
 *      crash   — CDP `Page.crash`: the renderer dies, its sockets drop without a goodbye;
 *      hang    — CDP `Debugger.pause` on the main thread: sockets and data channels stay open, only
 *                the missing heartbeats tell (3 × heartbeatMs): the timeout path, as an in-run
 *                reference for what detection costs without the fast paths.
 *    Recovery time = from the instant the fault is issued (Node's clock, taken right before the CDP
 *    call) to the first step committed in a later round, as the coordinator's admin feed
 *    (`GET /api/admin/feed`, Server-Sent Events pushed as commits happen) stamps it with the server's
 *    clock (same machine, same clock). The feed's log events split it into detect (→ `round_closed`),
 *    regroup (→ `round_open`, includes the job's lastCallMs window), sync (→ `round_train`) and first
 *    step (→ its commit).
 *    Steps lost = steps the survivors had applied past the last commit and had to redo (read from
 *    each survivor's `window.tabswarmElastic.losses`, which logs every applied step, undone ones
 *    included: the old round's entries after the new round's first step), plus any commits the
 *    coordinator rolled back to a checkpoint (feed `rollback` events). The step being computed when
 *    the fault hit is not counted (it was never applied); it is redone too.
 *
 * There is no torchrun or Horovod on this machine, so no external system is measured. For context
 * only: torchrun's restart of the whole worker group takes tens of seconds; Horovod Elastic polls host
 * discovery every second and then rolls back to its last `state.commit()`. The in-run reference is
 * the hang row: the same event noticed by heartbeat timeout only.
 *
 * Options: --tabs 2,3,4  --mib 1,4,16  --frame 16300  --high 262144  --low 65536  --repeat 3
 *          --compression none|fp16|int8                                 (allreduce part)
 *          --events 5  --world 3  --faults goodbye,crash,hang  --heartbeat-ms 1000  --last-call-ms 300
 *          --global-batch 64  --commit-every 1                          (recovery part)
 *          --recovery-only | --allreduce-only
 * The recovery part serves the web app built in $TABSWARM_DIST, else builds it (`vite build`) into a
 * temp dir, so the shared dist/ is never touched. Load average (2 cores) is printed with the figures.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Browser, CDPSession, Page } from 'playwright-core';
import { writeDatasetSlice } from '../test/support/small-dataset';
import type { FeedMessage } from '../core/protocol/admin-feed';
import type { NetHarness } from '../test/browser/pages/net-harness';
import { FASHION_MNIST_DIR, launchChromium } from '../test/support/browser';
import { mulberry32 } from '../test/support/rng';
import { CoordinatorProcess, REPO_ROOT, TEST_ADMIN_TOKEN } from '../test/support/coordinator-process';
import { writeFakeIdxDataset } from '../test/support/fake-dataset';
import { allreduceFromCommonStart, rawThroughput } from '../test/support/net-harness-client';
import { startPeerServer } from '../test/support/peer-server';
import { Swarm, type SwarmTab } from '../test/support/swarm';
import type { ElasticStatus } from '../web/elastic/elastic-loop';
import { startViteServer } from '../test/support/vite-server';
import { DEFAULT_FRAME_BYTES } from '../web/net/framing';
import { DEFAULT_HIGH_WATER_BYTES } from '../web/net/paced-sender';
import { DEFAULT_LOW_WATER_BYTES } from '../web/net/peer-link';
import { chunkElementsFor, ringAllreduceBusBytes, type WireCompression } from '../web/net/ring-allreduce';

declare const netHarness: NetHarness;

const MiB = 1024 * 1024;

function option(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
}
const flag = (name: string) => process.argv.includes(`--${name}`);
const list = (name: string, fallback: string) => option(name, fallback).split(',').map(Number);

const tabCounts = list('tabs', '2,3,4');
const sizesMiB = list('mib', '1,4,16');
const frameSizes = list('frame', String(DEFAULT_FRAME_BYTES));
const highWaterBytes = Number(option('high', String(DEFAULT_HIGH_WATER_BYTES)));
const lowWaterBytes = Number(option('low', String(DEFAULT_LOW_WATER_BYTES)));
const repeat = Number(option('repeat', '3'));
const compression = option('compression', 'none') as WireCompression;
if (!['none', 'fp16', 'int8'].includes(compression))
  throw new Error(`--compression none|fp16|int8, not ${compression}`);

const FAULT_KINDS = ['goodbye', 'crash', 'hang'] as const;
type FaultKind = (typeof FAULT_KINDS)[number];
const eventsPerKind = Number(option('events', '5'));
const worldSize = Number(option('world', '3'));
const faultKinds = option('faults', FAULT_KINDS.join(',')).split(',') as FaultKind[];
const heartbeatMs = Number(option('heartbeat-ms', '1000'));
const lastCallMs = Number(option('last-call-ms', '300'));
const globalBatch = Number(option('global-batch', '64'));
const commitEvery = Number(option('commit-every', '1'));
const runAllreducePart = !flag('recovery-only');
const runRecoveryPart = !flag('allreduce-only');

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const now = () => performance.timeOrigin + performance.now();

interface Row {
  tabs: number;
  mib: number;
  frameBytes: number;
  ms: number;
  busMiBps: number;
  ratioToRaw: number;
  /** Raw per-link throughput with every link of the ring busy at once (same run). */
  rawRingMiBps: number;
  ratioToRawRing: number;
  runsMs: number[];
}

interface AllreduceResult {
  highWaterBytes: number;
  lowWaterBytes: number;
  compression: WireCompression;
  rawMiBps: Record<number, number>;
  allreduce: Row[];
}

/** The allreduce part: prints its table, returns the figures for the JSON line. */
async function benchAllreduce(): Promise<AllreduceResult> {
  const peerServer = await startPeerServer();
  const vite = await startViteServer();
  let browser: Browser | null = null;
  try {
    browser = await launchChromium();
    const tabs = await openHarnessTabs(browser, vite.url, peerServer, Math.max(2, ...tabCounts));
    await Promise.all(
      [0, 1].map((i) => tabs[i].page.evaluate(([a, b]) => netHarness.rawConnect(a, b), [tabs[i].id, tabs[1 - i].id])),
    );
    const raw = new Map<number, { before: number[]; after: number[] }>(
      frameSizes.map((f) => [f, { before: [], after: [] }]),
    );
    await rawOnce(tabs, frameSizes[0]); // warm-up: a fresh SCTP association starts with a small congestion window
    for (let r = 0; r < repeat; r++) for (const f of frameSizes) raw.get(f)!.before.push(await rawOnce(tabs, f));
    const rawRing = new Map<string, number[]>();

    let step = 0;
    const times = new Map<string, number[]>();
    for (const tabCount of tabCounts) {
      const members = tabs.slice(0, tabCount);
      await connectRing(members);
      for (let r = 0; r < repeat; r++) {
        for (const f of frameSizes)
          rawRing.set(`${tabCount}/${f}`, [
            ...(rawRing.get(`${tabCount}/${f}`) ?? []),
            await rawRingOnce(tabs, tabCount, f),
          ]);
      }
      for (const mib of sizesMiB) {
        // One unmeasured run per ring and size warms the links and the JIT.
        for (let r = -1; r < repeat; r++) {
          for (const frameBytes of frameSizes) {
            const ms = await timeAllreduce(members, (mib * MiB) / 4, r + 2, ++step, frameBytes);
            if (r >= 0) {
              const k = allreduceKey(tabCount, mib, frameBytes);
              times.set(k, [...(times.get(k) ?? []), ms]);
            }
          }
        }
      }
    }
    for (let r = 0; r < repeat; r++) for (const f of frameSizes) raw.get(f)!.after.push(await rawOnce(tabs, f));

    const rawMedian = new Map([...raw].map(([f, m]) => [f, median([...m.before, ...m.after])]));
    const rows = allreduceRows(times, rawMedian, rawRing);
    printAllreduce(raw, rawMedian, rows);
    for (const t of tabs) await t.page.evaluate(() => netHarness.close()).catch(() => {});
    return { highWaterBytes, lowWaterBytes, compression, rawMiBps: Object.fromEntries(rawMedian), allreduce: rows };
  } finally {
    await browser?.close();
    await vite.close();
    await peerServer.close();
  }
}

interface HarnessTab {
  id: string;
  page: Page;
}

/** `count` tabs, each in its own browser context, with the net harness open on the peer server. */
async function openHarnessTabs(
  browser: Browser,
  viteUrl: string,
  peerServer: { host: string; port: number },
  count: number,
): Promise<HarnessTab[]> {
  const run = Math.floor(Math.random() * 1e9).toString(36);
  const tabs: HarnessTab[] = [];
  for (let i = 0; i < count; i++) {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on('pageerror', (err) => console.error(`tab ${i}: ${err.message}`));
    await page.goto(`${viteUrl}/test/browser/pages/net-harness.html`);
    await page.waitForFunction(() => 'netHarness' in window);
    const id = `bench${i}-${run}`;
    await page.evaluate((o) => netHarness.open(o), {
      id,
      host: peerServer.host,
      port: peerServer.port,
      lowWaterBytes,
    });
    tabs.push({ id, page });
  }
  return tabs;
}

/** Raw data-channel throughput tab0→tab1 (MiB/s) for 16 MiB in `messageBytes` messages. */
function rawOnce(tabs: readonly HarnessTab[], messageBytes: number): Promise<number> {
  return rawThroughput(tabs[0], tabs[1], 16 * MiB, messageBytes, { leadMs: 200, highWaterBytes });
}

/**
 * Raw throughput per link when every tab of a ring sends to its right neighbour at once (for two
 * tabs: both directions of one link): the same load pattern as the allreduce without the
 * collective, i.e. what the machine's WebRTC stack can carry when all links are busy.
 */
async function rawRingOnce(tabs: readonly HarnessTab[], tabCount: number, messageBytes: number): Promise<number> {
  const total = 8 * MiB;
  const members = tabs.slice(0, tabCount);
  const startAt = now() + 300;
  const ends = await Promise.all(
    members.map(async (t, i) => {
      const right = members[(i + 1) % tabCount].id;
      const left = members[(i - 1 + tabCount) % tabCount].id;
      const receiving = t.page.evaluate(([peer, n]) => netHarness.rawReceive(peer as string, n as number), [
        left,
        total,
      ] as const);
      await t.page.evaluate(
        ([peer, n, m, s, h]) => netHarness.rawSend(peer as string, n as number, m as number, s as number, h as number),
        [right, total, messageBytes, startAt, highWaterBytes] as const,
      );
      return (await receiving).endAt;
    }),
  );
  return total / MiB / ((Math.max(...ends) - startAt) / 1000);
}

/** Form the allreduce ring of `members` and raw channels to both neighbours of each. */
async function connectRing(members: readonly HarnessTab[]): Promise<void> {
  const tabCount = members.length;
  await Promise.all(
    members.map((t) =>
      t.page.evaluate(
        (m) => netHarness.ring(m),
        members.map((x) => x.id),
      ),
    ),
  );
  await Promise.all(
    members.map((t, i) =>
      t.page.evaluate((args) => netHarness.rawConnect(args.self, args.peers), {
        self: t.id,
        peers: [members[(i + 1) % tabCount].id, members[(i - 1 + tabCount) % tabCount].id],
      }),
    ),
  );
}

/**
 * One allreduce of `n` floats on every member from a common start instant; milliseconds from that
 * instant to the last rank's finish. Throws if a rank fails or the ranks' results differ.
 */
async function timeAllreduce(
  members: readonly HarnessTab[],
  n: number,
  seed: number,
  step: number,
  frameBytes: number,
): Promise<number> {
  return allreduceFromCommonStart(
    members.map((t) => t.page),
    {
      n,
      seed,
      id: { round: 1, step, seq: 0 },
      timeoutMs: 300_000,
      chunkElements: chunkElementsFor(frameBytes, compression),
      compression,
      highWaterBytes,
    },
  );
}

const allreduceKey = (tabCount: number, mib: number, f: number) => `${tabCount}/${mib}/${f}`;

/** One row per configuration: median time, bus bandwidth and its ratios to the raw references. */
function allreduceRows(
  times: ReadonlyMap<string, number[]>,
  rawMedian: ReadonlyMap<number, number>,
  rawRing: ReadonlyMap<string, number[]>,
): Row[] {
  const rows: Row[] = [];
  for (const tabCount of tabCounts) {
    for (const mib of sizesMiB) {
      for (const frameBytes of frameSizes) {
        const runs = times.get(allreduceKey(tabCount, mib, frameBytes))!;
        const ms = median(runs);
        const busMiBps = ringAllreduceBusBytes((mib * MiB) / 4, tabCount, compression) / MiB / (ms / 1000);
        const ringRaw = median(rawRing.get(`${tabCount}/${frameBytes}`)!);
        rows.push({
          tabs: tabCount,
          mib,
          frameBytes,
          ms,
          busMiBps,
          ratioToRaw: busMiBps / rawMedian.get(frameBytes)!,
          rawRingMiBps: ringRaw,
          ratioToRawRing: busMiBps / ringRaw,
          runsMs: runs.map(Math.round),
        });
      }
    }
  }
  return rows;
}

function printAllreduce(
  raw: ReadonlyMap<number, { before: number[]; after: number[] }>,
  rawMedian: ReadonlyMap<number, number>,
  rows: readonly Row[],
): void {
  console.log(
    `high water ${highWaterBytes} B, low water ${lowWaterBytes} B, compression ${compression}, ${repeat} runs each (median)`,
  );
  for (const [f, m] of raw) {
    const fmt = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(' ');
    console.log(
      `raw channel tab0→tab1, ${f}-byte messages: ${rawMedian.get(f)!.toFixed(1)} MiB/s (before: ${fmt(m.before)}; after: ${fmt(m.after)})`,
    );
  }
  console.log('\ntabs    size   frame B   time ms   bus MiB/s   bus/raw   raw ring MiB/s   bus/raw ring   runs ms');
  for (const r of rows) {
    console.log(
      `${String(r.tabs).padStart(4)}  ${String(r.mib).padStart(2)} MiB  ${String(r.frameBytes).padStart(8)}  ${r.ms.toFixed(0).padStart(8)}  ${r.busMiBps.toFixed(1).padStart(10)}  ${r.ratioToRaw.toFixed(2).padStart(8)}  ${r.rawRingMiBps.toFixed(1).padStart(15)}  ${r.ratioToRawRing.toFixed(2).padStart(13)}   ${r.runsMs.join(' ')}`,
    );
  }
}

// ---------------------------------------------------------------------------------------------------
// Recovery part

const TRAIN_IMAGES = 2048;
const TEST_IMAGES = 100;

/** The first images of Fashion-MNIST as small raw IDX files (each tab downloads ~1.6 MB, not 55); seeded fake images without it. */
async function writeSmallDataset(dir: string): Promise<{ dir: string; name: string }> {
  mkdirSync(dir, { recursive: true });
  if (!existsSync(FASHION_MNIST_DIR)) {
    writeFakeIdxDataset(dir, { trainCount: TRAIN_IMAGES, testCount: TEST_IMAGES });
    return { dir, name: `fake IDX images (no ${FASHION_MNIST_DIR})` };
  }
  await writeDatasetSlice(FASHION_MNIST_DIR, dir, TRAIN_IMAGES, TEST_IMAGES);
  return { dir, name: `Fashion-MNIST, first ${TRAIN_IMAGES} training images` };
}

/** The web app to serve: $TABSWARM_DIST, else a fresh `vite build` into `tempDir` (never the shared dist/). */
function webBuild(tempDir: string): string {
  if (process.env.TABSWARM_DIST) {
    const dist = resolve(process.env.TABSWARM_DIST);
    if (!existsSync(join(dist, 'index.html')))
      throw new Error(`TABSWARM_DIST=${dist} has no index.html: run npx vite build --outDir ${dist}`);
    return dist;
  }
  const dist = join(tempDir, 'dist');
  const built = spawnSync('npx', ['vite', 'build', '--outDir', dist, '--emptyOutDir', '--logLevel', 'error'], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  if (built.status !== 0) throw new Error(`vite build failed:\n${built.stderr.toString()}`);
  return dist;
}

interface FeedCommitSeen {
  step: number;
  round: number;
  worldSize: number;
  /** Server clock (ms since the epoch). */
  at: number;
}
interface FeedEventSeen {
  event: string;
  at: number;
  data: any;
}

/**
 * The coordinator's admin feed (Server-Sent Events) read in Node: commits, log events and rollbacks as
 * the coordinator pushes them, and `until(check)` to wait on them (no polling).
 */
class FeedWatcher {
  readonly commits: FeedCommitSeen[] = [];
  readonly events: FeedEventSeen[] = [];
  readonly rollbacks: { afterStep: number; lastStepBefore: number }[] = [];
  private readonly abort = new AbortController();
  private waiters: (() => void)[] = [];
  private failure: Error | null = null;
  private snapshotSeen = false;

  private constructor() {}

  static async open(url: string, token: string): Promise<FeedWatcher> {
    const feed = new FeedWatcher();
    const res = await fetch(`${url}/api/admin/feed?token=${encodeURIComponent(token)}`, { signal: feed.abort.signal });
    if (!res.ok || !res.body) throw new Error(`admin feed: ${res.status} ${await res.text()}`);
    void feed.read(res.body);
    await feed.until(() => feed.snapshotSeen, 'snapshot', 30_000);
    return feed;
  }

  private async read(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block
            .split('\n')
            .filter((line) => line.startsWith('data: '))
            .map((line) => line.slice(6))
            .join('\n');
          if (data) this.take(JSON.parse(data) as FeedMessage);
        }
        this.notify();
      }
      if (!this.abort.signal.aborted) this.failure = new Error('the admin feed ended');
    } catch (err) {
      if (!this.abort.signal.aborted) this.failure = err as Error;
    }
    this.notify();
  }

  private take(msg: FeedMessage): void {
    const commit = (c: { step: number; round: number; worldSize: number; at: number }) =>
      this.commits.push({ step: c.step, round: c.round, worldSize: c.worldSize, at: c.at });
    switch (msg.type) {
      case 'snapshot':
        this.snapshotSeen = true;
        msg.commits.forEach(commit);
        for (const e of msg.events) this.events.push({ event: e.event, at: e.at, data: e.data });
        break;
      case 'commit':
        commit(msg.commit);
        break;
      case 'event':
        this.events.push({ event: msg.event.event, at: msg.event.at, data: msg.event.data });
        break;
      case 'rollback':
        this.rollbacks.push({ afterStep: msg.afterStep, lastStepBefore: this.commits.at(-1)?.step ?? 0 });
        break;
    }
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }

  /** Resolves with the first truthy `check()` (evaluated after every feed message). */
  until<T>(check: () => T | null | undefined | false, what: string, timeoutMs = 120_000): Promise<T> {
    return new Promise((resolveWait, reject) => {
      const waiter = () => {
        if (this.failure) return finish(this.failure);
        const value = check();
        if (value) finish(null, value);
      };
      const finish = (err: Error | null, value?: T) => {
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== waiter);
        if (err) reject(err);
        else resolveWait(value as T);
      };
      const timer = setTimeout(
        () =>
          finish(
            new Error(
              `admin feed: no ${what} within ${timeoutMs} ms (last commit ${JSON.stringify(this.commits.at(-1))})`,
            ),
          ),
        timeoutMs,
      );
      this.waiters.push(waiter);
      waiter();
    });
  }

  /** The first event named `event` after index `from` whose data matches. */
  find(event: string, from: number, match: (data: any) => boolean = () => true): FeedEventSeen | undefined {
    return this.events.slice(from).find((e) => e.event === event && match(e.data));
  }

  close(): void {
    this.abort.abort();
  }
}

interface RecoveryEvent {
  kind: FaultKind;
  /** Rank of the tab taken away. */
  rank: number;
  /** Round the fault hit, and the round whose first commit ended the recovery. */
  round: number;
  nextRound: number;
  /** The new round started at this step (last commit + 1). */
  resumedAt: number;
  recoveryMs: number;
  /** Fault → round_closed → round_open → round_train → first commit, ms each. */
  detectMs: number;
  regroupMs: number;
  syncMs: number;
  firstStepMs: number;
  stepsLost: number;
  /** Per survivor: applied steps undone. */
  undoneBySurvivor: number[];
  rolledBackCommits: number;
  /** Survivors that put their backup back (`restores` grew): a cross-check of `undoneBySurvivor`. */
  restoredSurvivors: number;
}

interface FaultSummary {
  n: number;
  median_ms: number;
  max_ms: number;
  min_ms: number;
  detect_ms: number;
  regroup_ms: number;
  sync_ms: number;
  first_step_ms: number;
  steps_lost: { median: number; max: number };
}

interface RecoveryResult {
  job: Record<string, unknown>;
  dataset: string;
  events: RecoveryEvent[];
  recovery: Partial<Record<FaultKind, FaultSummary>>;
  steps_lost: { median: number; max: number };
  /** Median time between two commits of one round with the full world: one step, for scale. */
  stepMs: number;
  seconds: number;
}

/** Steps a survivor applied in the old round at or after `resumedAt`, i.e. undone: its losses log holds them before the new round's `resumedAt`. */
function undoneSteps(losses: readonly { step: number }[], resumedAt: number): number {
  let newRoundStart = -1;
  for (let i = losses.length - 1; i >= 0; i--) {
    if (losses[i].step === resumedAt) {
      newRoundStart = i;
      break;
    }
  }
  if (newRoundStart <= 0) return 0;
  return Math.max(0, losses[newRoundStart - 1].step - resumedAt + 1);
}

async function benchRecovery(): Promise<RecoveryResult> {
  const started = now();
  const tempDir = mkdtempSync(join(tmpdir(), 'tabswarm-bench-elastic-'));
  let coordinator: CoordinatorProcess | null = null;
  let browser: Browser | null = null;
  let feed: FeedWatcher | null = null;
  let swarm: Swarm | null = null;
  try {
    const dist = webBuild(tempDir);
    const dataset = await writeSmallDataset(join(tempDir, 'dataset'));
    const job = recoveryJob();
    coordinator = await CoordinatorProcess.spawn({ job, datasetDir: dataset.dir, extraArgs: ['--dist', dist] });
    feed = await FeedWatcher.open(coordinator.url, TEST_ADMIN_TOKEN);
    browser = await launchChromium();
    swarm = new Swarm(browser, coordinator.url, { query: { testSubset: '0' } });
    const s = swarm;
    const f = feed;
    const random = mulberry32(12345);

    await s.openMany(worldSize);
    await steadyTraining(f, `${worldSize} tabs training`);

    const order: FaultKind[] = [];
    for (let i = 0; i < eventsPerKind; i++) order.push(...faultKinds);
    const events: RecoveryEvent[] = [];
    for (const [i, kind] of order.entries()) {
      events.push(await runFaultEvent(s, f, kind, i, random));
      if (i < order.length - 1) await s.open();
    }

    const recovery: Partial<Record<FaultKind, FaultSummary>> = {};
    for (const kind of faultKinds) recovery[kind] = summarizeFaults(events.filter((e) => e.kind === kind));
    const problems = s.problems(/WebSocket|ERR_CONNECTION|peer|Peer|closed|Lost connection/);
    if (problems.length)
      console.log(`console errors in live tabs (not failing the bench):\n  ${problems.slice(0, 10).join('\n  ')}`);
    const audit = await coordinator.audit();
    if (!audit.ok)
      throw new Error(`the coordinator's audit failed after the events: ${JSON.stringify(audit).slice(0, 2000)}`);
    const gaps = commitGaps(f);
    return {
      job,
      dataset: dataset.name,
      stepMs: Math.round(median(gaps) / commitEvery),
      events,
      recovery,
      steps_lost: { median: median(events.map((e) => e.stepsLost)), max: Math.max(...events.map((e) => e.stepsLost)) },
      seconds: Math.round((now() - started) / 1000),
    };
  } finally {
    feed?.close();
    await swarm?.closeAll();
    await browser?.close();
    await coordinator?.stop();
    rmSync(tempDir, { recursive: true, force: true });
  }
}

/** The recovery part's small job. */
function recoveryJob() {
  return {
    model: 'tiny-mlp',
    optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
    globalBatch,
    // Long enough never to finish during the bench.
    epochs: 1000,
    minWorkers: 1,
    maxWorkers: worldSize,
    commitEvery,
    checkpointEvery: 1000,
    heartbeatMs,
    lastCallMs,
    evalSamples: 0,
    seed: 7,
  };
}

/** Two commits in a row by the full world in the newest round: every tab trains. */
function steadyTraining(f: FeedWatcher, what: string): Promise<FeedCommitSeen> {
  return f.until(
    () => {
      const last = f.commits.at(-1);
      const lastOpen = [...f.events].reverse().find((e) => e.event === 'round_open');
      if (!last || last.worldSize !== worldSize || (lastOpen && lastOpen.data.round !== last.round)) return null;
      return f.commits.filter((c) => c.round === last.round).length >= 2 ? last : null;
    },
    what,
    180_000,
  );
}

/** Times between consecutive commits of one round with the full world (a commit interval each). */
function commitGaps(f: FeedWatcher): number[] {
  return f.commits.slice(1).flatMap((c, j) => {
    const previous = f.commits[j];
    return c.round === previous.round && c.worldSize === worldSize && previous.worldSize === worldSize
      ? [c.at - previous.at]
      : [];
  });
}

type TabWithStatus = { tab: SwarmTab; status: ElasticStatus };

/** Event `i`: wait for steady training, take one tab away by `kind`, and measure until the next round commits. */
async function runFaultEvent(
  s: Swarm,
  f: FeedWatcher,
  kind: FaultKind,
  i: number,
  random: () => number,
): Promise<RecoveryEvent> {
  await steadyTraining(f, `steady training before event ${i + 1}`);
  // steadyTraining() returns right after a commit; a fault issued then would always find nothing applied
  // past it. A uniform delay over one commit interval samples every point of the step cycle.
  const interval = median(commitGaps(f).slice(-20));
  await new Promise((r) => setTimeout(r, random() * interval));
  const statuses: TabWithStatus[] = await Promise.all(
    s.live.map(async (tab) => ({ tab, status: (await s.status(tab))! })),
  );
  // Rotate the victim's rank, so rank 0 (checkpoints, evaluation) goes as often as the others.
  const wantedRank = i % worldSize;
  const victim = statuses.find((t) => t.status.rank === wantedRank) ?? statuses[0];
  const survivors = statuses.filter((t) => t !== victim).map((t) => t.tab);
  const eventIndex = f.events.length;
  const commitIndex = f.commits.length;
  const rollbackIndex = f.rollbacks.length;
  // The round the fault hits: the newest one announced (a commit-boundary round change may have happened during the delay).
  const round = Math.max(
    f.commits.at(-1)!.round,
    ...f.events.filter((e) => e.event === 'round_open').map((e) => e.data.round as number),
  );

  const { faultAt, cdp, pending } = await injectFault(s, victim.tab, kind);
  const first = await f.until(
    () => f.commits.slice(commitIndex).find((c) => c.round > round),
    `a commit after the ${kind} of event ${i + 1}`,
    60_000,
  );
  await pending;
  const closed = f.find('round_closed', eventIndex, (d) => d.round === round);
  const opened = f.find('round_open', eventIndex, (d) => d.round === first.round);
  const train = f.find('round_train', eventIndex, (d) => d.round === first.round);
  if (!closed || !opened || !train)
    throw new Error(
      `event ${i + 1}: the feed lacks round_closed/round_open/round_train for rounds ${round}→${first.round}`,
    );
  const resumedAt = opened.data.step as number;
  const after = await Promise.all(survivors.map(async (tab) => (await s.status(tab))!));
  const undoneBySurvivor = after.map((status) => undoneSteps(status.losses, resumedAt));
  const restoredSurvivors = after.filter(
    (status, j) => status.restores > statuses.find((t) => t.tab === survivors[j])!.status.restores,
  ).length;
  const rolledBackCommits = f.rollbacks
    .slice(rollbackIndex)
    .reduce((sum, r) => sum + Math.max(0, r.lastStepBefore - r.afterStep), 0);
  const event: RecoveryEvent = {
    kind,
    rank: victim.status.rank!,
    round,
    nextRound: first.round,
    resumedAt,
    recoveryMs: first.at - faultAt,
    detectMs: closed.at - faultAt,
    regroupMs: opened.at - closed.at,
    syncMs: train.at - opened.at,
    firstStepMs: first.at - train.at,
    stepsLost: Math.max(0, ...undoneBySurvivor) + rolledBackCommits,
    undoneBySurvivor,
    rolledBackCommits,
    restoredSurvivors,
  };
  logFaultEvent(f, event, i, eventIndex);
  if (cdp) {
    // Not resumed: a resumed tab would reconnect and rejoin. Closing the context ends the paused renderer.
    victim.tab.gone = 'closed';
    await victim.tab.context.close().catch(() => undefined);
  }
  return event;
}

/**
 * Take `tab` away by `kind`: `faultAt` is Node's clock right before the call; `pending` settles when
 * the fault is done; `cdp` is the session holding a hung tab paused.
 */
async function injectFault(
  s: Swarm,
  tab: SwarmTab,
  kind: FaultKind,
): Promise<{ faultAt: number; cdp: CDPSession | null; pending: Promise<unknown> }> {
  if (kind === 'hang') {
    const cdp = await tab.context.newCDPSession(tab.page);
    await cdp.send('Debugger.enable');
    const faultAt = Date.now();
    // Pauses the main thread at its next statement (a heartbeat tick or a frame arrives within ms).
    return { faultAt, cdp, pending: cdp.send('Debugger.pause') };
  }
  if (kind === 'crash') {
    const faultAt = Date.now();
    return { faultAt, cdp: null, pending: s.crash(tab) };
  }
  const faultAt = Date.now();
  return { faultAt, cdp: null, pending: s.close(tab) };
}

/** One line per event, and notes when it took extra rounds or the restore count disagrees with the losses log. */
function logFaultEvent(f: FeedWatcher, event: RecoveryEvent, i: number, eventIndex: number): void {
  const { kind, round, nextRound, resumedAt, undoneBySurvivor, restoredSurvivors, rolledBackCommits } = event;
  if (nextRound > round + 1) {
    const closes = f.events.slice(eventIndex).filter((e) => e.event === 'round_closed' && e.data.round < nextRound);
    console.log(
      `  (event ${i + 1} went through ${nextRound - round - 1} more round(s): ${closes.map((e) => `round ${e.data.round} closed: ${e.data.reason}`).join('; ')})`,
    );
  }
  if (restoredSurvivors > 0 !== Math.max(0, ...undoneBySurvivor) > 0) {
    console.log(
      `  (event ${i + 1}: ${restoredSurvivors} survivor(s) restored their backup, yet ${undoneBySurvivor.join('/')} steps undone per the losses log)`,
    );
  }
  console.log(
    `event ${String(i + 1).padStart(2)}: ${kind.padEnd(7)} rank ${event.rank}, round ${round}→${nextRound}, resumed at step ${resumedAt}: ` +
      `${event.recoveryMs} ms (detect ${event.detectMs}, regroup ${event.regroupMs}, sync ${event.syncMs}, first step ${event.firstStepMs}), ` +
      `steps lost ${event.stepsLost} (${undoneBySurvivor.join('/')} undone, ${rolledBackCommits} rolled back)`,
  );
}

function summarizeFaults(xs: RecoveryEvent[]): FaultSummary {
  return {
    n: xs.length,
    median_ms: median(xs.map((e) => e.recoveryMs)),
    max_ms: Math.max(...xs.map((e) => e.recoveryMs)),
    min_ms: Math.min(...xs.map((e) => e.recoveryMs)),
    detect_ms: median(xs.map((e) => e.detectMs)),
    regroup_ms: median(xs.map((e) => e.regroupMs)),
    sync_ms: median(xs.map((e) => e.syncMs)),
    first_step_ms: median(xs.map((e) => e.firstStepMs)),
    steps_lost: { median: median(xs.map((e) => e.stepsLost)), max: Math.max(...xs.map((e) => e.stepsLost)) },
  };
}

function printRecovery(r: RecoveryResult): void {
  const targets: Record<FaultKind, string> = { goodbye: '< 1000', crash: '< 3000', hang: 'reference' };
  console.log(
    `\nrecovery: fault → first commit of the next round, ms (${worldSize} tabs → ${worldSize - 1}, ${r.job.model}, global batch ${r.job.globalBatch}, ` +
      `heartbeat ${r.job.heartbeatMs} ms (timeout ×3), last call ${r.job.lastCallMs} ms; ${r.dataset})`,
  );
  console.log(
    'fault     n   median      max      min  target    detect  regroup   sync  1st step   steps lost med/max',
  );
  for (const kind of faultKinds) {
    const k = r.recovery[kind]!;
    console.log(
      `${kind.padEnd(7)} ${String(k.n).padStart(3)} ${String(k.median_ms).padStart(8)} ${String(k.max_ms).padStart(8)} ${String(k.min_ms).padStart(8)}  ${targets[kind].padEnd(9)} ` +
        `${String(k.detect_ms).padStart(7)} ${String(k.regroup_ms).padStart(8)} ${String(k.sync_ms).padStart(6)} ${String(k.first_step_ms).padStart(9)}   ${k.steps_lost.median}/${k.steps_lost.max}`,
    );
  }
  console.log(
    `steps lost per failure, all events: median ${r.steps_lost.median}, max ${r.steps_lost.max} (target ≤ 1); one step takes ${r.stepMs} ms (median, ${worldSize} tabs)`,
  );
  console.log("(medians of each phase separately; detect/regroup/sync/1st step by the coordinator's log events)");
}

// ---------------------------------------------------------------------------------------------------

const load = () => loadavg().map((x) => Math.round(x * 100) / 100);

async function main(): Promise<void> {
  const loadAtStart = load();
  const started = now();
  console.log(`load average ${loadAtStart.join(' ')} at start (2 cores)`);
  const allreduce = runAllreducePart ? await benchAllreduce() : null;
  const recovery = runRecoveryPart ? await benchRecovery() : null;
  if (recovery) printRecovery(recovery);
  const loadAtEnd = load();
  const seconds = Math.round((now() - started) / 1000);
  console.log(
    `\nload average ${loadAtStart.join(' ')} at start, ${loadAtEnd.join(' ')} at end (2 cores); run took ${seconds} s`,
  );
  const stripEvent = (e: RecoveryEvent) => ({
    kind: e.kind,
    ms: e.recoveryMs,
    detect: e.detectMs,
    regroup: e.regroupMs,
    sync: e.syncMs,
    first: e.firstStepMs,
    lost: e.stepsLost,
  });
  // Three decimals are plenty for timings and ratios measured on a shared machine.
  const rounded = (_key: string, v: unknown) =>
    typeof v === 'number' && !Number.isInteger(v) ? Math.round(v * 1000) / 1000 : v;
  const result = {
    bench: 'elastic',
    ...(allreduce ?? {}),
    ...(recovery
      ? {
          recovery: recovery.recovery,
          steps_lost: recovery.steps_lost,
          step_ms: recovery.stepMs,
          recovery_job: { ...recovery.job, world: worldSize, dataset: recovery.dataset },
          recovery_events: recovery.events.map(stripEvent),
        }
      : {}),
    load: { start: loadAtStart, end: loadAtEnd, cores: 2 },
    seconds,
  };
  console.log(JSON.stringify(result, rounded));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
