/**
 * The admin feed's wire format: what `GET /api/admin/feed` streams as Server-Sent Events (one JSON
 * `FeedMessage` per `data:` line, default event type), and what the admin REST routes return.
 *
 * Pure types (no DOM, no Node), shared by the coordinator (coordinator/admin/admin-feed.ts writes them) and
 * the admin page (web/admin reads them), so they live in the pure core both may import
 * (docs/boundaries.md).
 *
 * Life of a connection: the first message is a `snapshot` (the whole picture: status, every worker,
 * commit history, recent events, checkpoints); after it, a `delta` at least every second and soon
 * after every change (the status, and only the workers that were added, changed or removed), `commit`
 * per recorded commit, `rollback` when the record went back to a checkpoint, `event` per log line at
 * info level or above, `checkpoints` when the list changed. Deltas are numbered: a page that sees a
 * gap reconnects, and a reconnecting EventSource gets a fresh snapshot, so the page replaces its
 * state instead of patching a state it no longer has. What a delta costs grows with what changed, not
 * with the swarm (a status listed every worker every second: 1,000 workers, ~300 kB a second).
 */
import type { SyncSpec } from '../training/job';
import type { KernelsReport, PeerLink } from './tab-messages';
import type { StatusSummary, UsageView } from './views';

/**
 * The feed's `status`: `/api/status` without its pages (aggregates over every worker; bounded whatever
 * the swarm's size). The rows of the workers come as `FeedWorker`s, in the snapshot and then as deltas.
 */
export type AdminStatus = StatusSummary;

/** Where a worker stands: a member of the round (syncing its state, ready, or training) or waiting. */
export type FeedWorkerState = 'syncing' | 'ready' | 'training' | 'waiting';

/**
 * One worker as the admin page's table shows it, member or waiting. Values that change with every
 * report are rounded (3 significant digits; `lastSeen` down to a quarter of the heartbeat period, at most
 * a second), so a row changes, and is sent, about once a second, not at every step. `/api/status` has the
 * exact values.
 */
export interface FeedWorker {
  id: string;
  peerId: string;
  state: FeedWorkerState;
  /** Rank in the round (members), else null. */
  rank: number | null;
  /** Its group in the round's topology (members; 0 in a plain ring: `AdminStatus.topology`), else null. */
  group: number | null;
  /** Place on the wait list (waiting), else null. */
  position: number | null;
  /** Fraction of each step's samples (members), else null. */
  share: number | null;
  /** Last step it reported in this round (members), else null. */
  lastStep: number | null;
  /** Smoothed samples per compute-ms the coordinator measured, or null before its first step. */
  throughput: number | null;
  /** Recent compute utilization in [0, 1], or null. */
  utilization: number | null;
  /** Recent bytes it sent in collectives per sample (its claim), or null. */
  bytesPerSample: number | null;
  /** Its ring links' RTT (max over them, ms) from its last heartbeat, or null. */
  peerRttMs: number | null;
  /** Each ring link: the peer's worker id, the selected candidate types, its RTT when reported. */
  peerLinks: PeerLink[];
  iceError: string | null;
  /** WebGPU adapter vendor and architecture ('' unknown). */
  adapter: string;
  /** The kernels its hello reported (variants, GFLOP/s, tuned or cached), or null. */
  kernels: KernelsReport | null;
  invite: string | null;
  /** When it joined, and when its last message arrived (floored as said above): coordinator clock, ms. */
  joinedAt: number;
  lastSeen: number;
}

/** A changed worker: its id and the fields whose value changed. */
export type FeedWorkerChange = { id: string } & Partial<Omit<FeedWorker, 'id'>>;

/** What the page shows of the job (from the validated job spec). */
export interface AdminJobSummary {
  model: string;
  /** A byte-level language model (transformer): the page plots bits per byte and offers a Sample button. */
  languageModel: boolean;
  parameterCount: number;
  dataset: string;
  datasetSize: number;
  globalBatch: number;
  epochs: number;
  stepsPerEpoch: number;
  optimizer: string;
  commitEvery: number;
  checkpointEvery: number;
  /** Workers send a heartbeat this often; one silent for 3× this is dropped. */
  heartbeatMs: number;
  /** How the ranks combine their work: every step, or local steps (H = innerSteps) with an outer optimizer; the wire format. */
  sync: SyncSpec;
}

