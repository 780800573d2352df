/**
 * `GET /api/audit`, `GET /api/commits` and `GET /api/evaluations`: read models of the run (`GET /api/status`
 * is coordinator/machine/status-view.ts, its wire format core/protocol/views.ts).
 *
 * The audit is computed from the stored commit rows alone, re-deriving each commit's dataset indices
 * from `epochOrder(seed, epoch, n)` and its position ranges (`ranges`, or [cursorStart, cursorStart+count))
 * — independent of the machine's in-memory bitset, which it is compared against at the end
 * (`recordAgrees`). Each epoch's rows are replayed over a record of their own (cursor and holes): a
 * row must take the front of the remaining sequence R = holes ++ [cursor, n), committed and skipped
 * positions together, or it counts as a discontinuity (an overlapped job's row may also take the front
 * of R less the positions the row before it skipped: `replayRow`). Invariant (1) of docs/ARCHITECTURE.md holds
 * when every epoch has no index committed twice and every finished epoch has no index never committed.
 */
import type { CoordinatorState } from '../machine/machine';
import {
  groupPlan,
  mergeRanges,
  positionAfterGroup,
  rangesCount,
  sameRanges,
  type PositionRange,
  type RecordPosition,
} from '../../core/training/groups';
import { overlapsOuterSteps } from '../../core/training/overlap';
import { base64ToBytes, epochOrder, subtractRanges } from '../../core/training/sampler';
import type { CommitRow, EventRow } from '../runtime/store';

/** Lists in the audit are cut to this many entries (the counts are exact). */
const LIST_LIMIT = 1000;

export interface EpochAudit {
  epoch: number;
  /** Commit rows of this epoch. */
  commits: number;
  /** Positions consumed (sum of the rows' counts). */
  positions: number;
  /** Distinct dataset indices committed. */
  committed: number;
  /** Indices committed more than once (must be empty). */
  duplicates: number[];
  duplicateCount: number;
  /** All of the epoch's commits are in (the record moved past it). */
  finished: boolean;
  /** For finished epochs: indices never committed (must be empty); null while the epoch runs. */
  neverCommitted: number[] | null;
  neverCommittedCount: number | null;
  /** Commit rows that do not take the front of the epoch's remaining sequence (gaps or overlaps in the order). */
  discontinuities: number;
  /** Positions the epoch's rows left as holes (partial commits), and those still holes after its last row. */
  skipped: number;
  holesLeft: number;
}

export interface AuditReport {
  runId: string;
  datasetSize: number;
  seed: number;
  epochs: EpochAudit[];
  /** Live commit rows (rolled-back rows excluded). */
  commitRows: number;
  rolledBackRows: number;
  /** Last committed step per the rows, and per the durable state. */
  lastRowStep: number;
  lastCommitStep: number;
  /** The in-memory processed bitset of the current epoch equals the indices re-derived from the rows. */
  recordAgrees: boolean;
  /** No duplicates, no never-committed index in a finished epoch, no discontinuity, record agrees, steps agree. */
  ok: boolean;
}

/** The positions a row committed: its `ranges`, or [cursorStart, cursorStart+count). */
export function rowRanges(row: Pick<CommitRow, 'ranges' | 'cursorStart' | 'count'>): PositionRange[] {
  if (row.ranges) return row.ranges;
  return row.count > 0 ? [[row.cursorStart, row.cursorStart + row.count]] : [];
}

/**
 * Where the record stands after `row`, replayed from `at`: null when the row does not take the front of
 * R = holes ++ [cursor, n) (its committed and skipped positions, in R order) or starts elsewhere.
 * `deferred`: holes of `at` the row's group may have been planned without (an overlapped job's group
 * planned before its predecessor committed partially, core/training/overlap.ts): the front of R less
 * them is taken too, and they stay holes.
 */
function replayRow(
  at: RecordPosition,
  row: CommitRow,
  n: number,
  deferred: readonly PositionRange[] = [],
): RecordPosition | null {
  try {
    const committed = mergeRanges(rowRanges(row));
    const skipped = mergeRanges(row.skipped ?? []);
    const consumed = mergeRanges([...committed, ...skipped]);
    const taken = rangesCount(consumed);
    if (row.cursorStart !== at.cursor || taken === 0) return null;
    // The front of R, `taken` positions long, as one step of a group of its own.
    const from = deferred.length > 0 ? { ...at, holes: subtractRanges(at.holes, deferred) } : at;
    const front = groupPlan(from, 1, { datasetSize: n, globalBatch: taken, epochs: at.epoch + 1, commitEvery: 1 });
    const expected = mergeRanges(front.steps[0].ranges);
    if (!sameRanges(expected, consumed)) return null;
    return positionAfterGroup(from, front, [...skipped, ...deferred], n);
  } catch {
    return null;
  }
}

/**
 * One epoch's rows replayed over its order: how often each index was committed, and rows out of place.
 * `lagged` (an overlapped job): a row may also take the front of R less the positions the row before it
 * skipped (`replayRow`'s `deferred`).
 */
