/**
 * `SimTrainer` drives a SimWorker through whole rounds without gradients: ready, step reports with the
 * right sample counts and a hash that is a pure function of the step, waiting for `committed`,
 * checkpoint uploads of a valid simulated snapshot. `untilCommitted(step)` / `untilDone()` await
 * progress; `SimTrainer.rejoin(old, wsUrl, …)` reconnects like a tab after a coordinator restart.
 */
import { trainingStateHash } from '../../core/state/hash';
import type { JobPublic } from '../../core/training/job';
import { isTransformer, type ModelSpec, parameterLayout, type TransformerSpec } from '../../core/training/model-spec';
import { mulberry32 } from './rng';
import { groupPlan, jobDone, rankRanges, rangesCount, type RecordPosition } from '../../core/training/groups';
import { referencePositionAfter } from './hole-free-layout';
import { encodeSnapshot, OPTIMIZER_MOMENTS } from '../../core/state/snapshot';
import { type ServerMsg, SimWorker } from './sim-worker';

/**
 * Simulated parameters after `step` (deterministic, the same in every simulated rank). A transformer's
 * are seeded uniform values (see transformerParams) so a model decoded from them has distinct logits.
 */
export function simulatedParams(spec: ModelSpec, step: number): Float32Array {
  if (isTransformer(spec)) return transformerParams(spec, step);
  const params = new Float32Array(parameterLayout(spec).totalElements);
  for (let i = 0; i < params.length; i++) params[i] = step * 1e-3 + (i % 17) * 1e-4;
  return params;
}

/**
 * A transformer's parameters as if trained: matrices uniform in ±0.3 (logits of order 1, so the best
 * next token stands clear of the second), LayerNorm gains 1 ± 0.1, biases ±0.05; seeded by the step.
 */
function transformerParams(spec: TransformerSpec, step: number): Float32Array {
  const layout = parameterLayout(spec);
  const params = new Float32Array(layout.totalElements);
  const rand = mulberry32(0x5eed + step);
  for (const e of layout.entries) {
    const gain = /ln_[12f]\.weight$/.test(e.name);
    const [center, spread] = e.shape.length === 2 ? [0, 0.3] : gain ? [1, 0.1] : [0, 0.05];
    for (let i = 0; i < e.size; i++) params[e.offset + i] = center + spread * (2 * rand() - 1);
  }
  return params;
}

const stateHashCache = new Map<string, string>();
/**
 * The agreed hash of the simulated state after `step` (core/state/hash.ts `trainingStateHash` of
 * `simulatedSnapshot`'s sections: the parameters, zero moments, t = step), cached: what a simulated rank
 * that uploads checkpoints reports, so the coordinator's check of an upload finds it.
 */
export function simulatedStateHash(job: Pick<JobPublic, 'model' | 'optimizer'>, step: number): string {
  const key = `${job.model.name}:${job.optimizer.kind}:${step}`;
  let hash = stateHashCache.get(key);
  if (!hash) {
    const params = simulatedParams(job.model, step);
    const moments = OPTIMIZER_MOMENTS[job.optimizer.kind].map(() => new Float32Array(params.length));
    hash = trainingStateHash(params, moments, step);
    stateHashCache.set(key, hash);
    if (stateHashCache.size > 256) stateHashCache.delete(stateHashCache.keys().next().value!);
  }
  return hash;
}

/**
 * A checkpoint snapshot of simulated state at `step`, as a tab would upload it; `at`: the record after
 * that commit (default: where a run without partial commits has it).
 */
export function simulatedSnapshot(
  job: JobPublic,
  step: number,
  at: { epoch: number; cursor: number } = referencePositionAfter(step, job),
): Uint8Array<ArrayBuffer> {
  const params = simulatedParams(job.model, step);
  const { epoch, cursor } = at;
  const moments = OPTIMIZER_MOMENTS[job.optimizer.kind].map(() => new Float32Array(params.length));
  return new Uint8Array(
    encodeSnapshot({
      spec: job.model,
      step,
      epoch,
      cursor,
      optimizer: { kind: job.optimizer.kind, t: step },
      params,
      moments,
    }),
  );
}

