/**
 * The elastic training loop of one tab (main thread: RTCPeerConnection exists only there; the model
 * lives in the training worker). It turns the coordinator's messages into work:
 *
 *   round  → connect the ring neighbours, get the committed state (`planSync`: fresh / local / peer
 *            broadcast along the ring / durable checkpoint), send `ready`;
 *   train  → per step: own indices from the shared sampler, gradient sums in the worker (the buffer
 *            is transferred, never copied), ring allreduce, apply with the step's sample count,
 *            hash, `step_report`; at commit points wait for `committed`, then `saveBackup`;
 *   round_closed, a failed collective, a timeout → abort everything in flight, put the committed
 *            state back (`restoreBackup`), report `failure` when the fault was seen here, and wait
 *            for the next round;
 *   checkpoint_request → snapshot of the committed step, uploaded in the background.
 *
 * Nothing waits unbounded: collectives have deadlines, coordinator waits are tied to the round's
 * AbortSignal (aborted by `round_closed` and by a dropped socket) and to a deadline, and worker calls
 * go through a serial queue with a timeout.
 *
 * The loop tracks which training states the worker holds (`HeldStates`), so that after a reconnect
 * it can tell the coordinator both the committed state and a newer reported one (`helloHolding`),
 * and so that a new round re-syncs only what is needed (`planSync`).
 */
import type { JobPublic } from '../../coordinator/core/job';
import { hashBytes } from '../../coordinator/core/hash';
import type { RoundMessage, ServerMessage, WaitReason, WorldEntry } from '../../coordinator/core/protocol';
import { positionAfter, stepPosition } from '../../coordinator/core/sampler';
import { isEvaluationPoint } from '../../coordinator/core/evaluation';
import { broadcastReceive, broadcastSend } from '../net/broadcast';
import type { Ring } from '../net/link';
import { ringAllreduce } from '../net/ring-allreduce';
import { abortReason, bounded, deferred, SerialQueue, type Deferred } from './async-tools';
import {
  expectsCheckpoint,
  failureReport,
  helloHolding,
  NOTHING_HELD,
  planSync,
  sameTag,
  stepWork,
  syncRoute,
  type HeldStates,
  type StateTag,
  type SyncPlan,
} from './plan';
import type { ControlPort, MeshPort, TrainerPort } from './ports';
import { downloadCheckpoint, uploadCheckpoint, type HttpPort } from './checkpoint-transfer';

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
  /** Training images of the job (per epoch) and samples per step: with `committedStep` they give the samples committed by all tabs (`positionAfter`). */
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
  /** How the last round's state was obtained. */
  lastSync: SyncPlan['kind'] | null;
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

export interface ElasticTimeouts {
  /** Opening the ring's data channels. */
  ringConnectMs: number;
  /** A state broadcast or checkpoint download, whole. */
  syncMs: number;
  /** From `ready` to `train`, and from a commit-point report to `committed` (the coordinator decides; this only bounds a silent one). */
  coordinatorWaitMs: number;
  /** An allreduce, from the call (includes waiting for slower ranks); at least 10× the last compute time. */
  collectiveMs: number;
  /** One call into the training worker. */
  workerCallMs: number;
  /** A checkpoint upload. */
  uploadMs: number;
}

export const DEFAULT_TIMEOUTS: ElasticTimeouts = {
  ringConnectMs: 20_000,
  syncMs: 60_000,
  coordinatorWaitMs: 120_000,
  collectiveMs: 20_000,
  workerCallMs: 120_000,
  uploadMs: 120_000,
};

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
  log?(level: 'info' | 'warn' | 'error', text: string): void;
  now?(): number;
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

/** Collective ids: the state broadcast of a round uses step 0, the allreduce of step s uses s (ids must grow per link). */
const SYNC_ID_STEP = 0;

/**
 * Extra allreduce time for the step after an evaluation point: rank 0 evaluates the committed state
 * before computing this step, and the other ranks wait for it inside this allreduce. Estimated from
 * this rank's own time per training sample (a forward pass costs about a third of forward+backward,
 * and throughput shares make the ranks' slice times alike), doubled: about 6× the expected time.
 */
function evaluationAllowanceMs(step: number, job: JobPublic, computeMs: number, samples: number): number {
  if (step < 2 || samples < 1 || !isEvaluationPoint(step - 1, job)) return 0;
  return 2 * job.evalSamples * (computeMs / samples);
}

