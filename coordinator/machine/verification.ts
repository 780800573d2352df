/**
 * Contributions that are checked, not trusted (docs/threat-model.md): the checks made at every commit,
 * over the sketches each rank reports with a commit point (core/state/sketch.ts), and what follows when
 * any check (these, or a recomputation: checks.ts) proves a lie.
 *
 * 1. **Agreement.** Every rank applied the same all-reduced bytes and holds the same state, so its
 *    sketches of both (`sum`, `sumMass`, `params`; int8: `sumSlack`; local mode: `outer`) must equal the
 *    other ranks' bit for bit, like the hash.
 * 2. **Every hop of the ring, at every commit** (`checkHops`), in both sync modes and on every wire:
 *    what a rank sent in the reduce-scatter must be what it received plus its own contribution, within
 *    the rounding of one addition (int8: plus the slack of the encode, which the decoded values bound),
 *    the owner's last sum must be the final one, and a receiver's sketch of a hop must equal its
 *    sender's. A rank that contradicts itself is banned; two neighbours that contradict each other are
 *    both suspects, intersected across failures (with the two swapped in the ring each time) until one
 *    is left, who is banned. The step is not committed either way and the round restarts from the last
 *    commit. Σ_r own_r = sum (the ring identity) is checked too, as a net under the hop checks (float32
 *    and fp16 wires; int8's hops leave it no tolerance of its own).
 *
 * A rank caught cheating is banned (worker id for the longest cool-off; its address and invite marked and
 * cooled off: penalties.ts `banIn`) and the record rolls back to the latest stored checkpoint before its
 * first contribution since the last rollback: everything it touched since may carry its poison, and a
 * stored checkpoint is the only state the coordinator can vouch for. Training goes on from there with
 * the other tabs.
 */
import { log, metric, own, persist, type Ctx } from './context';
import { workerOf } from './worker-table';
import type { JobSpec } from '../../core/training/job';
import type { StepReportMessage } from '../../core/protocol/tab-messages';
import {
  bucketsPerSegment,
  checkHops,
  checkIdentity,
  identityTolerance,
  PARAMS_SKETCH_BUCKETS,
  type StepSketches,
} from '../../core/state/sketch';
import { banIn, culpritOf } from './penalties';
import { rollbackIn } from './checkpoints';
import { closeRoundIn, afterCloseIn, enforceBansIn } from './round-close';
import { OPTIMIZER_MOMENTS } from '../../core/state/snapshot';

/** Commits after which the suspects of an old ring failure are forgotten. */
export const SUSPICION_STEPS = 20;

/**
 * Why a commit point's report's sketches are unacceptable, or null. `disagrees`: they are well-formed but
 * their sketches of the reduced sums, the parameters or the outer momentum differ from another rank's (a
 * divergence, not a malformed report). `others`: reports of the same step already in. What a report
 * carries depends on the mode and the wire (core/state/sketch.ts `StepSketches`).
 */
export function sketchProblem(
  job: JobSpec,
  world: number,
  msg: StepReportMessage,
  others: { sketch?: StepReportMessage['sketch'] }[],
): { message: string; disagrees: boolean } | null {
  const malformed = (message: string) => ({ message, disagrees: false });
  if (!job.verify)
    return msg.sketch || msg.innerHash || msg.innerT !== undefined
      ? malformed('this job does not verify: send no sketch')
      : null;
  const k = msg.sketch;
  if (!k) return malformed('this job verifies contributions: the step report needs its sketch');
  const shape = shapeProblem(job, world, msg);
  if (shape) return malformed(shape);
  const first = others.find((o) => o.sketch)?.sketch;
  const agreed = (x: StepSketches) => [x.sum, x.sumMass, x.params, x.sumSlack ?? [], x.outer ?? []];
  if (first && !agreed(first).every((a, i) => same(a, agreed(k)[i])))
    return {
      message: 'the sketches of the reduced sums or of the new state differ from the other ranks’',
      disagrees: true,
    };
  return null;
}

