/**
 * Contributions that are checked, not trusted (docs/threat-model.md). Three checks, all over the
 * sketches each rank reports with a step (core/state/sketch.ts):
 *
 * 1. **Agreement.** Every rank applied the same all-reduced bytes and holds the same parameters, so its
 *    sketches of both (`sum`, `sumMass`, `params`) must equal the other ranks' bit for bit, like the hash.
 * 2. **Every hop of the ring, at every commit** (`checkHops`): what a rank sent in the reduce-scatter
 *    must be what it received plus its own contribution, the owner's last sum must be the final one,
 *    and a receiver's sketch of a hop must equal its sender's. A rank that contradicts itself is banned;
 *    two neighbours that contradict each other are both suspects, intersected across failures (with
 *    the two swapped in the ring each time) until one is left, who is banned. The step is not committed
 *    either way and the round restarts from the last commit. Σ_r own_r = sum (the ring identity) is
 *    checked too, as a net under the hop checks.
 * 3. **Recomputation, with probability p per committed step.** One member uploads the state before the
 *    step (hash-checked by the server: SHA-256 of the bytes must equal the committed hash), the verifier
 *    recomputes every rank's gradient sums and the optimizer step, and each rank's `own` and the agreed
 *    `params` sketch are compared with the recomputed ones. A rank whose `own` is off is banned; a wrong
 *    `params` with honest `own`s (every rank applied a wrong update: they all collude) bans the round.
 *    Which steps are checked is drawn from a server secret, and a step is chosen only after all its
 *    reports (the rank's commitments) are in.
 *
 * A rank caught cheating is banned (worker and address, the longest cool-off) and the record rolls back
 * to the latest stored checkpoint before its first contribution since the last rollback: everything it
 * touched since may carry its poison, and a stored checkpoint is the only state the coordinator can
 * vouch for. Training goes on from there with the other tabs.
 */
import { begin, finish, log, metric, own, persist, type Ctx } from './context';
import { hashBytes } from '../../core/state/hash';
import type { JobSpec } from '../../core/training/job';
import type { StepReportMessage } from '../../core/protocol/tab-messages';
import {
  groupPlan,
  indicesAt,
  planOf,
  rankRanges,
  type RecordPosition,
  type StepPlan,
} from '../../core/training/groups';
import { epochOrder, recordPosition } from '../../core/training/sampler';
import {
  bucketsPerSegment,
  checkIdentity,
  identityTolerance,
  PARAMS_SKETCH_BUCKETS,
  RECOMPUTE_TOLERANCE,
  checkHops,
  worstRatio,
} from '../../core/state/sketch';
import type { StepSketches } from '../../core/state/sketch';
import type { CoordinatorState, Event, RecomputedStep, Transition, VerificationState } from './state';
import { banIn, chargeIn, culpritOf } from './penalties';
import { rollbackIn } from './checkpoints';
import { afterCloseIn, closeRoundIn, enforceBansIn } from './round-close';

/** Commits after which the suspects of an old ring failure are forgotten. */
export const SUSPICION_STEPS = 20;

/** How long the chosen member has to upload the state before the checked step (ms). */
export const VERIFY_UPLOAD_MS = 60_000;

/** URL path where the chosen member PUTs the state of `step` (the step before the one checked). */
export function verifyPath(runId: string, step: number): string {
  return `/api/verify/${encodeURIComponent(runId)}/${step}`;
}

/** A uniform draw in [0, 1) for `step`, from the server's secret salt (the hash of salt and step). */
export function verificationDraw(salt: string, step: number): number {
  const text = `${salt}:${step}`;
  const words = new Uint32Array(Math.ceil(text.length / 4) + 1);
  for (let i = 0; i < text.length; i++) words[i >> 2] |= text.charCodeAt(i) << (8 * (i & 3));
  words[words.length - 1] = text.length;
  return Number.parseInt(hashBytes(words).slice(0, 8), 16) / 2 ** 32;
}

