/**
 * The scratch context of one transition: a private copy of the state that the ops mutate, the clock,
 * and the actions emitted so far, in execution order. Public ops clone first, so callers' states are
 * never mutated (a rejected message returns the very same state object).
 */
import { PROTOCOL_VERSION } from '../../core/protocol/control-fields';
import type { ErrorCode, ServerMessage } from '../../core/protocol/coordinator-messages';
import type {
  Action,
  Connection,
  CoordinatorState,
  DurableState,
  LogLevel,
  MetricName,
  Participant,
  Transition,
  WorkerInfo,
} from './state';
import { bucketOf, connectionOf, workerOf } from './worker-table';

export interface Ctx {
  s: CoordinatorState;
  now: number;
  out: Action[];
  /** Workers already copied in this transition (copy-on-write: see `mutWorker`). */
  copied: Set<string>;
  /** Per table (worker-table.ts): null until its bucket array is this transition's own, then the buckets copied. */
  ownBuckets?: { workers: Set<number> | null; connections: Set<number> | null };
  /** Whether `s.rendezvous.participants` is this transition's own array, and which of its entries were copied. */
  ownParticipants?: Set<string>;
}

/** A lookup in a map keyed by untrusted strings that never reaches the prototype (`__proto__`, `constructor`). */
export function own<T>(map: Record<string, T>, key: string): T | undefined {
  return Object.hasOwn(map, key) ? map[key] : undefined;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** A server message without its version field (added on send). */
export type ServerBody = DistributiveOmit<ServerMessage, 'v'>;

/**
 * Copy the small containers an op may mutate. What grows with the swarm is copied only when a
 * transition writes it, and then only the part it writes: the workers (worker-table.ts: one bucket,
 * `putWorker`, `mutWorker`, `deleteWorker`), the connections (`putConnection`, `deleteConnection`) and the round's
 * participants (`mutParticipant`). Their entries are replaced, never edited, so the input state is
 * never touched; the wait list, the participants and a carried group (`rendezvous.carry`) are replaced
 * whole, never edited in place, and so are the steps of `pending`. Strings (the record's bitset) and the job are shared.
 *
 * Before, every transition copied every participant, and every write to a worker copied the record of
 * all workers: at 1,000 workers and a world of 256 those two copies took half of the coordinator's CPU
 * (docs/performance.md, "A coordinator for hundreds").
 */
export function cloneState(s: CoordinatorState): CoordinatorState {
  return {
    ...s,
    rendezvous: { ...s.rendezvous },
    record: { ...s.record },
    lastCommit: { ...s.lastCommit },
    checkpoints: s.checkpoints.map((c) => ({ ...c })),
    checkpointRequests: s.checkpointRequests.map((c) => ({ ...c })),
    pending: { ...s.pending },
  };
}

type TableName = 'workers' | 'connections';

/** This transition's own bucket of a table for `key` (the bucket array and the bucket copied on first write). */
function writableBucket<K extends TableName>(
  ctx: Ctx,
  name: K,
  key: string,
): Record<string, CoordinatorState[K][number][string]> {
  if (!ctx.ownBuckets) ctx.ownBuckets = { workers: null, connections: null };
  const own = ctx.ownBuckets;
  if (own[name] === null) {
    (ctx.s[name] as unknown[]) = [...ctx.s[name]];
    own[name] = new Set();
  }
  const index = bucketOf(key);
  const buckets = ctx.s[name] as Record<string, CoordinatorState[K][number][string]>[];
  if (!own[name].has(index)) {
    buckets[index] = { ...buckets[index] };
    own[name].add(index);
  }
  return buckets[index];
}

/** Adds (or replaces) a worker in this transition's state. */
export function putWorker(ctx: Ctx, worker: WorkerInfo): void {
  writableBucket(ctx, 'workers', worker.workerId)[worker.workerId] = worker;
  ctx.copied.add(worker.workerId);
}

/** Removes a worker from this transition's state (no-op for an unknown one). */
export function deleteWorker(ctx: Ctx, workerId: string): void {
  if (!workerOf(ctx.s.workers, workerId)) return;
  delete writableBucket(ctx, 'workers', workerId)[workerId];
  ctx.copied.delete(workerId);
}

/** Adds or replaces (never edits) the connection `conn` in this transition's state. */
export function putConnection(ctx: Ctx, conn: string, connection: Connection): void {
  writableBucket(ctx, 'connections', conn)[conn] = connection;
}

export function deleteConnection(ctx: Ctx, conn: string): void {
  if (connectionOf(ctx.s.connections, conn)) delete writableBucket(ctx, 'connections', conn)[conn];
}

/** A worker of this transition's state that may be edited (copied on first use); the worker must exist. */
export function mutWorker(ctx: Ctx, workerId: string): WorkerInfo {
  const bucket = writableBucket(ctx, 'workers', workerId);
  if (!ctx.copied.has(workerId)) {
    bucket[workerId] = { ...bucket[workerId] };
    ctx.copied.add(workerId);
  }
  return bucket[workerId];
}

/**
 * The participant of the open round with this id, copied (once per transition) so it may be edited,
 * or undefined when it is not a member. Replaces `rendezvous.participants` by this transition's own
 * array on the first call; arrays assigned whole (a new round) need no copy.
 */
export function mutParticipant(ctx: Ctx, workerId: string): Participant | undefined {
  const rv = ctx.s.rendezvous;
  const index = rv.participants.findIndex((p) => p.workerId === workerId);
  if (index < 0) return undefined;
  if (!ctx.ownParticipants) {
    rv.participants = [...rv.participants];
    ctx.ownParticipants = new Set();
  }
  if (!ctx.ownParticipants.has(workerId)) {
    rv.participants[index] = { ...rv.participants[index] };
    ctx.ownParticipants.add(workerId);
  }
  return rv.participants[index];
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
  const worker = workerOf(ctx.s.workers, workerId);
  if (worker) sendConn(ctx, worker.conn, body);
}

/**
 * Send one message to several workers: every `send` action carries the same message object, so the
 * executor serialises it once (a round's `round` message lists the whole world, and went to each of 256
 * members as its own copy: 256 serialisations of ~25 kB per round).
 */
export function sendWorkers(ctx: Ctx, workerIds: readonly string[], body: ServerBody): void {
  const msg = { v: PROTOCOL_VERSION, ...body } as ServerMessage;
  for (const id of workerIds) {
    const worker = workerOf(ctx.s.workers, id);
    if (worker) ctx.out.push({ kind: 'send', conn: worker.conn, msg });
  }
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
