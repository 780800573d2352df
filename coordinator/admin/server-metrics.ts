/**
 * The coordinator's /metrics: the series the machine emits (`METRICS` in machine/state.ts, updated by its
 * `metric` actions) plus what only the server sees (sockets, frames dropped before the machine,
 * store transactions, checkpoint uploads, admin calls) and gauges read from the current state, which
 * unlike counters survive a coordinator restart.
 */
import { METRICS, type Action, type CoordinatorState, type MetricName } from '../machine/machine';
import { Counter, DURATION_BUCKETS_SECONDS, Gauge, type Histogram, MetricsRegistry, type Summary } from './metrics';

/** Finer than DURATION_BUCKETS_SECONDS below 50 ms: a commit's handling is compared with a 20 ms goal (docs/performance.md). */
const COMMIT_BUCKETS_SECONDS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1];
import { workerCount } from '../machine/worker-table';

type MetricAction = Extract<Action, { kind: 'metric' }>;

export class CoordinatorMetrics {
  readonly registry = new MetricsRegistry();
  private readonly machineSeries = new Map<MetricName, Counter | Gauge | Summary>();

  /** Frames received on /ws (before validation). */
  readonly framesReceived: Counter;
  /** Frames sent on /ws. */
  readonly framesSent: Counter;
  /** Machine message errors (also fed by the server for frames the machine never sees: oversized, binary, rate-limited). */
  readonly messageErrors: Counter;
  readonly eventSeconds: Histogram;
  /** Events that recorded a commit: from the completing report's arrival to its `committed` sent. */
  readonly commitSeconds: Histogram;
  readonly storeTransactions: Counter;
  readonly storeTransactionSeconds: Histogram;
  readonly checkpointUploads: Counter;
  readonly adminRequests: Counter;
  readonly httpRequests: Counter;

  constructor(getState: () => CoordinatorState, getCounts: () => { sockets: number; peers: number }) {
    const r = this.registry;
    for (const [name, meta] of Object.entries(METRICS) as [MetricName, (typeof METRICS)[MetricName]][]) {
      const series =
        meta.type === 'counter'
          ? r.counter(name, meta.help)
          : meta.type === 'gauge'
            ? r.gauge(name, meta.help)
            : r.summary(name, meta.help);
      this.machineSeries.set(name, series);
    }
    this.messageErrors = this.machineSeries.get('tabswarm_message_errors_total') as Counter;
    this.framesReceived = r.counter('tabswarm_ws_frames_received_total', 'Frames received on the control WebSocket.');
    this.framesSent = r.counter('tabswarm_ws_frames_sent_total', 'Frames sent on the control WebSocket.');
    this.eventSeconds = r.histogram(
      'tabswarm_event_handle_seconds',
      'Time to apply one machine event and execute its actions (store included).',
      DURATION_BUCKETS_SECONDS,
    );
    this.commitSeconds = r.histogram(
      'tabswarm_commit_handle_seconds',
      "Time to handle the report that completes a commit: the machine, the commit's SQLite transaction (fsync included) and its `committed` messages handed to the sockets.",
      COMMIT_BUCKETS_SECONDS,
    );
    this.storeTransactions = r.counter('tabswarm_store_transactions_total', 'SQLite transactions committed.');
    this.storeTransactionSeconds = r.histogram(
      'tabswarm_store_transaction_seconds',
      'Duration of a SQLite transaction (fsync included).',
      DURATION_BUCKETS_SECONDS,
    );
    this.checkpointUploads = r.counter('tabswarm_checkpoint_uploads_total', 'Checkpoint uploads, by result.');
    this.adminRequests = r.counter('tabswarm_admin_requests_total', 'Admin API calls, by action and result.');
    this.httpRequests = r.counter('tabswarm_http_requests_total', 'HTTP requests, by route class.');
    r.gauge('tabswarm_ws_connections', 'Open control WebSockets.', () => getCounts().sockets);
    r.gauge('tabswarm_peer_clients', 'PeerJS signaling clients connected.', () => getCounts().peers);
    r.gauge(
      'tabswarm_committed_step',
      'Last committed step (from the durable state).',
      () => getState().lastCommit.step,
    );
    r.gauge('tabswarm_epoch', 'Epoch of the sampler record.', () => getState().record.epoch);
    r.gauge(
      'tabswarm_processed_in_epoch',
      'Samples committed in the current epoch.',
      () => getState().record.processedCount,
    );
    r.gauge('tabswarm_round', 'Current (or last) round number.', () => getState().rendezvous.round);
    r.gauge(
      'tabswarm_restarts',
      'Failure restarts of this run (durable; counters reset with the process).',
      () => getState().restarts,
    );
    r.gauge('tabswarm_workers', 'Workers welcomed and connected.', () => workerCount(getState().workers));
  }

  /** Applies a machine `metric` action: counters add (default 1), gauges set, summaries observe. */
  apply(action: MetricAction): void {
    const series = this.machineSeries.get(action.name);
    if (!series) return;
    if (series instanceof Counter) series.inc(action.value ?? 1, action.labels);
    else if (series instanceof Gauge) series.set(action.value ?? 0, action.labels);
    else series.observe(action.value ?? 0);
  }

  render(): string {
    return this.registry.render();
  }
}
