/**
 * The page's status: one plain object the view renders and tests read (`window.tabswarm`, a frozen
 * copy per read, so a test cannot change what the page believes), and the pure functions that derive
 * it from the elastic loop's status.
 */
import { holeFreePosition } from '../../core/training/groups';
import type { ElasticStatus } from '../elastic/elastic-loop';
import type { KernelsReport } from '../../core/protocol/tab-messages';
import type { AdapterSummary } from '../worker/types';

export type TabState =
  /** Page loaded, WebGPU not yet checked. */
  | 'checking'
  /** WebGPU works; waiting for the person to press Start. */
  | 'ready'
  /** WebGPU is missing or has no adapter: `error` says why. */
  | 'unsupported'
  | 'loading-data'
  /** Timing kernel variants for this adapter, at its first start (kernels/tuning/). */
  | 'tuning'
  | 'building'
  /** Elastic: opening the control channel for the first time. */
  | 'connecting'
  /** Elastic: the coordinator went away (restart, network); the client retries with backoff. */
  | 'reconnecting'
  /** Elastic: joined, waiting to be admitted to a round (`waitReason` says why). */
  | 'waiting'
  /** Elastic: in a round, getting the committed model state (from a peer, a checkpoint, or locally). */
  | 'syncing'
  | 'training'
  | 'evaluating'
  | 'done'
  /** Solo: stopped by the Stop button. */
  | 'stopped'
  /** Elastic: left the job (Leave button); the coordinator removed the tab at once. Start rejoins. */
  | 'left'
  | 'error';

export interface TabStatus {
  state: TabState;
  mode: 'solo' | 'elastic';
  model: string;
  adapter: AdapterSummary | null;
  /** The kernels the worker chose for this adapter (tuned, cached or the defaults), once chosen. */
  kernels: KernelsReport | null;
  /** Steps completed (elastic: the job's last committed step). */
  step: number;
  /** Steps of the whole run (0 until known). */
  totalSteps: number;
  /** 0-based epoch of the last step; `epochs` in total. */
  epoch: number;
  epochs: number;
  epochProgress: number;
  /** Latest mean training loss per sample (elastic: over this tab's slice of its last step). */
  loss: number | null;
  /** (step, loss) each time the loss was read back, oldest first. */
  losses: { step: number; loss: number }[];
  /** Latest test accuracy in [0, 1], after an epoch's evaluation. */
  accuracy: number | null;
  testLoss: number | null;
  /** This tab's compute speed (samples per second of GPU work). */
  samplesPerSec: number | null;
  dataset: { loadedBytes: number; totalBytes: number; cachedBytes: number; done: boolean } | null;
  /** Why WebGPU is unavailable, or what failed. */
  error: string | null;
  /** Elastic: why peer connections cannot work (e.g. "TURN authentication failed …"), or null. */
  networkProblem: string | null;
  /** Wall-clock seconds of the finished (solo) run. */
  seconds: number | null;

  // ---- elastic contribution (zeros / nulls in solo mode)
  /** Why the tab waits (state `waiting`): gathering, round_running, full, paused. */
  waitReason: string | null;
  /** Tabs in the current round (0 outside one). */
  worldSize: number;
  rank: number | null;
  /** This tab's fraction of each step's samples in the current round. */
  share: number | null;
  /** Samples this tab processed in steps the coordinator committed (work that counts). */
  samplesProcessed: number;
  /** Samples this tab computed, including steps undone after a failure. */
  samplesComputed: number;
  /** Samples committed in the whole job so far, by every tab. */
  jobSamples: number;
  /** `samplesProcessed / jobSamples` (null before anything was committed). */
  jobShare: number | null;
  /** Milliseconds this tab spent training (in a round, computing steps), over every join. */
  contributedMs: number;
  /** The GPU-use limit: pause between steps (ms). */
  stepPauseMs: number;
}

