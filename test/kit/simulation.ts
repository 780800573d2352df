/**
 * The elastic loop without a browser: the real coordinator state machine in-process (executed like
 * the server does, over fake sockets that JSON-encode and validate every message), in-memory data
 * channels (`memory-link.ts`), and a CPU "trainer" with the worker's interface. Unit tests drive
 * churn through it (goodbye, crash, join, coordinator restart, every tab gone) in milliseconds, and
 * because the fake gradients are small integers their sums are exact in float32, so the parameters
 * after a churned run must be bit-identical to an uninterrupted run's: elastic invariance as a
 * hash comparison.
 *
 * Nothing here runs in the product (test/kit is test code; the product may not import it).
 */
import { stateHash, trainingStateHash } from '../../core/state/hash';
import { stepSketches } from '../../core/state/step-sketches';
import type { JobSpec, JobSpecInput } from '../../core/training/job';
import {
  DEFAULT_TRUST_POLICY,
  initialState,
  restoreState,
  type CommitRecord,
  type CoordinatorState,
  type DurableState,
  type Event,
  type TrustPolicy,
} from '../../coordinator/machine/machine';
import { mergeRanges, type PositionRange } from '../../core/training/groups';
import { parameterLayout, type ModelSpec } from '../../core/training/model-spec';
import { epochOrder } from '../../core/training/sampler';
import { MachineExecutor } from '../../coordinator/runtime/executor';
import type { StoreOp } from '../../coordinator/runtime/store';
import { NO_EXECUTOR_METRICS } from './executor-metrics';
import { NO_HASH } from '../../core/protocol/tab-messages';
import type { WorldEntry } from '../../core/protocol/coordinator-messages';
import { parseClientMessage } from '../../core/protocol/control-parse';
import { decodeSnapshot, encodeSnapshot } from '../../core/state/snapshot';
import { CoordinatorClient, type WebSocketLike } from '../../web/net/coordinator-client';
import type { Ring } from '../../web/net/link';
import { memoryLinkPair, type MemoryLink, type MemoryLinkOptions } from '../../web/net/memory-link';
import { sha256Hex, type HttpPort } from '../../web/elastic/checkpoint-transfer';
import { ElasticLoop, type ElasticLoopOptions, type ElasticStatus } from '../../web/elastic/elastic-loop';
import type { MeshPort, TrainerPort } from '../../web/elastic/ports';
import type { GroupLinks } from '../../web/net/group-allreduce';
import { groupPartners } from '../../core/training/group-geometry';
import { type ApplyOptions, type ApplyResult, type NextIndices, sameIndices } from '../../web/worker/elastic-steps';
import { EagerOuter } from '../../web/worker/eager-outer';
import { OuterState } from '../../web/worker/outer-step';
import type {
  BuildModelOptions,
  EvaluationResult,
  GradientResult,
  ModelSummary,
  OuterReport,
  OuterReportOptions,
  RestoredState,
} from '../../web/worker/types';

// ---------------------------------------------------------------- a CPU trainer

/** A small model spec for simulations: 2×2 inputs, 3 hidden, 2 classes (256 aligned floats). */
export const SIM_MODEL: ModelSpec = {
  name: 'sim',
  input: [2, 2, 1],
  classes: 2,
  layers: [
    { type: 'dense', units: 3, activation: 'relu' },
    { type: 'dense', units: 2, activation: 'none' },
  ],
};

function mix(a: number, b: number): number {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 0x7f4a7c15, 0xc2b2ae35);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  return (h ^ (h >>> 12)) >>> 0;
}

/**
 * Deterministic stand-in for the training worker. Per-sample gradients are integers in [-2, 2] that
 * depend on the sample and on the current parameters (so a wrong state yields a different
 * trajectory); sums of a few hundred of them are exact in float32 whatever the order.
 * The optimizer is heavy-ball SGD, so the state has a moment buffer and a step counter like the real one.
 */
export class CpuTrainer implements TrainerPort {
  private spec: ModelSpec | null = null;
  private params = new Float32Array(0);
  private velocity = new Float32Array(0);
  private t = 0;
  private backup: { params: Float32Array; velocity: Float32Array; t: number } | null = null;
  /** Local sync mode's outer state (the worker's `OuterState`), or null. */
  private outer: OuterState | null = null;
  /**
   * Local mode: trainingStateHash of the state this outer step's inner steps started from, which must be
   * the backup (the pseudo-gradient is taken against it, and a verifying report commits to it); what
   * went otherwise is in `problems`.
   */
  private innerStart: string | null = null;
  problems: string[] = [];
  /** An overlapped job's own outer state (the worker's `EagerOuter`, made by `resetOuter`), or null. */
  private eager: EagerOuter | null = null;
  calls: string[] = [];
  /** A hang (`hang`): the worker calls of that kind stall until `resume`. */
  private hanging: { at: 'inner' | 'outer'; resumed: Promise<void>; resume: () => void } | null = null;

