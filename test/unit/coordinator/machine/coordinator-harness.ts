/**
 * The coordinator machine driven through the product's own executor (coordinator/runtime/executor.ts) with
 * in-memory ports: a manual clock, a store that keeps commits and the durable state in arrays, sockets
 * that deliver to simulated workers' inboxes. It plays the workers and checks the invariants after every
 * event:
 * - every sent message is a valid ServerMessage;
 * - `record_commit`/`rollback_commits` are followed by `persist` before any send;
 * - round messages (train, round_closed, committed, members_lost) go only to members of that round;
 * - each index is committed at most once per epoch, exactly once per finished epoch (in the store);
 * - in the current epoch, the store's committed positions and the record's holes are exactly [0, cursor);
 * - the record agrees with the last commit; the state is plain JSON; ranks are dense.
 * Its workers plan their slices as the tabs do (an overlapped job's with the tabs' own planner, which
 * plans the next group before the one in flight commits).
 */
import { createHash } from 'node:crypto';
import { expect } from 'vitest';
import { MachineExecutor } from '../../../../coordinator/runtime/executor';
import { NO_EXECUTOR_METRICS } from '../../../kit/executor-metrics';
import type { StoreOp } from '../../../../coordinator/runtime/store';
import { jobPublic, parseJobSpec, type JobSpecInput } from '../../../../core/training/job';
import { overlapsOuterSteps } from '../../../../core/training/overlap';
import { StepPlanner } from '../../../../web/elastic/plan';
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
  groupPlan,
  mergeRanges,
  planOf,
  rankRanges,
  rangesCount,
  type PositionRange,
  type RecordPosition,
} from '../../../../core/training/groups';
import { epochOrder, processedIndices } from '../../../../core/training/sampler';
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
  /** The sample record where the group in flight starts, as `round` and `committed` said. */
  position: RecordPosition;
  /** The record after each committed step this worker heard of (a checkpoint of it carries it). */
  positions: Map<number, RecordPosition>;
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

/** Frozen objects already found plain: the state is copy-on-write, so most of it is shared between events. */
const plainJson = new WeakSet<object>();

/**
 * The path of the first value in `value` that JSON would not carry over unchanged (a non-finite number,
 * undefined in an array, a function, a Map or other class instance), or null. Undefined object
 * properties are fine (JSON drops them, and an absent field reads as undefined).
 */
function notPlainJson(value: unknown, path: string): string | null {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return null;
  if (typeof value === 'number') return Number.isFinite(value) ? null : path;
  if (typeof value === 'object' && plainJson.has(value)) return null;
  const bad = notPlainJsonWalk(value, path);
  if (bad === null && typeof value === 'object' && Object.isFrozen(value)) plainJson.add(value as object);
  return bad;
}

function notPlainJsonWalk(value: unknown, path: string): string | null {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const bad = value[i] === undefined ? `${path}[${i}]` : notPlainJson(value[i], `${path}[${i}]`);
      if (bad) return bad;
    }
    return null;
  }
  if (typeof value !== 'object' || Object.getPrototypeOf(value) !== Object.prototype) return path;
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    if (v === undefined) continue;
    const bad = notPlainJson(v, `${path}.${key}`);
    if (bad) return bad;
  }
  return null;
}

