/**
 * A member lost during a grouped outer sync costs only its group's retry (local sync mode, a round in
 * groups: web/net/group-allreduce.ts). The grouped allreduce leaves a member lost inside its group's
 * reduce out and the survivors finish the outer step without it, re-weighted; so instead of closing the
 * round over the loss (a carry: every survivor takes the outer step again in a new round), the
 * coordinator waits for their reports, which name the ranks the sum left out, and commits the group with
 * those ranks' slices as holes, as a carried commit does (commit.ts). Then the round closes at that
 * commit boundary and the survivors go on in a new one.
 *
 * The wait is taken (`deferLossIn`) only while every survivor is at the group's outer sync (it reported
 * every inner step and not the commit point: none has applied a sum that held the lost member) and a
 * carry would be possible at all (carry.ts); the lost members leave the round's participants at once and
 * the round's split becomes that carry. If the survivors' reports do not all come in, naming exactly the
 * lost ranks, by the deadline, or another member is lost, or a survivor fails, the round closes with the
 * carry as before. A survivor whose call failed naming no live peer (a group that had sealed cannot retry)
 * ends the wait as its deadline would, and stays a survivor, not charged (`outerLossFailedIn` in
 * round-close.ts). A survivor's report that names left-out ranks the coordinator has not seen lost yet
 * (a member the survivors judged hung) starts the same wait (`excludedByReportIn`).
 */
import { HANG_FLOOR_MS } from '../../core/training/hang';
import { floorTransferMs } from '../../core/training/link-floor';
import { parameterLayout } from '../../core/training/model-spec';
import { overlapsOuterSteps } from '../../core/training/overlap';
import { log, sendWorkers, type Ctx } from './context';
import { carryFor } from './carry';
import { groupInFlight } from './group';
import type { CoordinatorState } from './state';
import { workerOf } from './worker-table';

/**
 * Whether a report of `step` is where survivors name the ranks their outer sum left out: the commit
 * point of a local-mode job whose outer steps are not overlapped (an overlapped job reports its outer
 * step apart, in `outer_report`, and closes the round over a loss as before).
 */
export function namesOuterLoss(s: CoordinatorState, step: number): boolean {
  return s.job.sync.mode === 'local' && !overlapsOuterSteps(s.job) && step === groupInFlight(s).lastStep;
}

/** Why a report naming ranks an outer sum left out stands anywhere but where `namesOuterLoss` says, or null. */
export function misplacedExclusion(s: CoordinatorState, msg: { step: number; excluded?: number[] }): string | null {
  if (!msg.excluded?.length || namesOuterLoss(s, msg.step)) return null;
  return `step ${msg.step}: only a local-mode commit point may name ranks its outer sum left out`;
}

/**
 * How long survivors have to report the outer step without a lost member: the hang floor (a group's
 * retry starts within it when its left neighbour went silent) plus the outer sum's bytes at the floor
 * rate, twice (its reduce again and the exchange).
 */
export function outerRetryAllowanceMs(s: CoordinatorState): number {
  const bytes = parameterLayout(s.job.model).totalElements * 4;
  return (s.policy.hangFloorMs ?? HANG_FLOOR_MS) + 2 * Math.round(floorTransferMs(2 * bytes));
}

/** Whether the round's outer sync may finish without `lost`: see the module comment. */
function deferrable(s: CoordinatorState, lost: readonly string[]): boolean {
  const rv = s.rendezvous;
  if (s.status !== 'active' || s.job.sync.mode !== 'local' || rv.phase !== 'training' || !rv.topology) return false;
  if (rv.outerLoss || overlapsOuterSteps(s.job)) return false;
  const survivors = rv.participants.filter((p) => !lost.includes(p.workerId));
  if (survivors.length === rv.participants.length || survivors.length === 0) return false;
  const point = groupInFlight(s).lastStep;
  return survivors.every((p) => p.lastStep === point - 1);
}

/**
 * The round's outer sync goes on without `lost` (members of the round): they leave its participants,
 * its split becomes the carry without them, and the survivors' reports are awaited. Returns false
 * (nothing changed) when that is not possible: the caller closes the round as before.
 */
export function deferLossIn(ctx: Ctx, lost: readonly string[], namedBy?: string): boolean {
  const s = ctx.s;
  if (!deferrable(s, lost)) return false;
  const carry = carryFor(s, lost);
  if (!carry) return false;
  const rv = s.rendezvous;
  const gone = rv.participants.filter((p) => lost.includes(p.workerId));
  rv.participants = rv.participants.filter((p) => !lost.includes(p.workerId));
  rv.carry = carry;
  const kept = new Set(carry.members.map((m) => String(m.slot)));
  for (const [step, reports] of Object.entries(s.pending))
    s.pending[step] = Object.fromEntries(Object.entries(reports).filter(([slot]) => kept.has(slot)));
  rv.outerLoss = {
    ranks: gone.map((p) => p.rank).sort((a, b) => a - b),
    workers: gone.map((p) => p.workerId),
    deadline: ctx.now + outerRetryAllowanceMs(s),
    ...(namedBy !== undefined ? { namedBy } : {}),
  };
  // The survivors leave the lost ranks out of their grouped allreduce at once: a crashed tab's links
  // stay open for about 30 s, and the groups' silence watch alone outlasts this wait (core/protocol
  // coordinator-messages.ts `membersLostSchema`). Not for ranks only a survivor's report named: their
  // mates must find them out on their own, or the reporter's word alone would push honest members out
  // (the disagreement that charges a liar, `excludedByReportIn`, could not happen).
  if (namedBy === undefined)
    sendWorkers(
      ctx,
      rv.participants.map((p) => p.workerId),
      { type: 'members_lost', round: rv.round, ranks: rv.outerLoss.ranks },
    );
  // A lost member still connected (blamed, or left out as hung) hears that this round is over for it.
  // The wait list is replaced, never edited (context.ts `cloneState`: it may be the input state's).
  const connected = gone.filter((p) => workerOf(s.workers, p.workerId)).map((p) => p.workerId);
  sendWorkers(ctx, connected, { type: 'round_closed', round: rv.round, reason: 'failure', restore: true });
  rv.waitList = [...rv.waitList, ...connected.filter((id) => !rv.waitList.includes(id))];
  log(ctx, 'warn', 'outer_loss_deferred', { round: rv.round, lost: rv.outerLoss.workers, ranks: rv.outerLoss.ranks });
  return true;
}

/**
 * A commit-point report of `reporter` that names ranks the outer sum left out: check them against the
 * wait in progress, or start one for them (members the survivors judged hung; `reporter` is remembered,
 * and charged if the others then disagree: a tab cannot push honest members out for free). Returns an
 * error message when the report cannot stand (the caller closes the round as a failure), or null.
 */
export function excludedByReportIn(ctx: Ctx, excluded: readonly number[], reporter: string): string | null {
  const rv = ctx.s.rendezvous;
  const want = rv.outerLoss?.ranks ?? [];
  if (rv.outerLoss || excluded.length === 0)
    return sameRanks(excluded, want)
      ? null
      : `the outer sum left out ranks [${excluded.join(', ')}], the round lost [${want.join(', ')}]`;
  const members = excluded.map((rank) => rv.participants.find((p) => p.rank === rank));
  if (members.some((p) => !p)) return `the outer sum left out ranks [${excluded.join(', ')}], not all of them members`;
  if (
    !deferLossIn(
      ctx,
      members.map((p) => p!.workerId),
      reporter,
    )
  )
    return `the outer sum left out ranks [${excluded.join(', ')}] where the group cannot commit without them`;
  return null;
}

function sameRanks(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