  constructor(private readonly opts: { delayMs?: number } = {}) {}

  private async pause(): Promise<void> {
    await new Promise((r) => setTimeout(r, this.opts.delayMs ?? 0));
  }

  /**
   * From now on, worker calls of an inner step (`inner`: gradients and applies) or of an outer step
   * (`outer`: the pseudo-gradient) stall, like a tab whose main thread or GPU stopped, until `resume`.
   * The tab's coordinator client keeps its heartbeats (a timer of its own), as a hung tab's worker timer may.
   */
  hang(at: 'inner' | 'outer'): void {
    let resume = () => {};
    const resumed = new Promise<void>((r) => {
      resume = r;
    });
    this.hanging = { at, resumed, resume };
  }

  resume(): void {
    this.hanging?.resume();
    this.hanging = null;
  }

  private async stall(at: 'inner' | 'outer'): Promise<void> {
    if (this.hanging?.at === at) {
      this.calls.push(`hung:${at}`);
      await this.hanging.resumed;
    }
  }

  async buildModel(opts: BuildModelOptions): Promise<ModelSummary> {
    this.calls.push('buildModel');
    await this.pause();
    this.version += 1;
    const spec = typeof opts.model === 'string' ? SIM_MODEL : opts.model;
    const layout = parameterLayout(spec);
    this.spec = spec;
    this.params = new Float32Array(layout.totalElements);
    for (let j = 0; j < this.params.length; j++) this.params[j] = ((mix(opts.seed, j) % 200) - 100) / 64;
    this.velocity = new Float32Array(layout.totalElements);
    this.t = 0;
    this.backup = null;
    this.innerStart = null;
    this.outer = opts.outer ? new OuterState(opts.outer, layout.totalElements) : null;
    this.eager = null;
    return { name: spec.name, parameterCount: layout.parameterCount, totalElements: layout.totalElements };
  }

  /** Gradients kept "on the device" by `computeGradients(…, true)`, for `applyAndHash(null, …)`. */
  private onDevice: Float32Array | null = null;
  /** Bumped by every change of the state: a prefetch made before a change is stale. */
  private version = 0;
  /** Gradients of the next step computed inside `applyAndHash` (the worker's prefetch). */
  private prefetch: { indices: Uint32Array; version: number; g: Float32Array; lossSum: number } | null = null;

  private gradientsOf(indices: Uint32Array): { g: Float32Array; lossSum: number } {
    const g = new Float32Array(this.params.length);
    let lossSum = 0;
    for (const i of indices) {
      for (let j = 0; j < g.length; j++) g[j] += ((i * 31 + j * 7 + (Math.floor(this.params[j] * 8) & 3)) % 5) - 2;
      lossSum += (i % 7) * 0.5 + Math.abs(this.params[0]);
    }
    return { g, lossSum };
  }

  /** The prefetch for `indices` if it was made on the current state (consumed either way). */
  private takePrefetch(indices: Uint32Array): { g: Float32Array; lossSum: number } | null {
    const p = this.prefetch;
    this.prefetch = null;
    return p && p.version === this.version && sameIndices(p.indices, indices) ? p : null;
  }

  async computeGradients(indices: Uint32Array, keepOnDevice = false): Promise<GradientResult> {
    this.calls.push('computeGradients');
    await this.pause();
    await this.stall('inner');
    const { g, lossSum } = this.takePrefetch(indices) ?? this.gradientsOf(indices);
    this.onDevice = keepOnDevice ? g : null;
    return { gradients: keepOnDevice ? null : (g.buffer as ArrayBuffer), lossSum, samples: indices.length };
  }

  /** The worker's apply + hash (web/worker/elastic-steps.ts), with its backup-first and prefetch. */
  async applyAndHash(
    sums: ArrayBuffer | null,
    sampleCount: number,
    next: NextIndices | null,
    opts: ApplyOptions = {},
  ): Promise<ApplyResult> {
    await this.stall('inner');
    if (opts.backupFirst) await this.saveBackup();
    if (this.outer && this.innerStart === null)
      this.innerStart = trainingStateHash(this.params, [this.velocity], this.t);
    let own: GradientResult | null = null;
    if (opts.prefetched) {
      const p = this.takePrefetch(opts.prefetched) ?? this.gradientsOf(opts.prefetched);
      this.onDevice = p.g;
      own = { gradients: null, lossSum: p.lossSum, samples: opts.prefetched.length };
    }
    const kept = this.onDevice;
    this.onDevice = null;
    if (!sums && !kept) throw new Error('applyAndHash: no sums and no gradients kept on the device');
    await this.applyGradients(sums ? new Float32Array(sums) : kept!, sampleCount);
    if (next && next.indices.length > 0) {
      this.calls.push('prefetch');
      this.prefetch = { indices: next.indices.slice(), version: this.version, ...this.gradientsOf(next.indices) };
    }
    const hash = opts.hash === false ? NO_HASH : await this.hash();
    const k = opts.sketch;
    if (!k || !sums) return { hash, gradient: own };
    // A verifying job's sketches, as the worker builds them (core/state/step-sketches.ts).
    const [mine, sum, sent, received] = [k.own, sums, k.sent, k.received].map((b) => new Float32Array(b));
    const vectors = { own: mine, sum, sent, received, params: this.params };
    return { hash, gradient: own, sketch: stepSketches(vectors, hash, k.world, k.compression ?? 'none') };
  }