export class Harness {
  now = 0;
  /** The record and store signature last checked (they change only at commits and rollbacks). */
  private checkedRecord = '';
  private checkedBits = '';
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
          position: { epoch: 0, cursor: 0, holes: [] },
          positions: new Map(),
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
    const round = w.round;
    const me = w.round.world.find((e) => e.workerId === w.workerId)!;
    const samples = this.sliceOf(w, step);
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
    // A report that closed its round (the worker heard a new one meanwhile) left `live` as that round set it.
    const refused = actions.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.conn === w.conn);
    if (!refused && w.round === round) w.live = step;
    return actions;
  }

  /**
   * The samples `w` computes in `step`, as a tab works it out: the group plan at the record position it
   * was told (round, committed), its slot and the split's shares (the carry's, or the round's own).
   */
  sliceOf(w: SimWorker, step: number): number {
    const round = w.round!;
    const rank = round.world.findIndex((e) => e.workerId === w.workerId);
    // An overlapped job's tab plans the next group before the one in flight commits: its own planner.
    if (overlapsOuterSteps(this.state.job)) {
      const planner = new StepPlanner(jobPublic(this.state.job, this.state.datasetSize), round, rank);
      return planner.work(step)?.indices.length ?? 0;
    }
    const firstStep = w.committed.step + 1;
    const group = groupPlan(w.position, firstStep, planOf(this.state));
    const span = group.steps[step - firstStep];
    if (!span) return 0;
    const carried = round.carry && round.step === firstStep;
    const shares = carried ? round.carry!.shares : round.world.map((e) => e.share);
    const slot = carried ? round.carry!.slots[rank] : rank;
    return rangesCount(rankRanges(span, shares, slot));
  }

  /** An overlapped job's outer step of `name` for the group ending at `step` (overridable to forge one). */
  outer(
    name: string,
    step: number,
    overrides: Partial<Extract<ClientMessage, { type: 'outer_report' }>> = {},
  ): Action[] {
    const w = this.worker(name);
    if (!w.round) throw new Error(`${name} is in no round`);
    const me = w.round.world.find((e) => e.workerId === w.workerId)!;
    return this.send(name, {
      type: 'outer_report',
      runId: this.runId,
      workerId: w.workerId!,
      round: w.round.round,
      rank: me.rank,
      step,
      hash: hashOf(step),
      wireBytes: 1000,
      ...overrides,
    });
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
        // Syncing gives the committed state named by the round; a carried group goes on where the
        // coordinator has this rank's reports.
        w.committed = { step: msg.step - 1, hash: msg.committedHash };
        w.position = { epoch: msg.epoch, cursor: msg.cursor, holes: msg.holes ?? [] };
        w.positions.set(msg.step - 1, w.position);
        w.live = msg.carry ? msg.carry.reported[msg.world.findIndex((e) => e.workerId === w.workerId)] : msg.step - 1;
        break;
      case 'train':
        w.training = true;
        break;
      case 'committed':
        w.committed = { step: msg.step, hash: msg.hash };
        w.position = { epoch: msg.epoch, cursor: msg.cursor, holes: msg.holes ?? [] };
        w.positions.set(msg.step, w.position);
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
      // `expect` only on a failure: these run for every message of every event (64 members).
      if (unpersisted) expect(unpersisted, 'a send before the persist of a commit').toBe(false);
      const parsed = serverMessageSchema.safeParse(JSON.parse(JSON.stringify(action.msg)));
      if (!parsed.success) expect(parsed.success, `invalid server message ${JSON.stringify(action.msg)}`).toBe(true);
      const msg = action.msg;
      if (msg.type === 'welcome') welcomed.set(action.conn, msg.workerId);
      if (msg.type === 'round') {
        const recipient = welcomed.get(action.conn) ?? this.byConn.get(action.conn)?.workerId;
        if (!msg.world.some((e) => e.workerId === recipient)) expect.fail(`round ${msg.round} sent to a non-member`);
        const members = this.roundMembers.get(msg.round) ?? new Set<string>();
        members.add(action.conn);
        this.roundMembers.set(msg.round, members);
      } else if (
        msg.type === 'train' ||
        msg.type === 'round_closed' ||
        msg.type === 'committed' ||
        msg.type === 'members_lost'
      ) {
        const members = this.roundMembers.get(msg.round);
        if (!members?.has(action.conn))
          expect.fail(`${msg.type} of round ${msg.round} sent to non-member ${action.conn}`);
      }
    }
    expect(unpersisted, 'a commit never persisted').toBe(false);
  }

  checkInvariants(): void {
    const s = this.state;
    const bad = notPlainJson(s, 'state');
    if (bad !== null) expect.fail(`the state is not plain JSON at ${bad}`);
    // The record agrees with the last commit.
    if (s.lastCommit.epoch !== s.record.epoch || s.lastCommit.cursor !== s.record.cursor)
      expect.fail(
        `record at ${s.record.epoch}/${s.record.cursor}, last commit at ${s.lastCommit.epoch}/${s.lastCommit.cursor}`,
      );
    // The record and the store change only at commits and rollbacks: check them again only then.
    const signature = `${this.commits.length}:${s.lastCommit.step}:${s.record.epoch}:${s.record.cursor}:${JSON.stringify(s.record.holes)}:${s.record.processed.length}`;
    if (signature !== this.checkedRecord || s.record.processed !== this.checkedBits) {
      expect(s.record.holes).toEqual(s.lastCommit.holes ?? []);
      this.checkRecord();
      this.checkStore();
      this.checkedRecord = signature;
      this.checkedBits = s.record.processed;
    }
    if (this.durable && JSON.stringify(this.durable.lastCommit) !== JSON.stringify(s.lastCommit))
      expect(this.durable.lastCommit).toEqual(s.lastCommit);
    // Dense ranks (but those of members a grouped outer sync goes on without: coordinator/machine/
    // outer-loss.ts), members and waiters are known workers, slots distinct (`expect` only on a failure).
    const participants = s.rendezvous.participants;
    const vacant = s.rendezvous.outerLoss?.ranks ?? [];
    let rank = 0;
    const badRank = participants.findIndex((p) => {
      while (vacant.includes(rank)) rank++;
      return p.rank !== rank++ || !workerOf(s.workers, p.workerId);
    });
    if (badRank >= 0) expect.fail(`participant ${badRank} is not a known worker of that rank`);
    if (new Set(participants.map((p) => p.slot)).size !== participants.length) expect.fail('two members share a slot');
    const unknown = s.rendezvous.waitList.filter((id) => !workerOf(s.workers, id));
    if (unknown.length > 0) expect.fail(`unknown waiters ${unknown.join(', ')}`);
  }

  /** The record's processed bitset is order[0..cursor) less the holes. */
  private checkRecord(): void {
    const s = this.state;
    if (s.record.epoch >= s.job.epochs) return;
    const order = epochOrder(s.job.seed, s.record.epoch, s.datasetSize);
    const expected: number[] = [];
    for (let p = 0; p < s.record.cursor; p++)
      if (!s.record.holes.some(([a, b]) => a <= p && p < b)) expected.push(order[p]);
    expect(processedIndices(s.record)).toEqual(expected.sort((a, b) => a - b));
  }

  /**
   * The store, independently of the machine's bitset: rows contiguous in steps; in every epoch each
   * index committed at most once; a finished epoch complete; the current epoch's committed positions
   * and the record's holes exactly [0, cursor) (so a lost slice is a hole until a later row commits it).
   */
  private checkStore(): void {
    const s = this.state;
    const byEpoch = new Map<number, PositionRange[]>();
    let expectedStep = 1;
    for (const c of [...this.commits].sort((a, b) => a.step - b.step)) {
      expect(c.firstStep).toBe(expectedStep);
      expectedStep = c.step + 1;
      const ranges = c.ranges ?? (c.count > 0 ? [[c.cursorStart, c.cursorStart + c.count] as PositionRange] : []);
      expect(rangesCount(ranges)).toBe(c.count);
      byEpoch.set(c.epoch, [...(byEpoch.get(c.epoch) ?? []), ...ranges]);
    }
    expect(expectedStep - 1).toBe(s.lastCommit.step);
    for (const [epoch, ranges] of byEpoch) {
      const order = epochOrder(s.job.seed, epoch, s.datasetSize);
      const list = ranges.flatMap(([a, b]) => Array.from(order.subarray(a, b)));
      expect(new Set(list).size, `an index committed twice in epoch ${epoch}`).toBe(list.length);
      if (epoch < s.record.epoch) expect(list.length, `epoch ${epoch} incomplete`).toBe(s.datasetSize);
    }
    if (s.record.epoch < s.job.epochs) {
      const covered = mergeRanges([...(byEpoch.get(s.record.epoch) ?? []), ...s.record.holes]);
      expect(covered, 'committed positions and holes of the current epoch').toEqual(
        s.record.cursor > 0 ? [[0, s.record.cursor]] : [],
      );
    }
  }

  /** Where any worker heard the record stood after committed step `step` (null: none heard it). */
  positionAfter(step: number): RecordPosition | null {
    for (const w of this.workers.values()) {
      const at = w.positions.get(step);
      if (at) return at;
    }
    return null;
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

export type EvaluationBody = Body<Extract<ClientMessage, { type: 'evaluation' }>>;

/**
 * `name`'s evaluation report with plausible counts: of the last commit, under the current round, epoch 0,
 * unless `overrides` say otherwise (evaluation.test.ts, checks.test.ts).
 */
export function evaluationReport(h: Harness, name: string, overrides: Partial<EvaluationBody> = {}): EvaluationBody {
  return {
    type: 'evaluation',
    runId: h.runId,
    workerId: h.worker(name).workerId!,
    round: h.state.rendezvous.round,
    step: h.state.lastCommit.step,
    epoch: 0,
    testSamples: 1000,
    correct: 800,
    lossSum: 450,
    ...overrides,
  };
}
