/**
 * The coordinator machine driven through the product's own executor (coordinator/runtime/executor.ts) with
 * in-memory ports: a manual clock, a store that keeps commits and the durable state in arrays, sockets
 * that deliver to simulated workers' inboxes. It plays the workers and checks the invariants after every
 * event:
 * - every sent message is a valid ServerMessage;
 * - `record_commit`/`rollback_commits` are followed by `persist` before any send;
 * - round messages (train, round_closed, committed) go only to members of that round;
 * - each index is committed at most once per epoch, exactly once per finished epoch (in the store);
 * - the record agrees with the last commit; the state is plain JSON; ranks are dense.
 */
import { createHash } from 'node:crypto';
import { expect } from 'vitest';
import { MachineExecutor } from '../../../../coordinator/runtime/executor';
import { NO_EXECUTOR_METRICS } from '../../../kit/executor-metrics';
import type { StoreOp } from '../../../../coordinator/runtime/store';
import { parseJobSpec, type JobSpecInput } from '../../../../core/training/job';
import {
  initialState,
  type Action,
  type CommitRecord,
  type CoordinatorState,
  type DurableState,
  type Event,
  type TrustPolicy,
} from '../../../../coordinator/machine/machine';
import { PROTOCOL_VERSION } from '../../../../core/protocol/control-fields';
import type { ClientMessage } from '../../../../core/protocol/tab-messages';
import {
  serverMessageSchema,
  type RoundMessage,
  type ServerMessage,
} from '../../../../core/protocol/coordinator-messages';
import {
  epochOrder,
  indicesForRank,
  planOf,
  positionAfter,
  processedIndices,
  stepPosition,
} from '../../../../core/training/sampler';
import { workerOf } from '../../../../coordinator/machine/worker-table';

/** The parameter hash every honest rank reports after `step` (all ranks agree by construction). */
export function hashOf(step: number): string {
  return createHash('sha256').update(`step ${step}`).digest('hex');
}

export interface SimWorker {
  name: string;
  conn: string;
  workerId: string | null;
  inbox: ServerMessage[];
  round: RoundMessage | null;
  readySent: boolean;
  training: boolean;
  /** Committed state held. */
  committed: { step: number; hash: string | null };
  /** Last step computed (may be ahead of committed by an uncommitted step). */
  live: number;
  closedByServer: boolean;
}

type Body<T> = T extends unknown ? Omit<T, 'v'> : never;

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** The store port: commits and the durable state in memory, written by the executor exactly as SQLite is. */
class MemoryStore {
  commits: CommitRecord[] = [];
  durable: DurableState | null = null;
  /** Event rows are not kept here (logs are recorded from the action list). */
  pruneEvents(_runId: string, _keep: number): number {
    return 0;
  }

  apply(_runId: string, ops: StoreOp[]): void {
    for (const op of ops) {
      if (op.kind === 'persist') this.durable = JSON.parse(JSON.stringify(op.durable));
      else if (op.kind === 'commit') this.commits.push(op.commit);
      else if (op.kind === 'rollback') this.commits = this.commits.filter((c) => c.step <= op.afterStep);
    }
  }
}

export class Harness {
  now = 0;
  workers = new Map<string, SimWorker>();
  private byConn = new Map<string, SimWorker>();
  private roundMembers = new Map<number, Set<string>>();
  private connSeq = 0;
  private readonly store = new MemoryStore();
  private executor: MachineExecutor;
  metrics: { name: string; value?: number; labels?: Record<string, string> }[] = [];
  logs: { level: string; event: string; data: Record<string, unknown> }[] = [];
  lastActions: Action[] = [];

  constructor(
    job: JobSpecInput,
    datasetSize: number,
    public runId = 'run-1',
    policy?: TrustPolicy,
    /** Fields the server adds to the initial state (e.g. `verifySalt`). */
    extra: Partial<CoordinatorState> = {},
  ) {
    this.executor = this.executorFor({ ...initialState(parseJobSpec(job), datasetSize, runId, policy), ...extra });
  }

  get state(): CoordinatorState {
    return this.executor.state;
  }

  /** The store's commit table. */
  get commits(): CommitRecord[] {
    return this.store.commits;
  }

