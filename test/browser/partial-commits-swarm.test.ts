/**
 * Issue 22's proof in real browsers: eight Chromium tabs (the volunteer page, WebGPU on SwiftShader) and
 * two headless workers (`tabswarm worker`: the same loop and training worker in Node, on Dawn and
 * node-datachannel) train one local-mode job (H = 8, int8 wire). Inside an outer step a tab's renderer
 * crashes; inside the next group, which the carrying round trains on its own split, a second tab crashes;
 * once the round after that trains, a third headless worker joins. Each crash costs only the crashed
 * rank's slices: a partial commit's skipped positions are exactly the lost slots' slices of the outer step
 * in flight, computed here from the split that group trained on (the shares each round logs in
 * `round_open`, by rank; a round that carries a group keeps its predecessor's split for that group only:
 * `splitRound`) with a largest-remainder split written out in test/support/lost-slices.ts, not the product's; the next
 * outer step serves them first. On a loaded machine (load 20+ on 2 cores) the outer allreduce's silence
 * floor (3 s, docs/local-steps.md) also drops a live member as hung in some runs: such a loss is allowed
 * (and reported in the log line), and its partial commit is checked the same way. Every commit needs
 * every rank's report of the same state hash (a mismatch is a `divergence`), so commits by worlds holding
 * both kinds are hash-agreed across tabs and headless workers alike. The audit is clean.
 *
 * Two suites failed here before the second crash and the timed join were added. In one, a live member was
 * dropped as hung inside a carrying round's later group, and the old rule (the last uncarried round's
 * split) was wrong for that group. In the other, the joiner was started right after the crash and arrived
 * while the carrying round was still syncing, not inside an outer step.
 *
 * Needs Chromium, the web build and WebGPU in Node: skips here when missing, fails under CI.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusResponse } from '../../core/protocol/views';
import { skipWithoutChromium, skipWithoutWebBuild } from '../support/browser';
import { expectCleanAudit } from '../support/clean-audit';
import { commitsFrom } from '../../tools/swarm/coordinator-api';
import { MixedSwarm, tinyLocalJob } from '../support/mixed-swarm';
import { nodeGpuAvailable } from '../support/node-gpu';
import { skipWithout } from '../support/skip';
import {
  lostSlices as lostSlicesOf,
  openedRounds,
  rangesCount as count,
  sharesByRank,
  splitRound,
} from '../support/lost-slices';
import { coordinatorStatusUntil, type SwarmTab } from '../support/swarm';

const TABS = 8;
const HEADLESS = 2;
const H = 8;
const GLOBAL_BATCH = 64;
/** Six outer steps per epoch, so every group starts on a multiple of H × batch with no holes before it. */
const TRAIN = 6 * H * GLOBAL_BATCH;

const JOB = tinyLocalJob({ innerSteps: H, globalBatch: GLOBAL_BATCH, maxWorkers: TABS + HEADLESS + 1 });