export interface SimTrainerOptions {
  /** Coordinator base URL (for checkpoint uploads), e.g. `proc.url`. */
  httpUrl: string;
  /** Do not compute steps after this one (default: the job's last step). */
  stopAfterStep?: number;
  /** Delay before each report (simulated compute), ms. Default 0. */
  computeMs?: number;
  /** The `computeMs` the reports claim (default 1): a liar claims far less than it takes. */
  claimedComputeMs?: number;
  /** Send heartbeats every this many ms. Default: the job's heartbeatMs / 2. 0 disables. */
  heartbeatMs?: number;
  /** Upload checkpoints when asked. Default true. */
  uploadCheckpoints?: boolean;
  /** Called on every step report sent (`at`: performance.now()) — for latency measurements. */
  onReport?: (step: number, at: number, round: number) => void;
  /** Called on every `committed` received. */
  onCommitted?: (step: number, at: number, round: number) => void;
  /** Keep every received message in `worker.received` (default true; turn off under load). */
  keepReceived?: boolean;
  /** The GPU it claims in its hello (default a simulated one). */
  adapter?: { vendor: string; architecture: string; description: string };
  /** Mean loss per sample a report claims at `step` (default 0.5). */
  lossAt?: (step: number) => number;
  /** Wire bytes per sample a report claims (default: the field is left out). */
  wireBytesPerSample?: number;
  /** Extra fields of each heartbeat (peerRttMs, peerLinks, iceError), asked at each beat. */
  heartbeatFields?: (trainer: SimTrainer) => Record<string, unknown>;
}

/**
 * Drives a joined SimWorker through the protocol with no gradients: ready on `round`, on `train` report
 * steps up to the next commit point (hash = `simulatedStateHash(job, step)`, samples = its slice), wait for
 * `committed`, go on; stop on `round_closed`; upload a simulated snapshot on `checkpoint_request`.
 */
export class SimTrainer {
  readonly job: JobPublic;
  /** Steps this worker saw committed, in order. */
  readonly committed: number[] = [];
  /** Last step this worker reported (0: none). */
  lastReported = 0;
  readonly errors: ServerMsg[] = [];
  readonly uploads: { step: number; status: number }[] = [];
  done = false;
  /**
   * The current round: this worker's rank, the split of the group in flight (shares by slot and its
   * slot: a carried group's, else the round's own), the step to compute next, and where the record
   * stands at the group in flight.
   */
  private round: {
    round: number;
    rank: number;
    shares: number[];
    slot: number;
    step: number;
    /** The round's own shares by rank (the split of the groups after a carried one). */
    world: number[];
    /** Worker ids by rank. */
    workers: string[];
    /** This rank's samples in a step of `count` positions under `shares` and `slot` (cleared when they change). */
    samples: Map<number, number>;
  } | null = null;
  /** The record at the group in flight, and after recent commits (for checkpoint snapshots). */
  private position: RecordPosition = { epoch: 0, cursor: 0, holes: [] };
  /** The first step of the group in flight. */
  private groupStart = 1;
  private readonly positions = new Map<number, RecordPosition>();
  private training = false;
  private heartbeat: NodeJS.Timeout | null = null;
  private stopped = false;
  private progressWaiters: { ready: () => boolean; resolve: () => void }[] = [];

  constructor(
    readonly worker: SimWorker,
    welcome: ServerMsg,
    private readonly options: SimTrainerOptions,
  ) {
    this.job = welcome.job as JobPublic;
    if (options.keepReceived === false) {
      worker.keepReceived = false;
      worker.received.length = 0;
    }
    worker.onMessage = (msg) => this.onMessage(msg);
    for (const msg of worker.drain()) this.onMessage(msg);
    const period = options.heartbeatMs ?? Math.floor(this.job.heartbeatMs / 2);
    if (period > 0) {
      this.heartbeat = setInterval(() => {
        if (!worker.isClosed) worker.heartbeat(options.heartbeatFields?.(this));
      }, period);
    }
    void worker.closed.then(() => this.stop());
  }

