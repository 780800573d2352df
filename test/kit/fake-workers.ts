/**
 * Scripted fake workers: what the hostile visitor runs. Plain protocol clients (SimWorker, no
 * browser, no GPU) that join a real coordinator, say `ready`, and report every step with invented work:
 * made-up states whose real hashes they report, and mutually consistent sketches (every hop adds up,
 * every rank agrees), so nothing but a recomputation can tell. Each script computes the whole world's
 * claims for a step from the round alone (`fabricate`), so colluders agree without talking.
 *
 * When a check asks one of them for a state (`committed.upload`), the `upload` policy decides:
 * `honest` PUTs the state it committed to at once (it hashes right; the verifier finds the lie),
 * `withhold` never does, `late` only once its round stalls (the coordinator holds its commits) or its
 * steps are done. With `rejoin`, a script that is banned comes back at once as a new worker from the same
 * address, and keeps retrying while it is refused.
 */
import { NO_HASH } from '../../core/protocol/tab-messages';
import { stateHash, trainingStateHash } from '../../core/state/hash';
import { encodeSnapshot } from '../../core/state/snapshot';
import { gradientSketches, paramsSketch, type StepSketches } from '../../core/state/sketch';
import type { JobPublic } from '../../core/training/job';
import { parameterLayout } from '../../core/training/model-spec';
import { assignStep } from '../../core/training/groups';
import {
  referenceIsCommitPoint as isCommitPoint,
  referencePositionAfter as positionAfter,
  referenceStepPosition as stepPosition,
} from '../support/hole-free-layout';
import { initParams } from '../../kernels/model/layers';
import { ringSketches } from '../support/ring-sketches';
import { mulberry32 } from '../support/rng';
import { type ServerMsg, SimWorker } from '../support/sim-worker';

export type UploadPolicy = 'honest' | 'withhold' | 'late';

export interface FakeTeamOptions {
  wsUrl: string;
  httpUrl: string;
  /** How many colluding scripts. */
  size: number;
  upload: UploadPolicy;
  /** Come back as a new worker after a ban. */
  rejoin?: boolean;
  /** The loopback address the scripts connect from (their "place"). */
  localAddress?: string;
}

/** What the team saw: reports sent, uploads made, bans and refused hellos. */
export interface TeamLog {
  firstLieAt: number | null;
  reports: number;
  uploads: { status: number; at: number }[];
  banned: number;
  refusedHellos: number;
}

type World = { workerId: string; rank: number; share: number }[];

/** A made-up training state after `step` (params, moments, t; local mode: outer momentum), the same for every script. */
function fabricatedState(job: JobPublic, step: number, rank = 0) {
  const n = parameterLayout(job.model).totalElements;
  const local = job.sync.mode === 'local';
  if (step === 0) {
    // The true fresh state: a check of the first commit finds nothing wrong with where it started.
    const moments = job.optimizer.kind === 'adamw' ? [new Float32Array(n), new Float32Array(n)] : [new Float32Array(n)];
    return {
      params: initParams(job.model, parameterLayout(job.model), job.seed),
      moments,
      t: 0,
      outer: local ? new Float32Array(n) : null,
    };
  }
  const rand = mulberry32(step * 7919 + 1);
  const own = mulberry32(step * 104_729 + rank + 3);
  const params = Float32Array.from({ length: n }, () => (rand() - 0.5) * 0.2);
  const outer = local ? Float32Array.from({ length: n }, () => (rand() - 0.5) * 1e-3) : null;
  const count = job.optimizer.kind === 'adamw' ? 2 : 1;
  // Every-step ranks agree on everything; local ranks each have moments of their own.
  const source = local ? own : rand;
  const moments = Array.from({ length: count }, (_, k) =>
    Float32Array.from({ length: n }, () => (k === 1 ? source() * 1e-4 : (source() - 0.5) * 1e-2)),
  );
  return { params, moments, t: local ? step + rank : step, outer };
}

