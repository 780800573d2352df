/**
 * Hung members, judged by progress, not by heartbeats (a hung tab's worker timer may still beat). In
 * local sync mode every inner step is reported, and the coordinator has measured each member's
 * throughput (samples per ms of wall time between its reports: commit.ts), so it knows when the next
 * report of each member is due: its next step's samples / its throughput. A member whose next inner
 * step is later than `hangAllowanceMs` of that (twice it, its own jitter allowed for — four mean
 * deviations, as TCP's retransmission timeout — and at least the floor: core/training/hang.ts) has hung:
 * its socket is closed and it is lost like a crashed tab (round-close.ts `failIn`), so its
 * share of the outer step in flight is all the job loses.
 *
 * Not judged here: a member's commit point (its report waits for the outer sync, which waits for the
 * slowest member: the tabs judge a silent ring neighbour there, web/elastic/sync-modes.ts) or, in an
 * overlapped job, the first step of a group (the same wait, one group later: `judged`), a member not
 * measured yet (its first round: heartbeats cover it), a member of a carrying round before its first
 * report in it (it may be recomputing steps already reported), and every-step mode (every report waits for the
 * allreduce, so all members stall together and reports cannot single out the hung one: the
 * collective's deadline on the tabs does).
 */
import { CloseCode } from '../../core/protocol/coordinator-messages';
import { hangAllowanceMs, HANG_FLOOR_MS } from '../../core/training/hang';
import { log, type Ctx } from './context';
import type { GroupPlan } from '../../core/training/groups';
import { overlapsOuterSteps } from '../../core/training/overlap';
import { allCommitted, groupsInFlight, splitSizes } from './group';
import { failIn } from './round-close';
import type { CoordinatorState } from './state';
import { workerOf } from './worker-table';

/** Each judged member and when its next report is due at the latest (ms, coordinator clock). */
function dueTimes(s: CoordinatorState): { workerId: string; due: number; allowanceMs: number }[] {
  const rv = s.rendezvous;
  if (s.status !== 'active' || s.job.sync.mode !== 'local' || rv.phase !== 'training' || allCommitted(s)) return [];
  const groups = groupsInFlight(s);
  const group = groups[0];
  const floor = s.policy.hangFloorMs ?? HANG_FLOOR_MS;
  const out: { workerId: string; due: number; allowanceMs: number }[] = [];
  // Each count's split once per event (not once per member: this runs at every event, for up to 4096
  // members), from the split the commit rule keeps across events (group.ts `splitSizes`).
  const sizes = new Map<number, number[]>();
  const sizesOf = (step: number) => {
    const of = groups.find((g) => step <= g.lastStep)!;
    const count = of.steps[step - of.firstStep].count;
    let x = sizes.get(count);
    if (!x) {
      x = splitSizes(s, count);
      sizes.set(count, x);
    }
    return x;
  };
  for (const p of rv.participants) {
    const next = p.lastStep + 1;
    if (!judged(s, groups, next)) continue;
    // A member carrying a group on may first recompute steps the coordinator has (its live state was
    // lost): it is judged from its first report in the round on.
    if (rv.carry && p.lastReportAt === undefined) continue;
    const worker = workerOf(s.workers, p.workerId);
    const throughput = worker?.throughput ?? null;
    if (throughput === null || !(throughput > 0) || next < group.firstStep) continue;
    const samples = sizesOf(next)[p.slot] ?? 0;
    const allowanceMs = hangAllowanceMs(samples / throughput, floor, worker?.stepDeviationMs ?? 0);
    if (allowanceMs === null) continue;
    const since = Math.max(rv.stepStartedAt ?? 0, p.lastReportAt ?? 0);
    out.push({ workerId: p.workerId, due: since + allowanceMs, allowanceMs });
  }
  return out;
}

/**
 * Whether a member's report of `step` is judged: an inner step of the groups in flight. Not a commit point
 * (its report waits for the outer sync), nor in an overlapped job a group's first step (the rank may wait
 * there for the previous outer step's allreduce and commit, core/training/overlap.ts), whose commit
 * point's report is an inner one and judged.
 */
function judged(s: CoordinatorState, groups: GroupPlan[], step: number): boolean {
  const last = groups[groups.length - 1];
  if (step > last.lastStep) return false;
  if (!overlapsOuterSteps(s.job)) return step < groups[0].lastStep;
  return !groups.some((g) => g.firstStep === step);
}

/** Close and lose the members whose next inner-step report is overdue. */
export function hangIn(ctx: Ctx): void {
  const late = dueTimes(ctx.s).filter((d) => ctx.now > d.due);
  if (late.length === 0) return;
  for (const d of late) {
    const worker = workerOf(ctx.s.workers, d.workerId);
    log(ctx, 'warn', 'member_hung', { workerId: d.workerId, allowanceMs: Math.round(d.allowanceMs) });
    if (worker) ctx.out.push({ kind: 'close', conn: worker.conn, code: CloseCode.noProgress, reason: 'no progress' });
  }
  failIn(
    ctx,
    late.map((d) => d.workerId),
    'failure',
    'no progress',
    { remove: true },
  );
}

/** The earliest time a member's report falls due (for the server's timer), or null. */
export function nextHangDeadline(s: CoordinatorState): number | null {
  const dues = dueTimes(s);
  return dues.length > 0 ? Math.min(...dues.map((d) => d.due)) + 1 : null;
}