  async applyGradients(s: Float32Array, sampleCount: number): Promise<void> {
    this.calls.push('applyGradients');
    await this.pause();
    this.t += 1;
    this.version += 1;
    for (let j = 0; j < this.params.length; j++) {
      this.velocity[j] = Math.fround(0.5 * this.velocity[j] + s[j] / sampleCount);
      this.params[j] = Math.fround(this.params[j] - 0.125 * this.velocity[j]);
    }
  }

  /** The agreed hash, as the worker's: the whole state in every-step mode, θ and u in local mode. */
  async hash(): Promise<string> {
    if (this.outer) return stateHash(this.params, this.outer.momentum);
    return trainingStateHash(this.params, [this.velocity], this.t);
  }

  async saveBackup(): Promise<void> {
    this.calls.push('saveBackup');
    this.backup = { params: this.params.slice(), velocity: this.velocity.slice(), t: this.t };
    this.outer?.saveBackup();
    if (this.eager?.syncPending) this.eager.commit();
  }

  async pseudoGradient(weight: number): Promise<ArrayBuffer> {
    this.calls.push('pseudoGradient');
    await this.pause();
    await this.stall('outer');
    if (!this.outer || !this.backup) throw new Error('pseudoGradient: no outer state or no backup');
    const { params, velocity, t } = this.backup;
    if (this.innerStart !== null && this.innerStart !== trainingStateHash(params, [velocity], t))
      this.problems.push(`outer step at t ${this.t}: the inner steps did not start from the backup`);
    if (this.eager) return this.eager.syncContribution(this.params, weight).buffer as ArrayBuffer;
    return this.outer.pseudoGradient(this.backup.params.slice(), this.params, weight).buffer as ArrayBuffer;
  }

  async applyOuter(sum: ArrayBuffer): Promise<string> {
    this.calls.push('applyOuter');
    await this.pause();
    if (!this.outer) throw new Error('applyOuter: no outer state');
    this.version += 1;
    this.innerStart = null;
    if (this.eager) {
      const next = this.eager.consensusStep(new Float32Array(sum), this.outer.momentum, true);
      this.outer.momentum = next.momentum.slice();
      this.params = next.params.slice();
    } else this.params = new Float32Array(this.outer.step(new Float32Array(sum)));
    return this.hash();
  }

  /** The worker's `outerReport`: the same sketches and commitment, from this stand-in's state. */
  async outerReport(o: OuterReportOptions): Promise<OuterReport> {
    this.calls.push('outerReport');
    if (!this.outer || !this.backup) throw new Error('outerReport: no outer state or no backup');
    const hash = stateHash(this.params, this.outer.momentum);
    const [own, sent, received, sum] = [o.own, o.sent, o.received, o.sum].map((x) => new Float32Array(x));
    const local = { outer: this.outer.momentum, moments: [this.velocity] };
    return {
      sketch: stepSketches({ own, sent, received, sum, params: this.params, local }, hash, o.world, o.compression),
      innerHash: trainingStateHash(this.backup.params, [this.backup.velocity], this.backup.t),
      innerT: this.t,
    };
  }

  async revertOuter(): Promise<void> {
    this.calls.push('revertOuter');
    if (!this.outer) throw new Error('revertOuter: no outer state');
    this.version += 1;
    if (this.eager) {
      const local = this.eager.revert();
      if (!local) throw new Error('revertOuter: no outer step to undo');
      this.outer.restoreBackup();
      this.params = new Float32Array(local);
    } else this.params = new Float32Array(this.outer.revert());
  }

  /** The worker's overlapped outer calls (web/worker/outer-calls.ts) over the same `EagerOuter`. */
  async resetOuter(): Promise<void> {
    this.calls.push('resetOuter');
    if (!this.outer) throw new Error('resetOuter: no outer state');
    if (this.eager) this.eager.reset(this.params, this.outer.momentum);
    else this.eager = new EagerOuter(this.outer.opt, this.params, this.outer.momentum);
  }

  async eagerOuter(weight: number): Promise<ArrayBuffer> {
    this.calls.push('eagerOuter');
    await this.pause();
    await this.stall('outer');
    const { params, contribution } = this.requireEager().eager(this.params, weight);
    this.version += 1;
    this.params = new Float32Array(params);
    return contribution.buffer as ArrayBuffer;
  }