/**
 * Why a step report's sketches are unacceptable, or null. `disagrees`: they are well-formed but their
 * sketches of the reduced sums or of the parameters differ from another rank's (a divergence, not a
 * malformed report). `others`: reports of the same step already in.
 */
export function sketchProblem(
  job: JobSpec,
  world: number,
  msg: StepReportMessage,
  others: { sketch?: StepReportMessage['sketch'] }[],
): { message: string; disagrees: boolean } | null {
  const malformed = (message: string) => ({ message, disagrees: false });
  if (!job.verify) return msg.sketch ? malformed('this job does not verify: send no sketch') : null;
  const k = msg.sketch;
  if (!k) return malformed('this job verifies contributions: the step report needs its sketch');
  const buckets = world * bucketsPerSegment(world);
  const gradient = [k.own, k.sum, k.sumMass, k.sent, k.sentMass, k.received, k.receivedMass];
  if (gradient.some((a) => a.length !== buckets))
    return malformed(`gradient sketches of a world of ${world} have ${buckets} buckets`);
  if (k.params.length !== PARAMS_SKETCH_BUCKETS)
    return malformed(`the parameter sketch has ${PARAMS_SKETCH_BUCKETS} buckets`);
  if ([k.sumMass, k.sentMass, k.receivedMass].some((a) => a.some((m) => m < 0)))
    return malformed('a bucket mass is negative');
  const first = others.find((o) => o.sketch)?.sketch;
  if (first && !(same(first.sum, k.sum) && same(first.sumMass, k.sumMass) && same(first.params, k.params)))
    return {
      message: 'the sketches of the reduced sums or of the parameters differ from the other ranks’',
      disagrees: true,
    };
  return null;
}

function same(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
}

/**
 * The hop checks and the ring identity of the step about to be committed (every rank reported it).
 * True: commit. False: the failure was handled (round closed, a liar banned or suspects narrowed).
 */
export function ringChecksPassIn(ctx: Ctx, point: number): boolean {
  const s = ctx.s;
  if (!s.job.verify || s.job.sync.mode !== 'every-step' || s.job.sync.compression === 'int8') return true;
  const rv = s.rendezvous;
  const reports = s.pending[point] ?? {};
  const size = rv.participants.length;
  const claims = rv.participants.map((p) => reports[p.rank]?.sketch);
  const first = claims[0];
  if (!first || claims.some((c) => !c)) return true; // every report was checked for its sketch already
  const all = claims as StepSketches[];
  const tolerance = identityTolerance(size, s.job.sync.compression);
  const identity = checkIdentity(
    all.map((c) => c.own),
    first.sum,
    first.sumMass,
    size,
    tolerance,
  );
  const hops = size > 1 ? checkHops(all, first.sum, first.sumMass, tolerance) : { liars: [], disputes: [], worst: 0 };
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
 * the job pays), and two suspects swap places in the ring, so the next failure (if the culprit goes
 * on) has other neighbours around it and the intersection narrows to the culprit. In a world of two
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
  closeRoundIn(ctx, 'failure', true, true, undefined, charged);
  const list = s.rendezvous.waitList;
  const [i, j] = current.slice(0, 2).map((w) => list.indexOf(w));
  if (current.length >= 2 && i >= 0 && j >= 0) {
    const swapped = [...list];
    [swapped[i], swapped[j]] = [swapped[j], swapped[i]];
    s.rendezvous.waitList = swapped;
  }
  afterCloseIn(ctx);
}

/**
 * The sample indices of `step` (1-based), which started at record position `at` (a verifying job
 * commits every step: each step is a group of its own), for each rank of a world whose shares were
 * `shares` (by rank), as the group plan gave them to the tabs, and the samples in the step: what the
 * verifier recomputes.
 */
export function stepSlices(
  plan: StepPlan,
  seed: number,
  at: RecordPosition,
  step: number,
  shares: readonly number[],
): { slices: Uint32Array[]; count: number } {
  const span = groupPlan(at, step, { ...plan, commitEvery: 1 }).steps[0];
  const order = epochOrder(seed, at.epoch, plan.datasetSize);
  const slices = shares.map((_, rank) => indicesAt(order, rankRanges(span, shares, rank)).slice());
  return { slices, count: span.count };
}