/** One recorded commit (one row of the commit log). */
export interface FeedCommit {
  step: number;
  firstStep: number;
  epoch: number;
  cursorStart: number;
  /** Samples covered by the commit. */
  count: number;
  /** Mean training loss over the commit's samples (null when not finite). */
  loss: number | null;
  worldSize: number;
  round: number;
  hash: string;
  /** When it was recorded (ms since the epoch, coordinator clock). */
  at: number;
  /** Committed samples per second over the last few commits of the same round; null at a round's first commit. */
  samplesPerSecond: number | null;
  /**
   * The job's recent compute utilization and wire bytes per sample (utilization.ts) when the commit was
   * recorded; null for commits recorded before this coordinator process started (the sums are not stored).
   */
  usage: UsageView | null;
}

/** Kinds of event the page filters by. */
export type FeedCategory =
  | 'join'
  | 'leave'
  | 'crash'
  | 'restart'
  | 'rejected'
  | 'admin'
  | 'checkpoint'
  | 'verify'
  | 'round'
  | 'job'
  | 'other';

export const FEED_CATEGORIES: readonly FeedCategory[] = [
  'join',
  'leave',
  'crash',
  'restart',
  'rejected',
  'admin',
  'checkpoint',
  'verify',
  'round',
  'job',
  'other',
];

/** One line of the event log. */
export interface FeedEvent {
  /** Event-log row id when read from the store; null for a live event not yet read back. */
  id: number | null;
  at: number;
  level: string;
  /** The machine's log event name (join, leave, worker_failed, message_rejected, round_open, …). */
  event: string;
  category: FeedCategory;
  data: unknown;
}

/** A stored checkpoint, with the URLs that fetch it. */
export interface FeedCheckpoint {
  step: number;
  epoch: number;
  cursor: number;
  sha256: string;
  bytes: number;
  createdAt: number;
  /** `GET` with the admin token: the parameters as safetensors. */
  safetensorsUrl: string;
  /** The raw training snapshot (parameters and optimizer state), as tabs fetch it. */
  snapshotUrl: string;
}

/** A test-set evaluation, when one is reported in the event log (event `evaluation` with {step, accuracy, loss}). */
export interface FeedEvaluation {
  step: number;
  /** Correct arg-max predictions per test image, or per held-out byte (language models). */
  accuracy: number;
  /**
   * Mean test loss per sample in nats (null when the event carries none). A language model's sample loss
   * is the mean over its window's positions, i.e. nats per byte: bits per byte = loss / ln 2.
   */
  loss: number | null;
  at: number;
  /** Two ranks agreed on it (coordinator/machine/evaluation.ts); false: one rank's number, unverified. */
  verified: boolean;
}

export type FeedMessage =
  | {
      type: 'snapshot';
      /** The delta this snapshot includes: the next `delta` to apply is seq + 1. */
      seq: number;
      runId: string;
      /** Coordinator clock when the snapshot was taken. */
      at: number;
      status: AdminStatus;
      /** Every worker (members by rank, then the wait list). */
      workers: FeedWorker[];
      job: AdminJobSummary;
      commits: FeedCommit[];
      events: FeedEvent[];
      checkpoints: FeedCheckpoint[];
      evaluations: FeedEvaluation[];
    }
  | {
      /**
       * What changed since the previous delta (or the snapshot): the status (always whole: it is
       * bounded) and the workers added, changed (only the changed fields) and removed. Sent after
       * changes (at most one per throttle period) and at least once a second. A page whose last
       * seq is not seq − 1 missed one and must take a new snapshot (reconnect).
       */
      type: 'delta';
      seq: number;
      at: number;
      status: AdminStatus;
      added: FeedWorker[];
      changed: FeedWorkerChange[];
      removed: string[];
    }
  | { type: 'commit'; commit: FeedCommit }
  | { type: 'rollback'; afterStep: number }
  | { type: 'event'; event: FeedEvent }
  | { type: 'checkpoints'; checkpoints: FeedCheckpoint[] }
  | { type: 'evaluation'; evaluation: FeedEvaluation };

/** `GET /api/admin/checkpoints`. */
export interface CheckpointListResponse {
  runId: string;
  checkpoints: FeedCheckpoint[];
}

/**
 * How the ranks sync, as the admin page's sync line and the swarm report show it: "every step, fp32" or
 * "local, H = 32, int8, outer Nesterov lr 0.7 m 0.9" (", overlapped" with overlapped outer steps).
 */
export function syncLabel(sync: SyncSpec): string {
  const wire = sync.compression === 'none' ? 'fp32' : sync.compression;
  if (sync.mode === 'every-step') return `every step, ${wire}`;
  const overlapped = sync.overlap ? ', overlapped' : '';
  return `local, H = ${sync.innerSteps}, ${wire}, outer Nesterov lr ${sync.outer.lr} m ${sync.outer.momentum}${overlapped}`;
}