  /** The store's durable state (null before the first persist). */
  get durable(): DurableState | null {
    return this.store.durable;
  }

  set durable(durable: DurableState | null) {
    this.store.durable = durable;
  }

  private executorFor(state: CoordinatorState): MachineExecutor {
    const executor = new MachineExecutor(state, {
      store: this.store,
      runId: this.runId,
      // The machine's metric actions are recorded from the action list (below); timings are not checked here.
      metrics: NO_EXECUTOR_METRICS,
      now: () => this.now,
      timers: false,
      storedLogLevels: new Set(),
      sockets: {
        send: (conn, text) => {
          const w = this.byConn.get(conn);
          if (w) this.deliver(w, JSON.parse(text) as ServerMessage);
          return !!w;
        },
        close: (conn) => {
          const w = this.byConn.get(conn);
          if (w) w.closedByServer = true;
        },
      },
      // A machine that throws is a bug: the product logs it and drops the event; a test must fail.
      onLog: (_level, event, data) => {
        if (event === 'machine_threw' || event === 'action_listener_threw') throw new Error(String(data.error));
      },
      onFatal: (error) => {
        throw error;
      },
    });
    executor.subscribe((actions) => {
      this.lastActions = [...actions];
      for (const action of actions) {
        if (action.kind === 'metric')
          this.metrics.push({ name: action.name, value: action.value, labels: action.labels });
        if (action.kind === 'log') this.logs.push({ level: action.level, event: action.event, data: action.data });
      }
    });
    return executor;
  }

  /** Replace the machine's state (a coordinator restart); sockets are gone. */
  restart(state: CoordinatorState): void {
    this.executor = this.executorFor(state);
    for (const w of this.workers.values()) {
      w.round = null;
      w.training = false;
      w.readySent = false;
    }
    this.byConn.clear();
  }

  apply(event: Event): Action[] {
    // handle() must never mutate its input: a frozen state makes any mutation throw (ESM is strict).
    deepFreeze(this.executor.state);
    this.lastActions = [];
    this.executor.dispatch(event);
    const actions = this.lastActions;
    this.checkActions(actions);
    this.checkInvariants();
    // Like the server: a socket the machine closed reports its close event afterwards.
    for (const action of actions) {
      if (action.kind === 'close' && this.byConn.has(action.conn)) {
        this.byConn.delete(action.conn);
        this.apply({ kind: 'disconnected', conn: action.conn });
      }
    }
    return actions;
  }

  isConnected(name: string): boolean {
    const w = this.workers.get(name);
    return !!w && this.byConn.get(w.conn) === w;
  }

  advance(ms: number): Action[] {
    this.now += ms;
    return this.apply({ kind: 'tick' });
  }

  // ------------------------------------------------------------ simulated workers

  /** Open a socket for `name` from client address `addr` (default '127.0.0.1'). */
  connect(name: string, addr = '127.0.0.1'): SimWorker {
    const conn = `c${++this.connSeq}-${name}`;
    const prev = this.workers.get(name);
    const w: SimWorker = prev
      ? { ...prev, conn, inbox: [], round: null, readySent: false, training: false, closedByServer: false }
      : {
          name,
          conn,
          workerId: null,
          inbox: [],
          round: null,
          readySent: false,
          training: false,
          committed: { step: 0, hash: null },
          live: 0,
          closedByServer: false,
        };
    this.workers.set(name, w);
    this.byConn.set(conn, w);
    this.apply({ kind: 'connected', conn, nonce: `n${name}`, addr });
    return w;
  }

  /** Connect (if needed) and say hello; a known worker reconnects with its id and held state. */
  join(name: string, opts: { fresh?: boolean; addr?: string } = {}): SimWorker {
    const w = this.connect(name, opts.addr);
    const reconnect = !opts.fresh && w.workerId !== null;
    this.send(name, {
      type: 'hello',
      runId: reconnect ? this.runId : null,
      workerId: reconnect ? w.workerId : null,
      peerId: `peer-${name}`,
      adapter: { vendor: 'google', architecture: 'swiftshader', description: name },
      haveStep: reconnect ? w.committed.step : null,
      haveHash: reconnect ? w.committed.hash : null,
    });
    expect(w.workerId, `${name} welcomed`).not.toBeNull();
    return w;
  }

