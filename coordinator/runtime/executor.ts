/**
 * The executor of the pure machine: one event in, `handle`, then the actions out, in order.
 *
 * Durability rule (docs/coordinator-contract.md): `record_commit`, `rollback_commits` and `persist` are
 * queued and written in ONE SQLite transaction as soon as the next `send`/`close` comes up (or at
 * the end of the transition), so a tab never sees `committed` for a step the store could lose. Log
 * events are buffered and ride along with the next transaction (or a short timer), because an fsync
 * per heartbeat log line would cost more than the line is worth; losing the last few log lines to a
 * `kill -9` loses no state.
 *
 * If the store fails, the state the machine moved to cannot be made durable, so the executor stops
 * before sending anything that depends on it and reports a fatal error (the process exits; a restart
 * resumes from the last transaction that did commit).
 */
import { randomBytes } from 'node:crypto';
import {
  type Action,
  type CoordinatorState,
  type Event,
  handle,
  heartbeatDeadline,
  roundDeadline,
  type Transition,
} from '../machine/machine';
import type { ServerMessage } from '../../core/protocol/coordinator-messages';
import { sameSecret } from '../http/http-util';
import type { CoordinatorMetrics } from '../admin/server-metrics';
import type { Store, StoreOp } from './store';
import { connectionOf } from '../machine/worker-table';

/** How the executor reaches sockets (the control channel implements it). */
export interface SocketSink {
  /** Sends a text frame; returns false when the socket is gone. */
  send(conn: string, text: string): boolean;
  close(conn: string, code: number, reason: string): void;
}

/** A checkpoint upload the machine asked for: who may upload it, with which capability token. */
export interface CheckpointGrant {
  step: number;
  conn: string;
  workerId: string | null;
  token: string;
  /** The commit hash the uploaded parameters must have (null: unknown, not checked). */
  hash: string | null;
  issuedAt: number;
}

/**
 * Why an upload of `what` to `url` may not use `grant`: none was issued, the URL's token is not its
 * token, or another worker names itself. Null: the upload may go on.
 */
export function grantRefusal(
  grant: CheckpointGrant | undefined,
  url: URL,
  what: string,
): { status: number; code: string; message: string } | null {
  if (!grant) return { status: 409, code: 'not_requested', message: `no ${what} was requested` };
  if (!sameSecret(url.searchParams.get('token'), grant.token))
    return { status: 403, code: 'forbidden', message: `missing or wrong upload token for the ${what}` };
  const workerId = url.searchParams.get('workerId');
  if (workerId !== null && workerId !== grant.workerId)
    return { status: 403, code: 'forbidden', message: `the ${what} was requested from another worker` };
  return null;
}

/** The metrics the executor feeds (CoordinatorMetrics in the product; a recorder in tests). */
export type ExecutorMetrics = Pick<
  CoordinatorMetrics,
  'apply' | 'eventSeconds' | 'commitSeconds' | 'framesSent' | 'storeTransactions' | 'storeTransactionSeconds'
>;

/**
 * The executor's ports. The product passes SQLite, the control channel's sockets and Prometheus metrics;
 * test/unit/coordinator/machine/coordinator-harness.ts passes in-memory ones and drives the same executor with a manual clock.
 */
export interface ExecutorOptions {
  store: Pick<Store, 'apply' | 'pruneEvents'>;
  runId: string;
  metrics: ExecutorMetrics;
  sockets: SocketSink;
  now?: () => number;
  /** Schedule `tick` events on timers at the machine's deadlines (default true; false: the caller ticks). */
  timers?: boolean;
  /** Called for warn/error log actions (besides storing them). */
  onLog?: (level: string, event: string, data: Record<string, unknown>) => void;
  /** The store failed: the process must stop. */
  onFatal: (error: Error) => void;
  /** Log levels written to the event log. Default: info, warn, error. */
  storedLogLevels?: ReadonlySet<string>;
  /**
   * Adds server-side fields to a `welcome` (the reconnect secret, the ICE configuration with a fresh
   * TURN credential) as it leaves, so they are in no action, log line or stored row.
   */
  onWelcome?: (msg: Extract<ServerMessage, { type: 'welcome' }>) => ServerMessage;
  /** Event-log retention: rows kept per run (older ones pruned now and then; evaluations kept). Default 100,000. */
  maxEvents?: number;
}

/**
 * Log events that a client can cause at will (one per bad frame): counted and written as one
 * `messages_rejected {counts}` row per window, never one row each.
 */
const COUNTED_EVENTS = new Set(['message_invalid', 'message_rejected']);
const COUNTED_WINDOW_MS = 10_000;
/** Prune the event log after this many rows were written. */
const PRUNE_EVERY_ROWS = 1000;

