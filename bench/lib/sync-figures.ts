/**
 * The figures of bench/sync.ts, as pure functions of plain data (tested in test/unit/bench/sync-figures.test.ts):
 * what the tabs' step reports and the coordinator's commits say about a window of training.
 */
import type { CommitView } from '../../coordinator/admin/audit';
import { MLP_SPEC, parameterLayout } from '../../core/training/model-spec';
import { ringAllreduceBusBytes } from '../../web/net/ring-allreduce';
import type { SyncConfig } from './sync-configs';

export const TABS = 3;
export const GLOBAL_BATCH = 128;

/** One step report as a tab sent it (the fields the bench reads). */
export interface Report {
  step: number;
  samples: number;
  computeMs: number;
  wireBytes: number;
  /** Date.now() when this process saw the frame go out. */
  at: number;
  /** An overlapped job's `outer_report` (of the outer step ending at `step`): its bytes only, no step done. */
  outer?: boolean;
}

/**
 * Wall time (ms) a tab spent computing inside [t0, t1], from the times its step reports went out: the
 * gap before an inner step's report is compute (and the pipeline around it); the gap before the report
 * of a `boundaries` step also holds the outer sync and the wait for the slowest rank, so only a typical
 * step's compute counts there — the median inner gap of this tab, or (every-step mode: no inner steps)
 * the tab's own computeMs for that step. The boundaries are the commit points, or with overlapped outer
 * steps the steps after them (the commit point's report goes out at once; the next group's first step
 * waits for the previous outer step: `boundarySteps`). Outer reports are no step done: skipped.
 */
export function busyMs(all: Report[], boundaries: Set<number>, t0: number, t1: number): number {
  const reports = all.filter((r) => !r.outer);
  const gaps: { ms: number; report: Report }[] = [];
  for (let i = 1; i < reports.length; i++) {
    const report = reports[i];
    if (report.at < t0 || report.at > t1) continue;
    gaps.push({ ms: report.at - Math.max(reports[i - 1].at, t0), report });
  }
  const inner = gaps
    .filter((g) => !boundaries.has(g.report.step))
    .map((g) => g.ms)
    .sort((a, b) => a - b);
  const typical = inner.length > 0 ? inner[inner.length >> 1] : null;
  return gaps.reduce(
    (n, g) => n + (boundaries.has(g.report.step) ? Math.min(g.ms, typical ?? g.report.computeMs) : g.ms),
    0,
  );
}

/** The steps whose report gap holds an outer sync: the commit points, or with overlap the steps after them. */
export function boundarySteps(commitPoints: readonly number[], overlapped: boolean): Set<number> {
  return new Set(commitPoints.map((step) => (overlapped ? step + 1 : step)));
}

/** Bytes all tabs send per sample by the ring formula (one allreduce of the padded gradient per commit point). */
export function formulaBytesPerSample(config: SyncConfig): number {
  const n = parameterLayout(MLP_SPEC).totalElements;
  return (TABS * ringAllreduceBusBytes(n, TABS, config.compression)) / (config.innerSteps * GLOBAL_BATCH);
}

/**
 * The run's figures from the commits after `shapedStep` (up to the window's end `t1`) and each tab's step
 * reports (with the time this process saw them sent):
 * - samplesPerSec: samples of the commits inside [t0, t1] over t1 − t0 (the issue's "committed samples /
 *   wall time"; a slow configuration commits few times in a window, so also
 * - spanSamplesPerSec: samples of the commits after the first one on the shaped links, over the time from
 *   that first commit to the last (null with fewer than two);
 * - reportedBytesPerSample: the reports' wireBytes (step reports' and outer reports') for the steps of the commits
 *   after `shapedStep`, all tabs, over those commits' samples (reports of a step computed twice both count);
 * - utilization: per tab, busyMs over t1 − t0; claimedUtilization: the tabs' own computeMs summed over the
 *   same window, which overlap (a step's time runs from its prefetch request, inside the previous
 *   step's) and reach 1.6 in local mode, so they are shown, not used.
 */
export function windowFigures(
  commits: Commit[],
  reports: Report[][],
  shapedStep: number,
  t0: number,
  t1: number,
  overlapped = false,
) {
  const inWindow = commits.filter((c) => c.committedAt >= t0 && c.committedAt <= t1);
  const windowSamples = inWindow.reduce((n, c) => n + c.count, 0);
  const last = commits.at(-1);
  const stepsCommitted = (r: Report) => last !== undefined && r.step > shapedStep && r.step <= last.step;
  const wire = reports.reduce((n, rs) => n + rs.filter(stepsCommitted).reduce((m, r) => m + r.wireBytes, 0), 0);
  const committedSamples = commits.reduce((n, c) => n + c.count, 0);
  const spanMs = commits.length >= 2 ? commits.at(-1)!.committedAt - commits[0].committedAt : 0;
  const boundaries = boundarySteps(
    commits.map((c) => c.step),
    overlapped,
  );
  const utilizationPerTab = reports.map((rs) => busyMs(rs, boundaries, t0, t1) / (t1 - t0));
  const claimedUtilizationPerTab = reports.map(
    (rs) => rs.filter((r) => r.at >= t0 && r.at <= t1).reduce((m, r) => m + r.computeMs, 0) / (t1 - t0),
  );
  return {
    samplesPerSec: (windowSamples / (t1 - t0)) * 1000,
    spanSamplesPerSec: spanMs > 0 ? (commits.slice(1).reduce((n, c) => n + c.count, 0) / spanMs) * 1000 : null,
    windowSamples,
    commits: inWindow.length,
    reportedBytesPerSample: committedSamples > 0 ? wire / committedSamples : null,
    utilization: utilizationPerTab.reduce((a, b) => a + b, 0) / reports.length,
    utilizationPerTab,
    claimedUtilization: claimedUtilizationPerTab.reduce((a, b) => a + b, 0) / reports.length,
  };
}

/** The fields of a commit (`GET /api/commits`) the figures read. */
export type Commit = Pick<CommitView, 'step' | 'count' | 'committedAt' | 'worldSize'>;
