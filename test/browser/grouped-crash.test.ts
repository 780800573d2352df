/**
 * Issue 23's proof in real browsers: a crash in one group during a grouped outer sync costs that group's
 * retry and nothing more. Two Chromium tabs and four headless workers (`tabswarm worker`: the same loop,
 * collectives and kernels in Node) train one local-mode job (H = 8, int8 wire) with
 * `"topology": "groups"`, which plans the six members in two groups of three whatever the latency
 * estimate says (core/training/topology.ts). The victim is a headless worker in a process of its own,
 * stopped (SIGSTOP) two inner steps before the outer sync (again at the next outer step, when the stop came
 * too late): its sockets and data channels stay open and it
 * sends nothing, so it cannot have sent any of the outer allreduce. Once every other member has reported
 * the group's last inner step (all of them in the allreduce, the victim's group waiting for it), it is
 * killed (SIGKILL: its links go silent or close, its coordinator socket closes). A tab cannot be stopped
 * that precisely: a tab's steps here take tens of ms, and CDP's `Debugger.pause` landed 220 ms after it was
 * asked, by which time the tab had reached the sync. Then:
 *
 * - the coordinator defers the loss (`outer_loss_deferred`) and tells the survivors (`members_lost`);
 * - the victim's group leaves it out and starts its reduce again; the other groups only wait at the
 *   exchange: the outer step commits **in the same round** (no round closed and re-formed: nobody was
 *   held back beyond the one group's retry), with no expiry and no failure report;
 * - the commit skips exactly the victim's slices of that outer step, computed here from the round's
 *   logged split with test/support/lost-slices.ts (a largest-remainder split written apart from the
 *   product's);
 * - every commit is hash-agreed: each needs every rank's report of the same state hash, tabs and headless
 *   workers alike (a mismatch is a `divergence`, and there is none); the audit is clean; the next outer
 *   step commits too.
 *
 * On loopback the killed process's data channels close at once, so the survivors' grouped allreduce
 * finds the loss by its closed links (62–141 ms from the kill to the commit in five runs here). A crash
 * whose links stay open (a browser's, across NATs: until ICE consent fails, about 30 s) is found by the
 * coordinator's `members_lost` instead: the memory-link tests in
 * test/unit/web/net/group-allreduce.test.ts cover that path. The random-timing version of this crash,
 * with tabs as victims (killed at whatever point of the sync they reached), is
 * `npm run bench:grouped-crash`, where a loss after the group sealed still costs a carry
 * (docs/networking.md). Needs Chromium, the web build and WebGPU in Node: skips here when missing, fails
 * under CI.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusResponse } from '../../core/protocol/views';
import { commitsFrom } from '../../tools/swarm/coordinator-api';
import { skipWithoutChromium, skipWithoutWebBuild } from '../support/browser';
import { expectCleanAudit } from '../support/clean-audit';
import { lostSlices, openedRounds, sharesByRank } from '../support/lost-slices';
import { MixedSwarm, tinyLocalJob } from '../support/mixed-swarm';
import { nodeGpuAvailable } from '../support/node-gpu';
import { skipWithout } from '../support/skip';
import { coordinatorStatusUntil } from '../support/swarm';

const TABS = 2;
/** Headless workers besides the victim (one process). */
const HEADLESS = 3;
const H = 8;
const GLOBAL_BATCH = 64;
/** Six outer steps per epoch, so every group starts on a multiple of H × batch with no holes before it. */
const TRAIN = 6 * H * GLOBAL_BATCH;
/** The victim is stopped with this many inner steps of the group still to compute. */
const STEPS_LEFT = 2;
/** Outer steps at which the victim is stopped at most (a stop that came too late lets it go and tries again). */
const ATTEMPTS = 3;

const JOB = tinyLocalJob({
  innerSteps: H,
  globalBatch: GLOBAL_BATCH,
  maxWorkers: TABS + HEADLESS + 1,
  topology: 'groups',
  verify: false,
});

const skip =
  skipWithoutChromium() ||
  skipWithoutWebBuild() ||
  skipWithout('WebGPU in Node (Debian chromium ships SwiftShader)', await nodeGpuAvailable());