const LOG_FLUSH_MS = 250;
const MAX_LAZY_QUEUE = 10_000;

export class MachineExecutor {
  private currentState: CoordinatorState;
  private readonly storeQueue: StoreOp[] = [];
  private readonly lazyQueue: StoreOp[] = [];
  private logTimer: NodeJS.Timeout | null = null;
  private tickTimer: NodeJS.Timeout | null = null;
  private failed = false;
  private dispatching = false;
  private readonly deferred: Event[] = [];
  private readonly grants = new Map<number, CheckpointGrant>();
  /** Upload grants of the checks in flight, by check id (the grant's `step` field holds the id). */
  private readonly verifyGrants = new Map<number, CheckpointGrant>();
  private lastDurableJson = '';
  private lastRecordedRound = -1;
  private droppedLogLines = 0;
  private readonly listeners = new Set<(actions: readonly Action[]) => void>();
  private readonly counted = new Map<string, number>();
  private countedTimer: NodeJS.Timeout | null = null;
  private rowsSincePrune = 0;
  /** The last message sent and its JSON (messages are never edited once emitted). */
  private lastSent: { msg: ServerMessage | null; text: string } = { msg: null, text: '' };
  /** When the first heartbeat times out, as last computed (see `nextDeadline`). */
  private heartbeatDue: number | null = null;
  private readonly now: () => number;
  private readonly storedLogLevels: ReadonlySet<string>;

  constructor(
    initial: CoordinatorState,
    private readonly options: ExecutorOptions,
  ) {
    this.currentState = initial;
    this.now = options.now ?? Date.now;
    this.storedLogLevels = options.storedLogLevels ?? new Set(['info', 'warn', 'error']);
  }

  get state(): CoordinatorState {
    return this.currentState;
  }

  /** The open checkpoint grant for `step`, if the machine asked for that checkpoint. */
  checkpointGrant(step: number): CheckpointGrant | undefined {
    return this.grants.get(step);
  }

  /** The open upload grant of check `id` (machine/checks.ts), while the check still waits for its upload. */
  verifyGrant(id: number): CheckpointGrant | undefined {
    const grant = this.verifyGrants.get(id);
    const v = this.currentState.checks?.find((c) => c.id === id);
    return grant && v && v.phase === 'upload' ? grant : undefined;
  }

  /**
   * Applies one event and executes its actions. Re-entrant calls (an action whose execution makes a
   * socket emit synchronously) are queued and applied after the current one, so every transition
   * sees the state the previous one left.
   */
  dispatch(event: Event): void {
    if (this.failed) return;
    if (this.dispatching) {
      this.deferred.push(event);
      return;
    }
    this.dispatching = true;
    try {
      this.applyOne(event);
      while (this.deferred.length > 0 && !this.failed) this.applyOne(this.deferred.shift()!);
    } finally {
      this.dispatching = false;
    }
    this.scheduleTick();
  }

  private applyOne(event: Event): void {
    const started = performance.now();
    let transition: Transition;
    try {
      transition = handle(this.currentState, event, this.now());
    } catch (error) {
      // A machine bug: keep the old state (nothing was executed) and say so loudly; the event is dropped.
      this.options.onLog?.('error', 'machine_threw', {
        event: event.kind,
        error: String((error as Error).stack ?? error),
      });
      this.queueLog('error', 'machine_threw', { event: event.kind, error: String(error) });
      return;
    }
    this.currentState = transition.state;
    for (const action of transition.actions) {
      if (this.failed) return;
      this.execute(action);
    }
    this.flushStore();
    const seconds = (performance.now() - started) / 1000;
    this.options.metrics.eventSeconds.observe(seconds);
    if (transition.actions.some((a) => a.kind === 'record_commit')) this.options.metrics.commitSeconds.observe(seconds);
    if (this.failed || transition.actions.length === 0) return;
    for (const listener of this.listeners) {
      try {
        listener(transition.actions);
      } catch (error) {
        this.options.onLog?.('error', 'action_listener_threw', { error: String((error as Error).stack ?? error) });
      }
    }
  }

