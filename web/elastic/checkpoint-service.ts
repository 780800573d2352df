/**
 * Checkpoints and test evaluations of committed states, for rank 0 and for the coordinator's
 * `checkpoint_request`:
 * - `prepare(step)`: snapshot the just-committed step before the next step changes the live state;
 * - `upload(step, url)`: the committed state of `step` as a snapshot (the prepared one, the live one,
 *   or the backup while the live state ran ahead), uploaded in the background with progress;
 * - `evaluateCommitted(round, step)`: rank 0's test evaluation of a committed state, reported.
 * Each works on the committed state also while the live state ran ahead of it (`asCommitted`).
 */
import { NO_HASH } from '../../core/protocol/tab-messages';
import type { RecordPosition } from '../../core/training/groups';
import type { JobPublic } from '../../core/training/job';
import { uploadCheckpoint } from './checkpoint-transfer';
import type { LoopContext } from './loop-context';
import type { CheckpointTransferStatus } from './status';

export class CheckpointService {
  /** Rank 0's snapshot of a committed step it expects to be asked for. */
  private prepared: { step: number; bytes: Promise<ArrayBuffer> } | null = null;

  constructor(
    private readonly ctx: LoopContext,
    private readonly current: () => { job: JobPublic | null; workerId: string | null },
  ) {}

  /** Another run: a prepared snapshot belongs to the old one. */
  forget(): void {
    this.prepared = null;
  }

  /** Snapshot the just-committed step (which left the record `after`) now, before the next step changes the live state. */
  prepare(step: number, after: RecordPosition): void {
    const position = { step, epoch: after.epoch, cursor: after.cursor };
    const bytes = this.ctx.queue.run('snapshot', () =>
      this.asCommitted(step, 'a checkpoint', () => this.ctx.trainer.snapshot(position)),
    );
    bytes.catch(() => {});
    this.prepared = { step, bytes };
  }

  /** The committed state of `step` as a snapshot, whatever the live state is now. */
  private committedSnapshot(step: number): Promise<ArrayBuffer> {
    if (this.prepared?.step === step) return this.prepared.bytes;
    const after = this.ctx.positions.get(step);
    if (!after)
      return Promise.reject(new Error(`asked for a checkpoint of step ${step}, whose commit this tab did not see`));
    const position = { step, epoch: after.epoch, cursor: after.cursor };
    return this.ctx.queue.run('checkpoint snapshot', () =>
      this.asCommitted(step, 'a checkpoint', () => this.ctx.trainer.snapshot(position)),
    );
  }

  /**
   * Run `fn` (a worker call, inside a queued task) with the committed state of `step` live: the live state
   * when it is that one, else the backup with the live state parked around it — the live state ran ahead
   * (an overlapped job's always has: its committed consensus is never live). The parked state's position
   * is never read: it only carries the live state across.
   */
  private async asCommitted<T>(step: number, what: string, fn: () => Promise<T>): Promise<T> {
    const { trainer, keeper } = this.ctx;
    const { live, backup } = keeper.held;
    if (live?.step === step && live.hash !== NO_HASH) return fn();
    if (backup?.step !== step)
      throw new Error(
        `asked for ${what} of step ${step}, this tab holds ${live?.step ?? 'nothing'} / backup ${backup?.step ?? 'nothing'}`,
      );
    const parked = await trainer.snapshot({ step: live?.step ?? step, epoch: 0, cursor: 0 });
    await trainer.restoreBackup();
    try {
      return await fn();
    } finally {
      await trainer.restore(parked);
    }
  }

  /** Answer a `checkpoint_request`: upload the committed state of `step` to `url`; failures are logged and shown. */
  async upload(step: number, url: string): Promise<void> {
    const { box } = this.ctx;
    const status = (patch: Partial<CheckpointTransferStatus>) =>
      box.update({
        checkpoint: {
          ...{ step, direction: 'upload', loadedBytes: 0, totalBytes: 0, done: false, error: null },
          ...box.status.checkpoint,
          ...patch,
        },
      });
    status({ step, loadedBytes: 0, totalBytes: 0, done: false, error: null });
    try {
      const { job, workerId } = this.current();
      if (!job) throw new Error('no job');
      const bytes = await this.committedSnapshot(step);
      const target = new URL(url, this.ctx.http.baseUrl);
      if (workerId) target.searchParams.set('workerId', workerId);
      await uploadCheckpoint(this.ctx.http, target.href, bytes, {
        timeoutMs: this.ctx.timeouts.uploadMs,
        onProgress: (loaded, total) => status({ loadedBytes: loaded, totalBytes: total }),
      });
      status({ done: true, loadedBytes: bytes.byteLength, totalBytes: bytes.byteLength });
      box.update({ checkpointsUploaded: box.status.checkpointsUploaded + 1 });
      if (this.prepared?.step === step) this.prepared = null;
    } catch (err) {
      const message = (err as Error).message ?? String(err);
      this.ctx.log('warn', `checkpoint ${step} upload failed: ${message}`);
      status({ error: message });
    }
  }

  /**
   * Rank 0, right after committing `step` (an evaluation point): evaluate that committed state on the
   * first `job.evalSamples` test images and report it. Queued before the next step's apply, so it
   * sees exactly the committed parameters; not awaited (the next step's worker calls queue behind it,
   * and the other ranks wait for rank 0 in a later allreduce: `evaluationAllowanceMs`). The report
   * carries the round of the commit and the epoch its group trained on; the coordinator also takes it
   * after that round closed.
   */
  evaluateCommitted(round: number, step: number, epoch: number, job: JobPublic): void {
    this.ctx.queue
      .run('evaluate', () => this.asCommitted(step, 'an evaluation', () => this.ctx.trainer.evaluate(job.evalSamples)))
      .then((r) => {
        if (!(r.count >= 1)) return;
        const correct = Math.min(r.count, Math.max(0, Math.round(r.accuracy * r.count)));
        const lossSum = r.lossAvg * r.count;
        if (!Number.isFinite(lossSum) || lossSum < 0)
          throw new Error(`test loss ${r.lossAvg} is not a finite non-negative number`);
        this.ctx.control.send({ type: 'evaluation', round, step, epoch, testSamples: r.count, correct, lossSum });
        this.ctx.log(
          'info',
          `step ${step}: test accuracy ${((correct / r.count) * 100).toFixed(2)} % on ${r.count} images`,
        );
      })
      .catch((err) => this.ctx.log('warn', `evaluation of step ${step} failed: ${(err as Error).message}`));
  }
}