function replayEpoch(rows: readonly CommitRow[], order: ArrayLike<number>, n: number, epoch: number, lagged: boolean) {
  const seen = new Uint8Array(n);
  let positions = 0;
  let discontinuities = 0;
  let skipped = 0;
  let at: RecordPosition = { epoch, cursor: 0, holes: [] };
  let previousSkipped: PositionRange[] = [];
  for (const row of rows) {
    positions += row.count;
    skipped += rangesCount(row.skipped ?? []);
    const next =
      replayRow(at, row, n) ?? (lagged && previousSkipped.length > 0 ? replayRow(at, row, n, previousSkipped) : null);
    previousSkipped = row.skipped ?? [];
    if (next === null) discontinuities += 1;
    else at = next;
    for (const [start, end] of rowRanges(row)) {
      for (let p = Math.max(0, start); p < Math.min(end, n); p++) {
        const index = order[p];
        if (seen[index] < 255) seen[index] += 1;
      }
    }
  }
  const holesLeft = at.epoch === epoch ? rangesCount(at.holes) : 0;
  return { seen, positions, discontinuities, skipped, holesLeft };
}

/** Counts (and the first LIST_LIMIT) of indices committed twice and, in a finished epoch, never. */
function tally(seen: Uint8Array, finished: boolean) {
  const duplicates: number[] = [];
  const never: number[] = [];
  let duplicateCount = 0;
  let committed = 0;
  let neverCount = 0;
  for (let i = 0; i < seen.length; i++) {
    if (seen[i] > 0) committed += 1;
    if (seen[i] > 1) {
      duplicateCount += 1;
      if (duplicates.length < LIST_LIMIT) duplicates.push(i);
    }
    if (finished && seen[i] === 0) {
      neverCount += 1;
      if (never.length < LIST_LIMIT) never.push(i);
    }
  }
  return { duplicates, duplicateCount, committed, never, neverCount };
}

/** One epoch's audit from its rows, and how often each index was committed in it. */
function auditEpoch(
  epoch: number,
  rows: readonly CommitRow[],
  finished: boolean,
  order: ArrayLike<number>,
  n: number,
  lagged: boolean,
): { audit: EpochAudit; seen: Uint8Array } {
  const { seen, positions, discontinuities, skipped, holesLeft } = replayEpoch(rows, order, n, epoch, lagged);
  const t = tally(seen, finished);
  const audit: EpochAudit = {
    epoch,
    commits: rows.length,
    positions,
    committed: t.committed,
    duplicates: t.duplicates,
    duplicateCount: t.duplicateCount,
    finished,
    neverCommitted: finished ? t.never : null,
    neverCommittedCount: finished ? t.neverCount : null,
    discontinuities,
    skipped,
    holesLeft,
  };
  return { audit, seen };
}

export function auditRun(state: CoordinatorState, rows: CommitRow[], rolledBackRows: number): AuditReport {
  const n = state.datasetSize;
  const seed = state.job.seed;
  const live = rows.filter((r) => !r.rolledBack).sort((a, b) => a.step - b.step);
  // One pass over the rows (there can be many): grouped by epoch, each group in step order.
  const rowsByEpoch = new Map<number, CommitRow[]>();
  for (const row of live) {
    const group = rowsByEpoch.get(row.epoch);
    if (group) group.push(row);
    else rowsByEpoch.set(row.epoch, [row]);
  }
  const lastEpoch = Math.max(state.record.epoch, ...rowsByEpoch.keys());
  const epochs: EpochAudit[] = [];
  let currentEpochSeen: Uint8Array | null = null;
  for (let epoch = 0; epoch <= lastEpoch; epoch++) {
    const epochRows = rowsByEpoch.get(epoch) ?? [];
    const finished = epoch < state.record.epoch;
    // An epoch the job never reaches (record at epoch == job.epochs after the last one) is not listed.
    if (epochRows.length === 0 && !finished && epoch >= state.job.epochs) continue;
    const order = epochOrder(seed, epoch, n);
    const { audit, seen } = auditEpoch(epoch, epochRows, finished, order, n, overlapsOuterSteps(state.job));
    if (epoch === state.record.epoch) currentEpochSeen = seen;
    epochs.push(audit);
  }

  const recordAgrees = bitsetEquals(state.record.processed, state.record.n, currentEpochSeen ?? new Uint8Array(n));
  const lastRowStep = live.length > 0 ? live[live.length - 1].step : 0;
  const ok =
    recordAgrees &&
    lastRowStep === state.lastCommit.step &&
    epochs.every((e) => e.duplicateCount === 0 && e.discontinuities === 0 && (e.neverCommittedCount ?? 0) === 0);
  return {
    runId: state.runId,
    datasetSize: n,
    seed,
    epochs,
    commitRows: live.length,
    rolledBackRows,
    lastRowStep,
    lastCommitStep: state.lastCommit.step,
    recordAgrees,
    ok,
  };
}

