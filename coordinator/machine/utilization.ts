/**
 * Compute utilization and wire bytes per sample, per worker and for the job, from accepted step reports.
 *
 * - Utilization = time computing / wall time. The wall time of a report is measured by the coordinator:
 *   from the rank's previous report in the round (or, for its first, from when the round's steps could
 *   start) to this report. Measured from the rank's own previous report rather than from the last commit,
 *   so the time a fast rank waits for a straggler's commit counts as wall time, not as nothing. The time
 *   computing is the tab's `computeMs` claim, clamped to that wall time: a hostile or confused tab cannot
 *   claim more than 100%. Time between rounds (gathering, syncing) is in no report, so it is not counted.
 * - Bytes per sample = bytes sent in the collectives (`wireBytes`, a tab's claim, display only) / samples,
 *   over the reports that carried the field (older tabs leave it out; they count toward neither side).
 *   For the job it is the sum over all ranks: what the whole swarm puts on the wire per sample trained.
 *
 * Work later lost to a failure (a round closed before its commit) still counts: this measures how busy
 * the tabs were, not how much of it was kept. The sums live in memory only (a restarted coordinator
 * starts them again) and are plain JSON like the rest of the state.
 */
import type { Ctx } from './context';
import type { StepReportMessage } from '../../core/protocol/tab-messages';
import type { UsageView } from '../../core/protocol/views';
import type { Usage, UsageSums, WorkerInfo } from './state';
import { updateSyncAdviceIn } from './sync-advice';

/**
 * Half-life of the recent window, in ms of coordinator clock. Long enough to span several outer steps of
 * local mode (with H = 32 and ~0.1 s per inner step an outer step takes ~3–4 s, and only its last report
 * carries wire bytes, so a shorter window would show a sawtooth), short enough that a change (a link
 * slowing down, a tab throttled) shows within a minute.
 */
export const USAGE_HALF_LIFE_MS = 30_000;

const ZERO: UsageSums = { wallMs: 0, computeMs: 0, wireSamples: 0, wireBytes: 0, reports: 0 };

/** The part of one report the accounting needs. */
export type UsageReport = Pick<StepReportMessage, 'samples' | 'computeMs' | 'wireBytes'>;

function add(sums: UsageSums, r: UsageReport, wallMs: number, weight: number): UsageSums {
  const wired = r.wireBytes !== undefined;
  return {
    wallMs: sums.wallMs * weight + wallMs,
    computeMs: sums.computeMs * weight + Math.min(Math.max(0, r.computeMs), wallMs),
    wireSamples: sums.wireSamples * weight + (wired ? r.samples : 0),
    wireBytes: sums.wireBytes * weight + (wired ? r.wireBytes! : 0),
    reports: (sums.reports ?? 0) * weight + (wallMs > 0 ? 1 : 0),
  };
}

/**
 * `usage` after one report whose wall time was `wallMs`, arriving at `now`. A report with no positive,
 * finite wall time (two reports in the same millisecond) is no measurement of time: only its bytes count.
 */
export function addUsage(usage: Usage | undefined, r: UsageReport, wallMs: number, now: number): Usage {
  const wall = Number.isFinite(wallMs) && wallMs > 0 ? wallMs : 0;
  const at = Math.max(now, usage?.at ?? now);
  const weight = usage ? 2 ** (-(at - usage.at) / USAGE_HALF_LIFE_MS) : 1;
  return {
    at,
    recent: add(usage?.recent ?? ZERO, r, wall, weight),
    total: add(usage?.total ?? ZERO, r, wall, 1),
  };
}

/** Utilization and bytes per sample of some sums (of either window). */
export function usageView(sums: UsageSums | undefined): UsageView {
  if (!sums) return { utilization: null, bytesPerSample: null };
  return {
    utilization: sums.wallMs > 0 ? sums.computeMs / sums.wallMs : null,
    bytesPerSample: sums.wireSamples > 0 ? sums.wireBytes / sums.wireSamples : null,
  };
}

/**
 * Account an accepted report of `worker` (already this transition's copy) whose wall time started at
 * `since`, for the worker and for the job. Called by commit.ts `acceptReportIn`.
 */
export function recordUsageIn(ctx: Ctx, worker: WorkerInfo, r: UsageReport, since: number): void {
  worker.usage = addUsage(worker.usage, r, ctx.now - since, ctx.now);
  ctx.s.usage = addUsage(ctx.s.usage, r, ctx.now - since, ctx.now);
  updateSyncAdviceIn(ctx);
}