  send(name: string, body: Body<ClientMessage>): Action[] {
    const w = this.worker(name);
    return this.apply({ kind: 'message', conn: w.conn, msg: { v: PROTOCOL_VERSION, ...body } as ClientMessage });
  }

  disconnect(name: string): Action[] {
    const w = this.worker(name);
    this.byConn.delete(w.conn);
    w.round = null;
    w.training = false;
    return this.apply({ kind: 'disconnected', conn: w.conn });
  }

  worker(name: string): SimWorker {
    const w = this.workers.get(name);
    if (!w) throw new Error(`no worker ${name}`);
    return w;
  }

  nameOf(workerId: string): string {
    for (const w of this.workers.values()) if (w.workerId === workerId) return w.name;
    throw new Error(`no worker with id ${workerId}`);
  }

  /** Names of the current round's members by rank. */
  members(): string[] {
    return this.state.rendezvous.participants.map((p) => this.nameOf(p.workerId));
  }

  /** Every member of the announced round that has not yet sent ready does so. */
  readyAll(): void {
    for (const name of this.members()) {
      const w = this.worker(name);
      if (w.round && !w.readySent) {
        w.readySent = true;
        this.send(name, { type: 'ready', runId: this.runId, workerId: w.workerId!, round: w.round.round });
      }
    }
  }