function agreedHash(state: ReturnType<typeof fabricatedState>): string {
  return state.outer ? stateHash(state.params, state.outer) : trainingStateHash(state.params, state.moments, state.t);
}

/** An honest-looking ring of made-up contributions: every hop adds up, every rank's sum agrees. */
function ringClaims(own: number[][]): Omit<StepSketches, 'params'>[] {
  return ringSketches(own, (v) => v.map((x) => Math.abs(x) * 1.5 + 1e-3));
}

/**
 * The commit point before `step` (0: none): a verifying job never commits partially, so its layout is
 * the hole-free one (test/support/hole-free-layout.ts).
 */
function previousCommitPoint(step: number, job: JobPublic): number {
  let prev = step - 1;
  while (prev > 0 && !isCommitPoint(prev, job)) prev -= 1;
  return prev;
}

/** Every rank's report of commit point `step` in `world`: the fabricated hash, sketches and (local) commitments. */
export function fabricate(job: JobPublic, world: World, step: number) {
  const size = world.length;
  const local = job.sync.mode === 'local';
  const states = world.map((w) => fabricatedState(job, step, w.rank));
  const hash = agreedHash(states[0]);
  const buckets = gradientSketches([new Float32Array(size)], hash, size)[0].values.length;
  const rand = mulberry32(step * 31 + size);
  const own = world.map(() => Array.from({ length: buckets }, () => (rand() - 0.5) * 4));
  const ring = ringClaims(own);
  const prev = previousCommitPoint(step, job);
  return world.map((w, r) => {
    const me = states[r];
    const [params, outer, ...moments] = gradientSketches(
      [me.params, me.outer ?? new Float32Array(me.params.length), ...me.moments],
      hash,
      size,
    );
    const start = fabricatedState(job, prev, w.rank);
    const sketch: StepSketches = local
      ? {
          ...ring[r],
          params: Array.from(params.values),
          outer: Array.from(outer.values),
          moments: moments.map((m) => Array.from(m.values)),
        }
      : { ...ring[r], params: Array.from(paramsSketch(me.params, hash).values) };
    const commitments = local
      ? { innerHash: trainingStateHash(start.params, start.moments, start.t), innerT: me.t }
      : {};
    return { hash, sketch, ...commitments };
  });
}

/** The snapshot a script uploads for a check asking for the state of `step` (as its rank committed to it). */
function fabricatedSnapshot(job: JobPublic, step: number, rank: number): Uint8Array<ArrayBuffer> {
  const state = fabricatedState(job, step, rank);
  const position = positionAfter(step, job);
  return new Uint8Array(
    encodeSnapshot({
      spec: job.model,
      step,
      ...position,
      optimizer: { kind: job.optimizer.kind, t: state.t },
      params: state.params,
      moments: state.moments,
      outer: state.outer,
    }),
  );
}

/** One fake worker: joins, reports invented steps, uploads per policy, rejoins per policy. */
class FakeWorker {
  private worker: SimWorker | null = null;
  private job: JobPublic | null = null;
  private round: { round: number; world: World; rank: number } | null = null;
  private lastCommitAt = Date.now();
  private pendingUploads: { step: number; url: string }[] = [];
  private timers: NodeJS.Timeout[] = [];
  stopped = false;

  constructor(
    private readonly opts: FakeTeamOptions,
    private readonly log: TeamLog,
  ) {}

