/**
 * The admin page's live feed: Server-Sent Events (`text/event-stream`), one JSON `FeedMessage`
 * (web/admin/feed-protocol.ts) per event. SSE rather than a WebSocket because the feed only flows one
 * way, an `EventSource` reconnects by itself (and then gets a fresh snapshot), and it passes through
 * anything that passes plain HTTP. Admin commands stay ordinary POSTs.
 *
 * Sources:
 * - history when a page connects: commit rows, the newest event-log rows (read once at start, then kept
 *   in a ring with the live ones), stored checkpoints;
 * - live: the machine's actions, handed over by the executor after each transition (`subscribe`):
 *   `record_commit` → commit, `rollback_commits` → rollback, `log` (info and above) → event; a status
 *   snapshot follows every transition (throttled) and is re-sent every second for the heartbeat ages.
 *   The executor calls its listeners after the transition's store writes, so a page never sees a commit
 *   the store could still lose.
 * - without `subscribe` (a server that has no action hook) the feed tails the store instead, on a
 *   server-side timer: new commit rows, new event rows, checkpoint changes. The page is push-only either way.
 *
 * A client that does not read (its socket buffer past `maxBufferedBytes`) is disconnected rather than
 * buffered without bound; its EventSource reconnects and starts again from a snapshot.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Action, CoordinatorState } from './core/machine';
import type { CommitRecord } from './core/state';
import { parameterLayout } from './core/model-spec';
import { stepsPerEpoch } from './core/sampler';
import { statusOf } from './audit';
import type { CheckpointRow, CommitRow, EventRow, Store } from './store';
import {
  categoryOf,
  type AdminJobSummary,
  type FeedCheckpoint,
  type FeedCommit,
  type FeedEvaluation,
  type FeedEvent,
  type FeedMessage,
} from './core/admin-feed-protocol';

export type { FeedMessage };

/** What the feed reads from the store. */
export type FeedStore = Pick<Store, 'commits' | 'events' | 'checkpoints'>;

/** Receives the actions of one machine transition, in order, after they were executed. */
export type ActionListener = (actions: readonly Action[]) => void;
/** Registers a listener; returns the function that removes it. */
export type SubscribeActions = (listener: ActionListener) => () => void;

export interface AdminFeedOptions {
  runId: string;
  store: FeedStore;
  /** The machine's current state (e.g. `() => executor.state`). */
  state: () => CoordinatorState;
  /** Hands every transition's actions to the feed; without it the feed tails the store on a timer. */
  subscribe?: SubscribeActions;
  now?: () => number;
  /** Status re-sent at least this often while a page is connected (heartbeat ages move). Default 1000. */
  statusIntervalMs?: number;
  /** At most one status per this many ms after changes. Default 150. */
  statusThrottleMs?: number;
  /** Store tail period without `subscribe`. Default 500. */
  pollMs?: number;
  /** Event-log lines kept for new pages. Default 500. */
  recentEvents?: number;
  /** Commits sent in a snapshot (the newest). Default 5000. */
  maxCommits?: number;
  /** A client with more unsent bytes than this is disconnected. Default 4 MiB. */
  maxBufferedBytes?: number;
}

/** Commits whose rate is averaged (the newest, within one round). */
const RATE_WINDOW = 8;

/** Samples per second over the last few commits of a round: samples after the first / time span. */
export class CommitRater {
  private window: { at: number; count: number; round: number }[] = [];

  push(at: number, count: number, round: number): number | null {
    if (this.window.length > 0 && this.window[this.window.length - 1].round !== round) this.window = [];
    this.window.push({ at, count, round });
    if (this.window.length > RATE_WINDOW) this.window.shift();
    if (this.window.length < 2) return null;
    const span = this.window[this.window.length - 1].at - this.window[0].at;
    if (span <= 0) return null;
    const samples = this.window.slice(1).reduce((sum, c) => sum + c.count, 0);
    return (samples * 1000) / span;
  }

  /** Forget everything after a rollback (the rate restarts with the next round). */
  reset(): void {
    this.window = [];
  }
}

function finiteOrNull(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}

/** A commit as the feed shows it: a stored row, or a live `record_commit` stamped with the feed's clock. */
export function feedCommitFromRow(
  row: CommitRecord & Pick<CommitRow, 'committedAt'>,
  samplesPerSecond: number | null,
): FeedCommit {
  return {
    step: row.step,
    firstStep: row.firstStep,
    epoch: row.epoch,
    cursorStart: row.cursorStart,
    count: row.count,
    loss: finiteOrNull(row.loss),
    worldSize: row.world.length,
    round: row.round,
    hash: row.hash,
    at: row.committedAt,
    samplesPerSecond,
  };
}

