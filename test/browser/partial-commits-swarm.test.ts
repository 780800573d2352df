/**
 * Issue 22's proof in real browsers: eight Chromium tabs (the volunteer page, WebGPU on SwiftShader) and
 * two headless workers (`tabswarm worker`: the same loop and training worker in Node, on Dawn and
 * node-datachannel) train one local-mode job (H = 8, int8 wire). Inside an outer step a tab's renderer
 * crashes and a third headless worker joins. The crash costs only the crashed rank's slices: the partial
 * commit's skipped positions are exactly that rank's slices of the outer step in flight, computed here
 * from the planning round's shares (logged by the coordinator in `round_open`) with a largest-remainder
 * split written out in this file, not the product's; the next outer step serves them first. Every commit
 * needs every rank's report of the same state hash (a mismatch is a `divergence`), so commits by worlds
 * holding both kinds are hash-agreed across tabs and headless workers alike. The audit is clean.
 *
 * Needs Chromium, the web build and WebGPU in Node: skips here when missing, fails under CI.
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusReport } from '../../coordinator/admin/audit';
import { type HeadlessProcess, spawnHeadless } from '../../tools/swarm/headless-workers';
import { launchChromium, skipWithoutChromium, skipWithoutWebBuild, WEB_BUILD_DIR } from '../support/browser';
import { expectCleanAudit } from '../support/clean-audit';
import { commitsFrom } from '../support/commit-log';
import { CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../support/fake-dataset';
import { nodeGpuAvailable } from '../support/node-gpu';
import { skipWithout } from '../support/skip';
import { coordinatorStatusUntil, Swarm } from '../support/swarm';

const TABS = 8;
const HEADLESS = 2;
const H = 8;
const GLOBAL_BATCH = 64;
/** Six outer steps per epoch, so every group starts on a multiple of H × batch with no holes before it. */
const TRAIN = 6 * H * GLOBAL_BATCH;

const JOB = {
  model: 'tiny-mlp',
  optimizer: { kind: 'sgd', lr: 0.05, momentum: 0 },
  globalBatch: GLOBAL_BATCH,
  epochs: 1000,
  minWorkers: 2,
  maxWorkers: TABS + HEADLESS + 1,
  commitEvery: H,
  lastCallMs: 500,
  heartbeatMs: 1000,
  evalSamples: 0,
  checkpointEvery: 1000,
  sync: { mode: 'local', innerSteps: H, compression: 'int8' },
};

type Range = [number, number];
interface Member {
  workerId: string;
  rank: number;
  share: number;
  slot: number;
}

/**
 * The positions `slot` computes of a step of `count` positions from `start`: `count` split in proportion
 * to the shares (by slot) by largest remainders, ties to the lower slot, slices in slot order.
 */
function sliceOf(start: number, count: number, shares: number[], slot: number): Range {
  const total = shares.reduce((a, b) => a + b, 0);
  const exact = shares.map((s) => (s / total) * count);
  const sizes = exact.map(Math.floor);
  const order = exact.map((x, i) => ({ i, rem: x - sizes[i] })).sort((a, b) => b.rem - a.rem || a.i - b.i);
  for (let left = count - sizes.reduce((a, b) => a + b, 0), k = 0; left > 0; left--, k++) sizes[order[k].i]++;
  const from = start + sizes.slice(0, slot).reduce((a, b) => a + b, 0);
  return [from, from + sizes[slot]];
}

/** Index of the last event named `name` in `events`, −1 if none. */
function lastIndexOf(events: { event: string }[], name: string): number {
  for (let i = events.length - 1; i >= 0; i--) if (events[i].event === name) return i;
  return -1;
}

const skip =
  skipWithoutChromium() ||
  skipWithoutWebBuild() ||
  skipWithout('WebGPU in Node (Debian chromium ships SwiftShader)', await nodeGpuAvailable());