  async outerContribution(weight: number): Promise<ArrayBuffer> {
    this.calls.push('outerContribution');
    return this.requireEager().reweigh(weight).buffer as ArrayBuffer;
  }

  async consensusStep(sum: ArrayBuffer): Promise<string> {
    this.calls.push('consensusStep');
    await this.pause();
    const next = this.requireEager().consensusStep(new Float32Array(sum), this.outer!.momentum, false);
    return stateHash(next.params, next.momentum);
  }

  async commitConsensus(): Promise<void> {
    this.calls.push('commitConsensus');
    const { params, momentum } = this.requireEager().commit();
    this.backup = { params, velocity: this.velocity.slice(), t: this.t };
    this.outer!.momentum = momentum;
    this.outer!.saveBackup();
  }

  private requireEager(): EagerOuter {
    if (!this.eager || !this.outer) throw new Error('no overlapped outer state: call resetOuter first');
    return this.eager;
  }

  async restoreBackup(): Promise<void> {
    this.calls.push('restoreBackup');
    if (!this.backup) throw new Error('restoreBackup: no backup saved');
    this.version += 1;
    this.innerStart = null;
    this.params = this.backup.params.slice();
    this.velocity = this.backup.velocity.slice();
    this.t = this.backup.t;
    this.outer?.restoreBackup();
  }

  async snapshot(position: { step: number; epoch: number; cursor: number }): Promise<ArrayBuffer> {
    this.calls.push('snapshot');
    await this.pause();
    return encodeSnapshot({
      spec: this.spec!,
      ...position,
      optimizer: { kind: 'sgd', t: this.t },
      params: this.params.slice(),
      moments: [this.velocity.slice()],
      outer: this.outer?.momentum.slice(),
    });
  }

  async restore(bytes: ArrayBuffer): Promise<RestoredState> {
    this.calls.push('restore');
    await this.pause();
    this.version += 1;
    this.innerStart = null;
    const snap = decodeSnapshot(bytes);
    if (snap.spec.name !== this.spec?.name)
      throw new Error(`restore: snapshot of ${snap.spec.name}, model ${this.spec?.name}`);
    this.params = snap.params.slice();
    this.velocity = snap.moments[0].slice();
    this.t = snap.optimizer.t;
    if (!!snap.outer !== !!this.outer)
      throw new Error('restore: outer momentum present in one of snapshot and job only');
    if (snap.outer) this.outer!.load(snap.outer);
    return { step: snap.step, epoch: snap.epoch, cursor: snap.cursor, stateHash: snap.stateHash };
  }

  async evaluate(count?: number): Promise<EvaluationResult> {
    const sum = this.params.reduce((a, b) => a + b, 0);
    return { accuracy: Math.abs(sum) % 1, lossAvg: Math.abs(sum), count: count ?? 100 };
  }

  /** The optimizer step counter, for tests. */
  get optimizerStep(): number {
    return this.t;
  }
}

// ---------------------------------------------------------------- an in-memory network of data channels

export class MemoryNetwork {
  private readonly pairs = new Map<string, { ends: Map<string, MemoryLink> }>();
  /** Per peer: who hears of a channel another peer opened to it (the grouped allreduce's `onLink`). */
  private readonly arrivals = new Map<string, Set<(from: string, link: MemoryLink) => void>>();
  /** Ring connections requested, for tests. */
  connects = 0;

  /** `links`: every channel's latency and rate (memory-link.ts); none by default. */
  constructor(private readonly links: MemoryLinkOptions = {}) {}

  /** This peer's open end of the channel to `to`, if there is one. */
  openLink(from: string, to: string): MemoryLink | null {
    const end = this.pairs.get([from, to].sort().join('|'))?.ends.get(from);
    return end?.isOpen ? end : null;
  }

  /** This peer's end of the channel to `to` (a new pair when there is none or it closed). */
  link(from: string, to: string): MemoryLink {
    const key = [from, to].sort().join('|');
    let pair = this.pairs.get(key);
    if (!pair || ![...pair.ends.values()].every((l) => l.isOpen)) {
      const [a, b] = memoryLinkPair(from, to, this.links);
      // memoryLinkPair(a, b) returns [a's link to b, b's link to a]; a link is named by its remote peer.
      pair = {
        ends: new Map([
          [from, a],
          [to, b],
        ]),
      };
      this.pairs.set(key, pair);
      const theirs = pair.ends.get(to)!;
      for (const listener of this.arrivals.get(to) ?? []) listener(from, theirs);
    }
    return pair.ends.get(from)!;
  }

  /** Close the channel between two peers (a data channel failing while both tabs live). */
  cut(a: string, b: string): void {
    const pair = this.pairs.get([a, b].sort().join('|'));
    if (pair) for (const l of pair.ends.values()) l.close();
  }

