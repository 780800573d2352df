/**
 * Every-step sync that degrades loudly (issue 24): when the tabs' links cannot carry a step's gradient in
 * about the time of a step, the coordinator says so, on the admin page's job card and in `/api/status`
 * (`syncAdvice`), with the local-steps job to run instead, and logs `sync_advice` when the verdict
 * changes. It does not switch the job itself (docs/local-steps.md, "When every-step sync is too slow",
 * says why).
 *
 * The measure is the one the coordinator already keeps (utilization.ts): per rank, the recent wall time
 * between its step reports and the compute time it claims. What is not compute is, in every-step mode,
 * the step's allreduce plus waiting for slower ranks. To leave stragglers out, the verdict rests on the
 * busiest member (the highest utilization: the one that waits least, so what it waits for is the
 * network): advice when its sync time per step is at least `SLOW_SYNC_RATIO` × its compute time per step,
 * i.e. its utilization is at most 1 / (1 + ratio).
 */
import type { SyncAdviceView } from '../../core/protocol/views';
import type { SyncSpec } from '../../core/training/job';
import { type Ctx, log } from './context';
import type { UsageSums } from './state';
import { workerOf } from './worker-table';

/** Sync time per step ≥ this × compute time per step: the link cannot carry a step's gradient in a step's time. */
export const SLOW_SYNC_RATIO = 1;
/** A member's recent reports (decayed count) before its figures count: one slow step is not a verdict. */
export const MIN_RECENT_REPORTS = 3;
/**
 * The suggested H aims for sync ≤ this share of an outer step's compute (utilization ≈ 0.9), counting
 * the int8 wire's bytes against the job's current wire.
 */
export const TARGET_SYNC_SHARE = 0.1;
export const MIN_SUGGESTED_H = 4;
export const MAX_SUGGESTED_H = 256;

/** Bytes per value of each wire (web/net/ring-allreduce.ts `ringAllreduceBusBytes`): what int8 saves. */
const WIRE_BYTES = { none: 4, fp16: 2, int8: 1 + 4 / 256 } as const;

/**
 * Inner steps per outer step so that local mode with an int8 wire spends about `TARGET_SYNC_SHARE` of its
 * time syncing, for a job whose every-step sync takes `ratio` × its compute on a `compression` wire:
 * H = ratio · (int8 bytes / current bytes) / share, rounded up to a power of two, within [4, 256].
 */
export function suggestedInnerSteps(ratio: number, compression: keyof typeof WIRE_BYTES): number {
  const h = (ratio * (WIRE_BYTES.int8 / WIRE_BYTES[compression])) / TARGET_SYNC_SHARE;
  if (!Number.isFinite(h)) return MAX_SUGGESTED_H;
  const pow2 = 2 ** Math.ceil(Math.log2(Math.max(1, h)));
  return Math.min(MAX_SUGGESTED_H, Math.max(MIN_SUGGESTED_H, pow2));
}

const seconds = (ms: number) => (ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`);

/** The advice for a job with `sync` whose round members' recent usage sums are `members` (undefined: none yet). */
export function syncAdvice(sync: SyncSpec, members: readonly (UsageSums | undefined)[]): SyncAdviceView | null {
  if (sync.mode !== 'every-step') return null;
  let busiest: UsageSums | null = null;
  for (const m of members) {
    if (!m || m.reports < MIN_RECENT_REPORTS || !(m.wallMs > 0)) continue;
    if (!busiest || m.computeMs / m.wallMs > busiest.computeMs / busiest.wallMs) busiest = m;
  }
  if (!busiest) return null;
  const computeMsPerStep = busiest.computeMs / busiest.reports;
  const syncMsPerStep = (busiest.wallMs - busiest.computeMs) / busiest.reports;
  if (syncMsPerStep < SLOW_SYNC_RATIO * computeMsPerStep) return null;
  const innerSteps = suggestedInnerSteps(syncMsPerStep / computeMsPerStep, sync.compression);
  const suggested = { mode: 'local', innerSteps, compression: 'int8' } as const;
  return {
    syncMsPerStep: Math.round(syncMsPerStep),
    computeMsPerStep: Math.round(computeMsPerStep),
    suggested,
    message:
      `Every step waits ${seconds(syncMsPerStep)} on the network for ${seconds(computeMsPerStep)} of compute: ` +
      `the links cannot carry a step's gradient in the time of a step. Local steps send far less: ` +
      `"sync": ${JSON.stringify(suggested)} (docs/local-steps.md).`,
  };
}

/**
 * Recompute the advice from the round's members (after a report was accounted); log when it comes or
 * goes. Runs per report: a job that is not in every-step mode never gets advice, so it does not read
 * the round's members (every inner step of local mode is reported: that read made each step O(world²)).
 */
export function updateSyncAdviceIn(ctx: Ctx): void {
  const s = ctx.s;
  const advice =
    s.job.sync.mode === 'every-step'
      ? syncAdvice(
          s.job.sync,
          s.rendezvous.participants.map((p) => workerOf(s.workers, p.workerId)?.usage?.recent),
        )
      : null;
  const before = s.syncAdvice ?? null;
  if (advice === null && before === null) return;
  s.syncAdvice = advice;
  if (advice && !before)
    log(ctx, 'warn', 'sync_advice', {
      syncMsPerStep: advice.syncMsPerStep,
      computeMsPerStep: advice.computeMsPerStep,
      suggested: advice.suggested,
    });
  else if (!advice && before) log(ctx, 'info', 'sync_advice_cleared', {});
}
