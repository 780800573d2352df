/**
 * Where the committed state lives, as the machine knows it: which workers hold which committed state
 * (`holds`), the stored checkpoints and the requests for them, and rolling the record back to a
 * checkpoint (or to step 0) when nobody holds the last commit any more or a cheat is undone.
 *
 * The `…In(ctx)` functions mutate a transition's private copy (see context.ts).
 */
import { log, own, sendWorker, type Ctx } from './context';
import { checkpointPath } from '../../core/protocol/control';
import { emptyRecord, epochOrder, rollbackTo } from '../../core/training/sampler';
import type { CoordinatorState, HeldState, WorkerInfo } from './state';

export function holdsState(worker: WorkerInfo | undefined, state: HeldState): boolean {
  return !!worker && worker.holds.some((h) => h.step === state.step && h.hash === state.hash);
}

/** The latest stored checkpoint at or before the last commit, if any: where a rollback goes. */
export function latestCheckpoint(s: CoordinatorState): CoordinatorState['checkpoints'][number] | undefined {
  return s.checkpoints.filter((c) => c.step <= s.lastCommit.step).pop();
}

/** The first member of the round that holds the last commit (the one asked for a checkpoint of it), if any. */
export function checkpointHolder(s: CoordinatorState): string | undefined {
  return s.rendezvous.participants.find((p) => holdsState(own(s.workers, p.workerId), s.lastCommit))?.workerId;
}

/** Rewind the record and the last commit to an earlier committed step (a checkpoint, or 0). */
export function rollbackIn(
  ctx: Ctx,
  target: { step: number; epoch: number; cursor: number; hash: string | null },
  reason: string,
): void {
  const s = ctx.s;
  const from = s.lastCommit.step;
  s.record =
    target.step === 0
      ? emptyRecord(s.datasetSize)
      : rollbackTo(target.epoch, target.cursor, epochOrder(s.job.seed, target.epoch, s.datasetSize));
  s.lastCommit = { step: target.step, epoch: target.epoch, cursor: target.cursor, hash: target.hash };
  s.checkpointRequests = s.checkpointRequests.filter((r) => r.step <= target.step);
  // Contributions and a check of steps that no longer count are forgotten with them.
  if (s.contributions)
    s.contributions = Object.fromEntries(Object.entries(s.contributions).filter(([, step]) => step <= target.step));
  if (s.verification && s.verification.step > target.step) s.verification = null;
  s.ringSuspects = null;
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
  const step = s.lastCommit.step;
  if (!s.checkpointRequests.some((r) => r.step === step)) s.checkpointRequests.push({ step, hash: s.lastCommit.hash });
  sendWorker(ctx, target, { type: 'checkpoint_request', step, url: checkpointPath(s.runId, step) });
  log(ctx, 'info', 'checkpoint_requested', { step, workerId: target });
}
