/**
 * What the elastic loop needs from the world, as small interfaces: the training worker, the peer
 * mesh and the control channel. The browser wires them to Comlink, PeerJS and the coordinator
 * client; unit tests wire them to fakes, memory links and a scripted coordinator.
 */
import * as Comlink from 'comlink';
import type { WorldEntry } from '../../core/protocol/coordinator-messages';
import type { OutgoingMessage } from '../net/coordinator-client';
import type { GroupLinks } from '../net/group-allreduce';
import type { Ring } from '../net/link';
import type { TrainingWorkerApi } from '../worker/training-worker';
import type { ApplyOptions, ApplyResult, NextIndices } from '../worker/elastic-steps';
import type {
  BuildModelOptions,
  EvaluationResult,
  GradientResult,
  ModelSummary,
  OuterReport,
  OuterReportOptions,
  RestoredState,
} from '../worker/types';

/** The training worker as the loop calls it (every call may be slow: it runs on the GPU). */
export interface TrainerPort {
  /** Build the model with fresh parameters from `opts.seed` (the step-0 state). */
  buildModel(opts: BuildModelOptions): Promise<ModelSummary>;
  /**
   * Gradient sums of the samples `indices` (non-empty); the buffer is the caller's to keep. With
   * `keepOnDevice` (a world of one) they stay in the worker and `gradients` is null.
   */
  computeGradients(indices: Uint32Array, keepOnDevice?: boolean): Promise<GradientResult>;
  /**
   * One optimizer step with the allreduced `sums` (consumed: transferred; null: the gradients kept on
   * the device) over `sampleCount` samples; resolves to the new parameters' hash. `next` names the
   * next step's samples, whose gradients the worker then computes while it hashes. `opts`: save the
   * backup first (the previous step was just committed), and/or use the gradients of this step that
   * a previous `next` left on the device (web/worker/elastic-steps.ts).
   */
  applyAndHash(
    sums: ArrayBuffer | null,
    sampleCount: number,
    next: NextIndices | null,
    opts?: ApplyOptions,
  ): Promise<ApplyResult>;
  saveBackup(): Promise<void>;
  restoreBackup(): Promise<void>;
  /** The live state as a snapshot (core/state/snapshot.ts) tagged with the record position. */
  snapshot(position: { step: number; epoch: number; cursor: number }): Promise<ArrayBuffer>;
  /** Load a snapshot into the live state; `bytes` is consumed. */
  restore(bytes: ArrayBuffer): Promise<RestoredState>;
  /**
   * Local sync mode, at an outer step: this rank's sample-weighted pseudo-gradient (committed − live
   * parameters) · `weight`, the buffer the caller's to allreduce.
   */
  pseudoGradient(weight: number): Promise<ArrayBuffer>;
  /** Local sync mode: the outer optimizer step with the allreduced sum (consumed); resolves to the committed-state hash. */
  applyOuter(sum: ArrayBuffer): Promise<string>;
  /**
   * Local sync mode, after `applyOuter`, when the job verifies: the commit point's report additions
   * (web/worker/types.ts `OuterReport`) from this rank's own pseudo-gradient, what it sent and received
   * in the allreduce and the sum.
   */
  outerReport(opts: OuterReportOptions): Promise<OuterReport>;
  /**
   * Local sync mode: undo the last `applyOuter` (its outer step never committed: the world lost members):
   * the live parameters become this rank's own ones the outer step started from, the outer momentum the
   * committed one. Rejects when no outer step is there to undo.
   */
  revertOuter(): Promise<void>;
  /**
   * An overlapped job (docs/local-steps.md "Overlapped outer steps"; web/worker/eager-outer.ts): the live
   * state is the committed one; this rank's next inner phase starts there. Before a round's first step.
   */
  resetOuter(): Promise<void>;
  /**
   * An overlapped job, at the end of an outer step's inner phase: the eager step (the live parameters
   * become where the next inner phase starts) and this rank's contribution to the outer step's allreduce,
   * `weight` · ((C + θ_m)/2 − θ_live), C the committed consensus, the buffer the caller's.
   */
  eagerOuter(weight: number): Promise<ArrayBuffer>;
  /** An overlapped job, a carried round: the last outer step's contribution weighed anew (the survivors' weight). */
  outerContribution(weight: number): Promise<ArrayBuffer>;
  /** An overlapped job: the consensus step with the allreduced `sum` (consumed); resolves to the hash of the committed state it leads to. */
  consensusStep(sum: ArrayBuffer): Promise<string>;
  /** An overlapped job: that consensus step was committed; it becomes the committed state and the backup's parameters. */
  commitConsensus(): Promise<void>;
  evaluate(count?: number): Promise<EvaluationResult>;
}