  /**
   * Close every channel of `peer` (its tab crashed or left). `atItsEnd`: at `peer`'s end, so every other
   * tab hears a remote close (`peer_closed`), as a live tab does when another's page goes away. Without
   * it each channel closes at the end that opened it first, so some neighbours see a local close (an
   * abort, no blame): the older loop tests' timing is tuned to that, and a loaded machine turns the
   * extra failure reports into extra restarts there.
   */
  closeAll(peer: string, atItsEnd = false): void {
    for (const [key, pair] of this.pairs) {
      if (!key.split('|').includes(peer)) continue;
      if (atItsEnd) pair.ends.get(peer)?.close();
      else for (const l of pair.ends.values()) l.close();
    }
  }

  mesh(peerId: string): MeshPort {
    return {
      peerId,
      connectRing: async (world: readonly WorldEntry[], rank: number): Promise<Ring> => {
        this.connects++;
        const size = world.length;
        if (size === 1) return { rank, size, left: null, right: null };
        const left = this.link(peerId, world[(rank - 1 + size) % size].peerId);
        const right = this.link(peerId, world[(rank + 1) % size].peerId);
        return { rank, size, left, right };
      },
      groupLinks: async (world, rank, groups, n): Promise<GroupLinks> => {
        const members = world.map((w) => w.peerId);
        const layout = { sizes: [...groups] };
        const { ring, cross } = groupPartners(layout, n, rank);
        for (const r of [...ring, ...cross]) this.link(peerId, members[r]);
        return {
          rank,
          layout,
          link: (r) => this.openLink(peerId, members[r]),
          connect: async (r) => this.link(peerId, members[r]),
          onLink: (listener) => {
            const heard = (from: string, link: MemoryLink) => {
              const r = members.indexOf(from);
              if (r >= 0) listener(r, link);
            };
            const set = this.arrivals.get(peerId) ?? new Set();
            this.arrivals.set(peerId, set);
            set.add(heard);
            return () => set.delete(heard);
          },
        };
      },
    };
  }
}

// ---------------------------------------------------------------- the coordinator in-process

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 3;

class SimSocket implements WebSocketLike {
  readyState = CONNECTING;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: string }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;

  constructor(
    private readonly coordinator: SimCoordinator,
    readonly conn: string,
  ) {}

  send(text: string): void {
    if (this.readyState !== OPEN) throw new Error('socket not open');
    setTimeout(() => this.coordinator.receive(this.conn, text), 0);
  }

  /** Client-side close: the coordinator sees a disconnect; the client gets its close event. */
  close(code = 1000, reason = ''): void {
    if (this.readyState === CLOSED) return;
    this.readyState = CLOSED;
    setTimeout(() => {
      this.coordinator.socketGone(this.conn);
      this.onclose?.({ code, reason });
    }, 0);
  }

  /** Server-side close (or the server died). */
  serverClose(code: number, reason: string): void {
    if (this.readyState === CLOSED) return;
    this.readyState = CLOSED;
    setTimeout(() => this.onclose?.({ code, reason }), 0);
  }

  deliver(text: string): void {
    if (this.readyState !== OPEN) return;
    setTimeout(() => {
      if (this.readyState === OPEN) this.onmessage?.({ data: text });
    }, 0);
  }

  open(): void {
    this.readyState = OPEN;
    this.onopen?.({});
  }
}

export interface StoredCommit extends CommitRecord {
  rolledBack: boolean;
}

/**
 * The coordinator of the simulation: the product's machine run by the product's executor
 * (coordinator/runtime/executor.ts), with this class as its store and socket ports, so the actions are
 * carried out by the same code as in the server. Commits are kept in memory with a rolled-back flag;
 * checkpoints in a map behind the HTTP port. Ticks come every `tickMs` (the executor's own timers are off).
 */
export class SimCoordinator {
  durable: DurableState | null = null;
  readonly commits: StoredCommit[] = [];
  readonly checkpoints = new Map<number, { bytes: ArrayBuffer; sha256: string }>();
  readonly log: { level: string; event: string; data: Record<string, unknown> }[] = [];
  alive = true;
  private executor: MachineExecutor;
  private readonly sockets = new Map<string, SimSocket>();
  private nextConn = 1;
  private tickTimer: ReturnType<typeof setInterval> | null = null;
  /** Message types the coordinator "sends" into the void (a fault: it dies before they leave). */
  readonly dropped = new Set<string>();

  constructor(
    job: JobSpec,
    datasetSize: number,
    readonly runId = 'sim-run',
    private readonly tickMs = 10,
    private readonly policy: TrustPolicy = DEFAULT_TRUST_POLICY,
  ) {
    this.executor = this.executorFor(initialState(job, datasetSize, runId, policy));
    this.startTicks();
  }

  get state(): CoordinatorState {
    return this.executor.state;
  }