  /**
   * Registers a listener for every transition's actions, called after they were executed (and the
   * store written), e.g. the admin feed. Returns the function that removes it.
   */
  subscribe(listener: (actions: readonly Action[]) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private execute(action: Action): void {
    switch (action.kind) {
      case 'persist': {
        const json = JSON.stringify(action.durable);
        // Identical durable states (an admin `set_workers` that changed nothing, say) need no fsync.
        if (json !== this.lastDurableJson) {
          this.storeQueue.push({ kind: 'persist', durable: action.durable });
          this.lastDurableJson = json;
        }
        break;
      }
      case 'record_commit':
        this.storeQueue.push({ kind: 'commit', commit: action.commit });
        break;
      case 'rollback_commits':
        this.storeQueue.push({ kind: 'rollback', afterStep: action.afterStep });
        for (const step of [...this.grants.keys()]) if (step > action.afterStep) this.grants.delete(step);
        break;
      case 'log':
        if (COUNTED_EVENTS.has(action.event)) {
          this.count(action.event, action.data);
          break;
        }
        if (action.level === 'warn' || action.level === 'error')
          this.options.onLog?.(action.level, action.event, action.data);
        if (this.storedLogLevels.has(action.level)) this.queueLog(action.level, action.event, action.data);
        break;
      case 'metric':
        this.options.metrics.apply(action);
        break;
      case 'send':
        this.flushStore();
        if (this.failed) return;
        this.send(action.conn, this.beforeSend(action.conn, action.msg));
        break;
      case 'close':
        this.flushStore();
        if (this.failed) return;
        this.options.sockets.close(action.conn, action.code, action.reason);
        break;
    }
  }

  /** One more client-caused rejection: counted by event and code, written once per window. */
  private count(event: string, data: Record<string, unknown>): void {
    const key = `${event}:${String(data.code ?? 'unknown').slice(0, 40)}`;
    if (this.counted.size < 64 || this.counted.has(key)) this.counted.set(key, (this.counted.get(key) ?? 0) + 1);
    if (!this.countedTimer) {
      this.countedTimer = setTimeout(() => this.flushCounted(), COUNTED_WINDOW_MS);
      this.countedTimer.unref();
    }
  }

  private flushCounted(): void {
    if (this.countedTimer) clearTimeout(this.countedTimer);
    this.countedTimer = null;
    if (this.counted.size === 0) return;
    const counts = Object.fromEntries(this.counted);
    this.counted.clear();
    this.options.onLog?.('warn', 'messages_rejected', { counts });
    this.queueLog('warn', 'messages_rejected', { counts, windowMs: COUNTED_WINDOW_MS });
  }

  /** Server-side additions to outgoing messages: a capability token on checkpoint upload URLs; round rows. */
  private beforeSend(conn: string, msg: ServerMessage): ServerMessage {
    if (msg.type === 'welcome') return this.options.onWelcome?.(msg) ?? msg;
    if (msg.type === 'checkpoint_request') {
      const request = this.currentState.checkpointRequests.find((r) => r.step === msg.step);
      return { ...msg, url: this.issueGrant(this.grants, msg.step, conn, request?.hash ?? null, msg.url) };
    }
    if (msg.type === 'committed' && msg.upload) {
      // A check's upload grant, like a checkpoint's, keyed by the check (several may be open).
      const checks = this.currentState.checks ?? [];
      for (const id of [...this.verifyGrants.keys()])
        if (!checks.some((c) => c.id === id && c.phase === 'upload')) this.verifyGrants.delete(id);
      const workerId = connectionOf(this.currentState.connections, conn)?.workerId;
      const v = checks.find((c) => c.uploader === workerId && c.step === msg.step && c.phase === 'upload');
      if (!v) return { ...msg, upload: undefined };
      const url = this.issueGrant(this.verifyGrants, v.id, conn, v.prevHash, msg.upload.url);
      return { ...msg, upload: { ...msg.upload, url } };
    }
    if (msg.type === 'round' && msg.round !== this.lastRecordedRound) {
      // One row per round (the same message goes to every member). Like log lines, it rides along
      // with the next transaction: no fsync of its own, and nothing to restore depends on it.
      this.lastRecordedRound = msg.round;
      this.queueLazy({
        kind: 'round',
        round: { round: msg.round, step: msg.step, epoch: msg.epoch, world: msg.world, startedAt: this.now() },
      });
    }
    return msg;
  }

  /** A new grant for the upload of `step` by the worker on `conn`: `url` with its capability token. */
  private issueGrant(
    grants: Map<number, CheckpointGrant>,
    step: number,
    conn: string,
    hash: string | null,
    url: string,
  ): string {
    const token = randomBytes(16).toString('hex');
    const workerId = connectionOf(this.currentState.connections, conn)?.workerId ?? null;
    grants.set(step, { step, conn, workerId, token, hash, issuedAt: this.now() });
    return `${url}${url.includes('?') ? '&' : '?'}token=${token}`;
  }

  private send(conn: string, msg: ServerMessage): void {
    // A message the machine sends to many workers is one object (context.ts `sendWorkers`): serialised once.
    if (msg !== this.lastSent.msg) this.lastSent = { msg, text: JSON.stringify(msg) };
    if (this.options.sockets.send(conn, this.lastSent.text)) this.options.metrics.framesSent.inc();
  }

  /** A stored checkpoint settles its grant. */
  settleGrant(step: number): void {
    this.grants.delete(step);
  }

  private queueLog(level: string, event: string, data: unknown): void {
    this.queueLazy({ kind: 'event', level, event, data, at: this.now() });
  }

  /** Queues a write that needs no fsync of its own: it goes with the next transaction, or after a short delay. */
  private queueLazy(op: StoreOp): void {
    // Bounded: a flood of rejected frames must not grow memory between two flushes.
    if (this.lazyQueue.length >= MAX_LAZY_QUEUE) {
      this.droppedLogLines += 1;
      return;
    }
    if (this.droppedLogLines > 0 && op.kind === 'event') {
      this.lazyQueue.push({
        kind: 'event',
        level: 'warn',
        event: 'log_lines_dropped',
        data: { count: this.droppedLogLines },
        at: this.now(),
      });
      this.droppedLogLines = 0;
    }
    this.lazyQueue.push(op);
    if (!this.logTimer && this.options.timers !== false) {
      this.logTimer = setTimeout(() => {
        this.logTimer = null;
        this.flushLogs();
      }, LOG_FLUSH_MS);
      this.logTimer.unref();
    }
  }

  private flushStore(): void {
    if (this.storeQueue.length === 0 || this.failed) return;
    const ops = [...this.storeQueue, ...this.lazyQueue];
    this.storeQueue.length = 0;
    this.lazyQueue.length = 0;
    this.write(ops);
  }

  /** Writes buffered log events (timer, shutdown). */
  flushLogs(): void {
    if (this.lazyQueue.length === 0 || this.failed) return;
    const ops = [...this.lazyQueue];
    this.lazyQueue.length = 0;
    this.write(ops);
  }

  private write(ops: StoreOp[]): void {
    const started = performance.now();
    try {
      this.options.store.apply(this.options.runId, ops);
      this.rowsSincePrune += ops.length;
      if (this.rowsSincePrune >= PRUNE_EVERY_ROWS) {
        this.rowsSincePrune = 0;
        this.options.store.pruneEvents(this.options.runId, this.options.maxEvents ?? 100_000);
      }
    } catch (error) {
      this.failed = true;
      this.options.onFatal(new Error(`store write failed: ${(error as Error).message}`));
      return;
    }
    this.options.metrics.storeTransactions.inc();
    this.options.metrics.storeTransactionSeconds.observe((performance.now() - started) / 1000);
  }

  /**
   * The machine's `nextDeadline`, without scanning every worker per event: the heartbeat part is
   * recomputed only once its last value has passed (or there was none). A worker's `lastSeen` only
   * grows and a new worker's is now, so the remembered value is never later than the true one: at
   * worst a tick comes early and finds nothing to do. The scan per event took 18 % of the
   * coordinator's CPU at 1,000 workers (docs/performance.md, "A coordinator for hundreds").
   */
  private nextDeadline(now: number): number | null {
    if (this.heartbeatDue === null || now >= this.heartbeatDue)
      this.heartbeatDue = heartbeatDeadline(this.currentState);
    const round = roundDeadline(this.currentState);
    if (this.heartbeatDue === null) return round;
    return round === null ? this.heartbeatDue : Math.min(round, this.heartbeatDue);
  }

  /** Ticks at the machine's next deadline, and at least every `maxTickMs` (heartbeat checks). */
  private scheduleTick(): void {
    if (this.failed || this.stopped || this.options.timers === false) return;
    const now = this.now();
    const deadline = this.nextDeadline(now);
    const maxTickMs = Math.max(50, Math.floor(this.currentState.job.heartbeatMs / 2));
    // At least a few ms: a deadline the machine does not clear on tick must not become a busy loop.
    const delay = deadline === null ? maxTickMs : Math.max(5, Math.min(maxTickMs, deadline - now + 1));
    if (this.tickTimer) clearTimeout(this.tickTimer);
    this.tickTimer = setTimeout(() => {
      this.tickTimer = null;
      this.dispatch({ kind: 'tick' });
    }, delay);
  }

  private stopped = false;

  /** Starts the tick loop. */
  start(): void {
    this.stopped = false;
    this.scheduleTick();
  }

  /** Stops ticking and writes what is buffered. */
  stop(): void {
    this.stopped = true;
    if (this.tickTimer) clearTimeout(this.tickTimer);
    if (this.logTimer) clearTimeout(this.logTimer);
    this.tickTimer = null;
    this.logTimer = null;
    this.flushCounted();
    this.flushStore();
    this.flushLogs();
  }
}
