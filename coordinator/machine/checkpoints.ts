/**
 * Where the committed state lives, as the machine knows it: which workers hold which committed state
 * (`holds`), the stored checkpoints and the requests for them, and rolling the record back to a
 * checkpoint (or to step 0) when nobody holds the last commit any more or a cheat is undone. Also the
 * transition that records a checkpoint the server stored (`onCheckpointStored`).
 *
 * The `…In(ctx)` functions mutate a transition's private copy (see context.ts).
 */
import { begin, finish, log, metric, persist, sendWorker, type Ctx } from './context';
import { checkpointPath } from '../../core/protocol/coordinator-messages';
import { emptyRecord, epochOrder, rollbackTo } from '../../core/training/sampler';
import type { PositionRange } from '../../core/training/groups';
import type { CheckpointRequest, CoordinatorState, Event, HeldState, Transition, WorkerInfo } from './state';
import { workerOf } from './worker-table';

export function holdsState(worker: WorkerInfo | undefined, state: HeldState): boolean {
  return !!worker && worker.holds.some((h) => h.step === state.step && h.hash === state.hash);
}

/** The latest stored checkpoint at or before the last commit, if any: where a rollback goes. */
export function latestCheckpoint(s: CoordinatorState): CoordinatorState['checkpoints'][number] | undefined {
  return s.checkpoints.filter((c) => c.step <= s.lastCommit.step).pop();
}

/** The first member of the round that holds the last commit (the one asked for a checkpoint of it), if any. */
export function checkpointHolder(s: CoordinatorState): string | undefined {
  return s.rendezvous.participants.find((p) => holdsState(workerOf(s.workers, p.workerId), s.lastCommit))?.workerId;
}

/** Rewind the record (holes included) and the last commit to an earlier committed step (a checkpoint, or 0). */
export function rollbackIn(
  ctx: Ctx,
  target: { step: number; epoch: number; cursor: number; holes?: PositionRange[]; hash: string | null },
  reason: string,
): void {
  const s = ctx.s;
  const from = s.lastCommit.step;
  const holes = (target.holes ?? []).map(([a, b]): PositionRange => [a, b]);
  s.record =
    target.step === 0
      ? emptyRecord(s.datasetSize)
      : rollbackTo(
          { epoch: target.epoch, cursor: target.cursor, holes },
          epochOrder(s.job.seed, target.epoch, s.datasetSize),
        );
  s.lastCommit = { step: target.step, epoch: target.epoch, cursor: target.cursor, holes, hash: target.hash };
  s.rendezvous.carry = null;
  s.checkpointRequests = s.checkpointRequests.filter((r) => r.step <= target.step);
  // Contributions and a check of steps that no longer count are forgotten with them.
  if (s.contributions)
    s.contributions = Object.fromEntries(Object.entries(s.contributions).filter(([, step]) => step <= target.step));
  if (s.checks?.length) s.checks = s.checks.filter((c) => c.step <= target.step);
  s.momentClaims = null;
  s.ringSuspects = null;
  if (s.soundStart !== undefined) s.soundStart = Math.min(s.soundStart, target.step);
  // A step run again is another state: its evaluations are taken afresh (evaluation.ts).
  if (s.evaluationClaims?.length) s.evaluationClaims = s.evaluationClaims.filter((c) => c.step <= target.step);
  // A job can only be done on its last step: one rolled back from it runs again.
  if (s.status === 'done') s.status = 'active';
  ctx.out.push({ kind: 'rollback_commits', afterStep: target.step });
  log(ctx, 'warn', 'record_rolled_back', {
    from,
    to: target.step,
    reason,
  });
}

/**
 * Ask `workerId` (default: `checkpointHolder`) to upload the last committed state; nothing when no one
 * holds it or nothing is committed (`adminRefusal` tells an admin so).
 */
export function requestCheckpointIn(ctx: Ctx, workerId?: string): void {
  const s = ctx.s;
  const target = workerId ?? checkpointHolder(s);
  if (target === undefined || s.lastCommit.step === 0) return;
  const { step, epoch, cursor, hash } = s.lastCommit;
  const holes = (s.lastCommit.holes ?? []).map(([a, b]): PositionRange => [a, b]);
  if (!s.checkpointRequests.some((r) => r.step === step)) {
    const m = s.momentClaims?.step === step ? s.momentClaims : null;
    const claims = m ? { claims: { world: m.world, byWorker: m.byWorker } } : {};
    s.checkpointRequests.push({ step, hash, epoch, cursor, holes, ...claims });
  }
  sendWorker(ctx, target, { type: 'checkpoint_request', step, url: checkpointPath(s.runId, step) });
  log(ctx, 'info', 'checkpoint_requested', { step, workerId: target });
}

/**
 * The record position and hash after committed step `step`, as far as the machine knows it: a
 * requested checkpoint's, or the last commit's. Null for any other step (its position is not a function
 * of the step number: partial commits move later steps).
 */
export function committedPosition(s: CoordinatorState, step: number): CheckpointRequest | null {
  const request = s.checkpointRequests.find((r) => r.step === step);
  if (request) return { ...request, holes: request.holes.map(([a, b]): PositionRange => [a, b]) };
  if (step !== s.lastCommit.step) return null;
  const { epoch, cursor, hash } = s.lastCommit;
  return { step, epoch, cursor, hash, holes: (s.lastCommit.holes ?? []).map(([a, b]): PositionRange => [a, b]) };
}

/** Stored checkpoints kept in the state (older ones may be garbage-collected by the server). */
export const MAX_CHECKPOINTS_KEPT = 16;

/** The server stored a checkpoint upload (hash-checked): keep it in the list, or ignore one that does not fit. */
export function onCheckpointStored(
  state: CoordinatorState,
  event: Extract<Event, { kind: 'checkpoint_stored' }>,
  now: number,
): Transition {
  const ctx = begin(state, now);
  const s = ctx.s;
  const expected = committedPosition(s, event.step);
  if (event.step < 1 || !expected || expected.epoch !== event.epoch || expected.cursor !== event.cursor) {
    log(ctx, 'warn', 'checkpoint_ignored', {
      step: event.step,
      epoch: event.epoch,
      cursor: event.cursor,
      lastCommit: s.lastCommit.step,
    });
    return { state, actions: ctx.out };
  }
  s.checkpoints = s.checkpoints.filter((c) => c.step !== event.step);
  s.checkpoints.push({
    step: event.step,
    epoch: event.epoch,
    cursor: event.cursor,
    holes: expected.holes,
    sha256: event.sha256,
    hash: expected.hash,
    ...(event.trainingHash ? { trainingHash: event.trainingHash } : {}),
  });
  s.checkpoints.sort((a, b) => a.step - b.step);
  if (s.checkpoints.length > MAX_CHECKPOINTS_KEPT) s.checkpoints = s.checkpoints.slice(-MAX_CHECKPOINTS_KEPT);
  s.checkpointRequests = s.checkpointRequests.filter((r) => r.step > event.step);
  persist(ctx);
  metric(ctx, 'tabswarm_checkpoints_total');
  log(ctx, 'info', 'checkpoint_stored', { step: event.step, sha256: event.sha256 });
  return finish(ctx);
}
