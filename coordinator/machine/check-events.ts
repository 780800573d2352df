/**
 * The events of recomputed spot checks (checks.ts has the pure parts): an upload arrived and matched
 * (or was refused), the verifier answered, a deadline passed or an uploader left. Each resolution may
 * release a commit the gate held and finish a job whose last step was waiting for its checks
 * (commit.ts).
 */
import { begin, finish, log, metric, type Ctx } from './context';
import { commitReadyIn, finishIfCheckedIn } from './commit';
import { creditPassedIn, doubtIn } from './adaptive-trust';
import { earlierOpen, judge, releasableHeld } from './checks';
import { chargeIn } from './penalties';
import { afterCloseIn, closeRoundIn, enforceBansIn } from './round-close';
import type { CoordinatorState, Event, RecomputedStep, Transition, VerificationState } from './state';
import { cheatersCaughtIn, type Places, rollbackPastIn } from './verification';
import { workerOf } from './worker-table';

function findCheck(s: CoordinatorState, id: number): VerificationState | undefined {
  return (s.checks ?? []).find((c) => c.id === id);
}

function dropCheckIn(ctx: Ctx, id: number): void {
  ctx.s.checks = (ctx.s.checks ?? []).filter((c) => c.id !== id);
}

function placesOf(v: VerificationState): Places {
  return Object.fromEntries(v.world.map((m) => [m.workerId, { addr: m.addr, invite: m.invite }]));
}

/** A check resolved: held verdicts may follow, a commit it held may be made, a job at its last step may be done. */
function afterResolvedIn(ctx: Ctx): void {
  releaseHeldIn(ctx);
  enforceBansIn(ctx);
  commitReadyIn(ctx);
  finishIfCheckedIn(ctx);
}

/**
 * Held verdicts whose earlier checks all resolved, oldest first. A verdict of lies waits for the checks
 * of earlier steps because a lie that an earlier check will find may have poisoned the state this one
 * started from, and an honest rank's recomputation from a poisoned state can disagree with its claims:
 * the earlier catch rolls the record back past both and drops this one (rollbackIn).
 */
function releaseHeldIn(ctx: Ctx): void {
  for (;;) {
    const v = releasableHeld(ctx.s);
    if (!v?.result) return;
    dropCheckIn(ctx, v.id);
    verdictIn(ctx, v, v.result);
  }
}

/** The uploader's state arrived and matched (the verifier starts), or was refused: withheld. */
export function onVerificationUpload(
  state: CoordinatorState,
  event: Extract<Event, { kind: 'verification_upload' }>,
  now: number,
): Transition {
  const ctx = begin(state, now);
  const v = findCheck(ctx.s, event.check);
  if (v?.phase !== 'upload') return finish(ctx);
  if (event.ok) {
    ctx.s.checks = ctx.s.checks!.map((c) => (c.id === v.id ? { ...c, phase: 'recompute' as const } : c));
    log(ctx, 'info', 'verification_uploaded', { check: v.id, step: v.step, uploader: v.uploader });
    return finish(ctx);
  }
  // It reported (or synced and vouched for) the state it was asked for, and uploads other bytes.
  withheldIn(ctx, v, `uploaded a state that is not the one it committed to: ${event.reason ?? ''}`);
  return finish(ctx);
}

/** The verifier's answer: compare it with the claims; ban and roll back on a mismatch (after the earlier checks). */
export function onVerificationResult(
  state: CoordinatorState,
  event: Extract<Event, { kind: 'verification_result' }>,
  now: number,
): Transition {
  const ctx = begin(state, now);
  const v = findCheck(ctx.s, event.check);
  if (!v || v.phase === 'held') return finish(ctx);
  if ('error' in event.result) {
    dropCheckIn(ctx, v.id);
    metric(ctx, 'tabswarm_verifications_total', 1, { result: 'abandoned' });
    log(ctx, 'warn', 'verification_abandoned', { check: v.id, step: v.step, error: event.result.error });
    afterResolvedIn(ctx);
    return finish(ctx);
  }
  const result = event.result;
  const verdict = judge(v, result);
  if ((verdict.cheaters.length > 0 || verdict.inconclusive) && earlierOpen(ctx.s, v)) {
    ctx.s.checks = ctx.s.checks!.map((c) => (c.id === v.id ? { ...c, phase: 'held' as const, result } : c));
    const waiting = ctx.s.checks.filter((c) => c.step < v.step).map((c) => c.id);
    log(ctx, 'info', 'verification_held', { check: v.id, step: v.step, waitingFor: waiting });
    return finish(ctx);
  }
  dropCheckIn(ctx, v.id);
  verdictIn(ctx, v, result);
  afterResolvedIn(ctx);
  return finish(ctx);
}