describe.skipIf(skip)('eight tabs and headless workers in one local-mode job', () => {
  let coordinator: CoordinatorProcess;
  let browser: Browser;
  let swarm: Swarm;
  const headless: HeadlessProcess[] = [];
  /** Every (workerId → peerId) the coordinator's status showed in a world. */
  const peers = new Map<string, string>();
  const until = async (check: (s: StatusReport) => boolean, what: string) => {
    const { status } = await coordinatorStatusUntil(
      coordinator,
      (s) => {
        for (const w of s.world) peers.set(w.id, w.peerId);
        return check(s);
      },
      what,
      { timeoutMs: 120_000, pollMs: 250 },
    );
    return status;
  };

  beforeAll(async () => {
    const datasetDir = writeFakeIdxDataset(join(makeTempDir('tabswarm-partial-swarm-'), 'fake-mnist'), {
      trainCount: TRAIN,
      testCount: 16,
      seed: 5,
    });
    coordinator = await CoordinatorProcess.spawn({ job: JOB, datasetDir, extraArgs: ['--dist', WEB_BUILD_DIR] });
    browser = await launchChromium();
    swarm = new Swarm(browser, coordinator.url, { query: { testSubset: '0' } });
  });

  afterAll(async () => {
    for (const h of headless) h.crash();
    await swarm?.closeAll().catch(() => undefined);
    await browser?.close();
    await coordinator?.stop();
  });

  it('a crash costs only the crashed tab’s slices, a join inside an outer step costs nothing, and every commit is hash-agreed by tabs and headless workers', async () => {
    const started = performance.now();
    for (const name of ['hl-a', 'hl-b'])
      headless.push(spawnHeadless({ url: coordinator.url, name, args: ['--no-cache', '--quiet'] }));
    const tabs = await swarm.openMany(TABS);
    const loadedMs = performance.now() - started;
    const ten = await until((s) => s.world.length === TABS + HEADLESS && s.state === 'training', 'a world of ten');
    await until((s) => s.step >= ten.step + H, 'an outer commit by the world of ten');
    const world10 = performance.now() - started;

    // Inside an outer step (a few inner steps reported, the outer sync not begun) a tab crashes and a
    // headless worker joins; the joiner waits for the outer boundary.
    const victim = tabs[3];
    const victimId = (await swarm.status(victim))!.workerId!;
    await swarm.waitFor(victim, (st, h) => st.localStep % h >= 2 && st.localStep % h <= 5, H, 120_000);
    await swarm.crash(victim);
    headless.push(spawnHeadless({ url: coordinator.url, name: 'hl-join', args: ['--no-cache', '--quiet'] }));
    const crashedAt = performance.now() - started;
    await until(
      (s) => s.world.length === TABS + HEADLESS && s.world.some((w) => w.peerId.startsWith('hl-join')),
      'the joiner in a world of ten',
    );
    const atJoin = await until((s) => s.state === 'training', 'training');
    await until((s) => s.step >= atJoin.step + H, 'an outer commit with the joiner');
    const doneMs = performance.now() - started;

    const events = await coordinator.events();
    const commits = await commitsFrom((path) => coordinator.getJson(path));
    const rounds = new Map<number, Member[]>();
    for (const e of events) if (e.event === 'round_open') rounds.set(e.data.round as number, e.data.world as Member[]);
    const tabIds = new Set<string>();
    for (const t of tabs) tabIds.add((await swarm.status(t).catch(() => null))?.workerId ?? '');
    tabIds.add(victimId);

    // The crash: one partial commit, whose skipped positions are exactly the victim's slices of every step
    // of its outer step under the planning round's split, and whose committed ranges are the rest.
    expect(events.filter((e) => e.event === 'worker_failed').map((e) => e.data.workerId)).toEqual([victimId]);
    const partial = commits.filter((c) => (c.skipped ?? []).length > 0);
    expect(partial.length, 'one partial commit').toBe(1);
    const cut = partial[0];
    const planning = [...rounds.entries()]
      .filter(([r, w]) => r < cut.round && w.some((m) => m.workerId === victimId))
      .at(-1)![1];
    const shares: number[] = [];
    for (const m of planning) shares[m.slot] = m.share;
    const slot = planning.find((m) => m.workerId === victimId)!.slot;
    // No holes before it (the only partial commit), so the group is H whole steps from the cursor.
    const groupStart = cut.cursorStart;
    const lost: Range[] = [];
    for (let k = 0; k < H; k++) lost.push(sliceOf(groupStart + k * GLOBAL_BATCH, GLOBAL_BATCH, shares, slot));
    const merged = lost.filter(([s, e]) => e > s);
    expect(cut.skipped).toEqual(merged);
    const lostCount = merged.reduce((n, [s, e]) => n + e - s, 0);
    expect(cut.count, 'the survivors’ slices were committed').toBe(H * GLOBAL_BATCH - lostCount);
    expect(lostCount).toBeGreaterThan(0);
    const served = commits[commits.indexOf(cut) + 1];
    for (const [s, e] of merged)
      expect(
        served.ranges?.some(([x, z]) => x <= s && e <= z),
        'the next outer step serves the holes',
      ).toBe(true);

    // The join landed while an outer step was in flight (after a round began training, before the next
    // round opened) and cost nothing: no other commit is partial, and a later round holds the joiner.
    const joinerId = [...peers].find(([, p]) => p.startsWith('hl-join'))![0];
    const joinAt = events.findIndex((e) => e.event === 'join' && e.data.workerId === joinerId);
    const trainBefore = lastIndexOf(events.slice(0, joinAt), 'round_train');
    const openBefore = lastIndexOf(events.slice(0, joinAt), 'round_open');
    expect(trainBefore, 'the joiner arrived while a group trained').toBeGreaterThan(openBefore);

    // Every commit is hash-agreed by its whole world; after the first world of ten, each world held tabs
    // and headless workers.
    expect(events.filter((e) => e.event === 'divergence')).toEqual([]);
    let mixed = 0;
    for (const c of commits) {
      expect(c.hash).toMatch(/^[0-9a-f]{64}$/);
      const world = rounds.get(c.round)!;
      expect(c.worldSize, `commit ${c.step}`).toBe(world.length);
      const kinds = new Set(world.map((m) => (tabIds.has(m.workerId) ? 'tab' : 'headless')));
      if (kinds.size === 2 && world.length >= TABS + HEADLESS - 1) mixed++;
      if (world.some((m) => m.workerId === joinerId)) expect(kinds.size).toBe(2);
    }
    expect(mixed, 'commits by worlds of tabs and headless workers').toBeGreaterThanOrEqual(3);
    expect(commits.some((c) => rounds.get(c.round)!.some((m) => m.workerId === joinerId))).toBe(true);
    await expectCleanAudit(coordinator);
    expect(swarm.problems(/WebSocket|peer .* closed/)).toEqual([]);
    console.log(
      `eight tabs + headless: tabs loaded ${(loadedMs / 1000).toFixed(1)} s, first commit by ten ${(world10 / 1000).toFixed(1)} s, crash at ${(crashedAt / 1000).toFixed(1)} s, joiner committed ${(doneMs / 1000).toFixed(1)} s; ${commits.length} commits, ${lostCount} of ${H * GLOBAL_BATCH} samples skipped by the crash`,
    );
  }, 300_000);
});