  private executorFor(state: CoordinatorState): MachineExecutor {
    const executor = new MachineExecutor(state, {
      store: {
        apply: (_runId, ops) => this.storeOps(ops),
        pruneEvents: () => 0,
      },
      runId: this.runId,
      metrics: NO_EXECUTOR_METRICS,
      timers: false,
      storedLogLevels: new Set(),
      sockets: {
        send: (conn, text) => {
          const socket = this.sockets.get(conn);
          if (!socket) return false;
          const type = (JSON.parse(text) as { type: string }).type;
          if (!this.dropped.has(type)) socket.deliver(text);
          return true;
        },
        close: (conn, code, reason) => {
          const socket = this.sockets.get(conn);
          socket?.serverClose(code, reason);
          if (socket) {
            this.sockets.delete(conn);
            this.executor.dispatch({ kind: 'disconnected', conn });
          }
        },
      },
      onFatal: (error) => {
        throw error;
      },
    });
    executor.subscribe((actions) => {
      for (const action of actions)
        if (action.kind === 'log') this.log.push({ level: action.level, event: action.event, data: action.data });
    });
    return executor;
  }

  /** The store port: the durable state, commit rows and their rollback, as SQLite keeps them. */
  private storeOps(ops: readonly StoreOp[]): void {
    for (const op of ops) {
      if (op.kind === 'persist') this.durable = JSON.parse(JSON.stringify(op.durable)) as DurableState;
      else if (op.kind === 'commit') this.commits.push({ ...op.commit, rolledBack: false });
      else if (op.kind === 'rollback') for (const c of this.commits) if (c.step > op.afterStep) c.rolledBack = true;
    }
  }

  private startTicks(): void {
    // Ticks at a fixed short period (the server schedules them at `nextDeadline`; polling is simpler here).
    this.tickTimer = setInterval(() => this.dispatch({ kind: 'tick' }), this.tickMs);
  }

  dispatch(event: Event): void {
    if (!this.alive) return;
    this.executor.dispatch(event);
  }

  /** A client socket for `CoordinatorClient` (`createSocket`). */
  createSocket = (): WebSocketLike => {
    const conn = `c${this.nextConn++}`;
    const socket = new SimSocket(this, conn);
    setTimeout(() => {
      if (!this.alive) {
        socket.serverClose(1006, 'connection refused');
        return;
      }
      this.sockets.set(conn, socket);
      this.dispatch({ kind: 'connected', conn, nonce: `n${conn}` });
      socket.open();
    }, 0);
    return socket;
  };

  receive(conn: string, text: string): void {
    if (!this.alive || !this.sockets.has(conn)) return;
    const parsed = parseClientMessage(text);
    this.dispatch(
      parsed.ok
        ? { kind: 'message', conn, msg: parsed.msg }
        : { kind: 'invalid', conn, code: parsed.code, message: parsed.message },
    );
  }

  socketGone(conn: string): void {
    if (!this.sockets.delete(conn)) return;
    this.dispatch({ kind: 'disconnected', conn });
  }

  /** kill -9: every socket drops (1006), nothing but the durable state survives. */
  kill(): void {
    this.alive = false;
    if (this.tickTimer) clearInterval(this.tickTimer);
    this.executor.stop();
    for (const socket of this.sockets.values()) socket.serverClose(1006, '');
    this.sockets.clear();
  }

  /** Start again from the durable state (as `restoreState` after a process restart). */
  restart(): void {
    if (!this.durable) throw new Error('restart: nothing persisted');
    this.executor = this.executorFor(restoreState(this.durable, this.policy));
    this.dropped.clear();
    for (const c of this.commits) if (c.step > this.durable.lastCommit.step) c.rolledBack = true;
    this.alive = true;
    this.startTicks();
  }

  stop(): void {
    this.kill();
  }

  /** Live commit rows (not rolled back), by step. */
  liveCommits(): StoredCommit[] {
    return this.commits.filter((c) => !c.rolledBack).sort((a, b) => a.step - b.step);
  }

  /** The HTTP side: checkpoint upload (PUT) and download (GET) on `checkpointPath` URLs. */
  readonly http: HttpPort = {
    baseUrl: 'http://sim.invalid',
    fetch: async (url: string, init?: RequestInit): Promise<Response> => {
      const parsed = new URL(url);
      const match = /^\/api\/checkpoints\/[^/]+\/(\d+)$/.exec(parsed.pathname);
      if (!match) return new Response('not found', { status: 404 });
      const step = Number(match[1]);
      if (init?.method === 'PUT') {
        if (!this.alive) throw new TypeError('fetch failed');
        const body = init.body as ArrayBuffer;
        const snap = decodeSnapshot(body);
        if (snap.step !== step) return new Response('wrong step', { status: 422 });
        const sha256 = await sha256Hex(body);
        this.checkpoints.set(step, { bytes: body.slice(0), sha256 });
        this.dispatch({ kind: 'checkpoint_stored', step, epoch: snap.epoch, cursor: snap.cursor, sha256 });
        return new Response(null, { status: 201 });
      }
      const stored = this.checkpoints.get(step);
      if (!stored) return new Response('no checkpoint', { status: 404 });
      return new Response(stored.bytes.slice(0), {
        status: 200,
        headers: { 'content-length': String(stored.bytes.byteLength) },
      });
    },
  };
}