  /** A valid report of `name`'s next step (overridable to forge one). */
  report(name: string, overrides: Partial<Extract<ClientMessage, { type: 'step_report' }>> = {}): Action[] {
    const w = this.worker(name);
    if (!w.round) throw new Error(`${name} is in no round`);
    const step = w.live + 1;
    const me = w.round.world.find((e) => e.workerId === w.workerId)!;
    const plan = this.state;
    const { epoch, cursor } = stepPosition(step, planOf(plan));
    const order = epochOrder(plan.job.seed, epoch, plan.datasetSize);
    const samples = indicesForRank(
      order,
      cursor,
      plan.job.globalBatch,
      w.round.world.map((e) => e.share),
      me.rank,
    ).length;
    const actions = this.send(name, {
      type: 'step_report',
      runId: this.runId,
      workerId: w.workerId!,
      round: w.round.round,
      rank: me.rank,
      step,
      hash: hashOf(step),
      lossSum: samples * 0.5,
      samples,
      computeMs: 10,
      ...overrides,
    });
    if (!actions.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.conn === w.conn)) w.live = step;
    return actions;
  }

  /** All members report their next step (in rank order); returns the actions of the last report. */
  stepAll(): Action[] {
    let last: Action[] = [];
    const round = this.state.rendezvous.round;
    for (const name of this.members()) {
      // A report may close the round (e.g. divergence with an earlier forged report): stop there.
      if (this.state.rendezvous.round !== round || this.state.rendezvous.phase !== 'training') break;
      last = this.report(name);
    }
    return last;
  }

  /** ready (if needed) and train `steps` steps; asserts each commits. */
  train(steps: number): void {
    this.readyAll();
    expect(this.state.rendezvous.phase).toBe('training');
    for (let i = 0; i < steps; i++) {
      const before = this.state.lastCommit.step;
      this.stepAll();
      expect(this.state.lastCommit.step, 'step committed').toBe(before + 1);
      if (this.state.status === 'done') return;
      if (this.state.rendezvous.phase !== 'training') this.readyAll();
    }
  }

  // ------------------------------------------------------------ execution

  private deliver(w: SimWorker, msg: ServerMessage): void {
    w.inbox.push(msg);
    switch (msg.type) {
      case 'welcome':
        w.workerId = msg.workerId;
        break;
      case 'round':
        w.round = msg;
        w.readySent = false;
        w.training = false;
        // Syncing gives the committed state named by the round.
        w.committed = { step: msg.step - 1, hash: msg.committedHash };
        w.live = msg.step - 1;
        break;
      case 'train':
        w.training = true;
        break;
      case 'committed':
        w.committed = { step: msg.step, hash: msg.hash };
        break;
      case 'round_closed':
        w.round = null;
        w.training = false;
        w.live = w.committed.step;
        break;
      default:
        break;
    }
  }

  // ------------------------------------------------------------ checks

  private checkActions(actions: Action[]): void {
    let unpersisted = false;
    const welcomed = new Map<string, string>();
    for (const action of actions) {
      if (action.kind === 'record_commit' || action.kind === 'rollback_commits') unpersisted = true;
      if (action.kind === 'persist') unpersisted = false;
      if (action.kind !== 'send') continue;
      expect(unpersisted, 'a send before the persist of a commit').toBe(false);
      const parsed = serverMessageSchema.safeParse(JSON.parse(JSON.stringify(action.msg)));
      expect(parsed.success, `invalid server message ${JSON.stringify(action.msg)}`).toBe(true);
      const msg = action.msg;
      if (msg.type === 'welcome') welcomed.set(action.conn, msg.workerId);
      if (msg.type === 'round') {
        const recipient = welcomed.get(action.conn) ?? this.byConn.get(action.conn)?.workerId;
        expect(
          msg.world.some((e) => e.workerId === recipient),
          `round ${msg.round} sent to a non-member`,
        ).toBe(true);
        const members = this.roundMembers.get(msg.round) ?? new Set<string>();
        members.add(action.conn);
        this.roundMembers.set(msg.round, members);
      } else if (msg.type === 'train' || msg.type === 'round_closed' || msg.type === 'committed') {
        const members = this.roundMembers.get(msg.round);
        expect(members?.has(action.conn), `${msg.type} of round ${msg.round} sent to non-member ${action.conn}`).toBe(
          true,
        );
      }
    }
    expect(unpersisted, 'a commit never persisted').toBe(false);
  }

  checkInvariants(): void {
    const s = this.state;
    expect(JSON.parse(JSON.stringify(s))).toEqual(s);
    const plan = planOf(s);
    // The record agrees with the last commit.
    const at = positionAfter(s.lastCommit.step, plan);
    expect({ epoch: s.record.epoch, cursor: s.record.cursor }).toEqual(at);
    if (s.record.epoch < s.job.epochs) {
      const order = epochOrder(s.job.seed, s.record.epoch, s.datasetSize);
      expect(processedIndices(s.record)).toEqual(Array.from(order.subarray(0, s.record.cursor)).sort((a, b) => a - b));
    }
    // Store: each index at most once per epoch, exactly once per finished epoch; rows contiguous.
    const byEpoch = new Map<number, number[]>();
    let expectedStep = 1;
    for (const c of [...this.commits].sort((a, b) => a.step - b.step)) {
      expect(c.firstStep).toBe(expectedStep);
      expectedStep = c.step + 1;
      const order = epochOrder(s.job.seed, c.epoch, s.datasetSize);
      const list = byEpoch.get(c.epoch) ?? [];
      list.push(...order.subarray(c.cursorStart, c.cursorStart + c.count));
      byEpoch.set(c.epoch, list);
    }
    expect(expectedStep - 1).toBe(s.lastCommit.step);
    for (const [epoch, list] of byEpoch) {
      expect(new Set(list).size, `an index committed twice in epoch ${epoch}`).toBe(list.length);
      if (epoch < s.record.epoch) expect(list.length, `epoch ${epoch} incomplete`).toBe(s.datasetSize);
    }
    if (this.durable) expect(this.durable.lastCommit).toEqual(s.lastCommit);
    // Dense ranks, members are known workers.
    s.rendezvous.participants.forEach((p, i) => {
      expect(p.rank).toBe(i);
      expect(workerOf(s.workers, p.workerId)).toBeDefined();
    });
    for (const id of s.rendezvous.waitList) expect(workerOf(s.workers, id)).toBeDefined();
  }

  /** Messages of a type a worker received (newest last). */
  received<T extends ServerMessage['type']>(name: string, type: T): Extract<ServerMessage, { type: T }>[] {
    return this.worker(name).inbox.filter((m): m is Extract<ServerMessage, { type: T }> => m.type === type);
  }

  lastReceived(name: string): ServerMessage | undefined {
    const inbox = this.worker(name).inbox;
    return inbox[inbox.length - 1];
  }

  metricCount(name: string, labels?: Record<string, string>): number {
    return this.metrics
      .filter((m) => m.name === name && (!labels || Object.entries(labels).every(([k, v]) => m.labels?.[k] === v)))
      .reduce((acc, m) => acc + (m.value ?? 1), 0);
  }
}