export function initialStatus(model: string): TabStatus {
  return {
    state: 'checking',
    mode: 'solo',
    model,
    adapter: null,
    kernels: null,
    step: 0,
    totalSteps: 0,
    epoch: 0,
    epochs: 0,
    epochProgress: 0,
    loss: null,
    losses: [],
    accuracy: null,
    testLoss: null,
    samplesPerSec: null,
    dataset: null,
    error: null,
    networkProblem: null,
    seconds: null,
    waitReason: null,
    worldSize: 0,
    rank: null,
    share: null,
    samplesProcessed: 0,
    samplesComputed: 0,
    jobSamples: 0,
    jobShare: null,
    contributedMs: 0,
    stepPauseMs: 0,
  };
}

/** Deep-ish frozen copy for readers outside the page's code. */
export function publicStatus(s: TabStatus): Readonly<TabStatus> {
  return Object.freeze({
    ...s,
    adapter: s.adapter && Object.freeze({ ...s.adapter }),
    kernels: s.kernels && Object.freeze({ ...s.kernels }),
    losses: Object.freeze(s.losses.map((l) => Object.freeze({ ...l }))) as TabStatus['losses'],
    dataset: s.dataset && Object.freeze({ ...s.dataset }),
  });
}

/**
 * Samples committed by every tab after `committedStep` steps of a job (the record position, in samples),
 * as if no outer step had been committed partially: an estimate for the page (holes make it a little high).
 */
export function jobSamplesAfter(
  committedStep: number,
  job: Pick<ElasticStatus, 'datasetSize' | 'globalBatch' | 'epochs'>,
): number {
  if (committedStep <= 0 || job.datasetSize <= 0 || job.globalBatch <= 0) return 0;
  const { epoch, cursor } = holeFreePosition(committedStep, job);
  return epoch * job.datasetSize + cursor;
}

/**
 * The page's view of the elastic loop's status. The loop's totals restart at every join (a new loop),
 * so the page adds `carried` (what earlier joins of this page contributed).
 * `evaluating`: the page asked for a test evaluation at the end of the job.
 */
export function elasticPatch(
  s: ElasticStatus,
  opts: { evaluating: boolean; carried: { samplesProcessed: number; samplesComputed: number } },
): Partial<TabStatus> {
  const state: TabState =
    s.phase === 'training'
      ? 'training'
      : s.phase === 'connecting'
        ? s.workerId !== null
          ? 'reconnecting'
          : 'connecting'
        : s.phase === 'waiting'
          ? 'waiting'
          : s.phase === 'syncing' || s.phase === 'recovering'
            ? 'syncing'
            : s.phase === 'done'
              ? opts.evaluating && s.accuracy === null
                ? 'evaluating'
                : 'done'
              : s.phase === 'failed'
                ? 'error'
                : 'left';
  const outside = state === 'left' || state === 'error' || state === 'done' || state === 'evaluating';
  const samplesProcessed = opts.carried.samplesProcessed + s.samplesCommitted;
  const jobSamples = jobSamplesAfter(s.committedStep, s);
  return {
    state,
    step: s.committedStep,
    totalSteps: s.totalSteps,
    epoch: s.epoch,
    epochs: s.epochs,
    epochProgress: s.epochProgress,
    loss: s.loss,
    losses: s.losses,
    accuracy: s.accuracy,
    testLoss: s.testLoss,
    samplesPerSec: s.samplesPerSec,
    error: s.error,
    waitReason: s.phase === 'waiting' ? s.waitReason : null,
    // A tab that left (or whose job ended) is in no world, whatever the loop last heard.
    worldSize: outside ? 0 : s.worldSize,
    rank: outside ? null : s.rank,
    share: outside ? null : s.share,
    samplesProcessed,
    samplesComputed: opts.carried.samplesComputed + s.samplesComputed,
    jobSamples,
    // A tab that rejoined a restarted run could have counted more than this run committed; cap at 1.
    jobShare: jobSamples > 0 ? Math.min(1, samplesProcessed / jobSamples) : null,
    stepPauseMs: s.stepPauseMs,
  };
}
