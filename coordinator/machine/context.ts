/**
 * The scratch context of one transition: a private copy of the state that the ops mutate, the clock,
 * and the actions emitted so far, in execution order. Public ops clone first, so callers' states are
 * never mutated (a rejected message returns the very same state object).
 */
import { PROTOCOL_VERSION } from '../../core/protocol/control-fields';
import type { ErrorCode, ServerMessage } from '../../core/protocol/coordinator-messages';
import type { Action, CoordinatorState, DurableState, LogLevel, MetricName, Transition, WorkerInfo } from './state';

export interface Ctx {
  s: CoordinatorState;
  now: number;
  out: Action[];
  /** Workers already copied in this transition (copy-on-write: see `mutWorker`). */
  copied: Set<string>;
  /** Whether `s.workers` / `s.connections` are already this transition's own copies. */
  ownWorkers?: boolean;
  ownConnections?: boolean;
}

/** A lookup in a map keyed by untrusted strings that never reaches the prototype (`__proto__`, `constructor`). */
export function own<T>(map: Record<string, T>, key: string): T | undefined {
  return Object.hasOwn(map, key) ? map[key] : undefined;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** A server message without its version field (added on send). */
export type ServerBody = DistributiveOmit<ServerMessage, 'v'>;

/**
 * Copy the small containers an op may mutate. The maps of workers and connections (hundreds of keys:
 * copying them costs far more than the rest) are copied only when a transition writes them
 * (`writableWorkers`, `writableConnections`, `mutWorker`), and their entries are replaced, never
 * edited, so the input state is never touched. Strings (the record's bitset) and the job are shared.
 */
export function cloneState(s: CoordinatorState): CoordinatorState {
  return {
    ...s,
    rendezvous: {
      ...s.rendezvous,
      participants: s.rendezvous.participants.map((p) => ({ ...p })),
      waitList: [...s.rendezvous.waitList],
      carry: s.rendezvous.carry && {
        ...s.rendezvous.carry,
        members: s.rendezvous.carry.members.map((m) => ({ ...m })),
      },
    },
    record: { ...s.record },
    lastCommit: { ...s.lastCommit },
    checkpoints: s.checkpoints.map((c) => ({ ...c })),
    checkpointRequests: s.checkpointRequests.map((c) => ({ ...c })),
    pending: { ...s.pending },
  };
}

/** This transition's own map of workers (copied on first write). */
export function writableWorkers(ctx: Ctx): CoordinatorState['workers'] {
  if (!ctx.ownWorkers) {
    ctx.s.workers = { ...ctx.s.workers };
    ctx.ownWorkers = true;
  }
  return ctx.s.workers;
}

/** This transition's own map of connections (copied on first write). */
export function writableConnections(ctx: Ctx): CoordinatorState['connections'] {
  if (!ctx.ownConnections) {
    ctx.s.connections = { ...ctx.s.connections };
    ctx.ownConnections = true;
  }
  return ctx.s.connections;
}

/** A worker of this transition's state that may be edited (copied on first use). */
export function mutWorker(ctx: Ctx, workerId: string): WorkerInfo {
  const workers = writableWorkers(ctx);
  if (!ctx.copied.has(workerId)) {
    workers[workerId] = { ...workers[workerId] };
    ctx.copied.add(workerId);
  }
  return workers[workerId];
}

export function begin(state: CoordinatorState, now: number): Ctx {
  return { s: cloneState(state), now, out: [], copied: new Set() };
}

export function finish(ctx: Ctx): Transition {
  return { state: ctx.s, actions: ctx.out };
}

export function durableOf(s: CoordinatorState): DurableState {
  return {
    version: 1,
    runId: s.runId,
    job: s.job,
    datasetSize: s.datasetSize,
    status: s.status,
    record: { ...s.record },
    lastCommit: { ...s.lastCommit },
    checkpoints: s.checkpoints.map((c) => ({ ...c })),
    restarts: s.restarts,
    round: s.rendezvous.round,
    nextWorkerSeq: s.nextWorkerSeq,
  };
}

export function sendConn(ctx: Ctx, conn: string, body: ServerBody): void {
  ctx.out.push({ kind: 'send', conn, msg: { v: PROTOCOL_VERSION, ...body } as ServerMessage });
}

/** Send to a worker's current socket (no-op for an unknown worker). */
export function sendWorker(ctx: Ctx, workerId: string, body: ServerBody): void {
  const worker = ctx.s.workers[workerId];
  if (worker) sendConn(ctx, worker.conn, body);
}

export function sendError(ctx: Ctx, conn: string, code: ErrorCode, message: string): void {
  sendConn(ctx, conn, { type: 'error', code, message });
}

export function log(ctx: Ctx, level: LogLevel, event: string, data: Record<string, unknown> = {}): void {
  ctx.out.push({ kind: 'log', level, event, data });
}

export function metric(ctx: Ctx, name: MetricName, value?: number, labels?: Record<string, string>): void {
  const action: Action = { kind: 'metric', name };
  if (value !== undefined) action.value = value;
  if (labels !== undefined) action.labels = labels;
  ctx.out.push(action);
}

export function persist(ctx: Ctx): void {
  ctx.out.push({ kind: 'persist', durable: durableOf(ctx.s) });
}

/**
 * A rejected message: an error to its socket, a counted metric, a log line, and the caller's state
 * returned untouched.
 */
export function reject(
  state: CoordinatorState,
  conn: string,
  code: ErrorCode,
  message: string,
  data: Record<string, unknown> = {},
): Transition {
  const ctx: Ctx = { s: state, now: 0, out: [], copied: new Set() };
  sendError(ctx, conn, code, message);
  metric(ctx, 'tabswarm_message_errors_total', 1, { code });
  log(ctx, 'warn', 'message_rejected', { conn, code, message, ...data });
  return { state, actions: ctx.out };
}