  /** Joins a new simulated worker and starts training with it. */
  static async join(wsUrl: string, options: SimTrainerOptions): Promise<SimTrainer> {
    const worker = await SimWorker.connect(wsUrl);
    const welcome = await worker.join(options.adapter ? { adapter: options.adapter } : {});
    return new SimTrainer(worker, welcome, options);
  }

  /**
   * A tab reconnecting (after its socket or the coordinator died): same run and worker id, and it says
   * which states it holds — its last committed step and, as `pending`, the last step it reported.
   */
  static async rejoin(previous: SimTrainer, wsUrl: string, options: SimTrainerOptions): Promise<SimTrainer> {
    previous.stop();
    const worker = await SimWorker.connect(wsUrl);
    const pending =
      previous.lastReported > previous.lastCommitted
        ? { step: previous.lastReported, hash: simulatedStateHash(previous.job, previous.lastReported) }
        : null;
    const welcome = await worker.join({
      runId: previous.worker.runId,
      workerId: previous.worker.workerId,
      secret: previous.worker.secret,
      haveStep: previous.lastCommitted,
      haveHash: previous.lastCommitted > 0 ? simulatedStateHash(previous.job, previous.lastCommitted) : null,
      pending,
    });
    const trainer = new SimTrainer(worker, welcome, options);
    trainer.committed.unshift(...previous.committed);
    trainer.lastReported = Math.max(trainer.lastReported, previous.lastReported);
    return trainer;
  }

  get lastCommitted(): number {
    return this.committed.length > 0 ? this.committed[this.committed.length - 1] : 0;
  }

  get rank(): number | null {
    return this.round?.rank ?? null;
  }

  /** The worker ids of its round by rank (empty outside a round). */
  get roundWorld(): string[] {
    return this.round?.workers ?? [];
  }

  /** In a round that has not closed (syncing or training). */
  get inRound(): boolean {
    return this.round !== null;
  }

  /** Resolves once this worker has seen `step` (or a later one) committed. */
  untilCommitted(step: number, timeoutMs = 20_000): Promise<void> {
    return this.until(() => this.lastCommitted >= step, `step ${step} committed`, timeoutMs);
  }

  /** Resolves once this worker received `done`. */
  untilDone(timeoutMs = 30_000): Promise<void> {
    return this.until(() => this.done, 'done', timeoutMs);
  }

