/**
 * The admin feed as a projection, without I/O: stored rows and machine actions in, `FeedMessage`s out
 * (core/protocol/admin-feed.ts). It keeps only what a new page's snapshot needs beyond the
 * store: the newest event-log lines (a bounded ring), the evaluations, and the commit-rate window.
 * coordinator/admin/admin-feed.ts feeds it and sends what it returns through an SSE hub.
 */
import type { Action, CoordinatorState } from '../machine/machine';
import type { CommitRecord } from '../machine/state';
import { isTransformer, parameterLayout } from '../../core/training/model-spec';
import { stepsPerEpoch } from '../../core/training/groups';
import { usageView } from '../machine/utilization';
import type { UsageView } from '../../core/protocol/views';
import { statusSummary } from '../machine/status-view';
import type { CheckpointRow, CommitRow, EventRow } from '../runtime/store';
import {
  categoryOf,
  type AdminJobSummary,
  type FeedCheckpoint,
  type FeedCommit,
  type FeedEvaluation,
  type FeedEvent,
  type FeedMessage,
  type FeedWorker,
} from '../../core/protocol/admin-feed';

/** Commits whose rate is averaged (the newest, within one round). */
const RATE_WINDOW = 8;

/** The job's recent usage as a commit carries it. */
export function jobUsage(state: CoordinatorState): UsageView {
  return usageView(state.usage?.recent);
}

/** Samples per second over the last few commits of a round: samples after the first / time span. */
export class CommitRater {
  private window: { at: number; count: number; round: number }[] = [];

  push(at: number, count: number, round: number): number | null {
    if (this.window.length > 0 && this.window[this.window.length - 1].round !== round) this.window = [];
    this.window.push({ at, count, round });
    if (this.window.length > RATE_WINDOW) this.window.shift();
    if (this.window.length < 2) return null;
    const span = this.window[this.window.length - 1].at - this.window[0].at;
    if (span <= 0) return null;
    const samples = this.window.slice(1).reduce((sum, c) => sum + c.count, 0);
    return (samples * 1000) / span;
  }

  /** Forget everything after a rollback (the rate restarts with the next round). */
  reset(): void {
    this.window = [];
  }
}

function finiteOrNull(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}

/** A commit as the feed shows it: a stored row, or a live `record_commit` stamped with the feed's clock. */
export function feedCommitFromRow(
  row: CommitRecord & Pick<CommitRow, 'committedAt'>,
  samplesPerSecond: number | null,
  usage: UsageView | null = null,
): FeedCommit {
  return {
    step: row.step,
    firstStep: row.firstStep,
    epoch: row.epoch,
    cursorStart: row.cursorStart,
    count: row.count,
    loss: finiteOrNull(row.loss),
    worldSize: row.world.length,
    round: row.round,
    hash: row.hash,
    at: row.committedAt,
    samplesPerSecond,
    usage,
  };
}

/** A checkpoint as the HTTP API shows it (`/api/checkpoints`; the feed adds download URLs): the row without its file path. */
export type PublicCheckpoint = Omit<CheckpointRow, 'path'>;

export function publicCheckpoint(row: PublicCheckpoint): PublicCheckpoint {
  return {
    step: row.step,
    epoch: row.epoch,
    cursor: row.cursor,
    sha256: row.sha256,
    bytes: row.bytes,
    createdAt: row.createdAt,
  };
}

export function feedCheckpoint(runId: string, row: PublicCheckpoint): FeedCheckpoint {
  return {
    ...publicCheckpoint(row),
    safetensorsUrl: `/api/admin/model.safetensors?step=${row.step}`,
    snapshotUrl: `/api/checkpoints/${encodeURIComponent(runId)}/${row.step}`,
  };
}

function feedEvent(id: number | null, at: number, level: string, event: string, data: unknown): FeedEvent {
  return { id, at, level, event, category: categoryOf(event, data), data };
}

/** An `evaluation` log event carrying `{step, accuracy}` (and `loss`, when finite), if this is one. */
function evaluationOf(event: FeedEvent): FeedEvaluation | null {
  if (event.event !== 'evaluation') return null;
  const data = event.data as { step?: unknown; accuracy?: unknown; loss?: unknown; verified?: unknown } | null;
  if (typeof data?.step !== 'number' || typeof data.accuracy !== 'number' || !Number.isFinite(data.accuracy))
    return null;
  const loss = typeof data.loss === 'number' && Number.isFinite(data.loss) ? data.loss : null;
  return { step: data.step, accuracy: data.accuracy, loss, at: event.at, verified: data.verified === true };
}

export function jobSummary(state: CoordinatorState): AdminJobSummary {
  const job = state.job;
  const optimizer =
    job.optimizer.kind === 'adamw'
      ? `AdamW lr ${job.optimizer.lr}`
      : `SGD lr ${job.optimizer.lr} momentum ${job.optimizer.momentum}`;
  return {
    model: job.model.name,
    languageModel: isTransformer(job.model),
    parameterCount: parameterLayout(job.model).parameterCount,
    dataset: job.dataset.name,
    datasetSize: state.datasetSize,
    globalBatch: job.globalBatch,
    epochs: job.epochs,
    stepsPerEpoch: stepsPerEpoch({ datasetSize: state.datasetSize, globalBatch: job.globalBatch }),
    optimizer,
    commitEvery: job.commitEvery,
    checkpointEvery: job.checkpointEvery,
    heartbeatMs: job.heartbeatMs,
    sync: job.sync,
  };
}

