/**
 * A job that verifies carries a lost member's outer step on like any local-mode job (carry.ts): before,
 * it redid the whole group, so an open swarm (which verifies by default) paid every member's outer step
 * for each failure. Through the product executor at N = 16, every invariant checked after every event:
 *
 * - the survivors' commit point is checked over their ring: its reports are kept by slot, not rank, so
 *   the hop checks see every survivor's claims, and a lie in the carried ring is caught;
 * - each survivor's recomputed check of the carried commit keeps the planning round's split and the
 *   member's slot: the verifier is asked for exactly that slot's slices (computed here from the
 *   hole-free layout, test/support/hole-free-layout.ts, independently of the group plan), and its step
 *   counts add up to the survivors' samples, the weight's denominator a carrying tab uses;
 * - the job then runs to its end with every epoch whole.
 *
 * Sketches are synthetic (verify-kit.ts); the verifier's arithmetic on real data is tested in
 * test/integration/verifier-client.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { checkedSlices } from '../../../../coordinator/machine/checks';
import { groupInFlight } from '../../../../coordinator/machine/group';
import { DEFAULT_TRUST_POLICY } from '../../../../coordinator/machine/machine';
import { bucketsPerSegment } from '../../../../core/state/sketch';
import { mergeRanges, rangesCount } from '../../../../core/training/groups';
import type { JobSpecInput } from '../../../../core/training/job';
import { epochOrder } from '../../../../core/training/sampler';
import { Harness } from './coordinator-harness';
import { groupTestJob, shares, slices } from './group-kit';
import { honestOwn, honestParams, sketches } from './verify-kit';

const N = 16;
const H = 4;
const BATCH = 64;
/** Three outer steps per epoch, two epochs. */
const DATASET = BATCH * H * 3;
const JOB: JobSpecInput = groupTestJob(
  BATCH,
  N,
  { innerSteps: H, compression: 'none' },
  // Every member's outer step is recomputed (newcomers too): each survivor of the carry gets a check.
  { verify: { probability: 1, newcomer: { probability: 1, checks: 0 } } },
);
const SLOW = { timeout: 120_000 };

const name = (i: number) => `t${String(i).padStart(2, '0')}`;

/**
 * Members report their next steps up to `through`, one at a time; a commit point's report carries the
 * sketches a local-mode outer step needs, over the current round's ring (`liar` adds 1 to its own
 * contribution's first bucket on every hop it sends: a lie the hop checks catch).
 */
function reportVerifiedThrough(h: Harness, through: number, liar?: string): void {
  for (let guard = 0; guard < 10 * N * H; guard++) {
    const rv = h.state.rendezvous;
    if (rv.phase !== 'training') return;
    const members = h.members();
    const next = members.map((m) => h.worker(m).live + 1);
    const step = Math.min(...next);
    if (step > through) return;
    const point = groupInFlight(h.state).lastStep;
    if (step !== point) {
      for (const [i, m] of members.entries()) if (next[i] === step) h.report(m, {});
      h.now += 1;
      continue;
    }
    const size = members.length;
    const buckets = size * bucketsPerSegment(size);
    const liarRank = liar ? members.indexOf(liar) : -1;
    const all = sketches(
      members.map((_, r) => honestOwn(point, r, size)),
      honestParams(point, buckets),
      (r, _j, block) => (r === liarRank ? block.map((x, b) => (b === 0 ? x + 1 : x)) : block),
    );
    const outer = honestParams(point + 1, buckets);
    const moments = [honestParams(point + 2, buckets), honestParams(point + 3, buckets)]; // Adam's two
    for (const [r, m] of members.entries()) {
      if (h.state.rendezvous.phase !== 'training') return;
      h.now += 1;
      h.report(m, { sketch: { ...all[r], outer, moments }, innerHash: 'c'.repeat(64), innerT: point });
    }
  }
  throw new Error(`reportVerifiedThrough: no progress (${JSON.stringify(h.lastReceived(h.members()[0]))})`);
}