describe.skipIf(skip)('a crash during a grouped outer sync, with tabs and headless workers', () => {
  let mixed: MixedSwarm;
  const until = async (check: (s: StatusResponse) => boolean, what: string, pollMs = 250) =>
    (await coordinatorStatusUntil(mixed.coordinator, check, what, { timeoutMs: 120_000, pollMs })).status;
  const groups = (s: StatusResponse) => s.topology?.groups.length ?? 1;

  beforeAll(async () => {
    mixed = await MixedSwarm.start({ job: JOB, trainCount: TRAIN, seed: 9, name: 'grouped-crash' });
  });

  afterAll(async () => {
    await mixed?.stop();
  });

  it('costs only the crashed worker’s group a retry: the outer step commits in the same round without exactly its slices, hash-agreed', async () => {
    const { coordinator } = mixed;
    const victim = mixed.spawnHeadless('victim');
    mixed.spawnHeadless('hl', HEADLESS);
    await mixed.swarm.openMany(TABS);
    const members = TABS + HEADLESS + 1;
    const world = await until(
      (s) => s.world.total === members && s.state === 'training' && groups(s) >= 2,
      'the six members training in groups',
    );
    await until((s) => s.step >= world.step + H, 'an outer commit by the six');
    const victimId = world.world.items.find((w) => w.peerId.startsWith('victim'))!.id;

    // Stop the victim STEPS_LEFT inner steps before the outer sync: late enough that the others reach
    // the sync well within the hang floor (3 s: the coordinator would drop a member that late as hung),
    // early enough that it cannot have finished its last inner step. SIGSTOP lands at once, but the status
    // that shows the victim there is a poll old: on a slow machine (a suite at 2× CI's time) the victim
    // once ran past its last inner step in between. Then it is let go and stopped at the next outer step
    // (at most ATTEMPTS times): a stop that came too late is never taken for one that came in time.
    let inside: StatusResponse | null = null;
    let atSync: StatusResponse | null = null;
    for (let attempt = 0; attempt < ATTEMPTS && !atSync; attempt++) {
      const at = await until(
        (s) => {
          const v = s.world.items.find((w) => w.id === victimId);
          return s.state === 'training' && groups(s) >= 2 && v?.lastStep === s.step + H - 1 - STEPS_LEFT;
        },
        'the victim a few inner steps before the outer sync',
        10,
      );
      victim.hang();
      const point = at.step + H;
      // Every other member reports the group's last inner step and enters the outer allreduce; the victim
      // sends nothing more (a report of its last step means it was stopped too late).
      const seen = await until(
        (s) =>
          s.world.items.some((w) => w.id === victimId && w.lastStep >= point - 1) ||
          (s.world.items.length === members &&
            s.world.items.every((w) => w.id === victimId || w.lastStep === point - 1)),
        'every member but the victim at the outer sync',
        10,
      );
      if (seen.world.items.find((w) => w.id === victimId)!.lastStep < point - 1) {
        inside = at;
        atSync = seen;
      } else {
        console.log(`grouped-crash: the victim ran past its last inner step before step ${point}; again`);
        victim.resume();
        await until((s) => s.step >= point, `the commit of step ${point}`);
      }
    }
    expect(atSync, `the victim stopped before its last inner step in one of ${ATTEMPTS} outer steps`).not.toBeNull();
    const point = inside!.step + H;
    expect(atSync!.step, 'no commit since the victim stopped').toBe(inside!.step);
    expect(atSync!.round, 'the same round, planned in groups').toBe(inside!.round);
    victim.crash();
    const crashedAt = Date.now();
    await until((s) => s.step >= point, `the commit of step ${point}`);

    const events = await coordinator.events();
    const deferred = events.filter((e) => e.event === 'outer_loss_deferred');
    expect(deferred, 'the loss was deferred once, for the victim').toHaveLength(1);
    expect(deferred[0].data.lost).toEqual([victimId]);
    const round = deferred[0].data.round as number;
    expect(round, 'the round the victim was stopped in').toBe(inside!.round);
    const inRound = (name: string) => events.filter((e) => e.event === name && e.data.round === round);
    for (const name of ['outer_loss_expired', 'outer_loss_failed', 'outer_loss_mismatch', 'failure_report'])
      expect(inRound(name), name).toEqual([]);
    expect(events.filter((e) => e.event === 'divergence')).toEqual([]);

    const commits = await commitsFrom((path) => coordinator.getJson(path));
    const cut = commits.find((c) => c.step === point)!;
    console.error(
      `grouped crash: committed step ${point} ${Math.round(cut.committedAt - crashedAt)} ms after the kill`,
    );
    expect(cut.round, 'committed by the round that lost the tab, not a re-formed one').toBe(round);
    const open = openedRounds(events).find((o) => o.round === round)!;
    const rank = open.world.find((m) => m.workerId === victimId)!.rank;
    const want = lostSlices([...(cut.ranges ?? []), ...(cut.skipped ?? [])], sharesByRank(open), [rank], GLOBAL_BATCH);
    expect(cut.skipped, 'exactly the victim’s slices are holes').toEqual(want);

    // The survivors go on: the next outer step commits, and the record stays exactly once.
    await until((s) => s.step >= point + H, 'the next outer commit');
    await expectCleanAudit(coordinator);
  });
});
