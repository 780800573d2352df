/**
 * bench:elastic's recovery part: a real coordinator process with a small job and `world` volunteer tabs
 * (the built web app, `?autostart=1`) train; one tab at a time is taken away (goodbye, crash or hang,
 * interleaved event by event) and a fresh tab replaces it before the next event. Each event is timed
 * from the fault to the next round's first commit on the coordinator's admin feed
 * (admin-feed-watcher.ts), split into its phases, and the steps the survivors redid are counted
 * (elastic-figures.ts). bench/elastic.ts describes the method in full.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Browser, CDPSession } from 'playwright-core';
import { FASHION_MNIST_DIR, launchChromium } from '../../test/support/browser';
import { CoordinatorProcess, REPO_ROOT, TEST_ADMIN_TOKEN } from '../../test/support/coordinator-process';
import { writeFakeIdxDataset } from '../../test/support/fake-dataset';
import { mulberry32 } from '../../test/support/rng';
import { writeDatasetSlice } from '../../test/support/small-dataset';
import { Swarm, type SwarmTab } from '../../test/support/swarm';
import type { ElasticStatus } from '../../web/elastic/elastic-loop';
import { type FeedCommitSeen, FeedWatcher } from './admin-feed-watcher';
import { nowMs } from './common';
import {
  type FaultKind,
  type FaultSummary,
  median,
  type RecoveryEvent,
  type RecoveryResult,
  summarizeFaults,
  undoneSteps,
} from './elastic-figures';
import { logFaultEvent } from './elastic-report';

export interface RecoveryOptions {
  /** Events per fault kind, and the kinds (interleaved in this order). */
  eventsPerKind: number;
  faultKinds: FaultKind[];
  /** Tabs training when a fault hits. */
  worldSize: number;
  /** The job's heartbeat, last-call window, global batch and commit interval. */
  heartbeatMs: number;
  lastCallMs: number;
  globalBatch: number;
  commitEvery: number;
}

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

export async function benchRecovery(o: RecoveryOptions): Promise<RecoveryResult> {
  const started = nowMs();
  const tempDir = mkdtempSync(join(tmpdir(), 'tabswarm-bench-elastic-'));
  let coordinator: CoordinatorProcess | null = null;
  let browser: Browser | null = null;
  let feed: FeedWatcher | null = null;
  let swarm: Swarm | null = null;
  try {
    const dist = webBuild(tempDir);
    const dataset = await writeSmallDataset(join(tempDir, 'dataset'));
    const job = recoveryJob(o);
    coordinator = await CoordinatorProcess.spawn({ job, datasetDir: dataset.dir, extraArgs: ['--dist', dist] });
    feed = await FeedWatcher.open(coordinator.url, TEST_ADMIN_TOKEN);
    browser = await launchChromium();
    swarm = new Swarm(browser, coordinator.url, { query: { testSubset: '0' } });
    const s = swarm;
    const f = feed;
    const random = mulberry32(12345);

    await s.openMany(o.worldSize);
    await steadyTraining(f, o.worldSize, `${o.worldSize} tabs training`);

    const order: FaultKind[] = [];
    for (let i = 0; i < o.eventsPerKind; i++) order.push(...o.faultKinds);
    const events: RecoveryEvent[] = [];
    for (const [i, kind] of order.entries()) {
      events.push(await runFaultEvent(s, f, kind, i, random, o.worldSize));
      if (i < order.length - 1) await s.open();
    }

    const recovery: Partial<Record<FaultKind, FaultSummary>> = {};
    for (const kind of o.faultKinds) recovery[kind] = summarizeFaults(events.filter((e) => e.kind === kind));
    const problems = s.problems(/WebSocket|ERR_CONNECTION|peer|Peer|closed|Lost connection/);
    if (problems.length)
      console.log(`console errors in live tabs (not failing the bench):\n  ${problems.slice(0, 10).join('\n  ')}`);
    const audit = await coordinator.audit();
    if (!audit.ok)
      throw new Error(`the coordinator's audit failed after the events: ${JSON.stringify(audit).slice(0, 2000)}`);
    const gaps = commitGaps(f, o.worldSize);
    return {
      job,
      dataset: dataset.name,
      stepMs: Math.round(median(gaps) / o.commitEvery),
      events,
      recovery,
      steps_lost: { median: median(events.map((e) => e.stepsLost)), max: Math.max(...events.map((e) => e.stepsLost)) },
      seconds: Math.round((nowMs() - started) / 1000),
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
function recoveryJob(o: RecoveryOptions) {
  return {
    model: 'tiny-mlp',
    optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
    globalBatch: o.globalBatch,
    // Long enough never to finish during the bench.
    epochs: 1000,
    minWorkers: 1,
    maxWorkers: o.worldSize,
    commitEvery: o.commitEvery,
    checkpointEvery: 1000,
    heartbeatMs: o.heartbeatMs,
    lastCallMs: o.lastCallMs,
    evalSamples: 0,
    seed: 7,
  };
}

/** Two commits in a row by the full world in the newest round: every tab trains. */
function steadyTraining(f: FeedWatcher, worldSize: number, what: string): Promise<FeedCommitSeen> {
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
function commitGaps(f: FeedWatcher, worldSize: number): number[] {
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
  worldSize: number,
): Promise<RecoveryEvent> {
  await steadyTraining(f, worldSize, `steady training before event ${i + 1}`);
  // steadyTraining() returns right after a commit; a fault issued then would always find nothing applied
  // past it. A uniform delay over one commit interval samples every point of the step cycle.
  const interval = median(commitGaps(f, worldSize).slice(-20));
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
