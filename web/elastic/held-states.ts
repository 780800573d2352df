/**
 * The training states the worker holds, and every worker call that changes them. Each call runs on
 * the loop's serial worker queue and updates the tags (web/elastic/plan.ts: `HeldStates`) in the
 * same queued task, so a tag never describes a state the worker no longer has:
 * - live: the working buffers (the last step applied); backup: the last committed step.
 * - `lastReported`: the newest step this tab reported, for `hello` after a reconnect.
 */
import type { JobPublic } from '../../core/training/job';
import { NO_HASH } from '../../core/protocol/tab-messages';
import type { SerialQueue } from './async-tools';
import { helloHolding, NOTHING_HELD, sameTag, type HeldStates, type StateTag } from './plan';
import type { TrainerPort } from './ports';
import type { ApplyOptions, ApplyResult } from '../worker/elastic-steps';
import type { OuterReport, OuterReportOptions } from '../worker/types';

export interface NextStep {
  indices: Uint32Array;
  keepOnDevice: boolean;
}

export class HeldStateKeeper {
  held: HeldStates = NOTHING_HELD;
  lastReported: StateTag | null = null;
  /** Floats in the model's flat buffers, once the worker has a model for the job (else null). */
  modelElements: number | null = null;
  /**
   * An overlapped job (docs/local-steps.md "Overlapped outer steps"): the commit point whose eager step
   * the live state is past (the next inner phase started from it), or null since the last fresh start.
   */
  eagerAt: number | null = null;
  /** An overlapped job: the consensus the worker computed and this tab reported, not yet committed here. */
  consensus: StateTag | null = null;

  constructor(
    private readonly trainer: TrainerPort,
    private readonly queue: SerialQueue,
  ) {}

  /** Another run: nothing held belongs to it. */
  forget(): void {
    this.held = NOTHING_HELD;
    this.lastReported = null;
    this.modelElements = null;
    this.eagerAt = null;
    this.consensus = null;
  }

  /** The hello fields describing the states held. */
  hello(): ReturnType<typeof helloHolding> {
    return helloHolding(this.held, this.lastReported, this.consensus);
  }

  /**
   * True when the live state is ahead of the backup and must be undone when a round ends: it was
   * applied but never reported. A live state this tab REPORTED is kept: with the commit wait
   * overlapped with the next step (step-runner.ts), a round can fail after the coordinator committed
   * it and before this tab heard so. The next round's `planSync` then uses it or the backup, whichever
   * the coordinator committed (the same rule as a reconnect's `pending`).
   */
  get liveToUndo(): boolean {
    const { live, backup } = this.held;
    return !!backup && !!live && !sameTag(live, backup) && !sameTag(live, this.lastReported);
  }

  /** Build the model from the job seed: live = step 0, no backup yet. */
  async buildFresh(job: JobPublic): Promise<void> {
    await this.queue.run('buildModel', async () => {
      const summary = await this.trainer.buildModel({
        model: job.model,
        optimizer: job.optimizer,
        maxBatch: Math.min(job.globalBatch, job.datasetSize),
        seed: job.seed,
        precision: job.kernels.precision,
        ...(job.sync.mode === 'local' ? { outer: job.sync.outer } : {}),
      });
      this.modelElements = summary.totalElements;
      this.held = { live: { step: 0, hash: null }, backup: null };
      this.eagerAt = null;
      this.consensus = null;
    });
  }

  async ensureModel(job: JobPublic): Promise<void> {
    if (this.modelElements === null) await this.buildFresh(job);
  }

  /** Put the backup back into the live state (an uncommitted step is undone). */
  async restoreBackup(): Promise<void> {
    await this.queue.run('restoreBackup', async () => {
      await this.trainer.restoreBackup();
      this.held = { ...this.held, live: this.held.backup };
      this.eagerAt = null;
    });
  }

  /** Make the live state (tagged `tag`, by default its own tag) the backup. */
  async saveBackup(tag?: StateTag): Promise<void> {
    await this.queue.run('saveBackup', async () => {
      await this.trainer.saveBackup();
      this.held = { ...this.held, backup: tag ?? this.held.live };
    });
  }

  /** Load a snapshot and check it is the committed state `wanted`. */
  async restoreSnapshot(bytes: ArrayBuffer, wanted: StateTag): Promise<void> {
    const live = await this.restoreUnchecked(bytes, wanted);
    if (live.step !== wanted.step)
      throw new Error(`received the state of step ${live.step}, the round starts from step ${wanted.step}`);
    if (wanted.hash !== null && live.hash !== wanted.hash)
      throw new Error(`received a state with hash ${live.hash}, the committed hash is ${wanted.hash}`);
  }

  /**
   * Load a snapshot and make it the live state, whatever it holds; returns its tag (the step's state
   * hash, null for the fresh state when `wanted` is). The caller checks it: a state broadcast compares
   * the hash before acknowledging (web/elastic/state-sync.ts), so the worker's one decode is the check.
   */
  async restoreUnchecked(bytes: ArrayBuffer, wanted: StateTag): Promise<StateTag> {
    return this.queue.run('restore', async () => {
      const info = await this.trainer.restore(bytes);
      const live = { step: info.step, hash: info.step === 0 && wanted.hash === null ? null : info.stateHash };
      this.held = { ...this.held, live };
      return live;
    });
  }

  /**
   * Local sync mode, an inner step with no samples for this rank: nothing is applied, but the state is
   * no longer the committed one by its tag (the outer step's pseudo-gradient is zero, its weight too).
   * `backup`: as in `applyAndHash`, the committed live state is saved as the backup first.
   */
  async skipInner(step: number, backup?: StateTag): Promise<void> {
    if (backup) await this.saveBackup(backup);
    this.held = { ...this.held, live: { step, hash: NO_HASH } };
  }