/**
 * The links a round's collectives run on: the plain ring in rank order (its allreduce in a plain-ring
 * round, and the state broadcast), and, when the round syncs in groups (`round.topology`), the links of
 * the grouped allreduce.
 */
export interface SyncLinks {
  readonly ring: Ring;
  readonly groups: GroupLinks | null;
}

/** Connections to the other tabs of a round. */
export interface MeshPort {
  /** This tab's PeerJS id (sent in hello). */
  readonly peerId: string;
  /**
   * Open (or reuse) the data channels to this rank's ring neighbours in `world` and resolve with the
   * ring; reject on timeout or when `signal` aborts. Links to peers no longer needed may be closed.
   */
  connectRing(
    world: readonly WorldEntry[],
    rank: number,
    opts: { round: number; signal: AbortSignal; timeoutMs: number },
  ): Promise<Ring>;
  /**
   * Open (or reuse) the links a grouped allreduce of `n` values starts with under `groups` (this rank's
   * ring neighbours in its group and its partners across groups: `groupPartners` in
   * core/training/group-geometry.ts), and resolve with this rank's view of them. Called after
   * `connectRing` for the same world. Absent: this port cannot sync in groups (the round fails).
   */
  groupLinks?(
    world: readonly WorldEntry[],
    rank: number,
    groups: readonly number[],
    n: number,
    opts: { round: number; signal: AbortSignal; timeoutMs: number },
  ): Promise<GroupLinks>;
}

/** The control channel: send a message in the current session with the coordinator (false: not sent). */
export interface ControlPort {
  send(body: OutgoingMessage): boolean;
}

/** The Comlink proxy of web/worker/training-worker.ts as a `TrainerPort`, transferring buffers both ways. */
export function comlinkTrainer(remote: Comlink.Remote<TrainingWorkerApi>): TrainerPort {
  return {
    buildModel: (opts) => remote.buildModel(opts),
    // A subarray would be cloned with its whole backing buffer (an epoch order): copy the slice and transfer it.
    computeGradients: (indices, keepOnDevice = false) => {
      const own = indices.slice();
      return remote.computeGradients(Comlink.transfer(own, [own.buffer]), keepOnDevice);
    },
    applyAndHash: (sums, sampleCount, next, opts = {}) => {
      // Each argument carries its own transfer list (Comlink keys them by object).
      const own = next && { indices: next.indices.slice(), keepOnDevice: next.keepOnDevice };
      return remote.applyAndHash(
        sums && Comlink.transfer(sums, [sums]),
        sampleCount,
        own && Comlink.transfer(own, [own.indices.buffer]),
        withTransfers(opts.prefetched ? { ...opts, prefetched: opts.prefetched.slice() } : opts),
      );
    },
    saveBackup: () => remote.saveBackup(),
    restoreBackup: () => remote.restoreBackup(),
    snapshot: (position) => remote.snapshot(position),
    restore: (bytes) => remote.restore(Comlink.transfer(bytes, [bytes])),
    pseudoGradient: (weight) => remote.pseudoGradient(weight),
    applyOuter: (sum) => remote.applyOuter(Comlink.transfer(sum, [sum])),
    outerReport: (o) => remote.outerReport(Comlink.transfer(o, [o.own, o.sent, o.received, o.sum])),
    revertOuter: () => remote.revertOuter(),
    resetOuter: () => remote.resetOuter(),
    eagerOuter: (weight) => remote.eagerOuter(weight),
    outerContribution: (weight) => remote.outerContribution(weight),
    consensusStep: (sum) => remote.consensusStep(Comlink.transfer(sum, [sum])),
    commitConsensus: () => remote.commitConsensus(),
    evaluate: (count) => remote.evaluate(count),
  };
}

/** The apply options with the sketch's copy of this rank's gradient sums transferred, not copied. */
function withTransfers(opts: ApplyOptions): ApplyOptions {
  return opts.sketch ? Comlink.transfer(opts, [opts.sketch.own, opts.sketch.sent, opts.sketch.received]) : opts;
}
