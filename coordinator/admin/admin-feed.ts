/**
 * The admin page's live feed: Server-Sent Events (`text/event-stream`), one JSON `FeedMessage`
 * (core/protocol/admin-feed.ts) per event. SSE rather than a WebSocket because the feed only
 * flows one way, an `EventSource` reconnects by itself (and then gets a fresh snapshot), and it passes
 * through anything that passes plain HTTP. Admin commands stay ordinary POSTs.
 *
 * Two parts: `FeedProjection` (admin-feed-projection.ts, no I/O) turns history and actions into
 * messages; `SseHub` (sse-hub.ts) sends them. This class wires them:
 * - history when it starts: commit rows, the newest event-log rows, stored checkpoints;
 * - live: the machine's actions, handed over by the executor after each transition (`subscribe`):
 *   `record_commit` → commit, `rollback_commits` → rollback, `log` (info and above) → event; a delta
 *   (feed-workers.ts: the status and the workers that changed) follows changes (throttled) and is sent
 *   at least every second. The executor calls its listeners after the transition's store writes, so a
 *   page never sees a commit the store could still lose.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FeedCheckpoint, FeedMessage } from '../../core/protocol/admin-feed';
import type { Action, CoordinatorState } from '../machine/machine';
import { FeedProjection, feedCheckpoint, jobUsage } from './admin-feed-projection';
import { FeedWorkers } from './feed-workers';
import { statusSummary } from '../machine/status-view';
import { SseHub } from './sse-hub';
import type { EventRow, Store } from '../runtime/store';

export type { FeedMessage };
export { CommitRater, feedCheckpoint, feedCommitFromRow, jobSummary } from './admin-feed-projection';

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
  /** Hands every transition's actions to the feed (e.g. `(l) => executor.subscribe(l)`). */
  subscribe: SubscribeActions;
  now?: () => number;
  /** Status re-sent at least this often while a page is connected (heartbeat ages move). Default 1000. */
  statusIntervalMs?: number;
  /** At most one status per this many ms after changes. Default 150. */
  statusThrottleMs?: number;
  /** Event-log lines kept for new pages. Default 500. */
  recentEvents?: number;
  /** Commits sent in a snapshot (the newest). Default 5000. */
  maxCommits?: number;
  /** A client with more unsent bytes than this is disconnected. Default 4 MiB. */
  maxBufferedBytes?: number;
}

export class AdminFeed {
  private readonly now: () => number;
  private readonly opts: Required<Omit<AdminFeedOptions, 'subscribe' | 'now'>>;
  private readonly projection: FeedProjection;
  private readonly workers = new FeedWorkers();
  private readonly hub: SseHub<FeedMessage>;
  private unsubscribe: (() => void) | null;
  private statusTimer: NodeJS.Timeout | null = null;
  private throttleTimer: NodeJS.Timeout | null = null;
  private lastStatusAt = 0;
  private closed = false;

  constructor(options: AdminFeedOptions) {
    this.now = options.now ?? Date.now;
    this.opts = {
      runId: options.runId,
      store: options.store,
      state: options.state,
      statusIntervalMs: options.statusIntervalMs ?? 1000,
      statusThrottleMs: options.statusThrottleMs ?? 150,
      recentEvents: options.recentEvents ?? 500,
      maxCommits: options.maxCommits ?? 5000,
      maxBufferedBytes: options.maxBufferedBytes ?? 4 * 1024 * 1024,
    };
    this.projection = new FeedProjection(this.opts.recentEvents, this.opts.maxCommits);
    this.hub = new SseHub<FeedMessage>(this.opts.maxBufferedBytes);
    this.projection.loadHistory(this.opts.store.commits(this.opts.runId), this.storedEvents());
    this.unsubscribe = options.subscribe((actions) => this.onActions(actions));
  }

  get clientCount(): number {
    return this.hub.size;
  }

  /** Serves one EventSource: headers, the snapshot, then live messages until the client goes away. */
  attach(req: IncomingMessage, res: ServerResponse): void {
    this.hub.attach(req, res, () => this.snapshot());
    if (!this.closed) this.ensureTimers();
  }

  /**
   * The whole picture, as a new page's first message. The pages already watching get the delta up to
   * now first, so the snapshot's rows and number are the baseline the next delta applies to.
   */
  snapshot(): Extract<FeedMessage, { type: 'snapshot' }> {
    const { runId, store, state } = this.opts;
    this.sendDelta(true);
    const workers = { seq: this.workers.seq, rows: this.workers.rows() };
    return this.projection.snapshot(
      runId,
      state(),
      store.commits(runId),
      store.checkpoints(runId),
      this.now(),
      workers,
    );
  }

  checkpoints(): FeedCheckpoint[] {
    return this.opts.store.checkpoints(this.opts.runId).map((row) => feedCheckpoint(this.opts.runId, row));
  }

  /** One transition's actions (the executor's listener). */
  onActions(actions: readonly Action[]): void {
    if (this.closed) return;
    const projected = this.projection.apply(actions, this.now(), jobUsage(this.opts.state()));
    for (const msg of projected.messages) this.hub.broadcast(msg);
    // The list is re-read from the store only for pages that are watching (a new page's snapshot reads it anyway).
    if (projected.checkpointsChanged && this.hub.size > 0)
      this.hub.broadcast({ type: 'checkpoints', checkpoints: this.checkpoints() });
    if (projected.changed) this.scheduleStatus();
  }

  /** Ends every stream and stops the timers (server shutdown). */
  close(): void {
    this.closed = true;
    this.unsubscribe?.();
    this.unsubscribe = null;
    if (this.statusTimer) clearInterval(this.statusTimer);
    if (this.throttleTimer) clearTimeout(this.throttleTimer);
    this.statusTimer = this.throttleTimer = null;
    this.hub.close();
  }

  /** Every event-log row of the run, oldest first, in pages. */
  private *storedEvents(): Generator<EventRow> {
    const page = 1000;
    let afterId = 0;
    for (;;) {
      const rows = this.opts.store.events(this.opts.runId, { afterId, limit: page });
      for (const row of rows) {
        afterId = row.id;
        yield row;
      }
      if (rows.length < page) return;
    }
  }

  /**
   * The status and what changed among the workers since the last delta, to every page. With no page
   * watching nothing is computed, unless `always` (a snapshot moves the baseline to now).
   */
  private sendDelta(always = false): void {
    if (this.hub.size === 0 && !always) return;
    const at = this.now();
    const state = this.opts.state();
    this.lastStatusAt = at;
    const { seq, added, changed, removed } = this.workers.diff(state);
    this.hub.broadcast({ type: 'delta', seq, at, status: statusSummary(state, at), added, changed, removed });
  }

  /** A status soon after a change, at most one per throttle period. */
  private scheduleStatus(): void {
    if (this.hub.size === 0 || this.throttleTimer) return;
    const wait = Math.max(0, this.lastStatusAt + this.opts.statusThrottleMs - this.now());
    this.throttleTimer = setTimeout(() => {
      this.throttleTimer = null;
      this.sendDelta();
    }, wait);
    this.throttleTimer.unref?.();
  }

  private ensureTimers(): void {
    if (this.statusTimer) return;
    this.statusTimer = setInterval(() => {
      if (this.hub.size === 0) return;
      if (this.now() - this.lastStatusAt >= this.opts.statusIntervalMs - 10) this.sendDelta();
    }, this.opts.statusIntervalMs);
    this.statusTimer.unref?.();
  }
}