export function feedCheckpoint(
  runId: string,
  row: Pick<CheckpointRow, 'step' | 'epoch' | 'cursor' | 'sha256' | 'bytes' | 'createdAt'>,
): FeedCheckpoint {
  return {
    step: row.step,
    epoch: row.epoch,
    cursor: row.cursor,
    sha256: row.sha256,
    bytes: row.bytes,
    createdAt: row.createdAt,
    safetensorsUrl: `/api/admin/model.safetensors?step=${row.step}`,
    snapshotUrl: `/api/checkpoints/${encodeURIComponent(runId)}/${row.step}`,
  };
}

function feedEvent(id: number | null, at: number, level: string, event: string, data: unknown): FeedEvent {
  return { id, at, level, event, category: categoryOf(event, data), data };
}

/** An `evaluation` log event carrying `{step, accuracy}`, if this is one. */
function evaluationOf(event: FeedEvent): FeedEvaluation | null {
  if (event.event !== 'evaluation') return null;
  const data = event.data as { step?: unknown; accuracy?: unknown } | null;
  if (typeof data?.step !== 'number' || typeof data.accuracy !== 'number' || !Number.isFinite(data.accuracy))
    return null;
  return { step: data.step, accuracy: data.accuracy, at: event.at };
}

export function jobSummary(state: CoordinatorState): AdminJobSummary {
  const job = state.job;
  const optimizer =
    job.optimizer.kind === 'adamw'
      ? `AdamW lr ${job.optimizer.lr}`
      : `SGD lr ${job.optimizer.lr} momentum ${job.optimizer.momentum}`;
  return {
    model: job.model.name,
    parameterCount: parameterLayout(job.model).parameterCount,
    dataset: job.dataset.name,
    datasetSize: state.datasetSize,
    globalBatch: job.globalBatch,
    epochs: job.epochs,
    stepsPerEpoch: stepsPerEpoch({
      datasetSize: state.datasetSize,
      globalBatch: job.globalBatch,
      epochs: job.epochs,
      commitEvery: job.commitEvery,
    }),
    optimizer,
    commitEvery: job.commitEvery,
    checkpointEvery: job.checkpointEvery,
    heartbeatMs: job.heartbeatMs,
  };
}

interface FeedClient {
  res: ServerResponse;
}

const LIVE_LEVELS = new Set(['info', 'warn', 'error']);

export class AdminFeed {
  private readonly clients = new Set<FeedClient>();
  private readonly now: () => number;
  private readonly opts: Required<Omit<AdminFeedOptions, 'subscribe' | 'now'>>;
  private readonly events: FeedEvent[] = [];
  private readonly evaluations: FeedEvaluation[] = [];
  private readonly rater = new CommitRater();
  private unsubscribe: (() => void) | null = null;
  private statusTimer: NodeJS.Timeout | null = null;
  private throttleTimer: NodeJS.Timeout | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private lastStatusAt = 0;
  /** Store tail positions (used without `subscribe`). */
  private lastEventId = 0;
  private lastCommitStep = 0;
  private checkpointsKey = '';
  private closed = false;

