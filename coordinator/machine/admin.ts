/**
 * An admin's actions on the job (pause, resume, checkpoint now, kick, change the worker bounds):
 * `adminRefusal` says why one would change nothing (the server answers 409 with it), `onAdmin`
 * applies one. Resuming a FAILED job restarts the count and rolls back to the latest checkpoint.
 */
import { begin, finish, log, persist, sendError, type Ctx } from './context';
import { checkpointHolder, latestCheckpoint, requestCheckpointIn, rollbackIn } from './checkpoints';
import { CloseCode } from '../../core/protocol/coordinator-messages';
import { jobSpecSchema } from '../../core/training/job';
import { evaluateGatheringIn, notifyWaitingIn } from './rendezvous';
import { afterCloseIn, closeRoundIn, leaveIn } from './round-close';
import type { AdminAction, CoordinatorState, Transition } from './state';
import { workerOf } from './worker-table';

/**
 * Why the machine would refuse `action` in `state`, or null when it would apply it. The server answers
 * an admin request with this reason (409) instead of an `ok` that changes nothing.
 */
export function adminRefusal(s: CoordinatorState, action: AdminAction): string | null {
  if (s.status === 'done') return 'the job is done';
  if (s.status === 'failed' && action.type !== 'resume')
    return 'the job failed: resume it first (POST /api/admin/resume)';
  switch (action.type) {
    case 'pause':
      return s.status === 'paused' ? 'already paused' : null;
    case 'resume':
      return s.status === 'paused' || s.status === 'failed' ? null : `the job is ${s.status}, not paused or failed`;
    case 'checkpoint_now':
      return s.lastCommit.step > 0 && checkpointHolder(s) !== undefined
        ? null
        : 'no round member holds the last commit, or nothing is committed yet';
    case 'kick':
      return workerOf(s.workers, action.workerId) ? null : `unknown worker ${action.workerId}`;
    case 'set_workers': {
      // The same validation as the job file: the changed job must still be a valid job.
      const checked = jobSpecSchema.safeParse({ ...s.job, minWorkers: action.min, maxWorkers: action.max });
      return checked.success
        ? null
        : checked.error.issues.map((i) => `${i.path.join('.') || 'job'}: ${i.message}`).join('; ');
    }
  }
}

/** Resume a failed job: restarts from 0, the record back to the latest stored checkpoint (or step 0). */
function resumeFailedIn(ctx: Ctx): void {
  const s = ctx.s;
  const checkpoint = latestCheckpoint(s);
  const target = checkpoint ?? { step: 0, epoch: 0, cursor: 0, hash: null };
  if (target.step !== s.lastCommit.step) rollbackIn(ctx, target, 'resume after failure');
  s.status = 'active';
  s.restarts = 0;
  s.blamedRestart = null;
  s.rendezvous.gatheringSince = null;
  log(ctx, 'warn', 'job_resumed_after_failure', { fromStep: target.step, checkpoint: checkpoint?.step ?? null });
  persist(ctx);
  afterCloseIn(ctx);
}

export function onAdmin(state: CoordinatorState, action: AdminAction, now: number): Transition {
  const ctx = begin(state, now);
  const s = ctx.s;
  const refusal = adminRefusal(s, action);
  if (refusal !== null) {
    log(ctx, 'warn', 'admin_ignored', { action, why: refusal });
    return { state, actions: ctx.out };
  }
  log(ctx, 'info', 'admin', { action });
  switch (action.type) {
    case 'pause': {
      s.status = 'paused';
      closeRoundIn(ctx, 'paused', true, false);
      s.rendezvous.deadline = null;
      persist(ctx);
      notifyWaitingIn(ctx);
      break;
    }
    case 'resume': {
      if (s.status === 'failed') {
        resumeFailedIn(ctx);
        break;
      }
      s.status = 'active';
      s.rendezvous.gatheringSince = null;
      persist(ctx);
      afterCloseIn(ctx);
      break;
    }
    case 'checkpoint_now': {
      requestCheckpointIn(ctx);
      break;
    }
    case 'kick': {
      const worker = workerOf(s.workers, action.workerId)!;
      sendError(ctx, worker.conn, 'kicked', 'removed by an admin');
      ctx.out.push({ kind: 'close', conn: worker.conn, code: CloseCode.kicked, reason: 'kicked' });
      leaveIn(ctx, action.workerId, 'kicked');
      break;
    }
    case 'set_workers': {
      s.job = { ...s.job, minWorkers: action.min, maxWorkers: action.max };
      persist(ctx);
      evaluateGatheringIn(ctx);
      break;
    }
  }
  return finish(ctx);
}