/** Judge check `v` (already dropped from the open checks) by the verifier's `result`, and act on it. */
function verdictIn(ctx: Ctx, v: VerificationState, result: RecomputedStep): void {
  const verdict = judge(v, result);
  log(ctx, verdict.cheaters.length ? 'error' : 'info', 'verification_done', {
    check: v.id,
    step: v.step,
    mode: v.mode,
    ranks: v.ranks,
    ownRatios: verdict.ownRatios,
    momentRatios: verdict.momentRatios,
    paramsRatio: verdict.paramsRatio,
    cheaters: verdict.cheaters,
    ms: result.ms ?? null,
  });
  const outcome = verdict.cheaters.length ? 'caught' : verdict.inconclusive ? 'inconclusive' : 'passed';
  metric(ctx, 'tabswarm_verifications_total', 1, { result: outcome });
  if (outcome === 'caught') {
    cheatersCaughtIn(ctx, verdict.cheaters, `a contribution to step ${v.step} is not what it claims`, placesOf(v));
  } else if (outcome === 'inconclusive') {
    inconclusiveIn(ctx, v, result.sensitivity ?? 0);
  } else {
    creditPassedIn(
      ctx,
      v.ranks.map((rank) => v.world.find((m) => m.rank === rank)!.workerId),
    );
    ctx.s.soundStart = Math.max(ctx.s.soundStart ?? 0, v.firstStep - 1);
  }
}

/** Rollbacks to one target after inconclusive checks before they are only logged (a job whose own training is chaotic). */
export const MAX_INCONCLUSIVE_ROLLBACKS = 2;

/**
 * A check whose recomputation contradicts the claims, but no farther than rounding alone moves it from
 * this start state: the state is chaotic (checks.ts `judge`), which honest training from a sound state
 * does not make, a lie that escaped its check (a poisoned update) does. Nobody is banned: an honest
 * rank's result on another GPU lands that far too, and blaming it is what a poisoner would want. The
 * record rolls back to the latest stored checkpoint at or before the newest state a check reproduced
 * (`soundStart`), i.e. past the poison, and every member of the step is doubted (checked at every commit
 * until it passed its checks), so a poisoner in the re-run is caught from a sound state. Bounded: after
 * MAX_INCONCLUSIVE_ROLLBACKS to the same target the job's own training is chaotic there, and further
 * inconclusive checks are only logged.
 */
function inconclusiveIn(ctx: Ctx, v: VerificationState, sensitivity: number): void {
  const s = ctx.s;
  const limit = Math.min(s.soundStart ?? 0, v.firstStep - 1);
  const target = s.checkpoints.filter((c) => c.step <= limit).at(-1)?.step ?? 0;
  const count = s.inconclusive?.target === target ? s.inconclusive.count : 0;
  const rollback = count < MAX_INCONCLUSIVE_ROLLBACKS && target < s.lastCommit.step;
  log(ctx, 'warn', 'verification_inconclusive', {
    check: v.id,
    step: v.step,
    sensitivity,
    doubted: v.world.map((m) => m.workerId),
    rolledBackTo: rollback ? target : null,
  });
  doubtIn(
    ctx,
    v.world.map((m) => m.workerId),
  );
  if (!rollback) return;
  s.inconclusive = { target, count: count + 1 };
  rollbackPastIn(ctx, limit, `inconclusive: the check of step ${v.step} cannot tell a lie from rounding there`);
  // Nobody leaves, and the members hold a state the record no longer has: the round restarts from the target.
  if (s.status === 'active') {
    closeRoundIn(ctx, 'divergence', true, false);
    afterCloseIn(ctx);
  }
}