/** The longest pause between steps a tab may ask for (the volunteer page's GPU-use slider ends here). */
export const MAX_STEP_PAUSE_MS = 2000;

class RoundSession {
  readonly controller = new AbortController();
  readonly train = deferred<void>();
  readonly commits = new Map<number, Deferred<void>>();
  /** Resolves when `run` has unwound (successfully or not). */
  finished: Promise<void> = Promise.resolve();
  rank = -1;
  /** Keep uncommitted states when the session ends (the coordinator may have committed them while unreachable). */
  keepPending = false;

  constructor(readonly msg: RoundMessage) {}

  get round(): number {
    return this.msg.round;
  }

  get world(): WorldEntry[] {
    return this.msg.world;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  abort(reason: string): void {
    if (!this.signal.aborted) this.controller.abort(new Error(reason));
  }

  committed(step: number): Deferred<void> {
    let d = this.commits.get(step);
    if (!d) {
      d = deferred<void>();
      this.commits.set(step, d);
    }
    return d;
  }
}

export class ElasticLoop {
  readonly status: ElasticStatus = initialElasticStatus();
  private job: JobPublic | null = null;
  private runId: string | null = null;
  private workerId: string | null = null;
  /** The worker has a model for `job` (else `buildModel` first). */
  private modelElements: number | null = null;
  private held: HeldStates = NOTHING_HELD;
  private lastReported: StateTag | null = null;
  private session: RoundSession | null = null;
  private readonly queue: SerialQueue;
  private readonly timeouts: ElasticTimeouts;
  /** Rank 0's snapshot of a committed step it expects to be asked for. */
  private prepared: { step: number; bytes: Promise<ArrayBuffer> } | null = null;
  private lastComputeMs = 0;
  private stopped = false;
  /** Samples of steps this tab reported that it has not yet seen committed (step → samples). */
  private uncommittedSamples = new Map<number, number>();
  /** The pause taken before the step about to be computed (counted in its reported computeMs). */
  private pausedMs = 0;

  constructor(private readonly opts: ElasticLoopOptions) {
    this.timeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };
    this.queue = new SerialQueue(this.timeouts.workerCallMs);
    this.status.stepPauseMs = this.clampPause(opts.stepPauseMs ?? 0);
  }

  /**
   * Limit this tab's GPU use: pause `ms` between steps (clamped to [0, MAX_STEP_PAUSE_MS] and to a
   * quarter of the collective timeout). Takes effect at the next step.
   *
   * Why a pause is safe in a ring: the other ranks wait for this one inside the next allreduce, whose
   * deadline (`collectiveMs`, ≥ 20 s by default) is far above the 2 s cap, so a pause never looks like
   * a failure. The pause is taken after a step is reported (and, at commit points, committed) and before
   * the next one is computed, never inside a collective. It is counted in the next step's reported
   * `computeMs`, so the coordinator's throughput shares (rebalanced at commit boundaries) move work to
   * the other tabs: a paused tab ends up with a smaller share, which it computes while the others
   * compute theirs, and the swarm is not held to its pace. With no other tab (or before a rebalance) the
   * pause slows the steps themselves.
   * In a hidden tab the pause is a main-thread timer, so Chrome may align it to whole seconds; it is
   * scheduled from a worker-reply task (timer nesting level 0), so never to the one-minute alignment.
   */
  setStepPause(ms: number): void {
    this.update({ stepPauseMs: this.clampPause(ms) });
  }

  private clampPause(ms: number): number {
    if (!Number.isFinite(ms) || ms <= 0) return 0;
    return Math.round(Math.min(ms, MAX_STEP_PAUSE_MS, this.timeouts.collectiveMs / 4));
  }

  /** Count the reported steps up to `committedStep` as committed, and forget later ones when `dropLater` (undone). */
  private creditCommitted(committedStep: number, dropLater = false): void {
    let credited = 0;
    for (const [step, samples] of this.uncommittedSamples) {
      if (step <= committedStep) credited += samples;
      if (step <= committedStep || dropLater) this.uncommittedSamples.delete(step);
    }
    if (credited > 0) this.update({ samplesCommitted: this.status.samplesCommitted + credited });
  }

  // ------------------------------------------------------------------ inputs