/** Why a verifying report's sketches do not have the shape its job's mode and wire need, or null. */
function shapeProblem(job: JobSpec, world: number, msg: StepReportMessage): string | null {
  const k = msg.sketch!;
  const local = job.sync.mode === 'local';
  const int8 = job.sync.compression === 'int8';
  const buckets = world * bucketsPerSegment(world);
  const gradient = [k.own, k.sum, k.sumMass, k.sent, k.sentMass, k.received, k.receivedMass];
  if (local) gradient.push(k.params, k.outer ?? [], ...(k.moments ?? []));
  if (int8) gradient.push(k.sentSlack ?? [], k.receivedSlack ?? [], k.sumSlack ?? []);
  if (gradient.some((a) => a.length !== buckets))
    return `gradient sketches of a world of ${world} have ${buckets} buckets`;
  if (!local && k.params.length !== PARAMS_SKETCH_BUCKETS)
    return `the parameter sketch has ${PARAMS_SKETCH_BUCKETS} buckets`;
  if (!int8 && (k.sentSlack || k.receivedSlack || k.sumSlack)) return 'slack is for the int8 wire only';
  if (!local && (k.outer || k.moments || msg.innerHash || msg.innerT !== undefined))
    return 'outer, moments, innerHash and innerT are for local mode';
  const moments = OPTIMIZER_MOMENTS[job.optimizer.kind].length;
  if (local && (k.moments?.length !== moments || !msg.innerHash || msg.innerT === undefined))
    return `local mode: the commit point's report needs ${moments} moment sketches, its innerHash and innerT`;
  const masses = [k.sumMass, k.sentMass, k.receivedMass, k.sentSlack ?? [], k.receivedSlack ?? [], k.sumSlack ?? []];
  if (masses.some((a) => a.some((m) => m < 0))) return 'a bucket mass is negative';
  return null;
}

function same(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
}

/**
 * The hop checks and the ring identity of the commit point about to be committed (every rank reported
 * it), in both sync modes and on every wire. True: commit. False: the failure was handled (round
 * closed, a liar banned or suspects narrowed).
 */
export function ringChecksPassIn(ctx: Ctx, point: number): boolean {
  const s = ctx.s;
  if (!s.job.verify) return true;
  const rv = s.rendezvous;
  const reports = s.pending[point] ?? {};
  const size = rv.participants.length;
  // Reports are kept by slot (a carried round's members keep the slots they planned with).
  const claims = rv.participants.map((p) => reports[p.slot]?.sketch);
  const first = claims[0];
  if (!first || claims.some((c) => !c)) return true; // every report was checked for its sketch already
  const all = claims as StepSketches[];
  const compression = s.job.sync.compression;
  const tolerance = identityTolerance(size, compression);
  const identity =
    compression === 'int8'
      ? { ok: true, worst: 0, badSegments: [] }
      : checkIdentity(
          all.map((c) => c.own),
          first.sum,
          first.sumMass,
          size,
          tolerance,
        );
  const hops =
    size > 1
      ? checkHops(all, first.sum, first.sumMass, tolerance, first.sumSlack)
      : { liars: [], disputes: [], worst: 0 };
  metric(ctx, 'tabswarm_ring_identity_ratio', Math.max(identity.worst, hops.worst) / tolerance);
  if (identity.ok && hops.liars.length === 0 && hops.disputes.length === 0) return true;
  const id = (r: number) => rv.participants[r].workerId;
  metric(ctx, 'tabswarm_verifications_total', 1, { result: 'ring' });
  log(ctx, 'error', 'ring_identity_failed', {
    step: point,
    round: rv.round,
    worst: Math.max(identity.worst, hops.worst),
    badSegments: identity.badSegments,
    liars: hops.liars.map(id),
    disputes: hops.disputes.map(([a, b]) => [id(a), id(b)]),
  });
  const why = `corrupted the ring's partial sums (step ${point})`;
  if (hops.liars.length > 0) {
    cheatersCaughtIn(ctx, hops.liars.map(id), why);
    enforceBansIn(ctx);
  } else {
    // A dispute names two neighbours; with several (or none: only the identity broke), all of them.
    const suspects = [...new Set(hops.disputes.flat())].map(id);
    suspectsFailIn(ctx, suspects.length > 0 ? suspects : rv.participants.map((p) => p.workerId), why);
  }
  return false;
}

/**
 * A member reports that its ring neighbour sent bytes no honest rank sends (a non-finite value, a
 * malformed frame): one of the two lies, and the coordinator cannot tell which from one report.
 */