/** 16 tabs in one round, ready, having committed the first outer step with its checks drawn. */
function swarm(): Harness {
  const h = new Harness(JOB, DATASET, 'run-1', DEFAULT_TRUST_POLICY, { verifySalt: 'salt' });
  for (let i = 0; i < N; i++) h.join(name(i), { addr: `198.51.100.${i + 1}` });
  h.readyAll();
  reportVerifiedThrough(h, H);
  expect(h.state.lastCommit.step).toBe(H);
  return h;
}

/** A crash of `lost` two steps into the second outer step: the survivors carry it on, ready. */
function crashIntoCarry(h: Harness, lost: number): number[] {
  reportVerifiedThrough(h, H + 2);
  const split = shares(h);
  h.disconnect(name(lost));
  const round = h.worker(h.members()[0]).round!;
  expect(round.carry, 'the verifying job carries the group on').toBeDefined();
  expect(round.carry!.slots).toEqual(split.map((_, r) => r).filter((r) => r !== lost));
  h.readyAll();
  return split;
}

describe(`a verifying local-mode job carries a lost member's outer step (N = ${N})`, () => {
  it(
    'the carried commit is checked over the survivors’ ring, and each survivor’s check recomputes its slot’s slices of the planning split',
    SLOW,
    () => {
      const h = swarm();
      const lost = 5;
      const split = crashIntoCarry(h, lost);
      const drawnBefore = h.state.nextCheckId ?? 1;
      reportVerifiedThrough(h, 2 * H);
      const commit = h.commits.at(-1)!;
      expect(commit.step).toBe(2 * H);
      // A partial commit: the crashed rank's slices are the holes, nothing was rolled back or redone.
      const lostRanges = mergeRanges(slices(h, H + 1, 2 * H, split, lost));
      expect(commit.skipped).toEqual(lostRanges);
      expect(h.logs.some((l) => l.event === 'record_rolled_back')).toBe(false);
      expect(h.logs.filter((l) => ['ring_identity_failed', 'cheater_banned'].includes(l.event))).toEqual([]);

      const checks = (h.state.checks ?? []).filter((c) => c.id >= drawnBefore);
      expect(checks.map((c) => h.nameOf(c.uploader)).sort()).toEqual(h.members().sort());
      const order = epochOrder(h.state.job.seed, 0, DATASET);
      for (const check of checks) {
        expect(check.split).toEqual(split);
        const member = check.world.find((m) => m.rank === check.ranks[0])!;
        expect(member.workerId).toBe(check.uploader);
        const slot = Number(h.nameOf(check.uploader).slice(1)); // t07 planned as rank 7
        expect(member.slot).toBe(slot);
        const asked = checkedSlices(h.state, check);
        expect(asked.map((st) => st.step)).toEqual([5, 6, 7, 8]);
        // Exactly its slot's slices of the planning split, step by step.
        for (const st of asked) {
          const expected = slices(h, st.step, st.step, split, slot).flatMap(([a, b]) =>
            Array.from(order.subarray(a, b)),
          );
          expect(Array.from(st.slices[check.ranks[0]])).toEqual(expected);
        }
        // The weight's denominator: the survivors' samples, which the commit processed.
        expect(asked.reduce((n, st) => n + st.count, 0)).toBe(commit.count);
      }
      expect(commit.count).toBe(
        rangesCount(split.flatMap((_, r) => (r === lost ? [] : slices(h, H + 1, 2 * H, split, r)))),
      );
    },
  );

  it('a lie in the carried ring is caught by the hop checks, and the liar banned', SLOW, () => {
    const h = swarm();
    crashIntoCarry(h, 3);
    const liar = name(9);
    const liarId = h.worker(liar).workerId;
    reportVerifiedThrough(h, 2 * H, liar);
    const banned = h.logs.find((l) => l.event === 'cheater_banned');
    expect(banned?.data.workers).toEqual([liarId]);
    // Named by its own hop sketches, and never committed: the record went back before its first contribution.
    expect(h.logs.find((l) => l.event === 'ring_identity_failed')?.data.liars).toEqual([liarId]);
    expect(h.state.lastCommit.step).toBeLessThan(2 * H);
  });
});