// ---------------------------------------------------------------- tabs

export class SimTab {
  readonly trainer: CpuTrainer;
  readonly loop: ElasticLoop;
  readonly client: CoordinatorClient;
  readonly statuses: ElasticStatus[] = [];
  readonly logs: string[] = [];
  closed = false;

  constructor(
    readonly name: string,
    coordinator: SimCoordinator,
    private readonly network: MemoryNetwork,
    opts: { delayMs?: number; loop?: Partial<ElasticLoopOptions> } = {},
  ) {
    this.trainer = new CpuTrainer({ delayMs: opts.delayMs });
    const peerId = `peer-${name}`;
    let client: CoordinatorClient | null = null;
    this.loop = new ElasticLoop({
      trainer: this.trainer,
      mesh: network.mesh(peerId),
      control: { send: (body) => client?.send(body) ?? false },
      http: coordinator.http,
      log: (level, text) => this.logs.push(`${level}: ${text}`),
      ...opts.loop,
    });
    client = new CoordinatorClient({
      url: 'ws://sim.invalid/ws',
      hello: () => ({
        peerId,
        adapter: { vendor: 'sim', architecture: 'cpu', description: name },
        ...this.loop.holding(),
      }),
      onMessage: (msg) => this.loop.handle(msg),
      onDisconnect: () => this.loop.disconnected(),
      createSocket: () => coordinator.createSocket(),
      initialBackoffMs: 5,
      maxBackoffMs: 40,
      log: (level, text) => this.logs.push(`${level}: ${text}`),
    });
    this.client = client;
  }

  get peerId(): string {
    return `peer-${this.name}`;
  }

  start(): this {
    this.client.start();
    return this;
  }

  /** pagehide: goodbye, then the page is gone (its channels close with it). */
  goodbye(): void {
    this.closed = true;
    this.client.goodbye();
    this.loop.stop();
    this.network.closeAll(this.peerId);
  }

  /**
   * The renderer dies: no goodbye, channels and socket drop. `peersHearRemoteClose`: every other tab's
   * channel reports the remote close (`MemoryNetwork.closeAll`'s `atItsEnd`), as in a browser; the
   * grouped allreduce needs it to tell a lost partner from its own abort.
   */
  crash(opts: { peersHearRemoteClose?: boolean } = {}): void {
    this.closed = true;
    this.loop.stop();
    this.client.stop(1006, 'crashed');
    this.network.closeAll(this.peerId, opts.peersHearRemoteClose === true);
  }
}