  async start(): Promise<void> {
    while (!this.stopped) {
      try {
        const worker = await SimWorker.connect(this.opts.wsUrl, { localAddress: this.opts.localAddress });
        const welcome = await worker.join();
        this.worker = worker;
        this.job = welcome.job as JobPublic;
        this.timers.push(setInterval(() => !worker.isClosed && worker.heartbeat(), 1000));
        worker.onMessage = (msg) => this.onMessage(msg);
        for (const msg of worker.drain()) this.onMessage(msg);
        const closed = await worker.closed;
        if (closed.code === 4005 || closed.reason === 'cooling off') this.log.banned += 1;
        if (!this.opts.rejoin || this.stopped) return;
      } catch {
        // Refused (cooling off) at upgrade or at hello: try again shortly.
        this.log.refusedHellos += 1;
        if (!this.opts.rejoin) return;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    this.worker?.socket.terminate();
  }

  private onMessage(msg: ServerMsg): void {
    const w = this.worker!;
    if (msg.type === 'round') {
      const me = (msg.world as World).find((x) => x.workerId === w.workerId)!;
      this.round = { round: msg.round, world: msg.world, rank: me.rank };
      w.ready(msg.round);
    } else if (msg.type === 'train' && this.round?.round === msg.round) {
      this.outerStep(this.roundStep());
    } else if (msg.type === 'committed' && this.round?.round === msg.round) {
      this.lastCommitAt = Date.now();
      if (msg.upload) this.uploadPerPolicy(msg.upload);
      this.outerStep(msg.step + 1);
    } else if (msg.type === 'round_closed') this.round = null;
  }

  /** The first step of the current round (its `round` message says). */
  private roundStep(): number {
    return this.worker!.received.filter((m) => m.type === 'round').at(-1)?.step ?? 1;
  }

  /** Report steps `from` … the next commit point, inventing everything. */
  private outerStep(from: number): void {
    const job = this.job!;
    const round = this.round;
    if (!round || from > job.totalSteps) {
      this.flushLate();
      return;
    }
    for (let step = from; step <= job.totalSteps; step++) {
      const { cursor, count } = stepPosition(step, job);
      const samples = assignStep(
        cursor,
        count,
        round.world.map((x) => x.share),
      )[round.rank].count;
      const commit = isCommitPoint(step, job);
      const claims = commit ? fabricate(job, round.world, step)[round.rank] : null;
      this.worker!.send({
        type: 'step_report',
        runId: this.worker!.runId,
        workerId: this.worker!.workerId,
        round: round.round,
        rank: round.rank,
        step,
        hash: claims?.hash ?? NO_HASH,
        lossSum: samples * 0.1,
        samples,
        computeMs: 1,
        ...(claims ? { sketch: claims.sketch } : {}),
        ...(claims && 'innerHash' in claims ? { innerHash: claims.innerHash, innerT: claims.innerT } : {}),
      });
      this.log.reports += 1;
      this.log.firstLieAt ??= Date.now();
      if (commit) break;
    }
  }

  private uploadPerPolicy(upload: { step: number; url: string }): void {
    if (this.opts.upload === 'withhold') return;
    if (this.opts.upload === 'honest') void this.put(upload);
    else {
      this.pendingUploads.push(upload);
      // Late: only once the round stalls (its commits held) or the steps are done.
      const timer = setInterval(() => {
        if (Date.now() - this.lastCommitAt > 3000) this.flushLate();
      }, 500);
      this.timers.push(timer);
    }
  }

  private flushLate(): void {
    for (const u of this.pendingUploads.splice(0)) void this.put(u);
  }

  private async put(upload: { step: number; url: string }): Promise<void> {
    const rank = this.round?.rank ?? 0;
    try {
      const res = await fetch(`${this.opts.httpUrl}${upload.url}`, {
        method: 'PUT',
        body: fabricatedSnapshot(this.job!, upload.step, rank),
      });
      await res.arrayBuffer();
      this.log.uploads.push({ status: res.status, at: Date.now() });
    } catch {
      this.log.uploads.push({ status: 0, at: Date.now() });
    }
  }
}

/** A team of colluding scripts; `stop()` ends them all. */
export class FakeTeam {
  readonly log: TeamLog = { firstLieAt: null, reports: 0, uploads: [], banned: 0, refusedHellos: 0 };
  private readonly workers: FakeWorker[];

  constructor(readonly opts: FakeTeamOptions) {
    this.workers = Array.from({ length: opts.size }, () => new FakeWorker(opts, this.log));
  }

  start(): void {
    for (const w of this.workers) void w.start();
  }

  stop(): void {
    for (const w of this.workers) w.stop();
  }
}