export function dataDisputeIn(ctx: Ctx, reporter: string, accused: string, reason: string): void {
  log(ctx, 'warn', 'data_dispute', { reporter, accused, reason });
  suspectsFailIn(ctx, [reporter, accused], `sent bytes no honest rank sends (${reason.slice(0, 80)})`);
}

/**
 * A round failed and one of `suspects` is to blame. Intersected with the suspects of the failures of
 * the last `SUSPICION_STEPS` commits (an attacker that lets steps pass in between is still narrowed
 * down): one left is banned (cheatersCaughtIn). Otherwise the round closes as a failure (a restart
 * the job pays), and the next ring puts two suspects apart (ring-suspects.ts), so the next failure (if
 * the culprit goes on) has other neighbours around it and the intersection narrows to the culprit. In a world of two
 * nothing can be narrowed: both are charged each time, and the quotas cool the culprit off.
 */
function suspectsFailIn(ctx: Ctx, suspects: string[], why: string): void {
  const s = ctx.s;
  const narrowed = s.ringSuspects ? s.ringSuspects.filter((w) => suspects.includes(w)) : suspects;
  s.ringSuspects = narrowed.length > 0 ? narrowed : suspects;
  s.ringSuspectsAt = s.lastCommit.step;
  if (s.ringSuspects.length === 1 && s.rendezvous.participants.length > 2) {
    const [culprit] = s.ringSuspects;
    s.ringSuspects = null;
    cheatersCaughtIn(ctx, [culprit], why);
    enforceBansIn(ctx); // closes the round (a member is banned)
    return;
  }
  if (s.rendezvous.phase === 'gathering') return;
  const current = s.ringSuspects;
  // Charged only where nothing can be narrowed (a world of two): elsewhere an honest neighbour would
  // pay as often as the culprit until the intersection finds it.
  const charged = s.rendezvous.participants.length <= 2 ? current.map((w) => culpritOf(s, w)) : [];
  closeRoundIn(ctx, 'failure', true, true, { culprits: charged });
  // The next round's ring puts the two apart (ring-suspects.ts, applied where rendezvous.ts plans it).
  afterCloseIn(ctx);
}

/** Where a caught worker joined from (its address and invite), when it has left since: the check's record. */
export type Places = Record<string, { addr: string; invite: string | null }>;

/**
 * Ban `workerIds` for cheating (penalties.ts `banIn`: worker, address, invite), roll the record back past
 * their contributions, and go on. `places`: where workers that may have left joined from.
 */
export function cheatersCaughtIn(ctx: Ctx, workerIds: string[], why: string, places: Places = {}): void {
  const s = ctx.s;
  const firsts = workerIds.map((w) => own(s.contributions ?? {}, w)).filter((x): x is number => x !== undefined);
  const first = firsts.length > 0 ? Math.min(...firsts) : null;
  for (const workerId of workerIds) {
    const worker = workerOf(s.workers, workerId);
    const place = worker ? { addr: worker.addr, invite: worker.invite ?? null } : own(places, workerId);
    banIn(ctx, { ...culpritOf(s, workerId), ...(place ?? {}) }, 'caught cheating');
  }
  log(ctx, 'error', 'cheater_banned', {
    workers: workerIds,
    why,
    firstContribution: first,
    lastCommit: s.lastCommit.step,
  });
  // Its checks are moot: everything it took part in since `first` is rolled back (or it never committed).
  if (s.checks?.length) s.checks = s.checks.filter((c) => !c.world.some((m) => workerIds.includes(m.workerId)));
  if (first !== null && first <= s.lastCommit.step) rollbackPastIn(ctx, first - 1, `cheater: ${why}`);
}

/** Roll the record back to the latest stored checkpoint at or before `limit` (or the start); later ones go. */
export function rollbackPastIn(ctx: Ctx, limit: number, why: string): void {
  const s = ctx.s;
  s.checkpoints = s.checkpoints.filter((c) => c.step <= limit);
  const checkpoint = s.checkpoints.at(-1);
  const target = checkpoint ?? { step: 0, epoch: 0, cursor: 0, hash: null };
  rollbackIn(ctx, target, why);
  persist(ctx); // the rollback is durable before anything is sent (executor.ts)
}
