/**
 * The admin feed's wire format: what `GET /api/admin/feed` streams as Server-Sent Events (one JSON
 * `FeedMessage` per `data:` line, default event type), and what the admin REST routes return.
 *
 * Pure types (no DOM, no Node), shared by the coordinator (coordinator/admin/admin-feed.ts writes them) and
 * the admin page (web/admin reads them), so they live in the pure core both may import
 * (docs/boundaries.md).
 *
 * Life of a connection: the first message is a `snapshot` (the whole picture: status, commit history,
 * recent events, checkpoints); after it, `status` at least every second and after every change,
 * `commit` per recorded commit, `rollback` when the record went back to a checkpoint, `event` per
 * log line at info level or above, `checkpoints` when the list changed. A reconnecting EventSource
 * gets a fresh snapshot, so the page replaces its state instead of patching it.
 */
import type { SyncSpec } from '../training/job';
import type { StatusView, UsageView, WorldView } from './views';

/** One rank of the current round as the admin page shows it: the core's view plus the server clock's view. */
export type AdminWorkerView = WorldView & {
  /** Milliseconds since the worker's last message, by the coordinator's clock. */
  lastHeartbeatAgeMs: number;
};

/** A worker enrolled but not in the round (waiting for the next commit boundary or rendezvous). */
export type AdminWaitingView = StatusView['waiting'][number] & {
  /** WebGPU adapter vendor and architecture. */
  adapter: string;
  /** The invite it joined through (id), or null. */
  invite: string | null;
  lastHeartbeatAgeMs: number;
};

/**
 * The body of `GET /api/status` (coordinator/admin/audit.ts `statusOf`), also the feed's `status`: the core's
 * `statusView` plus what only the server knows (heartbeat ages) and a few raw fields of the state.
 */
export type AdminStatus = Omit<StatusView, 'world' | 'waiting'> & {
  /** Rendezvous phase (gathering, syncing, training), also while paused. */
  phase: string;
  /** Job status: active, paused, done, failed. */
  status: string;
  /** Sampler cursor in the current epoch. */
  cursor: number;
  world: AdminWorkerView[];
  waiting: AdminWaitingView[];
  latestCheckpoint: { step: number; sha256: string } | null;
};

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
      runId: string;
      /** Coordinator clock when the snapshot was taken. */
      at: number;
      status: AdminStatus;
      job: AdminJobSummary;
      commits: FeedCommit[];
      events: FeedEvent[];
      checkpoints: FeedCheckpoint[];
      evaluations: FeedEvaluation[];
    }
  | { type: 'status'; at: number; status: AdminStatus }
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
 * "local, H = 32, int8, outer Nesterov lr 0.7 m 0.9".
 */
export function syncLabel(sync: SyncSpec): string {
  const wire = sync.compression === 'none' ? 'fp32' : sync.compression;
  if (sync.mode === 'every-step') return `every step, ${wire}`;
  return `local, H = ${sync.innerSteps}, ${wire}, outer Nesterov lr ${sync.outer.lr} m ${sync.outer.momentum}`;
}

/** The category of a machine log event (names from coordinator/machine: rendezvous.ts, round-close.ts, commit.ts, machine.ts, …). */
export function categoryOf(event: string, data: unknown): FeedCategory {
  switch (event) {
    case 'join':
      return 'join';
    case 'leave':
      return 'leave';
    case 'worker_failed':
    case 'failure_report':
    case 'divergence':
    case 'ready_timeout':
      return 'crash';
    case 'job_failed':
    case 'record_rolled_back':
    case 'charged':
    case 'restart_absorbed':
    case 'restart_confirmed':
    case 'restart_deferred':
    case 'restart_excused':
      return 'restart';
    case 'round_closed':
      return (data as { restart?: unknown } | null)?.restart === true ? 'restart' : 'round';
    case 'message_rejected':
    case 'message_invalid':
    case 'messages_rejected':
    case 'worker_refused':
    case 'cooled_off':
    case 'place_cooled_off':
      return 'rejected';
    case 'admin':
    case 'admin_ignored':
    case 'job_resumed_after_failure':
      return 'admin';
    case 'checkpoint_requested':
    case 'checkpoint_stored':
    case 'checkpoint_ignored':
      return 'checkpoint';
    case 'verification_requested':
    case 'verification_uploaded':
    case 'verification_done':
    case 'verification_abandoned':
    case 'verification_withheld':
    case 'verification_held':
    case 'verification_inconclusive':
    case 'commit_held':
    case 'ring_identity_failed':
    case 'data_dispute':
    case 'cheater_banned':
      return 'verify';
    case 'round_open':
    case 'round_train':
      return 'round';
    case 'epoch_end':
    case 'job_done':
    case 'evaluation':
    case 'evaluation_disputed':
      return 'job';
    default:
      return 'other';
  }
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
