/**
 * The elastic training loop of one tab (main thread: RTCPeerConnection exists only there; the model
 * lives in the training worker). It routes the coordinator's messages to the parts that do the work:
 *
 *   round  → connect the ring neighbours, get the committed state (state-sync.ts), send `ready`;
 *   train  → the steps (step-runner.ts: gradients, allreduce, apply + hash, `step_report`, commit
 *            waits overlapped with the next step's compute);
 *   round_closed, a failed collective, a timeout → abort everything in flight, put the committed
 *            state back, report `failure` when the fault was seen here, and wait for the next round;
 *   checkpoint_request → snapshot of the committed step, uploaded in the background (checkpoint-service.ts).
 *
 * The other parts: held-states.ts (which training states the worker holds, and the worker calls that
 * change them), status.ts (the status and its reducers), round-session.ts (one round's signal and waits).
 *
 * Nothing waits unbounded: collectives have deadlines, coordinator waits are tied to the round's
 * AbortSignal (aborted by `round_closed` and by a dropped socket) and to a deadline, and worker calls
 * go through a serial queue with a timeout.
 */
import type { JobPublic } from '../../core/training/job';
import type { RoundMessage, ServerMessage } from '../../core/protocol/coordinator-messages';
import { bounded, SerialQueue } from './async-tools';
import type { HttpPort } from './checkpoint-transfer';
import { CheckpointService } from './checkpoint-service';
import { HeldStateKeeper } from './held-states';
import {
  CommittedPositions,
  DEFAULT_TIMEOUTS,
  type ElasticTimeouts,
  type LogLevel,
  type LoopContext,
} from './loop-context';
import { remainingSteps, type RecordPosition } from '../../core/training/groups';
import { failureReport, type HeldStates } from './plan';
import type { ControlPort, MeshPort, SyncLinks, TrainerPort } from './ports';
import type { GroupLinks } from '../net/group-allreduce';
import { parameterLayout } from '../../core/training/model-spec';
import { RoundSession } from './round-session';
import { syncState } from './state-sync';
import { creditCommitted, StatusBox, type ElasticStatus } from './status';
import { MAX_STEP_PAUSE_MS, StepRunner } from './step-runner';

export { DEFAULT_TIMEOUTS, type ElasticTimeouts } from './loop-context';
export {
  initialElasticStatus,
  type CheckpointTransferStatus,
  type ElasticPhase,
  type ElasticStatus,
} from './status';
export { MAX_STEP_PAUSE_MS } from './step-runner';

export interface ElasticLoopOptions {
  trainer: TrainerPort;
  mesh: MeshPort;
  control: ControlPort;
  http: HttpPort;
  timeouts?: Partial<ElasticTimeouts>;
  /** Evaluate on the first N test images when the job is done (0: never). Default 0. */
  evaluateOnDone?: number;
  /** Pause between steps to limit GPU use (ms); see `setStepPause`. Default 0. */
  stepPauseMs?: number;
  onStatus?(status: ElasticStatus): void;
  log?(level: LogLevel, text: string): void;
  now?(): number;
}

export class ElasticLoop {
  private readonly ctx: LoopContext;
  private readonly box: StatusBox;
  private readonly keeper: HeldStateKeeper;
  private readonly checkpoints: CheckpointService;
  private readonly runner: StepRunner;
  private job: JobPublic | null = null;
  private runId: string | null = null;
  private workerId: string | null = null;
  private session: RoundSession | null = null;
  private stopped = false;
  /** Samples of steps this tab reported that it has not yet seen committed (step → samples). */
  private readonly uncommittedSamples = new Map<number, number>();