function bitsetEquals(processed: string, n: number, seen: Uint8Array): boolean {
  let bits: Uint8Array;
  try {
    bits = base64ToBytes(processed);
  } catch {
    return false;
  }
  if (n !== seen.length) return false;
  for (let i = 0; i < n; i++) {
    const inRecord = (bits[i >> 3] & (1 << (i & 7))) !== 0;
    if (inRecord !== seen[i] > 0) return false;
  }
  return true;
}

// ---------------------------------------------------------------- commits and evaluations

/** Most commit rows one `GET /api/commits` returns. */
export const MAX_COMMITS_PAGE = 1000;

/** One row of `GET /api/commits`: a live commit (steps firstStep..step) as the commit log holds it. */
export interface CommitView {
  /** Last step of the commit. */
  step: number;
  /** First step of the commit (= step when commitEvery is 1). */
  firstStep: number;
  epoch: number;
  /** The record's cursor before the commit; without `ranges` the commit covers [cursorStart, cursorStart+count). */
  cursorStart: number;
  count: number;
  /** The positions committed, when not [cursorStart, cursorStart+count) (holes served, or a partial commit). */
  ranges?: PositionRange[];
  /** Positions left as holes by a partial commit. */
  skipped?: PositionRange[];
  /** Parameter hash after `step`. */
  hash: string;
  round: number;
  /** Ranks that computed it. */
  worldSize: number;
  /** Mean training loss over the commit's samples (null if it was not finite). */
  loss: number | null;
  /** Server clock (ms since the epoch) when the row was written. */
  committedAt: number;
}

/** The body of `GET /api/commits?from=STEP&limit=N`. */
export interface CommitsPage {
  runId: string;
  commits: CommitView[];
  /** `from` for the next page (one past the last step returned), or null when this page was the last. */
  next: number | null;
}

export function commitsPage(runId: string, rows: CommitRow[], limit: number): CommitsPage {
  const commits = rows.map(
    (r): CommitView => ({
      step: r.step,
      firstStep: r.firstStep,
      epoch: r.epoch,
      cursorStart: r.cursorStart,
      count: r.count,
      ...(r.ranges ? { ranges: r.ranges } : {}),
      ...(r.skipped ? { skipped: r.skipped } : {}),
      hash: r.hash,
      round: r.round,
      worldSize: r.world.length,
      loss: Number.isFinite(r.loss) ? r.loss : null,
      committedAt: r.committedAt,
    }),
  );
  return {
    runId,
    commits,
    next: commits.length === limit && commits.length > 0 ? commits[commits.length - 1].step + 1 : null,
  };
}

/** One row of `GET /api/evaluations`: an accepted `evaluation` event (machine/evaluation.ts). */
export interface EvaluationView {
  /** Event-log id (pass it as `after` to page on). */
  id: number;
  /** Server clock (ms) when the event was logged. */
  at: number;
  step: number;
  epoch: number;
  /** Test accuracy in [0, 1]. */
  accuracy: number;
  /** Mean test cross-entropy (null if the event lacks it). */
  loss: number | null;
  testSamples: number;
  workerId: string;
  round: number;
  /** Two ranks agreed on it (`agreedBy`); false: one rank's number, unverified (coordinator/machine/evaluation.ts). */
  verified: boolean;
  agreedBy: string[];
}

/**
 * The `evaluation` event rows as views (rows whose data lacks a field are skipped), one per step: a
 * verified row replaces the step's unverified one. `rollbacks` are the run's `record_rolled_back` rows:
 * an evaluation of a step that a later rollback undid (its `to` below the step) measured a state the
 * record no longer has (a cheater's poisoned timeline, say) and is left out, like the rolled-back
 * commits `/api/commits` leaves out. Its step's evaluation, when the step is committed again, is a new row.
 */
export function evaluationViews(rows: EventRow[], rollbacks: readonly EventRow[] = []): EvaluationView[] {
  const undone = rollbacks.flatMap((r) => {
    const to = (r.data as { to?: unknown } | null)?.to;
    return typeof to === 'number' ? [{ id: r.id, to }] : [];
  });
  const views: EvaluationView[] = [];
  for (const row of rows) {
    const d = row.data as Partial<Record<keyof EvaluationView, unknown>> | null;
    if (!d || typeof d.step !== 'number' || typeof d.accuracy !== 'number') continue;
    const step = d.step;
    if (undone.some((r) => r.id > row.id && r.to < step)) continue;
    views.push({
      id: row.id,
      at: row.at,
      step: d.step,
      epoch: typeof d.epoch === 'number' ? d.epoch : 0,
      accuracy: d.accuracy,
      loss: typeof d.loss === 'number' ? d.loss : null,
      testSamples: typeof d.testSamples === 'number' ? d.testSamples : 0,
      workerId: typeof d.workerId === 'string' ? d.workerId : '',
      round: typeof d.round === 'number' ? d.round : 0,
      verified: d.verified === true,
      agreedBy: Array.isArray(d.agreedBy) ? d.agreedBy.filter((x): x is string => typeof x === 'string') : [],
    });
  }
  return views.filter((v) => v.verified || !views.some((w) => w.step === v.step && w.verified));
}