const lostSlices = (group: [number, number][], shares: number[], slots: number[]) =>
  lostSlicesOf(group, shares, slots, GLOBAL_BATCH);

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
  let bed: MixedSwarm;
  /** Every (workerId → peerId) the coordinator's status showed in a world. */
  const peers = new Map<string, string>();
  const until = async (check: (s: StatusResponse) => boolean, what: string, pollMs = 250) => {
    const { status } = await coordinatorStatusUntil(
      bed.coordinator,
      (s) => {
        for (const w of s.world.items) peers.set(w.id, w.peerId);
        return check(s);
      },
      what,
      { timeoutMs: 120_000, pollMs },
    );
    return status;
  };
  /**
   * Crash `tab` inside an outer step, by the coordinator's own record: every other member has reported a
   * step of the group (so the survivors carry it: with none reported the coordinator redoes the group, which
   * costs nothing and leaves no holes) and `tab` has not reached the outer sync. `after` adds a condition.
   */
  const crashInsideOuterStep = async (tab: SwarmTab, id: string, after: (s: StatusResponse) => boolean) => {
    const at = await until(
      (s) => {
        const me = s.world.items.find((w) => w.id === id);
        return (
          s.state === 'training' &&
          after(s) &&
          !!me &&
          me.lastStep <= s.step + H - 2 &&
          s.world.items.every((w) => w.id === id || w.lastStep > s.step)
        );
      },
      `${id} inside an outer step that every other member has begun`,
      10,
    );
    await bed.swarm.crash(tab);
    return at;
  };

  beforeAll(async () => {
    bed = await MixedSwarm.start({ job: JOB, trainCount: TRAIN, seed: 5, name: 'partial-swarm' });
  });

  afterAll(async () => {
    await bed?.stop();
  });

  it('a crash costs only the crashed tab’s slices, a join inside an outer step costs nothing, and every commit is hash-agreed by tabs and headless workers', async () => {
    const { coordinator, swarm } = bed;
    const started = performance.now();
    for (const name of ['hl-a', 'hl-b']) bed.spawnHeadless(name);
    const tabs = await swarm.openMany(TABS);
    const loadedMs = performance.now() - started;
    const ten = await until((s) => s.world.total === TABS + HEADLESS && s.state === 'training', 'a world of ten');
    await until((s) => s.step >= ten.step + H, 'an outer commit by the world of ten');
    const world10 = performance.now() - started;

    // Inside an outer step (a few inner steps reported, the outer sync not begun) a tab crashes: its
    // round's survivors carry the group on in a new round.
    const victim = tabs[3];
    const victimId = (await swarm.status(victim))!.workerId!;
    const atCrash = await crashInsideOuterStep(victim, victimId, () => true);
    const crashedAt = performance.now() - started;
    // A second tab crashes inside the next group, which the carrying round trained on its own split (by
    // rank, not the old slots): that loss costs its slices of that split.
    await until((s) => s.round > atCrash.round && s.state === 'training', 'the round after the crash training');
    const second = tabs[5];
    const secondId = (await swarm.status(second))!.workerId!;
    const atSecond = await crashInsideOuterStep(
      second,
      secondId,
      (s) => s.round > atCrash.round && s.step > atCrash.step,
    );
    const secondAt = performance.now() - started;
    // A headless worker joins once the round after the second crash trains, so it arrives inside an outer
    // step; it waits for the outer boundary.
    await until((s) => s.round > atSecond.round && s.state === 'training', 'the round after the second crash training');
    bed.spawnHeadless('hl-join');
    await until(
      (s) => s.world.total === TABS + HEADLESS - 1 && s.world.items.some((w) => w.peerId.startsWith('hl-join')),
      'the joiner in a world of nine',
    );
    const atJoin = await until((s) => s.state === 'training', 'training');
    await until((s) => s.step >= atJoin.step + H, 'an outer commit with the joiner');
    const doneMs = performance.now() - started;

    const events = await coordinator.events();
    const commits = await commitsFrom((path) => coordinator.getJson(path));
    if (process.env.DUMP)
      (await import('node:fs')).writeFileSync(process.env.DUMP, JSON.stringify({ events, commits }));
    const opens = openedRounds(events);
    const rounds = new Map(opens.map((o) => [o.round, o.world]));
    const tabIds = new Set<string>();
    for (const t of tabs) tabIds.add((await swarm.status(t).catch(() => null))?.workerId ?? '');
    tabIds.add(victimId).add(secondId);

    // Every loss inside an outer step costs exactly the lost ranks' slices of it. The two crashes are such
    // losses; on a loaded machine the outer allreduce's silence floor (3 s) may also drop a live member as
    // hung, and that loss must cost its slices only, too. Both crashes must be among the losses, and
    // nothing else may fail.
    const crashed = [victimId, secondId];
    const failed = events.filter((e) => e.event === 'worker_failed');
    expect(failed.map((e) => e.data.workerId)).toEqual(expect.arrayContaining(crashed));
    const hung = failed.filter((e) => !crashed.includes(e.data.workerId as string));
    for (const e of hung) expect(String(e.data.detail), JSON.stringify(e)).toMatch(/hung|no progress/);
    const partial = commits.filter((c) => (c.skipped ?? []).length > 0);
    expect(partial.length, 'a partial commit per loss at most').toBeGreaterThanOrEqual(2);
    expect(partial.length).toBeLessThanOrEqual(failed.length);
    const skippedBy = new Map<string, number>();
    for (const cut of partial) {
      const closed = events.find((e) => e.event === 'round_closed' && e.data.round === cut.round - 1);
      const lostSlots = (closed?.data.carry as { lost: number[] } | undefined)?.lost ?? [];
      expect(lostSlots.length, `commit ${cut.step} follows a carried round`).toBeGreaterThan(0);
      const planning = splitRound(opens, cut.firstStep);
      const shares = sharesByRank(planning);
      const group = [...(cut.ranges ?? []), ...cut.skipped!];
      const expected = lostSlices(group, shares, lostSlots);
      expect(
        cut.skipped,
        `commit ${cut.step}: the lost slots ${lostSlots} of round ${planning.round}'s split and nothing else`,
      ).toEqual(expected);
      // The group is a whole outer step, or less at an epoch's end, where the last group serves only the
      // holes left before it (seen once on a loaded machine: 104 positions).
      const skippedCount = count(expected);
      expect(count(group), 'at most one outer step').toBeLessThanOrEqual(H * GLOBAL_BATCH);
      expect(cut.count + skippedCount, 'the outer step was committed but for the lost slices').toBe(count(group));
      for (const m of planning.world)
        if (crashed.includes(m.workerId) && lostSlots.includes(m.rank))
          skippedBy.set(m.workerId, count(lostSlices(group, shares, [m.rank])));
      // The next outer step takes the holes first (it may lose a member too and skip some of them again).
      const next = commits[commits.indexOf(cut) + 1];
      const taken = next ? [...(next.ranges ?? []), ...(next.skipped ?? [])] : [];
      if (next)
        for (const [a, b] of expected)
          expect(
            taken.reduce((n, [x, z]) => n + Math.max(0, Math.min(b, z) - Math.max(a, x)), 0),
            `commit ${next.step} takes the holes of commit ${cut.step} first`,
          ).toBe(b - a);
    }
    for (const id of crashed)
      expect(skippedBy.get(id) ?? 0, `the crash of ${id} left its slices as holes`).toBeGreaterThan(0);

    // The join landed while an outer step was in flight (after a round began training, before the next
    // round opened), and a later round holds the joiner.
    const joinerId = [...peers].find(([, p]) => p.startsWith('hl-join'))![0];
    const joinAt = events.findIndex((e) => e.event === 'join' && e.data.workerId === joinerId);
    const trainBefore = lastIndexOf(events.slice(0, joinAt), 'round_train');
    const openBefore = lastIndexOf(events.slice(0, joinAt), 'round_open');
    expect(trainBefore, 'the joiner arrived while a group trained').toBeGreaterThan(openBefore);

    // Every commit is hash-agreed by its whole world, and at least three were agreed by worlds of tabs and
    // headless workers: the world of ten, the carry after the first crash and the joiner's. Their size is not
    // asserted: a live member dropped as hung (allowed above) shrinks a world (CI once saw only two worlds of
    // nine or more).
    expect(events.filter((e) => e.event === 'divergence')).toEqual([]);
    let mixed = 0;
    for (const c of commits) {
      expect(c.hash).toMatch(/^[0-9a-f]{64}$/);
      const world = rounds.get(c.round)!;
      expect(c.worldSize, `commit ${c.step}`).toBe(world.length);
      const kinds = new Set(world.map((m) => (tabIds.has(m.workerId) ? 'tab' : 'headless')));
      if (kinds.size === 2) mixed++;
      if (world.some((m) => m.workerId === joinerId)) expect(kinds.size).toBe(2);
    }
    expect(mixed, 'commits by worlds of tabs and headless workers').toBeGreaterThanOrEqual(3);
    expect(commits.some((c) => rounds.get(c.round)!.some((m) => m.workerId === joinerId))).toBe(true);
    await expectCleanAudit(coordinator);
    expect(swarm.problems(/WebSocket|peer .* closed/)).toEqual([]);
    console.log(
      `eight tabs + headless: tabs loaded ${(loadedMs / 1000).toFixed(1)} s, first commit by ten ${(world10 / 1000).toFixed(1)} s, crashes at ${(crashedAt / 1000).toFixed(1)} and ${(secondAt / 1000).toFixed(1)} s, joiner committed ${(doneMs / 1000).toFixed(1)} s; ${commits.length} commits, ${[...skippedBy.values()].join(' and ')} of ${H * GLOBAL_BATCH} samples skipped by the two crashes, ${hung.length} live members dropped as hung`,
    );
  }, 300_000);
});