/** Machine log events by feed category (names from coordinator/machine: rendezvous.ts, round-close.ts, commit.ts, machine.ts, …). */
const EVENT_CATEGORIES: Partial<Record<FeedCategory, readonly string[]>> = {
  join: ['join'],
  leave: ['leave'],
  crash: ['worker_failed', 'failure_report', 'divergence', 'ready_timeout', 'member_hung'],
  restart: [
    'job_failed',
    'record_rolled_back',
    'charged',
    'restart_absorbed',
    'restart_confirmed',
    'restart_deferred',
    'restart_excused',
    // A grouped outer sync that could not go on without its lost members (coordinator/machine/outer-loss.ts).
    'outer_loss_mismatch',
    'outer_loss_expired',
    'outer_loss_failed',
  ],
  rejected: [
    'message_rejected',
    'message_invalid',
    'messages_rejected',
    'worker_refused',
    'cooled_off',
    'place_cooled_off',
  ],
  admin: ['admin', 'admin_ignored', 'job_resumed_after_failure'],
  checkpoint: ['checkpoint_requested', 'checkpoint_stored', 'checkpoint_ignored'],
  verify: [
    'verification_requested',
    'verification_uploaded',
    'verification_done',
    'verification_abandoned',
    'verification_withheld',
    'verification_departed',
    'verification_held',
    'verification_inconclusive',
    'commit_held',
    'ring_identity_failed',
    'data_dispute',
    'cheater_banned',
  ],
  // outer_loss_deferred: a grouped outer sync goes on without its lost members (outer-loss.ts).
  round: ['round_open', 'round_train', 'carry_given_up', 'outer_loss_deferred'],
  job: ['epoch_end', 'job_done', 'evaluation', 'evaluation_disputed', 'sync_advice', 'sync_advice_cleared'],
};

const CATEGORY_OF = new Map<string, FeedCategory>(
  Object.entries(EVENT_CATEGORIES).flatMap(([category, events]) =>
    (events ?? []).map((event): [string, FeedCategory] => [event, category as FeedCategory]),
  ),
);

/** The category of a machine log event (`EVENT_CATEGORIES`; a round that closed with a restart is one). */
export function categoryOf(event: string, data: unknown): FeedCategory {
  if (event === 'round_closed') return (data as { restart?: unknown } | null)?.restart === true ? 'restart' : 'round';
  return CATEGORY_OF.get(event) ?? 'other';
}

/** Who may join: anyone with the URL, or only tabs opened from a live invite link (`--join`). */
export type JoinMode = 'open' | 'invite';

/** One invite as `GET /api/admin/invites` lists it (the token appears only inside `link`). */
export interface InviteView {
  id: string;
  /** Path of the link to hand out (`/?invite=…`). */
  link: string;
  label: string;
  maxTabs: number | null;
  /** Workers connected now that joined through it. */
  tabs: number;
  expiresAt: number | null;
  createdAt: number;
  revokedAt: number | null;
  /** Live: not revoked, not expired. */
  live: boolean;
}

/** The body of `GET /api/admin/invites`. */
export interface InvitesResponse {
  join: JoinMode;
  invites: InviteView[];
}

/** A delta's worker changes (the `delta` message without its status). */
export type FeedWorkersDelta = Pick<Extract<FeedMessage, { type: 'delta' }>, 'added' | 'changed' | 'removed'>;

/**
 * Applies a delta's worker changes to the rows a page holds (by id), in place: what the coordinator's
 * rows are after that delta, if the page held the rows of the delta before it (check `seq` first).
 */
export function applyWorkersDelta(rows: Map<string, FeedWorker>, delta: FeedWorkersDelta): void {
  for (const id of delta.removed) rows.delete(id);
  for (const row of delta.added) rows.set(row.id, row);
  for (const change of delta.changed) {
    const row = rows.get(change.id);
    if (row) rows.set(change.id, { ...row, ...change });
  }
}

/** Members by rank, then the waiting by position (the table's default order). */
export function byRankThenPosition(a: FeedWorker, b: FeedWorker): number {
  const ka = a.rank ?? Number.MAX_SAFE_INTEGER;
  const kb = b.rank ?? Number.MAX_SAFE_INTEGER;
  if (ka !== kb) return ka - kb;
  return (a.position ?? Number.MAX_SAFE_INTEGER) - (b.position ?? Number.MAX_SAFE_INTEGER);
}