/** Log levels the feed shows (debug lines stay in the event log). */
const LIVE_LEVELS = new Set(['info', 'warn', 'error']);

/** What one transition's actions mean for the feed. */
export interface Projected {
  messages: FeedMessage[];
  /** Something a status message would show changed. */
  changed: boolean;
  /** The stored checkpoint list may have changed (re-read and send it). */
  checkpointsChanged: boolean;
}

export class FeedProjection {
  readonly events: FeedEvent[] = [];
  readonly evaluations: FeedEvaluation[] = [];
  private readonly rater = new CommitRater();
  /**
   * The job's usage when each live commit was recorded, by step (insertion order: oldest first). At most
   * `maxCommits` entries: a snapshot shows no older commit.
   */
  private readonly usageByStep = new Map<number, UsageView>();

  /** `recentEvents`: event lines kept for new pages; `maxCommits`: the newest commits a snapshot sends. */
  constructor(
    private readonly recentEvents: number,
    private readonly maxCommits: number,
  ) {}

  /** History from the store: the last commits prime the rate, the event rows fill the ring. */
  loadHistory(commitRows: readonly CommitRow[], eventRows: Iterable<EventRow>): void {
    for (const row of commitRows.slice(-RATE_WINDOW)) this.rater.push(row.committedAt, row.count, row.round);
    for (const row of eventRows) {
      if (LIVE_LEVELS.has(row.level)) this.addEvent(feedEvent(row.id, row.at, row.level, row.event, row.data), []);
    }
  }

  /** One transition's actions, stamped `at`; `usage`: the job's usage after the transition (`jobUsage`). */
  apply(actions: readonly Action[], at: number, usage: UsageView | null = null): Projected {
    const out: Projected = { messages: [], changed: false, checkpointsChanged: false };
    for (const action of actions) {
      switch (action.kind) {
        case 'record_commit': {
          const c = action.commit;
          const rate = this.rater.push(at, c.count, c.round);
          if (usage) this.rememberUsage(c.step, usage);
          out.messages.push({ type: 'commit', commit: feedCommitFromRow({ ...c, committedAt: at }, rate, usage) });
          out.changed = true;
          break;
        }
        case 'rollback_commits':
          this.rater.reset();
          for (const step of this.usageByStep.keys()) if (step > action.afterStep) this.usageByStep.delete(step);
          // Evaluations of undone steps measured a state the record no longer has (a new page must not show them).
          for (let i = this.evaluations.length - 1; i >= 0; i--)
            if (this.evaluations[i].step > action.afterStep) this.evaluations.splice(i, 1);
          out.messages.push({ type: 'rollback', afterStep: action.afterStep });
          out.changed = true;
          break;
        case 'log':
          if (!LIVE_LEVELS.has(action.level)) break;
          this.addEvent(feedEvent(null, at, action.level, action.event, action.data), out.messages);
          if (action.event === 'checkpoint_stored' || action.event === 'record_rolled_back')
            out.checkpointsChanged = true;
          out.changed = true;
          break;
        case 'persist':
        case 'send':
        case 'close':
          out.changed = true;
          break;
        case 'metric':
          break;
      }
    }
    return out;
  }

  /** The whole picture, as a new page's first message: `workers` and `seq` are the feed's last delta's. */
  snapshot(
    runId: string,
    state: CoordinatorState,
    commitRows: readonly CommitRow[],
    checkpointRows: readonly CheckpointRow[],
    at: number,
    workers: { seq: number; rows: FeedWorker[] },
  ): Extract<FeedMessage, { type: 'snapshot' }> {
    const rater = new CommitRater();
    const commits = commitRows
      .map((row) =>
        feedCommitFromRow(row, rater.push(row.committedAt, row.count, row.round), this.usageByStep.get(row.step)),
      )
      .slice(-this.maxCommits);
    return {
      type: 'snapshot',
      seq: workers.seq,
      runId,
      at,
      status: statusSummary(state, at),
      workers: workers.rows,
      job: jobSummary(state),
      commits,
      events: [...this.events],
      checkpoints: checkpointRows.map((row) => feedCheckpoint(runId, row)),
      evaluations: [...this.evaluations],
    };
  }

  private rememberUsage(step: number, usage: UsageView): void {
    this.usageByStep.delete(step);
    this.usageByStep.set(step, usage);
    if (this.usageByStep.size > this.maxCommits) this.usageByStep.delete(this.usageByStep.keys().next().value!);
  }

  private addEvent(event: FeedEvent, messages: FeedMessage[]): void {
    this.events.push(event);
    if (this.events.length > this.recentEvents) this.events.splice(0, this.events.length - this.recentEvents);
    messages.push({ type: 'event', event });
    const evaluation = evaluationOf(event);
    if (evaluation) {
      // A step's verified number replaces its unverified one (the second rank agreed).
      const at = this.evaluations.findIndex((e) => e.step === evaluation.step);
      if (at >= 0) this.evaluations.splice(at, 1);
      this.evaluations.push(evaluation);
      messages.push({ type: 'evaluation', evaluation });
    }
  }
}