  /**
   * Local sync mode's outer step: this rank's pseudo-gradient (a worker call), the allreduce `reduce`
   * of it on the caller's side (the worker queue is free meanwhile), then the Nesterov step (a worker
   * call). The live state is tagged with the committed-state hash it resolves to.
   */
  async outerStep(step: number, weight: number, reduce: (delta: Float32Array) => Promise<void>): Promise<string> {
    const delta = new Float32Array(await this.queue.run('pseudoGradient', () => this.trainer.pseudoGradient(weight)));
    await reduce(delta);
    return this.queue.run('applyOuter', async () => {
      this.held = { ...this.held, live: { step, hash: null } };
      // A copy goes to the worker: the caller may still sketch the sum (`outerReport`).
      const hash = await this.trainer.applyOuter(delta.slice().buffer as ArrayBuffer);
      this.held = { ...this.held, live: { step, hash } };
      return hash;
    });
  }

  /** Local sync mode, after `outerStep`, when the job verifies: the report's additions (a worker call). */
  outerReport(opts: OuterReportOptions): Promise<OuterReport> {
    return this.queue.run('outerReport', () => this.trainer.outerReport(opts));
  }

  /**
   * An overlapped job's fresh start (a round's first step, or a carried group redone from the backup):
   * the live state is the committed one, and this rank's next inner phase starts there (web/worker/eager-outer.ts).
   */
  async resetOuter(): Promise<void> {
    await this.queue.run('resetOuter', async () => {
      await this.trainer.resetOuter();
      this.eagerAt = null;
      this.consensus = null;
    });
  }

  /**
   * An overlapped job, the end of the inner phase of the group ending at `step`: this rank's contribution
   * to its outer step's allreduce at `weight`, by the eager step (the live state moves to where the next
   * inner phase starts) or, when that step was taken already (a carried round), weighed anew.
   */
  async outerContribution(step: number, weight: number): Promise<Float32Array> {
    const again = this.eagerAt === step;
    const buffer = await this.queue.run(again ? 'outerContribution' : 'eagerOuter', async () => {
      if (again) return this.trainer.outerContribution(weight);
      this.held = { ...this.held, live: { step, hash: null } };
      const out = await this.trainer.eagerOuter(weight);
      this.held = { ...this.held, live: { step, hash: NO_HASH } };
      this.eagerAt = step;
      return out;
    });
    return new Float32Array(buffer);
  }

  /** An overlapped job: the consensus step of `step`'s outer step with the allreduced `sum`; its hash. */
  async consensusStep(step: number, sum: Float32Array): Promise<string> {
    return this.queue.run('consensusStep', async () => {
      this.consensus = null;
      const hash = await this.trainer.consensusStep(sum.buffer as ArrayBuffer);
      this.consensus = { step, hash };
      return hash;
    });
  }

  /** An overlapped job: the consensus `tag` was committed; it becomes the backup (the live state runs on). */
  async commitConsensus(tag: StateTag): Promise<void> {
    await this.queue.run('commitConsensus', async () => {
      if (!sameTag(this.consensus, tag))
        throw new Error(
          `committing step ${tag.step} (${tag.hash}), this tab computed ${this.consensus?.step ?? 'nothing'}`,
        );
      this.held = { ...this.held, backup: null };
      await this.trainer.commitConsensus();
      this.held = { ...this.held, backup: tag };
      this.consensus = null;
    });
  }

  /**
   * Local sync mode: undo the outer step of `step` (applied with a world that lost members before it
   * committed): the worker puts this rank's own parameters of the outer step back and the committed
   * outer momentum, so the outer step can be taken again with the survivors. The live state is then
   * the group's last inner step again.
   */
  async revertOuter(step: number): Promise<void> {
    await this.queue.run('revertOuter', async () => {
      this.held = { ...this.held, live: { step, hash: null } };
      await this.trainer.revertOuter();
      this.held = { ...this.held, live: { step, hash: NO_HASH } };
    });
  }

  /**
   * Apply step `step` (sums, or null for gradients kept on the device) and hash it, as one worker
   * task, so the live state is never left untagged; `next` starts the next step's gradients.
   * `backup`: the live state before this step, just committed, is saved as the backup first (same task).
   * `prefetched`: this step's indices, whose gradients an earlier `next` left on the device.
   */
  applyAndHash(
    step: number,
    sums: ArrayBuffer | null,
    count: number,
    next: NextStep | null,
    opts: { backup?: StateTag; prefetched?: Uint32Array; hash?: boolean; sketch?: ApplyOptions['sketch'] } = {},
  ): Promise<ApplyResult> {
    return this.queue.run('applyAndHash', async () => {
      const backup = opts.backup && sameTag(opts.backup, this.held.live) ? opts.backup : null;
      if (opts.backup && !backup)
        throw new Error(`asked to back up step ${opts.backup.step}, the live state is step ${this.held.live?.step}`);
      // The worker saves the backup first thing in the call, so it is tagged before the call: a
      // failure later in the call leaves the backup saved and the live state untagged.
      this.held = { backup: backup ?? this.held.backup, live: { step, hash: null } };
      const result = await this.trainer.applyAndHash(sums, count, next, {
        backupFirst: backup !== null,
        prefetched: opts.prefetched,
        hash: opts.hash,
        ...(opts.sketch ? { sketch: opts.sketch } : {}),
      });
      this.held = { ...this.held, live: { step, hash: result.hash } };
      return result;
    });
  }
}