/**
 * A check's upload will not come from an uploader that is still here: refused bytes, or its deadline
 * passed while it stayed connected. The uploader is treated as caught (it was asked for bytes it holds
 * and the deadline allows the slowest link we support), which rolls the record back past the step;
 * every other member of the step is charged a strike, as the rule says: a round that keeps
 * losing its uploads is cooled off as a whole. An uploader that LEFT is `departedIn`.
 */
function withheldIn(ctx: Ctx, v: VerificationState, why: string): void {
  dropCheckIn(ctx, v.id);
  metric(ctx, 'tabswarm_verifications_total', 1, { result: 'withheld' });
  log(ctx, 'warn', 'verification_withheld', { check: v.id, step: v.step, uploader: v.uploader, why });
  const others = v.world.filter((m) => m.workerId !== v.uploader && workerOf(ctx.s.workers, m.workerId));
  if (others.length > 0)
    chargeIn(
      ctx,
      others.map((m) => ({ workerId: m.workerId, addr: m.addr })),
      `a member withheld the upload of a check of step ${v.step}`,
    );
  cheatersCaughtIn(ctx, [v.uploader], `withheld the state a check of step ${v.step} needs (${why})`, placesOf(v));
  afterResolvedIn(ctx);
}

/**
 * A check's uploader left (goodbye, crash, dropped socket, kick) before its upload arrived. Leaving is
 * no proof of a lie (an honest volunteer closes its tab whenever it likes, and every tab of a test
 * machine shares one address, so a ban would cool off the honest ones too), so nobody is banned and no
 * address or invite is charged. But nothing the check would have vouched for is kept: as after an
 * inconclusive check, the record rolls back to the latest stored checkpoint at or before the start of
 * the checked commit, so no unchecked work survives, the leaver's included: leaving to dodge a check
 * costs the leaver its unverified work (docs/threat-model.md, "Leave to dodge a check"). No other member
 * is asked to upload instead: the upload grant rides on `committed`, which is gone by now.
 */
function departedIn(ctx: Ctx, v: VerificationState): void {
  const s = ctx.s;
  dropCheckIn(ctx, v.id);
  metric(ctx, 'tabswarm_verifications_total', 1, { result: 'departed' });
  const limit = v.firstStep - 1;
  const rollback = limit < s.lastCommit.step;
  const target = s.checkpoints.filter((c) => c.step <= limit).at(-1)?.step ?? 0;
  log(ctx, 'warn', 'verification_departed', {
    check: v.id,
    step: v.step,
    uploader: v.uploader,
    rolledBackTo: rollback ? target : null,
  });
  if (rollback) {
    rollbackPastIn(ctx, limit, `the uploader of a check of step ${v.step} left before uploading`);
    // Members still here hold a state the record no longer has: the round restarts from the target.
    if (s.status === 'active') {
      closeRoundIn(ctx, 'divergence', true, false);
      afterCloseIn(ctx);
    }
  }
  afterResolvedIn(ctx);
}

/**
 * At a tick: every open upload whose uploader left is dropped with a rollback (`departedIn`), every
 * one whose deadline passed while its uploader stayed is withheld; a held verdict whose earlier checks
 * went another way (dropped with a ban or a rollback) is due.
 */
export function checksTickIn(ctx: Ctx): void {
  if (releasableHeld(ctx.s)) afterResolvedIn(ctx);
  for (const v of ctx.s.checks ?? []) {
    if (v.phase !== 'upload' || !findCheck(ctx.s, v.id)) continue;
    if (!workerOf(ctx.s.workers, v.uploader)) departedIn(ctx, v);
    else if (ctx.now >= v.deadline) withheldIn(ctx, v, 'no upload by the deadline');
  }
}