  constructor(options: AdminFeedOptions) {
    this.now = options.now ?? Date.now;
    this.opts = {
      runId: options.runId,
      store: options.store,
      state: options.state,
      statusIntervalMs: options.statusIntervalMs ?? 1000,
      statusThrottleMs: options.statusThrottleMs ?? 150,
      pollMs: options.pollMs ?? 500,
      recentEvents: options.recentEvents ?? 500,
      maxCommits: options.maxCommits ?? 5000,
      maxBufferedBytes: options.maxBufferedBytes ?? 4 * 1024 * 1024,
    };
    this.loadStoredEvents();
    const rows = this.opts.store.commits(this.opts.runId);
    for (const row of rows.slice(-RATE_WINDOW)) this.rater.push(row.committedAt, row.count, row.round);
    this.lastCommitStep = rows.length > 0 ? rows[rows.length - 1].step : 0;
    this.checkpointsKey = this.checkpointKeyOf(this.opts.store.checkpoints(this.opts.runId));
    if (options.subscribe) this.unsubscribe = options.subscribe((actions) => this.onActions(actions));
    else {
      // Tail even while no page is connected, so the ring of recent events stays current.
      this.pollTimer = setInterval(() => this.tailStore(), this.opts.pollMs);
      this.pollTimer.unref?.();
    }
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Serves one EventSource: headers, the snapshot, then live messages until the client goes away. */
  attach(req: IncomingMessage, res: ServerResponse): void {
    if (this.closed) {
      res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8' }).end('feed closed\n');
      return;
    }
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      // Proxies (nginx) buffer responses unless told not to; a feed must flow.
      'x-accel-buffering': 'no',
    });
    res.socket?.setNoDelay(true);
    const client: FeedClient = { res };
    // Reconnect after 2 s when the connection drops (a coordinator restart, say).
    res.write('retry: 2000\n\n');
    this.write(client, this.snapshot());
    this.clients.add(client);
    const drop = () => this.clients.delete(client);
    req.on('close', drop);
    res.on('close', drop);
    res.on('error', drop);
    this.ensureTimers();
  }

  /** The whole picture, as a new page's first message. */
  snapshot(): Extract<FeedMessage, { type: 'snapshot' }> {
    const state = this.opts.state();
    const rows = this.opts.store.commits(this.opts.runId);
    const rater = new CommitRater();
    const commits = rows
      .map((row) => feedCommitFromRow(row, rater.push(row.committedAt, row.count, row.round)))
      .slice(-this.opts.maxCommits);
    const at = this.now();
    return {
      type: 'snapshot',
      runId: this.opts.runId,
      at,
      status: statusOf(state, at),
      job: jobSummary(state),
      commits,
      events: [...this.events],
      checkpoints: this.checkpoints(),
      evaluations: [...this.evaluations],
    };
  }

  checkpoints(rows = this.opts.store.checkpoints(this.opts.runId)): FeedCheckpoint[] {
    return rows.map((row) => feedCheckpoint(this.opts.runId, row));
  }

  /** One transition's actions (the executor's listener). */
  onActions(actions: readonly Action[]): void {
    if (this.closed) return;
    let changed = false;
    let checkpointsChanged = false;
    for (const action of actions) {
      switch (action.kind) {
        case 'record_commit': {
          const c = action.commit;
          const at = this.now();
          this.lastCommitStep = c.step;
          this.broadcast({
            type: 'commit',
            commit: feedCommitFromRow({ ...c, committedAt: at }, this.rater.push(at, c.count, c.round)),
          });
          changed = true;
          break;
        }
        case 'rollback_commits':
          this.rater.reset();
          this.lastCommitStep = Math.min(this.lastCommitStep, action.afterStep);
          this.broadcast({ type: 'rollback', afterStep: action.afterStep });
          changed = true;
          break;
        case 'log':
          if (!LIVE_LEVELS.has(action.level)) break;
          this.addEvent(feedEvent(null, this.now(), action.level, action.event, action.data));
          if (action.event === 'checkpoint_stored' || action.event === 'record_rolled_back') checkpointsChanged = true;
          changed = true;
          break;
        case 'persist':
        case 'send':
        case 'close':
          changed = true;
          break;
        case 'metric':
          break;
      }
    }
    if (checkpointsChanged) this.broadcastCheckpoints();
    if (changed) this.scheduleStatus();
  }

  private addEvent(event: FeedEvent): void {
    this.events.push(event);
    if (this.events.length > this.opts.recentEvents) this.events.splice(0, this.events.length - this.opts.recentEvents);
    this.broadcast({ type: 'event', event });
    const evaluation = evaluationOf(event);
    if (evaluation) {
      this.evaluations.push(evaluation);
      this.broadcast({ type: 'evaluation', evaluation });
    }
  }

  /** Sends the stored checkpoint list (`rows`, when the caller already read it) and remembers its key. */
  private broadcastCheckpoints(rows = this.opts.store.checkpoints(this.opts.runId)): void {
    this.checkpointsKey = this.checkpointKeyOf(rows);
    this.broadcast({ type: 'checkpoints', checkpoints: this.checkpoints(rows) });
  }

  private checkpointKeyOf(rows: CheckpointRow[]): string {
    return rows.map((r) => `${r.step}:${r.sha256}`).join(',');
  }

  private sendStatus(): void {
    if (this.clients.size === 0) return;
    const at = this.now();
    this.lastStatusAt = at;
    this.broadcast({ type: 'status', at, status: statusOf(this.opts.state(), at) });
  }

  /** A status soon after a change, at most one per throttle period. */
  private scheduleStatus(): void {
    if (this.clients.size === 0 || this.throttleTimer) return;
    const wait = Math.max(0, this.lastStatusAt + this.opts.statusThrottleMs - this.now());
    this.throttleTimer = setTimeout(() => {
      this.throttleTimer = null;
      this.sendStatus();
    }, wait);
    this.throttleTimer.unref?.();
  }

  private ensureTimers(): void {
    if (!this.statusTimer) {
      this.statusTimer = setInterval(() => {
        if (this.clients.size === 0) return;
        if (this.now() - this.lastStatusAt >= this.opts.statusIntervalMs - 10) this.sendStatus();
      }, this.opts.statusIntervalMs);
      this.statusTimer.unref?.();
    }
  }

  /** Without an action hook: what changed in the store since the last look. */
  private tailStore(): void {
    if (this.closed) return;
    const { store, runId } = this.opts;
    let changed = false;
    const step = this.opts.state().lastCommit.step;
    if (step < this.lastCommitStep) {
      this.rater.reset();
      this.broadcast({ type: 'rollback', afterStep: step });
      this.lastCommitStep = step;
      changed = true;
    }
    if (step > this.lastCommitStep) {
      for (const row of store.commits(runId).filter((r) => r.step > this.lastCommitStep)) {
        this.broadcast({
          type: 'commit',
          commit: feedCommitFromRow(row, this.rater.push(row.committedAt, row.count, row.round)),
        });
      }
      this.lastCommitStep = step;
      changed = true;
    }
    for (;;) {
      const rows = store.events(runId, { afterId: this.lastEventId, limit: 500 });
      for (const row of rows) {
        this.lastEventId = row.id;
        if (LIVE_LEVELS.has(row.level)) this.addEvent(feedEvent(row.id, row.at, row.level, row.event, row.data));
        changed = true;
      }
      if (rows.length < 500) break;
    }
    const checkpointRows = store.checkpoints(runId);
    if (this.checkpointKeyOf(checkpointRows) !== this.checkpointsKey) this.broadcastCheckpoints(checkpointRows);
    if (changed) this.scheduleStatus();
  }

  /** The newest event-log rows of the run, and every evaluation in it. */
  private loadStoredEvents(): void {
    const { store, runId } = this.opts;
    const page = 1000;
    let afterId = 0;
    for (;;) {
      const rows: EventRow[] = store.events(runId, { afterId, limit: page });
      for (const row of rows) {
        afterId = row.id;
        if (!LIVE_LEVELS.has(row.level)) continue;
        const event = feedEvent(row.id, row.at, row.level, row.event, row.data);
        this.events.push(event);
        const evaluation = evaluationOf(event);
        if (evaluation) this.evaluations.push(evaluation);
      }
      if (this.events.length > this.opts.recentEvents)
        this.events.splice(0, this.events.length - this.opts.recentEvents);
      if (rows.length < page) break;
    }
    this.lastEventId = afterId;
  }

  private broadcast(msg: FeedMessage): void {
    if (this.clients.size === 0) return;
    const frame = `data: ${JSON.stringify(msg)}\n\n`;
    for (const client of this.clients) this.writeFrame(client, frame);
  }

  private write(client: FeedClient, msg: FeedMessage): void {
    this.writeFrame(client, `data: ${JSON.stringify(msg)}\n\n`);
  }

  private writeFrame(client: FeedClient, frame: string): void {
    const { res } = client;
    if (res.destroyed || res.writableEnded) {
      this.clients.delete(client);
      return;
    }
    if (res.writableLength > this.opts.maxBufferedBytes) {
      // A page that stopped reading: drop it; its EventSource reconnects and starts from a snapshot.
      this.clients.delete(client);
      res.destroy();
      return;
    }
    res.write(frame);
  }

  /** Ends every stream and stops the timers (server shutdown). */
  close(): void {
    this.closed = true;
    this.unsubscribe?.();
    this.unsubscribe = null;
    for (const timer of [this.statusTimer, this.pollTimer]) if (timer) clearInterval(timer);
    if (this.throttleTimer) clearTimeout(this.throttleTimer);
    this.statusTimer = this.pollTimer = this.throttleTimer = null;
    for (const client of this.clients) client.res.end();
    this.clients.clear();
  }
}