  /** Resolves once `ready()` holds (checked after every message). */
  until(ready: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolveWait, reject) => {
      const timer = setTimeout(() => {
        this.progressWaiters = this.progressWaiters.filter((w) => w !== waiter);
        reject(
          new Error(
            `SimTrainer ${this.worker.workerId}: not ${what} within ${timeoutMs} ms (last committed ${this.lastCommitted}, errors ${JSON.stringify(this.errors.slice(-3))})`,
          ),
        );
      }, timeoutMs);
      const waiter = {
        ready,
        resolve: () => {
          clearTimeout(timer);
          resolveWait();
        },
      };
      this.progressWaiters.push(waiter);
    });
  }

  stop(): void {
    this.stopped = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = null;
  }

  private onMessage(msg: ServerMsg): void {
    if (this.stopped) return;
    this.handleMessage(msg);
    this.notifyProgress();
  }

  private notifyProgress(): void {
    for (const waiter of [...this.progressWaiters]) {
      if (waiter.ready()) {
        this.progressWaiters = this.progressWaiters.filter((w) => w !== waiter);
        waiter.resolve();
      }
    }
  }

  private handleMessage(msg: ServerMsg): void {
    switch (msg.type) {
      case 'round': {
        const me = (msg.world as { workerId: string; rank: number; share: number }[]).find(
          (w) => w.workerId === this.worker.workerId,
        );
        if (!me) return;
        const carry = msg.carry as { shares: number[]; slots: number[]; reported: number[] } | undefined;
        const shares = msg.world.map((w: { share: number }) => w.share);
        this.round = {
          round: msg.round,
          rank: me.rank,
          shares: carry ? carry.shares : shares,
          slot: carry ? carry.slots[me.rank] : me.rank,
          // A carried group goes on after the reports the coordinator has (this simulation keeps no state).
          step: carry ? carry.reported[me.rank] + 1 : msg.step,
          world: shares,
          workers: msg.world.map((w: { workerId: string }) => w.workerId),
          samples: new Map(),
        };
        this.position = { epoch: msg.epoch, cursor: msg.cursor, holes: msg.holes ?? [] };
        this.groupStart = msg.step;
        this.positions.set(msg.step - 1, this.position);
        this.training = false;
        this.worker.ready(msg.round);
        break;
      }
      case 'train':
        if (this.round && msg.round === this.round.round) {
          this.training = true;
          this.compute(this.round.step);
        }
        break;
      case 'committed':
        this.committed.push(msg.step);
        this.position = { epoch: msg.epoch, cursor: msg.cursor, holes: msg.holes ?? [] };
        this.groupStart = msg.step + 1;
        this.positions.set(msg.step, this.position);
        // The next group is the round's own split.
        if (this.round && (this.round.shares !== this.round.world || this.round.slot !== this.round.rank))
          Object.assign(this.round, { shares: this.round.world, slot: this.round.rank, samples: new Map() });
        this.options.onCommitted?.(msg.step, performance.now(), msg.round);
        if (this.training && this.round && msg.round === this.round.round) this.compute(msg.step + 1);
        break;
      case 'round_closed':
        this.training = false;
        if (this.round && msg.round === this.round.round) this.round = null;
        break;
      case 'checkpoint_request':
        if (this.options.uploadCheckpoints !== false) void this.upload(msg.step, msg.url);
        break;
      case 'done':
        this.done = true;
        this.training = false;
        break;
      case 'error':
        this.errors.push(msg);
        break;
    }
  }

  private compute(step: number): void {
    if (step > (this.options.stopAfterStep ?? Infinity) || !this.round || jobDone(this.position, this.job)) return;
    const round = this.round;
    const group = groupPlan(this.position, this.groupStart, this.job);
    const span = group.steps[step - group.firstStep];
    if (!span) return;
    const send = () => {
      if (this.stopped || !this.training || this.round !== round || this.worker.isClosed) return;
      // Once per split and step size: a bench runs hundreds of ranks in one process, and the split is a
      // sort over the world.
      let samples = round.samples.get(span.count);
      if (samples === undefined) {
        samples = rangesCount(rankRanges(span, round.shares, round.slot));
        round.samples.set(span.count, samples);
      }
      this.worker.report({
        round: round.round,
        rank: round.rank,
        step,
        hash: simulatedStateHash(this.job, step),
        samples,
        lossSum: samples * (this.options.lossAt?.(step) ?? 0.5),
        computeMs: this.options.claimedComputeMs ?? 1,
        ...(this.options.wireBytesPerSample === undefined
          ? {}
          : { wireBytes: samples * this.options.wireBytesPerSample }),
      });
      this.lastReported = step;
      this.options.onReport?.(step, performance.now(), round.round);
      // Between commit points a rank goes straight on to the next step.
      if (step !== group.lastStep) this.compute(step + 1);
    };
    if (this.options.computeMs) setTimeout(send, this.options.computeMs);
    else send();
  }

  private async upload(step: number, url: string): Promise<void> {
    try {
      const res = await fetch(`${this.options.httpUrl}${url}`, {
        method: 'PUT',
        body: simulatedSnapshot(this.job, step, this.positions.get(step)),
        headers: { 'content-type': 'application/octet-stream' },
      });
      await res.arrayBuffer();
      this.uploads.push({ step, status: res.status });
    } catch {
      this.uploads.push({ step, status: 0 });
    }
    this.notifyProgress();
  }
}