/** Resolve when `check()` holds, polling every few ms; reject after `timeoutMs` with `describe()`. */
export async function until(
  check: () => boolean,
  what: string,
  timeoutMs = 10_000,
  describe: () => string = () => '',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${describe() ? `: ${describe()}` : ''}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

// ---------------------------------------------------------------- a swarm for one test

/** Training images of the simulated jobs. */
export const SIM_DATASET = 200;

/**
 * The simulated job the loop tests share: `SIM_MODEL` with heavy-ball SGD over `SIM_DATASET` images,
 * batch 16 (13 steps per epoch, the last one of 8 samples), 2 epochs (`SIM_TOTAL_STEPS`), a checkpoint
 * every 4 steps.
 */
export const SIM_JOB = {
  model: SIM_MODEL,
  optimizer: { kind: 'sgd', lr: 0.1, momentum: 0.5 },
  globalBatch: 16,
  epochs: 2,
  minWorkers: 1,
  maxWorkers: 4,
  checkpointEvery: 4,
  heartbeatMs: 40,
  lastCallMs: 15,
  seed: 5,
} satisfies JobSpecInput;
export const SIM_TOTAL_STEPS = 26;

/** Loop timeouts of simulated tabs: far above in-memory latencies, short enough for a hung test to fail fast. */
export const SIM_LOOP_TIMEOUTS = {
  collectiveMs: 2000,
  ringConnectMs: 2000,
  syncMs: 2000,
  coordinatorWaitMs: 5000,
  hangFloorMs: 1000,
};

/**
 * A simulated coordinator and network with tabs opened on demand, a `waitFor` that prints the state
 * when it times out, and `stop()` (crash every tab still open, stop the coordinator) for the test's cleanup.
 */
export function simulatedSwarm(
  job: JobSpec,
  datasetSize: number,
  opts: {
    runId?: string;
    tickMs?: number;
    policy?: TrustPolicy;
    timeouts?: Partial<typeof SIM_LOOP_TIMEOUTS>;
    /** Latency and rate of every data channel (none by default). */
    links?: MemoryLinkOptions;
  } = {},
) {
  const coordinator = new SimCoordinator(job, datasetSize, opts.runId ?? 'sim-run', opts.tickMs ?? 5, opts.policy);
  const network = new MemoryNetwork(opts.links);
  const tabs: SimTab[] = [];
  const timeouts = { ...SIM_LOOP_TIMEOUTS, ...opts.timeouts };
  const open = (name: string, delayMs = 1) => {
    const tab = new SimTab(name, coordinator, network, { delayMs, loop: { timeouts } });
    tabs.push(tab);
    return tab.start();
  };
  const describeAll = () =>
    JSON.stringify({
      coordinator: {
        step: coordinator.state.lastCommit.step,
        phase: coordinator.state.rendezvous.phase,
        round: coordinator.state.rendezvous.round,
        status: coordinator.state.status,
      },
      tabs: tabs.map((t) => ({
        name: t.name,
        phase: t.loop.status.phase,
        round: t.loop.status.round,
        local: t.loop.status.localStep,
        logs: t.logs.slice(-3),
      })),
    });
  const committed = () => coordinator.state.lastCommit.step;
  const waitFor = (check: () => boolean, what: string, timeoutMs = 10_000) =>
    until(check, what, timeoutMs, describeAll);
  const stop = () => {
    for (const t of tabs) if (!t.closed) t.crash();
    coordinator.stop();
  };
  return { coordinator, network, tabs, open, committed, waitFor, stop };
}

/**
 * `n` tabs (`t0`…) on a swarm whose hang floor is `hangFloorMs` on both sides (the machine's trust
 * policy and the tabs' timeouts), returned once all of them are in the round past the first outer
 * step (`innerSteps` steps). `cleanup` gets the swarm's `stop` before anything is awaited.
 */
export async function swarmPastFirstOuter(
  job: JobSpec,
  datasetSize: number,
  opts: { runId: string; n: number; innerSteps: number; hangFloorMs: number; cleanup: (stop: () => void) => void },
) {
  const { n, hangFloorMs } = opts;
  const swarm = simulatedSwarm(job, datasetSize, {
    runId: opts.runId,
    policy: { ...DEFAULT_TRUST_POLICY, hangFloorMs },
    timeouts: { hangFloorMs },
  });
  opts.cleanup(swarm.stop);
  const tabs = Array.from({ length: n }, (_, i) => swarm.open(`t${i}`, 1));
  const rv = () => swarm.coordinator.state.rendezvous;
  await swarm.waitFor(
    () => swarm.committed() >= opts.innerSteps && rv().phase === 'training' && rv().participants.length === n,
    `${n} tabs past the first outer step`,
    60_000,
  );
  return { ...swarm, tabs };
}

/**
 * Invariant (1) of docs/ARCHITECTURE.md over stored commit rows: the epochs in which an index was
 * committed twice, and the finished epochs (all but the last, or the last once the job is `done`) in
 * which an index never was. A row commits its `ranges` (or [cursorStart, cursorStart+count)). Both
 * empty for a correct run.
 */
export function auditCommitRows(
  commits: readonly StoredCommit[],
  run: { seed: number; datasetSize: number; epochs: number; done: boolean },
): { twice: number[]; missing: number[] } {
  const byEpoch = new Map<number, StoredCommit[]>();
  for (const c of commits) byEpoch.set(c.epoch, [...(byEpoch.get(c.epoch) ?? []), c]);
  const twice: number[] = [];
  const missing: number[] = [];
  for (const [epoch, rows] of byEpoch) {
    const order = epochOrder(run.seed, epoch, run.datasetSize);
    const seen = new Uint8Array(run.datasetSize);
    for (const row of rows)
      for (const [start, end] of committedRanges(row)) for (let p = start; p < end; p++) seen[order[p]]++;
    if (seen.some((x) => x > 1)) twice.push(epoch);
    const finished = epoch < run.epochs - 1 || run.done;
    if (finished && seen.some((x) => x === 0)) missing.push(epoch);
  }
  return { twice, missing };
}

/** The positions a commit row committed. */
export function committedRanges(row: Pick<CommitRecord, 'ranges' | 'cursorStart' | 'count'>): [number, number][] {
  if (row.ranges) return row.ranges;
  return row.count > 0 ? [[row.cursorStart, row.cursorStart + row.count]] : [];
}

/** The holes of a partial commit that `next` did not commit (none: the next group served them all). */
export function unservedHoles(
  next: Pick<CommitRecord, 'ranges' | 'cursorStart' | 'count'>,
  holes: readonly PositionRange[],
): PositionRange[] {
  const served = mergeRanges(committedRanges(next));
  return holes.filter(([a, b]) => !served.some(([x, y]) => x <= a && b <= y));
}
