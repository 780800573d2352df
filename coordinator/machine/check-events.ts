/**
 * The events of recomputed spot checks (checks.ts has the pure parts): an upload arrived and matched
 * (or was refused), the verifier answered, a deadline passed or an uploader left. Each resolution may
 * release a commit the gate held and finish a job whose last step was waiting for its checks
 * (commit.ts).
 */
import { begin, finish, log, metric, own, type Ctx } from './context';
import { commitReadyIn, finishIfCheckedIn } from './commit';
import { creditPassedIn } from './adaptive-trust';
import { judge } from './checks';
import { chargeIn } from './penalties';
import { enforceBansIn } from './round-close';
import type { CoordinatorState, Event, Transition, VerificationState } from './state';
import { cheatersCaughtIn, type Places } from './verification';

function findCheck(s: CoordinatorState, id: number): VerificationState | undefined {
  return (s.checks ?? []).find((c) => c.id === id);
}

function dropCheckIn(ctx: Ctx, id: number): void {
  ctx.s.checks = (ctx.s.checks ?? []).filter((c) => c.id !== id);
}

function placesOf(v: VerificationState): Places {
  return Object.fromEntries(v.world.map((m) => [m.workerId, { addr: m.addr, invite: m.invite }]));
}

/** A check resolved: a commit it held may be made, and a job at its last step may be done. */
function afterResolvedIn(ctx: Ctx): void {
  enforceBansIn(ctx);
  commitReadyIn(ctx);
  finishIfCheckedIn(ctx);
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

/** The verifier's answer: compare it with the claims; ban and roll back on a mismatch. */
export function onVerificationResult(
  state: CoordinatorState,
  event: Extract<Event, { kind: 'verification_result' }>,
  now: number,
): Transition {
  const ctx = begin(state, now);
  const v = findCheck(ctx.s, event.check);
  if (!v) return finish(ctx);
  dropCheckIn(ctx, v.id);
  if ('error' in event.result) {
    metric(ctx, 'tabswarm_verifications_total', 1, { result: 'abandoned' });
    log(ctx, 'warn', 'verification_abandoned', { check: v.id, step: v.step, error: event.result.error });
    afterResolvedIn(ctx);
    return finish(ctx);
  }
  const verdict = judge(v, event.result);
  log(ctx, verdict.cheaters.length ? 'error' : 'info', 'verification_done', {
    check: v.id,
    step: v.step,
    mode: v.mode,
    ranks: v.ranks,
    ownRatios: verdict.ownRatios,
    momentRatios: verdict.momentRatios,
    paramsRatio: verdict.paramsRatio,
    cheaters: verdict.cheaters,
    ms: event.result.ms ?? null,
  });
  metric(ctx, 'tabswarm_verifications_total', 1, { result: verdict.cheaters.length ? 'caught' : 'passed' });
  if (verdict.cheaters.length) {
    cheatersCaughtIn(ctx, verdict.cheaters, `a contribution to step ${v.step} is not what it claims`, placesOf(v));
  } else {
    creditPassedIn(
      ctx,
      v.ranks.map((rank) => v.world.find((m) => m.rank === rank)!.workerId),
    );
  }
  afterResolvedIn(ctx);
  return finish(ctx);
}

/**
 * A check's upload will not come: refused, its deadline passed, or its uploader left. The uploader is
 * treated as caught (it was asked for bytes it holds and the deadline allows the slowest link we
 * support), which rolls the record back past the step; every other member of the step is charged a
 * strike, as the rule says: a round that keeps losing its uploads is cooled off as a whole.
 */
function withheldIn(ctx: Ctx, v: VerificationState, why: string): void {
  dropCheckIn(ctx, v.id);
  metric(ctx, 'tabswarm_verifications_total', 1, { result: 'withheld' });
  log(ctx, 'warn', 'verification_withheld', { check: v.id, step: v.step, uploader: v.uploader, why });
  const others = v.world.filter((m) => m.workerId !== v.uploader && own(ctx.s.workers, m.workerId));
  if (others.length > 0)
    chargeIn(
      ctx,
      others.map((m) => ({ workerId: m.workerId, addr: m.addr })),
      `a member withheld the upload of a check of step ${v.step}`,
    );
  cheatersCaughtIn(ctx, [v.uploader], `withheld the state a check of step ${v.step} needs (${why})`, placesOf(v));
  afterResolvedIn(ctx);
}

/** At a tick: every open upload whose deadline passed, or whose uploader is gone, is withheld. */
export function checksTickIn(ctx: Ctx): void {
  for (const v of ctx.s.checks ?? []) {
    if (v.phase !== 'upload' || !findCheck(ctx.s, v.id)) continue;
    const gone = !own(ctx.s.workers, v.uploader);
    if (gone || ctx.now >= v.deadline)
      withheldIn(ctx, v, gone ? 'it left before uploading' : 'no upload by the deadline');
  }
}