  constructor(private readonly opts: ElasticLoopOptions) {
    const timeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };
    const queue = new SerialQueue(timeouts.workerCallMs);
    this.box = new StatusBox(opts.onStatus);
    this.keeper = new HeldStateKeeper(opts.trainer, queue);
    this.ctx = {
      trainer: opts.trainer,
      mesh: opts.mesh,
      control: opts.control,
      http: opts.http,
      queue,
      timeouts,
      box: this.box,
      keeper: this.keeper,
      positions: new CommittedPositions(),
      log: (level, text) => opts.log?.(level, text),
      now: () => (opts.now ? opts.now() : performance.now()),
    };
    this.checkpoints = new CheckpointService(this.ctx, () => ({ job: this.job, workerId: this.workerId }));
    this.runner = new StepRunner(this.ctx, this.checkpoints, this.uncommittedSamples);
    this.box.status.stepPauseMs = this.clampPause(opts.stepPauseMs ?? 0);
  }

  /** What the page shows and tests read (the live object; `onStatus` gets copies). */
  get status(): ElasticStatus {
    return this.box.status;
  }

  /**
   * Limit this tab's GPU use: pause `ms` between steps (clamped to [0, MAX_STEP_PAUSE_MS] and to a
   * quarter of the collective timeout). Takes effect at the next step; see `StepRunner` for why a
   * pause is safe in a ring and how it moves work to the other tabs.
   */
  setStepPause(ms: number): void {
    this.update({ stepPauseMs: this.clampPause(ms) });
  }

  private clampPause(ms: number): number {
    if (!Number.isFinite(ms) || ms <= 0) return 0;
    return Math.round(Math.min(ms, MAX_STEP_PAUSE_MS, this.ctx.timeouts.collectiveMs / 4));
  }

  /**
   * Count the reported steps up to `committedStep` as committed, and forget later ones when `dropLater`
   * (undone). Returns the status patch, for the caller's own update (one status change, not two).
   */
  private credit(committedStep: number, dropLater = false): Partial<ElasticStatus> {
    const credited = creditCommitted(this.uncommittedSamples, committedStep, dropLater);
    return credited > 0 ? { samplesCommitted: this.status.samplesCommitted + credited } : {};
  }

  /** The status fields that follow from a commit of `step` that left the record at `at`. */
  private progress(step: number, at: RecordPosition): Partial<ElasticStatus> {
    const job = this.job;
    return {
      committedStep: step,
      epoch: at.epoch,
      epochProgress: job ? (at.cursor - at.holes.reduce((a, [s, e]) => a + e - s, 0)) / job.datasetSize : 0,
      // An estimate: the job's end moves when a later outer step is committed partially.
      ...(job ? { totalSteps: step + remainingSteps(at, job) } : {}),
    };
  }

  // ------------------------------------------------------------------ inputs

  /** The hello fields describing the states this tab holds (asked at every connect). */
  holding(): { haveStep: number | null; haveHash: string | null; pending: { step: number; hash: string } | null } {
    return this.keeper.hello();
  }

  /** A validated message from the coordinator. */
  handle(msg: ServerMessage): void {
    if (this.stopped) return;
    switch (msg.type) {
      case 'welcome':
        this.welcome(msg.runId, msg.workerId, msg.job);
        return;
      case 'wait':
        if (this.session && !this.session.signal.aborted) this.endSession('told to wait');
        this.update({ phase: 'waiting', waitReason: msg.reason, round: null, rank: null, worldSize: 0, share: null });
        return;
      case 'round':
        this.startRound(msg);
        return;
      case 'train':
        if (this.session?.round === msg.round) this.session.train.resolve();
        else
          this.log('warn', `train for round ${msg.round}, but this tab is in round ${this.session?.round ?? 'none'}`);
        return;
      case 'committed': {
        const at: RecordPosition = { epoch: msg.epoch, cursor: msg.cursor, holes: msg.holes ?? [] };
        this.ctx.positions.set(msg.step, at);
        this.update({ ...this.credit(msg.step), ...this.progress(msg.step, at) });
        // The coordinator checks this step: upload the state before it (still the backup) now, queued
        // on the worker before the next apply replaces the backup (checkpoint-service.ts).
        if (msg.upload) void this.checkpoints.upload(msg.upload.step, msg.upload.url);
        if (this.session?.round === msg.round) {
          if (msg.drain) this.session.drains.add(msg.step);
          this.session.committed(msg.step).resolve(at);
        }
        return;
      }
      case 'round_closed':
        if (this.session?.round === msg.round) this.endSession(`round ${msg.round} closed (${msg.reason})`);
        return;
      case 'members_lost':
        // The round goes on without them: a grouped outer allreduce in flight leaves them out at once.
        if (this.session?.round === msg.round) {
          this.log('info', `round ${msg.round}: the coordinator lost ranks ${msg.ranks.join(', ')}`);
          this.session.lost.add(msg.ranks);
        }
        return;
      case 'checkpoint_request':
        void this.checkpoints.upload(msg.step, msg.url);
        return;
      case 'error':
        this.log('warn', `coordinator: ${msg.code}: ${msg.message}`);
        if (msg.code === 'job_failed' || msg.code === 'kicked') {
          this.endSession(msg.code);
          this.update({ phase: 'failed', error: `${msg.code}: ${msg.message}` });
        }
        return;
      case 'done':
        this.finish(msg.step);
        return;
    }
  }

  /** The control socket dropped: the round is over from here; keep every state (the coordinator may have committed the pending one). */
  disconnected(): void {
    if (this.stopped) return;
    this.endSession('coordinator connection lost', { keepPending: true });
    if (this.status.phase !== 'done' && this.status.phase !== 'failed')
      this.update({ phase: 'connecting', round: null, rank: null, worldSize: 0, share: null });
  }

  /** Stop for good (the tab leaves). */
  stop(): void {
    this.endSession('stopped', { keepPending: true });
    this.stopped = true;
    if (this.status.phase !== 'done' && this.status.phase !== 'failed') this.update({ phase: 'stopped' });
  }

  // ------------------------------------------------------------------ session management

  private welcome(runId: string, workerId: string, job: JobPublic): void {
    if (this.runId !== null && (runId !== this.runId || JSON.stringify(job) !== JSON.stringify(this.job))) {
      // Another run (the coordinator's store was replaced): nothing this tab holds belongs to it.
      this.log('warn', `the coordinator runs ${runId} now (was ${this.runId}); dropping the local state`);
      this.keeper.forget();
      this.checkpoints.forget();
      this.ctx.positions.clear();
      this.uncommittedSamples.clear();
    }
    this.runId = runId;
    this.workerId = workerId;
    this.job = job;
    this.update({
      runId,
      workerId,
      totalSteps: job.totalSteps,
      epochs: job.epochs,
      datasetSize: job.datasetSize,
      globalBatch: job.globalBatch,
      phase: this.status.phase === 'done' ? 'done' : 'waiting',
      error: null,
    });
  }

  private startRound(msg: RoundMessage): void {
    const previous = this.session;
    if (previous) this.endSession(`superseded by round ${msg.round}`);
    const session = new RoundSession(msg);
    this.session = session;
    const me = msg.world.find((w) => w.workerId === this.workerId);
    if (!me) {
      this.log('warn', `round ${msg.round} does not include this tab (${this.workerId})`);
      return;
    }
    session.rank = me.rank;
    this.ctx.positions.set(msg.step - 1, { epoch: msg.epoch, cursor: msg.cursor, holes: msg.holes ?? [] });
    // The round starts after the last committed step: reported steps up to it were committed (perhaps
    // in our absence), later ones will be redone, unless the round carries their group on.
    this.update({
      ...this.credit(msg.step - 1, !msg.carry),
      phase: 'syncing',
      waitReason: null,
      round: msg.round,
      rank: me.rank,
      share: me.share,
      worldSize: msg.world.length,
      error: null,
    });
    const before = previous ? previous.finished : Promise.resolve();
    session.finished = before.then(() => this.runSession(session));
  }

  /** Abort the session: its waits reject at once; `runSession` then unwinds and puts the committed state back. */
  private endSession(reason: string, opts: { keepPending?: boolean } = {}): void {
    const session = this.session;
    if (!session) return;
    if (opts.keepPending) session.keepPending = true;
    session.abort(reason);
    if (this.session === session) this.session = null;
  }

  private async runSession(session: RoundSession): Promise<void> {
    const job = this.job!;
    let failure: unknown = null;
    try {
      if (session.signal.aborted) return;
      await this.ctx.queue.idle();
      const ring = await bounded(
        this.opts.mesh.connectRing(session.world, session.rank, {
          round: session.round,
          signal: session.signal,
          timeoutMs: this.ctx.timeouts.ringConnectMs,
        }),
        { signal: session.signal, timeoutMs: this.ctx.timeouts.ringConnectMs + 1000, what: 'connecting the ring' },
      );
      const links: SyncLinks = { ring, groups: await this.groupLinks(session, job) };
      await syncState(this.ctx, session, ring, job);
      if (!this.opts.control.send({ type: 'ready', round: session.round }))
        throw new Error('control socket closed before ready');
      await bounded(session.train.promise, {
        signal: session.signal,
        timeoutMs: this.ctx.timeouts.coordinatorWaitMs,
        what: `train for round ${session.round}`,
      });
      this.update({ phase: 'training' });
      await this.runner.run(session, links, job);
    } catch (err) {
      failure = err;
    } finally {
      await this.afterSession(session, failure);
    }
  }

  /** The grouped allreduce's links when the round syncs in groups (`round.topology`), else null. */
  private async groupLinks(session: RoundSession, job: JobPublic): Promise<GroupLinks | null> {
    const topology = session.msg.topology;
    if (!topology) return null;
    const mesh = this.opts.mesh;
    if (!mesh.groupLinks) throw new Error(`round ${session.round} syncs in groups; this tab's mesh cannot`);
    const timeoutMs = this.ctx.timeouts.ringConnectMs;
    const n = parameterLayout(job.model).totalElements;
    return bounded(
      mesh.groupLinks(session.world, session.rank, topology.groups, n, {
        round: session.round,
        signal: session.signal,
        timeoutMs,
      }),
      { signal: session.signal, timeoutMs: timeoutMs + 1000, what: 'connecting the group links' },
    );
  }

  private async afterSession(session: RoundSession, failure: unknown): Promise<void> {
    if (failure !== null && !session.signal.aborted) this.reportFailure(session, failure);
    if (this.ctx.queue.stuck) {
      this.fatal(new Error(this.ctx.queue.stuck));
      return;
    }
    // Undo an unreported step, unless the coordinator may have committed it in our absence (reconnect).
    // Local sync mode leaves it to the next round: a round that carries the group on keeps the inner
    // steps, any other puts the backup back when it syncs (state-sync.ts).
    const deferred = this.job?.sync.mode === 'local';
    if (!session.keepPending && !deferred && this.keeper.liveToUndo) {
      try {
        await this.keeper.restoreBackup();
        this.update({ restores: this.status.restores + 1, localStep: this.keeper.held.live?.step ?? 0 });
      } catch (err) {
        this.fatal(err);
        return;
      }
    }
    const phase = this.status.phase;
    if (this.session === null && !['done', 'failed', 'stopped', 'connecting'].includes(phase))
      this.update({ phase: 'recovering' });
  }

  private reportFailure(session: RoundSession, failure: unknown): void {
    const report = failureReport(failure, session.world, false);
    this.log('warn', `round ${session.round} failed here: ${report?.reason ?? String(failure)}`);
    const sent =
      report &&
      this.opts.control.send({
        type: 'failure',
        round: session.round,
        reason: report.reason,
        ...(report.peer ? { peer: report.peer } : {}),
        ...(report.evidence ? { evidence: report.evidence } : {}),
      });
    if (sent) this.update({ failuresReported: this.status.failuresReported + 1 });
  }

  // ------------------------------------------------------------------ the end

  private finish(step: number): void {
    this.endSession('done', { keepPending: true });
    this.update({ ...this.credit(step), phase: 'done', committedStep: step, epochProgress: 1 });
    const count = this.opts.evaluateOnDone ?? 0;
    if (count > 0 && this.keeper.modelElements !== null) {
      // A local-mode tab lost from the last rounds still holds inner steps nobody committed: evaluate
      // its last committed state instead.
      const committed =
        this.job?.sync.mode === 'local' && this.keeper.liveToUndo ? this.keeper.restoreBackup() : Promise.resolve();
      committed
        .then(() => this.ctx.queue.run('evaluate', () => this.opts.trainer.evaluate(count)))
        .then((r) => this.update({ accuracy: r.accuracy, testLoss: r.lossAvg }))
        .catch((err) => this.log('warn', `evaluation failed: ${(err as Error).message}`));
    }
  }

  private fatal(err: unknown): void {
    const message = err instanceof Error ? err.message : String(err);
    this.log('error', `elastic loop stopped: ${message}`);
    this.endSession('fatal');
    this.stopped = true;
    this.update({ phase: 'failed', error: message });
  }

  // ------------------------------------------------------------------ plumbing

  private update(patch: Partial<ElasticStatus>): void {
    this.box.update(patch);
  }

  private log(level: LogLevel, text: string): void {
    this.ctx.log(level, text);
  }

  /** Held states, for tests. */
  get heldStates(): HeldStates {
    return this.keeper.held;
  }
}