/** `stepSlices` of the step under check, from the world it was computed by and the record where it started. */
export function checkedSlices(s: CoordinatorState, v: Pick<VerificationState, 'world' | 'step' | 'at'>) {
  const shares = [...v.world].sort((a, b) => a.rank - b.rank).map((w) => w.share);
  return stepSlices(planOf(s), s.job.seed, v.at, v.step, shares);
}

/**
 * After committing `step` (hash `stepHash`; the previous commit's hash `prevHash`): note each member's
 * first contribution and maybe choose the step for recomputation. Returns the member that must upload
 * the state of step − 1 with its `committed`, if any.
 */
export function afterCommitIn(ctx: Ctx, step: number, stepHash: string, prevHash: string | null): string | null {
  const s = ctx.s;
  const rv = s.rendezvous;
  s.contributions = { ...(s.contributions ?? {}) };
  for (const p of rv.participants) if (!own(s.contributions, p.workerId)) s.contributions[p.workerId] = step;
  const p = s.job.verify?.probability ?? 0;
  if (p <= 0 || s.verification || prevHash === null || step < 2 || !s.verifySalt) return null;
  const draw = verificationDraw(s.verifySalt, step);
  if (draw >= p) return null;
  const reports = s.pending[step] ?? {};
  const world = rv.participants.map(({ workerId, rank, share }) => ({ workerId, rank, share }));
  const own_ = world.map((w) => reports[w.rank]?.sketch?.own);
  const params = reports[world[0].rank]?.sketch?.params;
  if (!params || own_.some((o) => !o)) return null;
  // The uploader: a member picked by the rest of the same draw (uniform over the world).
  const uploader = world[Math.min(world.length - 1, Math.floor((draw / p) * world.length))].workerId;
  s.verification = {
    step,
    // Called before the commit moves the record: it is still where the step started.
    at: recordPosition(s.record),
    prevHash,
    stepHash,
    world,
    claims: { own: own_ as number[][], params },
    uploader,
    phase: 'upload',
    deadline: ctx.now + VERIFY_UPLOAD_MS,
  };
  log(ctx, 'info', 'verification_requested', { step, uploader });
  return uploader;
}

/** Ban `workerIds` for cheating, roll the record back past their contributions, and go on. */
export function cheatersCaughtIn(ctx: Ctx, workerIds: string[], why: string): void {
  const s = ctx.s;
  const firsts = workerIds.map((w) => own(s.contributions ?? {}, w)).filter((x): x is number => x !== undefined);
  const first = firsts.length > 0 ? Math.min(...firsts) : null;
  for (const workerId of workerIds) banIn(ctx, culpritOf(s, workerId), 'caught cheating');
  log(ctx, 'error', 'cheater_banned', {
    workers: workerIds,
    why,
    firstContribution: first,
    lastCommit: s.lastCommit.step,
  });
  if (s.verification && workerIds.some((w) => s.verification!.world.some((m) => m.workerId === w)))
    s.verification = null;
  if (first !== null && first <= s.lastCommit.step) rollbackPastIn(ctx, first - 1, why);
}

/** Roll the record back to the latest stored checkpoint at or before `limit` (or the start); later ones go. */
function rollbackPastIn(ctx: Ctx, limit: number, why: string): void {
  const s = ctx.s;
  s.checkpoints = s.checkpoints.filter((c) => c.step <= limit);
  const checkpoint = s.checkpoints.at(-1);
  const target = checkpoint ?? { step: 0, epoch: 0, cursor: 0, hash: null };
  rollbackIn(ctx, target, `cheater: ${why}`);
  persist(ctx); // the rollback is durable before anything is sent (executor.ts)
}

