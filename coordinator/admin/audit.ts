/**
 * `GET /api/audit`, `GET /api/status`, `GET /api/commits` and `GET /api/evaluations`: read models of the run.
 *
 * The audit is computed from the stored commit rows alone, re-deriving each commit's dataset indices
 * from `epochOrder(seed, epoch, n)` and its [cursorStart, cursorStart+count) — independent of the
 * machine's in-memory bitset, which it is compared against at the end (`recordAgrees`). Invariant (1)
 * of docs/ARCHITECTURE.md holds when every epoch has no index committed twice and every finished epoch has no
 * index never committed.
 */
import type { CoordinatorState } from '../machine/machine';
import { adapterLabel, statusView } from '../machine/status-view';
import type { AdminStatus } from '../../core/protocol/admin-feed';
import { base64ToBytes, epochOrder } from '../../core/training/sampler';
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
  /** Commit rows whose range is not where the previous one ended (gaps or overlaps in the order). */
  discontinuities: number;
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

/** One epoch's rows replayed over its order: how often each index was committed, and gaps in the cursor. */
function replayEpoch(rows: readonly CommitRow[], order: ArrayLike<number>, n: number) {
  const seen = new Uint8Array(n);
  let positions = 0;
  let discontinuities = 0;
  let expectedCursor = 0;
  for (const row of rows) {
    if (row.cursorStart !== expectedCursor) discontinuities += 1;
    expectedCursor = row.cursorStart + row.count;
    positions += row.count;
    const end = Math.min(row.cursorStart + row.count, n);
    for (let p = Math.max(0, row.cursorStart); p < end; p++) {
      const index = order[p];
      if (seen[index] < 255) seen[index] += 1;
    }
    if (row.cursorStart < 0 || row.cursorStart + row.count > n) discontinuities += 1;
  }
  return { seen, positions, discontinuities };
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
    const { seen, positions, discontinuities } = replayEpoch(epochRows, epochOrder(seed, epoch, n), n);
    const t = tally(seen, finished);
    if (epoch === state.record.epoch) currentEpochSeen = seen;
    epochs.push({
      epoch,
      commits: epochRows.length,
      positions,
      committed: t.committed,
      duplicates: t.duplicates,
      duplicateCount: t.duplicateCount,
      finished,
      neverCommitted: finished ? t.never : null,
      neverCommittedCount: finished ? t.neverCount : null,
      discontinuities,
    });
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

/** `GET /api/status`: the core's `statusView`, plus what only the server's clock knows (heartbeat ages). */
export type StatusReport = AdminStatus;

export function statusOf(state: CoordinatorState, now: number): StatusReport {
  const view = statusView(state);
  const age = (id: string) => {
    const worker = state.workers[id];
    return worker ? Math.max(0, now - worker.lastSeen) : -1;
  };
  const latest = state.checkpoints[state.checkpoints.length - 1];
  return {
    ...view,
    phase: state.rendezvous.phase,
    status: state.status,
    cursor: state.record.cursor,
    world: view.world.map((w) => ({ ...w, lastHeartbeatAgeMs: age(w.id) })),
    waiting: view.waiting.map((w) => ({
      ...w,
      adapter: adapterLabel(state.workers[w.id]?.adapter),
      invite: state.workers[w.id]?.invite ?? null,
      lastHeartbeatAgeMs: age(w.id),
    })),
    latestCheckpoint: latest ? { step: latest.step, sha256: latest.sha256 } : null,
  };
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
  /** First position in the epoch order covered; the commit covers [cursorStart, cursorStart+count). */
  cursorStart: number;
  count: number;
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
 * verified row replaces the step's unverified one.
 */
export function evaluationViews(rows: EventRow[]): EvaluationView[] {
  const views: EvaluationView[] = [];
  for (const row of rows) {
    const d = row.data as Partial<Record<keyof EvaluationView, unknown>> | null;
    if (!d || typeof d.step !== 'number' || typeof d.accuracy !== 'number') continue;
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