  /** The hello fields describing the states this tab holds (asked at every connect). */
  holding(): { haveStep: number | null; haveHash: string | null; pending: { step: number; hash: string } | null } {
    return helloHolding(this.held, this.lastReported);
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
      case 'committed':
        this.creditCommitted(msg.step);
        this.update({
          committedStep: msg.step,
          epoch: msg.epoch,
          epochProgress: this.job ? msg.cursor / this.job.datasetSize : 0,
        });
        if (this.session?.round === msg.round) this.session.committed(msg.step).resolve();
        return;
      case 'round_closed':
        if (this.session?.round === msg.round) this.endSession(`round ${msg.round} closed (${msg.reason})`);
        return;
      case 'checkpoint_request':
        void this.checkpointRequested(msg.step, msg.url);
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
      this.held = NOTHING_HELD;
      this.lastReported = null;
      this.modelElements = null;
      this.prepared = null;
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
    // The round starts after the last committed step: reported steps up to it were committed (perhaps in our absence), later ones will be redone.
    this.creditCommitted(msg.step - 1, true);
    this.pausedMs = 0;
    this.update({
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
      await this.queue.idle();
      const ring = await bounded(
        this.opts.mesh.connectRing(session.world, session.rank, {
          round: session.round,
          signal: session.signal,
          timeoutMs: this.timeouts.ringConnectMs,
        }),
        { signal: session.signal, timeoutMs: this.timeouts.ringConnectMs + 1000, what: 'connecting the ring' },
      );
      await this.syncState(session, ring, job);
      if (!this.opts.control.send({ type: 'ready', round: session.round }))
        throw new Error('control socket closed before ready');
      await bounded(session.train.promise, {
        signal: session.signal,
        timeoutMs: this.timeouts.coordinatorWaitMs,
        what: `train for round ${session.round}`,
      });
      this.update({ phase: 'training' });
      await this.trainSteps(session, ring, job);
    } catch (err) {
      failure = err;
    } finally {
      await this.afterSession(session, failure);
    }
  }

  private async afterSession(session: RoundSession, failure: unknown): Promise<void> {
    const aborted = session.signal.aborted;
    const keepPending = session.keepPending;
    if (failure !== null && !aborted) {
      const report = failureReport(failure, session.world, false);
      this.log('warn', `round ${session.round} failed here: ${report?.reason ?? String(failure)}`);
      if (
        report &&
        this.opts.control.send({
          type: 'failure',
          round: session.round,
          reason: report.reason,
          ...(report.peer ? { peer: report.peer } : {}),
        })
      ) {
        this.update({ failuresReported: this.status.failuresReported + 1 });
      }
    }
    if (this.queue.stuck) {
      this.fatal(new Error(this.queue.stuck));
      return;
    }
    // Undo uncommitted steps unless the coordinator may have committed them in our absence (reconnect).
    if (!keepPending && this.held.backup && this.held.live && !sameTag(this.held.live, this.held.backup)) {
      try {
        await this.queue.run('restoreBackup', async () => {
          await this.opts.trainer.restoreBackup();
          this.held = { ...this.held, live: this.held.backup };
        });
        this.update({ restores: this.status.restores + 1, localStep: this.held.live?.step ?? 0 });
      } catch (err) {
        this.fatal(err);
        return;
      }
    }
    if (
      this.session === null &&
      this.status.phase !== 'done' &&
      this.status.phase !== 'failed' &&
      this.status.phase !== 'stopped' &&
      this.status.phase !== 'connecting'
    ) {
      this.update({ phase: 'recovering' });
    }
  }

  // ------------------------------------------------------------------ state sync

  private async ensureModel(job: JobPublic): Promise<void> {
    if (this.modelElements !== null) return;
    await this.buildFresh(job);
  }

  /** Build the model from the job seed: live = step 0, no backup yet. */
  private async buildFresh(job: JobPublic): Promise<void> {
    await this.queue.run('buildModel', async () => {
      const summary = await this.opts.trainer.buildModel({
        model: job.model,
        optimizer: job.optimizer,
        maxBatch: Math.min(job.globalBatch, job.datasetSize),
        seed: job.seed,
      });
      this.modelElements = summary.totalElements;
      this.held = { live: { step: 0, hash: null }, backup: null };
    });
  }

  private async syncState(session: RoundSession, ring: Ring, job: JobPublic): Promise<void> {
    const msg = session.msg;
    await this.ensureModel(job);
    const plan = planSync(msg, session.rank, this.held);
    const wanted: StateTag = { step: msg.step - 1, hash: msg.committedHash };
    const sync = { signal: session.signal, timeoutMs: this.timeouts.syncMs };
    this.log(
      'info',
      `round ${msg.round}: rank ${session.rank}/${msg.world.length}, step ${msg.step}, state ${plan.kind}`,
    );
    switch (plan.kind) {
      case 'fresh':
        if (!sameTag(this.held.live, { step: 0, hash: null })) await this.buildFresh(job);
        break;
      case 'local':
      case 'send':
        if (plan.use === 'backup' && !sameTag(this.held.live, this.held.backup)) {
          await this.queue.run('restoreBackup', async () => {
            await this.opts.trainer.restoreBackup();
            this.held = { ...this.held, live: this.held.backup };
          });
          this.update({ restores: this.status.restores + 1 });
        }
        break;
      case 'checkpoint': {
        this.update({
          checkpoint: {
            step: plan.step,
            direction: 'download',
            loadedBytes: 0,
            totalBytes: 0,
            done: false,
            error: null,
          },
        });
        const bytes = await downloadCheckpoint(this.opts.http, plan.url, plan.sha256, {
          ...sync,
          onProgress: (loaded, total) =>
            this.update({
              checkpoint: {
                step: plan.step,
                direction: 'download',
                loadedBytes: loaded,
                totalBytes: total,
                done: false,
                error: null,
              },
            }),
        });
        await this.restoreSnapshot(bytes, wanted);
        this.update({ checkpoint: { ...this.status.checkpoint!, done: true } });
        break;
      }
      case 'receive':
        break;
      case 'impossible':
        throw new Error(plan.reason);
    }
    if (plan.kind === 'send' || plan.kind === 'receive') {
      const root = plan.kind === 'send' ? session.rank : plan.root;
      const route = syncRoute(session.rank, ring.size, root);
      const opts = {
        id: { round: session.round, step: SYNC_ID_STEP, seq: 0 },
        hash: hashBytes,
        signal: session.signal,
        timeoutMs: this.timeouts.syncMs,
      };
      if (route.receiveFromLeft) {
        const bytes = await broadcastReceive(ring.left!, opts);
        const forward = route.sendToRight ? broadcastSend([ring.right!], bytes, opts) : Promise.resolve();
        // Restore a copy while the original is still being forwarded to the right (restore consumes its buffer).
        await Promise.all([forward, this.restoreSnapshot(route.sendToRight ? bytes.slice(0) : bytes, wanted)]);
      } else if (route.sendToRight) {
        const position = { step: wanted.step, ...positionAfter(wanted.step, job) };
        const bytes = await this.queue.run('snapshot', () => this.opts.trainer.snapshot(position));
        await broadcastSend([ring.right!], bytes, opts);
      }
    }
    // The round's starting state is committed: make it the backup.
    if (!sameTag(this.held.backup, this.held.live)) {
      await this.queue.run('saveBackup', async () => {
        await this.opts.trainer.saveBackup();
        this.held = { ...this.held, backup: this.held.live };
      });
    }
    if (!sameTag(this.held.live, wanted) && !(wanted.step === 0 && this.held.live?.step === 0)) {
      throw new Error(
        `after sync the tab holds step ${this.held.live?.step} (${this.held.live?.hash}), the round starts from step ${wanted.step} (${wanted.hash})`,
      );
    }
    this.update({
      lastSync: plan.kind,
      syncs: this.status.syncs + 1,
      localStep: wanted.step,
      committedStep: wanted.step,
    });
  }

  /** Load a snapshot and check it is the committed state the round starts from. */
  private async restoreSnapshot(bytes: ArrayBuffer, wanted: StateTag): Promise<void> {
    await this.queue.run('restore', async () => {
      const info = await this.opts.trainer.restore(bytes);
      // Whatever happens next, the live state is now the snapshot's.
      this.held = {
        ...this.held,
        live: { step: info.step, hash: info.step === 0 && wanted.hash === null ? null : info.paramsHash },
      };
      if (info.step !== wanted.step)
        throw new Error(`received the state of step ${info.step}, the round starts from step ${wanted.step}`);
      if (wanted.hash !== null && info.paramsHash !== wanted.hash) {
        throw new Error(`received parameters with hash ${info.paramsHash}, the committed hash is ${wanted.hash}`);
      }
    });
  }

  // ------------------------------------------------------------------ steps

  private async trainSteps(session: RoundSession, ring: Ring, job: JobPublic): Promise<void> {
    const { signal } = session;
    for (let step = session.msg.step; step <= job.totalSteps; step++) {
      if (signal.aborted) throw abortReason(signal);
      const work = stepWork(job, session.world, session.rank, step);
      const started = this.now();
      const gradient =
        work.indices.length > 0
          ? await this.queue.run('computeGradients', () => this.opts.trainer.computeGradients(work.indices))
          : { gradients: new ArrayBuffer(this.modelElements! * 4), lossSum: 0, samples: 0 };
      const computeMs = this.now() - started;
      this.lastComputeMs = computeMs;
      if (signal.aborted) throw abortReason(signal);
      const sums = new Float32Array(gradient.gradients);
      await ringAllreduce(ring, sums, {
        id: { round: session.round, step, seq: 0 },
        timeoutMs:
          Math.max(this.timeouts.collectiveMs, 10 * this.lastComputeMs) +
          evaluationAllowanceMs(step, job, computeMs, gradient.samples),
        signal,
      });
      if (signal.aborted) throw abortReason(signal);
      // Apply and hash as one worker task, so the live state is never left untagged.
      const hash = await this.queue.run('applyGradients', async () => {
        await this.opts.trainer.applyGradients(sums.buffer as ArrayBuffer, work.count);
        this.held = { ...this.held, live: { step, hash: null } };
        const h = await this.opts.trainer.hash();
        this.held = { ...this.held, live: { step, hash: h } };
        return h;
      });
      const sliceLoss = gradient.samples > 0 ? gradient.lossSum / gradient.samples : null;
      const losses =
        sliceLoss === null ? this.status.losses : [...this.status.losses.slice(-1999), { step, loss: sliceLoss }];
      this.update({
        localStep: step,
        stepsComputed: this.status.stepsComputed + 1,
        loss: sliceLoss ?? this.status.loss,
        losses,
        samplesPerSec:
          gradient.samples > 0 && computeMs > 0 ? (gradient.samples / computeMs) * 1000 : this.status.samplesPerSec,
        samplesComputed: this.status.samplesComputed + gradient.samples,
      });
      if (signal.aborted) throw abortReason(signal);
      const sent = this.opts.control.send({
        type: 'step_report',
        round: session.round,
        rank: session.rank,
        step,
        hash,
        lossSum: gradient.lossSum,
        samples: gradient.samples,
        // The pause before this step counts as this tab's time for it, so shares move work away from a paused tab.
        computeMs: Math.min(computeMs + this.pausedMs, 1e7),
      });
      if (!sent) throw new Error('control socket closed before the step report');
      this.pausedMs = 0;
      this.lastReported = { step, hash };
      if (gradient.samples > 0) this.uncommittedSamples.set(step, gradient.samples);
      if (work.commitPoint) {
        await bounded(session.committed(step).promise, {
          signal,
          timeoutMs: this.timeouts.coordinatorWaitMs,
          what: `commit of step ${step}`,
        });
        await this.queue.run('saveBackup', async () => {
          await this.opts.trainer.saveBackup();
          this.held = { ...this.held, backup: { step, hash } };
        });
        if (session.rank === 0 && expectsCheckpoint(step, job)) this.prepareCheckpoint(step, job);
        if (session.rank === 0 && isEvaluationPoint(step, job)) this.evaluateCommitted(session.round, step, job);
      }
      if (step < job.totalSteps) await this.pauseBetweenSteps(signal);
    }
    // Every step of the job is done; `done` follows from the coordinator.
  }

  /** The GPU-use limit (`setStepPause`): wait between two steps, cut short when the round ends. */
  private async pauseBetweenSteps(signal: AbortSignal): Promise<void> {
    const ms = this.status.stepPauseMs;
    if (ms <= 0 || signal.aborted) return;
    const started = this.now();
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
    this.pausedMs = this.now() - started;
  }

  // ------------------------------------------------------------------ test-set evaluation

  /**
   * Rank 0, right after committing `step` (an evaluation point): evaluate that committed state on the
   * first `job.evalSamples` test images and report it. Queued before the next step's worker calls, so
   * it sees exactly the committed parameters; not awaited, so the loop goes on (the next step's
   * gradients queue behind it). The other ranks wait for rank 0 in the next allreduce meanwhile
   * (`evaluationAllowanceMs`): a few seconds at most on SwiftShader for 2,000 images of the built-in
   * models. The report carries the round of the commit; the coordinator also takes it after that
   * round closed (e.g. at the job's end, when `done` follows the last commit at once).
   */
  private evaluateCommitted(round: number, step: number, job: JobPublic): void {
    const { epoch } = stepPosition(step, job);
    this.queue
      .run('evaluate', () => this.opts.trainer.evaluate(job.evalSamples))
      .then((r) => {
        if (!(r.count >= 1)) return;
        const correct = Math.min(r.count, Math.max(0, Math.round(r.accuracy * r.count)));
        const lossSum = r.lossAvg * r.count;
        if (!Number.isFinite(lossSum) || lossSum < 0)
          throw new Error(`test loss ${r.lossAvg} is not a finite non-negative number`);
        this.opts.control.send({ type: 'evaluation', round, step, epoch, testSamples: r.count, correct, lossSum });
        this.log(
          'info',
          `step ${step}: test accuracy ${((correct / r.count) * 100).toFixed(2)} % on ${r.count} images`,
        );
      })
      .catch((err) => this.log('warn', `evaluation of step ${step} failed: ${(err as Error).message}`));
  }

  // ------------------------------------------------------------------ checkpoints

  /** Snapshot the just-committed step now, before the next step changes the live state. */
  private prepareCheckpoint(step: number, job: JobPublic): void {
    const bytes = this.queue.run('snapshot', () => this.opts.trainer.snapshot({ step, ...positionAfter(step, job) }));
    bytes.catch(() => {});
    this.prepared = { step, bytes };
  }

  /** The committed state of `step` as a snapshot, whatever the live state is now. */
  private committedSnapshot(step: number): Promise<ArrayBuffer> {
    const job = this.job!;
    const position = { step, ...positionAfter(step, job) };
    if (this.prepared?.step === step) return this.prepared.bytes;
    return this.queue.run('checkpoint snapshot', async () => {
      const { live, backup } = this.held;
      if (live?.step === step) return this.opts.trainer.snapshot(position);
      if (backup?.step !== step)
        throw new Error(
          `asked for a checkpoint of step ${step}, this tab holds ${live?.step ?? 'nothing'} / backup ${backup?.step ?? 'nothing'}`,
        );
      // The live state ran ahead: park it, snapshot the backup, and put the live state back.
      const parked = await this.opts.trainer.snapshot({
        step: live!.step,
        ...positionAfter(Math.max(1, live!.step), job),
      });
      await this.opts.trainer.restoreBackup();
      const bytes = await this.opts.trainer.snapshot(position);
      await this.opts.trainer.restore(parked);
      return bytes;
    });
  }

  private async checkpointRequested(step: number, url: string): Promise<void> {
    const status = (patch: Partial<CheckpointTransferStatus>) =>
      this.update({
        checkpoint: {
          step,
          direction: 'upload',
          loadedBytes: 0,
          totalBytes: 0,
          done: false,
          error: null,
          ...this.status.checkpoint,
          ...patch,
        },
      });
    status({ step, loadedBytes: 0, totalBytes: 0, done: false, error: null });
    try {
      const bytes = await this.committedSnapshot(step);
      const target = new URL(url, this.opts.http.baseUrl);
      if (this.workerId) target.searchParams.set('workerId', this.workerId);
      await uploadCheckpoint(this.opts.http, target.href, bytes, {
        timeoutMs: this.timeouts.uploadMs,
        onProgress: (loaded, total) => status({ loadedBytes: loaded, totalBytes: total }),
      });
      status({ done: true, loadedBytes: bytes.byteLength, totalBytes: bytes.byteLength });
      this.update({ checkpointsUploaded: this.status.checkpointsUploaded + 1 });
      if (this.prepared?.step === step) this.prepared = null;
    } catch (err) {
      const message = (err as Error).message ?? String(err);
      this.log('warn', `checkpoint ${step} upload failed: ${message}`);
      status({ error: message });
    }
  }

  // ------------------------------------------------------------------ the end

  private finish(step: number): void {
    this.endSession('done', { keepPending: true });
    this.creditCommitted(step);
    this.update({ phase: 'done', committedStep: step, epochProgress: 1 });
    const count = this.opts.evaluateOnDone ?? 0;
    if (count > 0 && this.modelElements !== null) {
      this.queue
        .run('evaluate', () => this.opts.trainer.evaluate(count))
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
    Object.assign(this.status, patch);
    this.opts.onStatus?.({
      ...this.status,
      losses: this.status.losses,
      checkpoint: this.status.checkpoint && { ...this.status.checkpoint },
    });
  }

  private log(level: 'info' | 'warn' | 'error', text: string): void {
    this.opts.log?.(level, text);
  }

  private now(): number {
    return this.opts.now ? this.opts.now() : performance.now();
  }

  /** Held states, for tests. */
  get heldStates(): HeldStates {
    return this.held;
  }
}