/** The chosen member's upload arrived and matched the committed hash (the verifier starts), or was refused. */
export function onVerificationUpload(
  state: CoordinatorState,
  event: Extract<Event, { kind: 'verification_upload' }>,
  now: number,
): Transition {
  const ctx = begin(state, now);
  const v = ctx.s.verification;
  if (!v || v.step !== event.step + 1) return finish(ctx);
  if (event.ok) {
    ctx.s.verification = { ...v, phase: 'recompute' };
    log(ctx, 'info', 'verification_uploaded', { step: v.step, uploader: v.uploader });
  } else {
    ctx.s.verification = null;
    // It reported (or synced and vouched for) the committed hash, and uploads other bytes.
    cheatersCaughtIn(ctx, [v.uploader], `uploaded a state that is not the committed one: ${event.reason ?? ''}`);
    enforceBansIn(ctx);
  }
  return finish(ctx);
}

/** The verifier's answer: compare it with the claims; ban and roll back on a mismatch. */
export function onVerificationResult(
  state: CoordinatorState,
  event: Extract<Event, { kind: 'verification_result' }>,
  now: number,
): Transition {
  const ctx = begin(state, now);
  const v = ctx.s.verification;
  if (!v || v.step !== event.step) return finish(ctx);
  ctx.s.verification = null;
  if ('error' in event.result) {
    metric(ctx, 'tabswarm_verifications_total', 1, { result: 'abandoned' });
    log(ctx, 'warn', 'verification_abandoned', { step: v.step, error: event.result.error });
    return finish(ctx);
  }
  const verdict = judge(v, event.result);
  log(ctx, verdict.cheaters.length ? 'error' : 'info', 'verification_done', {
    step: v.step,
    ownRatios: verdict.ownRatios,
    paramsRatio: verdict.paramsRatio,
    cheaters: verdict.cheaters,
    ms: event.result.ms ?? null,
  });
  metric(ctx, 'tabswarm_verifications_total', 1, { result: verdict.cheaters.length ? 'caught' : 'passed' });
  if (verdict.cheaters.length) {
    cheatersCaughtIn(ctx, verdict.cheaters, `a contribution to step ${v.step} is not what it claims`);
    enforceBansIn(ctx);
  }
  return finish(ctx);
}

/** Which members' claims the recomputation contradicts (pure). */
export function judge(
  v: Pick<VerificationState, 'world' | 'claims'>,
  r: RecomputedStep,
): { cheaters: string[]; ownRatios: number[]; paramsRatio: number } {
  const ownRatios = v.world.map((_, i) =>
    r.own[i] ? worstRatio(v.claims.own[i], r.own[i].values, r.own[i].mass) : Number.POSITIVE_INFINITY,
  );
  const paramsRatio = worstRatio(v.claims.params, r.params.values, r.params.mass);
  const liars = v.world.filter((_, i) => !(ownRatios[i] <= RECOMPUTE_TOLERANCE)).map((w) => w.workerId);
  // Honest own contributions but a wrong update: every member applied it, so every member colludes.
  const cheaters = liars.length > 0 || paramsRatio <= RECOMPUTE_TOLERANCE ? liars : v.world.map((w) => w.workerId);
  return { cheaters, ownRatios, paramsRatio };
}

/** The upload deadline: a member that does not upload in time is charged a strike; the check is dropped. */
export function verificationTickIn(ctx: Ctx): void {
  const v = ctx.s.verification;
  if (v?.phase !== 'upload' || ctx.now < v.deadline) return;
  ctx.s.verification = null;
  metric(ctx, 'tabswarm_verifications_total', 1, { result: 'abandoned' });
  log(ctx, 'warn', 'verification_abandoned', { step: v.step, error: `no upload from ${v.uploader} in time` });
  chargeIn(ctx, [culpritOf(ctx.s, v.uploader)], 'no verification upload');
  enforceBansIn(ctx);
}

/** The `committed` message's upload field for the chosen member. */
export function uploadField(s: CoordinatorState, workerId: string): { step: number; url: string } | undefined {
  const v = s.verification;
  if (!v || v.uploader !== workerId || v.phase !== 'upload') return undefined;
  return { step: v.step - 1, url: verifyPath(s.runId, v.step - 1) };
}
