/**
 * The elastic loop's status: what the page shows and tests read, and the small reducers that move it.
 * `StatusBox` owns one status object and hands every change to the listener as a fresh copy.
 *
 * `losses` is the one part that is NOT copied per change: it is an append-only log owned by the box,
 * trimmed in place in chunks (`appendBounded`), so a step costs O(1) however long the run is. The
 * old code rebuilt the 2,000-entry array on every step (`[...slice(-1999), entry]`): 2,000 objects
 * copied per step and a matching amount of garbage, for the whole run.
 */
import type { WaitReason } from '../../core/protocol/coordinator-messages';
import type { SyncPlan } from './plan';

export type ElasticPhase =
  | 'connecting'
  | 'waiting'
  | 'syncing'
  | 'training'
  | 'recovering'
  | 'done'
  | 'failed'
  | 'stopped';

export interface CheckpointTransferStatus {
  step: number;
  direction: 'upload' | 'download';
  loadedBytes: number;
  totalBytes: number;
  done: boolean;
  error: string | null;
}

/** What the page shows and tests read. Plain data; a fresh copy is handed out on every change. */
export interface ElasticStatus {
  phase: ElasticPhase;
  runId: string | null;
  workerId: string | null;
  /** Why the tab waits (phase `waiting`). */
  waitReason: WaitReason | null;
  round: number | null;
  rank: number | null;
  worldSize: number;
  /** Last step the coordinator committed (as this tab heard). */
  committedStep: number;
  /** Last step applied in this tab's live state. */
  localStep: number;
  totalSteps: number;
  /** Epochs of the job. */
  epochs: number;
  epoch: number;
  /** Fraction of the current epoch committed, in [0, 1]. */
  epochProgress: number;
  /** Steps this tab computed (including ones later undone). */
  stepsComputed: number;
  /** Samples of this tab's slices it computed (including steps later undone). */
  samplesComputed: number;
  /** Samples of this tab's slices in steps the coordinator committed: this tab's lasting contribution. */
  samplesCommitted: number;
  /** This rank's fraction of each step's samples in the current round (null outside a round). */
  share: number | null;
  /** Training images of the job (per epoch) and samples per step: with `committedStep` they give the samples committed by all tabs (`holeFreePosition`: an estimate). */
  datasetSize: number;
  globalBatch: number;
  /** The pause this tab takes between steps to limit its GPU use (ms, after clamping; see `setStepPause`). */
  stepPauseMs: number;
  /** Mean loss over this tab's slice of its last step. */
  loss: number | null;
  /** (step, slice loss) per computed step, last 2000. */
  losses: { step: number; loss: number }[];
  /** Samples of this tab's slices per second of compute. */
  samplesPerSec: number | null;
  /** How the last round's state was obtained (`carry`: the round carried on a group this tab was computing). */
  lastSync: SyncPlan['kind'] | 'carry' | null;
  syncs: number;
  /** Times the backup was put back after an uncommitted step. */
  restores: number;
  failuresReported: number;
  checkpoint: CheckpointTransferStatus | null;
  checkpointsUploaded: number;
  /** Test accuracy in [0, 1] after the job finished (if evaluation is on). */
  accuracy: number | null;
  testLoss: number | null;
  error: string | null;
}

export function initialElasticStatus(): ElasticStatus {
  return {
    phase: 'connecting',
    runId: null,
    workerId: null,
    waitReason: null,
    round: null,
    rank: null,
    worldSize: 0,
    committedStep: 0,
    localStep: 0,
    totalSteps: 0,
    epochs: 0,
    epoch: 0,
    epochProgress: 0,
    stepsComputed: 0,
    samplesComputed: 0,
    samplesCommitted: 0,
    share: null,
    datasetSize: 0,
    globalBatch: 0,
    stepPauseMs: 0,
    loss: null,
    losses: [],
    samplesPerSec: null,
    lastSync: null,
    syncs: 0,
    restores: 0,
    failuresReported: 0,
    checkpoint: null,
    checkpointsUploaded: 0,
    accuracy: null,
    testLoss: null,
    error: null,
  };
}

/** Entries of `losses` kept (the chart's window). */
export const LOSS_LOG_LENGTH = 2000;

/**
 * Append `entry` to `log`, keeping the last `keep` entries: the log may grow to 1.25× `keep` before
 * one splice trims it, so trimming costs O(1) per append on average. Mutates and returns `log`.
 */
export function appendBounded<T>(log: T[], entry: T, keep: number): T[] {
  log.push(entry);
  if (log.length > keep + Math.max(1, keep >> 2)) log.splice(0, log.length - keep);
  return log;
}

/** What a computed step changes in the status. */
export function stepComputed(
  s: ElasticStatus,
  step: { step: number; lossSum: number; samples: number; computeMs: number },
): Partial<ElasticStatus> {
  const sliceLoss = step.samples > 0 ? step.lossSum / step.samples : null;
  if (sliceLoss !== null) appendBounded(s.losses, { step: step.step, loss: sliceLoss }, LOSS_LOG_LENGTH);
  return {
    localStep: step.step,
    stepsComputed: s.stepsComputed + 1,
    loss: sliceLoss ?? s.loss,
    samplesPerSec: step.samples > 0 && step.computeMs > 0 ? (step.samples / step.computeMs) * 1000 : s.samplesPerSec,
    samplesComputed: s.samplesComputed + step.samples,
  };
}

/**
 * Count the reported steps up to `committedStep` as committed (removed from `uncommitted`, step →
 * samples), and forget later ones when `dropLater` (they were undone). Returns the samples credited.
 */
export function creditCommitted(uncommitted: Map<number, number>, committedStep: number, dropLater = false): number {
  let credited = 0;
  for (const [step, samples] of uncommitted) {
    if (step <= committedStep) credited += samples;
    if (step <= committedStep || dropLater) uncommitted.delete(step);
  }
  return credited;
}

/** One status object, changed by patches; each change goes to `onStatus` as a copy. */
export class StatusBox {
  readonly status: ElasticStatus = initialElasticStatus();

  constructor(private readonly onStatus?: (status: ElasticStatus) => void) {}

  /**
   * Apply `patch` and tell the listener. A listener that throws (a page's rendering) is reported as an
   * uncaught error on a later task, not thrown here: the loop calls this from inside its steps, its
   * round handling and the coordinator client's disconnect, none of which a display bug may break.
   */
  update(patch: Partial<ElasticStatus>): void {
    Object.assign(this.status, patch);
    try {
      this.onStatus?.({
        ...this.status,
        losses: this.status.losses,
        checkpoint: this.status.checkpoint && { ...this.status.checkpoint },
      });
    } catch (err) {
      setTimeout(() => {
        throw err;
      }, 0);
    }
  }
}
