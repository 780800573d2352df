/**
 * Types of the coordinator's state machine: its state (plain JSON, so it can be logged, snapshotted and
 * compared), the events the server feeds it and the actions the server executes, in order.
 * Re-exported by machine.ts, which implements `handle`.
 */
import type { StepSketches } from '../../core/state/sketch';
import { z } from 'zod';
import type { JobSpec } from '../../core/training/job';
import type { ClientMessage, KernelsReport, PeerLink } from '../../core/protocol/tab-messages';
import type { SyncAdviceView } from '../../core/protocol/views';
import type { ServerMessage } from '../../core/protocol/coordinator-messages';
import type { ParseErrorCode } from '../../core/protocol/control-parse';
import type { SamplerRecord } from '../../core/training/sampler';
import type { MetricName } from './metric-names';
import type { BucketTable } from './worker-table';
import type { PenaltyRecord, TrustPolicy } from './trust-policy';
import type { PositionRange } from '../../core/training/groups';
import type { MomentClaim, RecomputedStep, VerificationState, TrustRecord } from './check-state';

export type { PenaltyRecord, TrustPolicy } from './trust-policy';
export type {
  CheckedMember,
  MomentClaim,
  RecomputedStep,
  SketchPair,
  TrustRecord,
  VerificationState,
} from './check-state';

// ---------------------------------------------------------------- state

/** A member of the current round. */
export interface Participant {
  workerId: string;
  peerId: string;
  /** Dense rank 0..world-1. */
  rank: number;
  /**
   * Its slot in the split of the group in flight (whose slices it computes, `rankRanges`): its rank,
   * unless the round carries a group an earlier round planned (`RendezvousState.carry`).
   */
  slot: number;
  /** Fraction of each step's samples; shares of a round sum to 1 and are fixed for the round. */
  share: number;
  /** Sent `ready` for this round. */
  ready: boolean;
  /** Last step this rank reported in this round (the round's base step before its first report). */
  lastStep: number;
  /** When (ms, coordinator clock) its last report of this round arrived; absent before the first. */
  lastReportAt?: number;
}

/** TorchElastic-style rendezvous state. */
export interface RendezvousState {
  /** Number of the current (or last) round; 0 before the first. Never reused, also across coordinator restarts. */
  round: number;
  /**
   * gathering: no round open, enrolled workers wait for minWorkers and the last call;
   * syncing: a round was announced, waiting for every participant's `ready`;
   * training: `train` was sent, steps are reported and committed.
   */
  phase: 'gathering' | 'syncing' | 'training';
  /** Members of the current round sorted by rank (empty while gathering). */
  participants: Participant[];
  /** Enrolled workers not in the round, in admission order (survivors of a closed round come first). */
  waitList: string[];
  /** Last-call deadline (ms) while gathering with at least minWorkers enrolled; null otherwise. */
  deadline: number | null;
  /** When the current rendezvous started gathering (ms), for the rendezvous-duration metric. */
  gatheringSince: number | null;
  /** Committed step when the current round opened (its participants hold this state once ready). */
  baseStep: number;
  /** Commits made in the current round (shares are re-measured after some). */
  roundCommits: number;
  /**
   * The round that closed most recently and its members (null before the first close). Reports about its commits
   * may arrive after the close — rank 0's test-set evaluation of the round's last commit, or of the job's last
   * step after `done` — and are still accepted from them.
   */
  closedRound: { round: number; members: string[] } | null;
  /** While syncing: members not `ready` by this time (ms) are dropped, without a restart. Null otherwise. */
  readyDeadline?: number | null;
  /** When the round's members may start computing their next step (train, or the last commit): ms. */
  stepStartedAt?: number | null;
  /**
   * A commit group an earlier round planned, carried on by the survivors (local sync mode: members were lost inside
   * the outer step; round-close.ts `carryIn`). Set when such a round closes, kept while the carrying round runs,
   * cleared by the group's commit or when it is given up (a restore). Replaced whole, never edited (context.ts).
   * Absent or null: the current round planned the group in flight (every slot is its rank).
   */
  carry?: CarriedGroup | null;
  /**
   * The open round's group sizes in rank order when it syncs in groups (core/training/topology.ts);
   * absent or null: one plain ring.
   */
  topology?: number[] | null;
  /**
   * Members lost during the open round's grouped outer sync, whose survivors may still commit the group
   * without them (outer-loss.ts): their ranks in this round, their worker ids, and until when (ms) the
   * survivors' reports are awaited before the round closes with a carry; `namedBy`: the member whose
   * report named them while the coordinator still counted them in (charged for the restart if the
   * survivors then disagree). Absent or null: none.
   */
  outerLoss?: { ranks: number[]; workers: string[]; deadline: number; namedBy?: string } | null;
  /**
   * An overlapped job (core/training/overlap.ts): the last step of the group whose outer step the coordinator asked
   * to be synchronous (`committed.drain`) because the round changes at its commit. Null or absent: none. Cleared
   * when the round closes.
   */
  drainAt?: number | null;
}

/** The split of a commit group that survivors carry on (see `RendezvousState.carry`). */
export interface CarriedGroup {
  /** The planning round's shares by slot: the split every slice of the group follows. */
  shares: number[];
  /** Slots whose ranks were lost: their slices become holes when the group commits. */
  lost: number[];
  /** The survivors in their old rank order: each one's slot and the last step it reported. */
  members: { workerId: string; slot: number; lastStep: number }[];
  /** Overlapped job: the last step carried on (the group in flight's, or its successor's if begun). Absent: the first. */
  through?: number;
  /**
   * Holes of the record the group in flight was planned without: the lost slices of its overlapped predecessor,
   * committed partially while this group was carried along (sampler.ts `commitGroup`).
   */
  deferred?: PositionRange[];
}

/** A state a worker holds: a committed step and the parameter hash there. */
export interface HeldState {
  step: number;
  hash: string | null;
}

/** The state's workers by id (a bucket table: worker-table.ts). */
export type WorkerTable = BucketTable<WorkerInfo>;
/** The state's open sockets by conn id (a bucket table: worker-table.ts). */
export type ConnectionTable = BucketTable<Connection>;

/** An open socket: the worker welcomed on it (null before hello or after goodbye), the server's nonce, the client address. */
export type Connection = { workerId: string | null; nonce: string; addr?: string };

/** A worker that said hello and has not left. */
export interface WorkerInfo {
  workerId: string;
  peerId: string;
  /** Its current socket. */
  conn: string;
  adapter: { vendor: string; architecture: string; description: string };
  joinedAt: number;
  /** Time of its last valid message (any message counts as a heartbeat). */
  lastSeen: number;
  /** States it holds (committed backup, maybe a newer reported step), so it can serve as a state source. */
  holds: HeldState[];
  /** Smoothed samples per compute-ms, or null before its first measured step. */
  throughput: number | null;
  /**
   * Mean deviation (ms) of its measured step times from what its throughput predicted
   * (core/training/hang.ts `smoothDeviation`): the hang check's room for its jitter. Absent: none measured.
   */
  stepDeviationMs?: number | null;
  /** WebRTC round-trip time (ms) of its ring links as its last heartbeat reported it, or null (unknown). */
  peerRttMs: number | null;
  /** Client address of its socket ('' when unknown): restarts and strikes are charged to it too (penalties.ts). */
  addr: string;
  /** The invite it joined through (its id, never its token; the server resolves tokens), or null. */
  invite?: string | null;
  /** Selected ICE candidate types of its ring links as its last heartbeat reported them (absent: unknown). */
  peerLinks?: PeerLink[];
  /**
   * The RTTs (ms) of its links its heartbeats reported, by peer id, remembered across rounds (topology.ts:
   * the most recent `MAX_REMEMBERED_LINKS`); the topology planner's link costs. Absent: none measured.
   */
  linkRtts?: Record<string, number>;
  /** Why ICE fails for it (e.g. TURN authentication), as its last heartbeat said; absent or null: no error known. */
  iceError?: string | null;
  /** Its compute utilization and wire bytes per sample over its accepted reports (utilization.ts); absent before the first. */
  usage?: Usage;
  /** The kernels its hello reported (variants, GFLOP/s; only shown); absent when it sent none. */
  kernels?: KernelsReport;
}

/** One rank's report of one step, kept until the step commits or the round closes. */
export interface PendingReport {
  hash: string;
  lossSum: number;
  samples: number;
  computeMs: number;
  /** The step's sketches, when the job verifies (core/state/sketch.ts). */
  sketch?: StepSketches;
  /** Local mode, at a commit point: the rank's commitment to the inner state it started the outer step from. */
  innerHash?: string;
  /** Local mode, at a commit point: its inner optimizer's t after the inner steps. */
  innerT?: number;
  /** An overlapped job's commit point: the hash of this rank's `outer_report`, once it arrived. */
  outer?: string;
}

/**
 * A checkpoint asked for and not yet stored: the commit it is of (its record position). Local mode adds
 * the members' moment claims of that commit: the upload's inner state must be its uploader's, and the
 * upload may arrive after the next commit replaced `momentClaims`.
 */
export interface CheckpointRequest extends HeldState {
  epoch: number;
  cursor: number;
  holes: PositionRange[];
  claims?: { world: number; byWorker: Record<string, MomentClaim> };
}

/** A durable checkpoint the server stored. */
export interface CheckpointInfo {
  step: number;
  /** Record position after `step` (where step+1 starts). */
  epoch: number;
  cursor: number;
  /** The record's holes there (a rollback restores them). Absent in states persisted before holes: none. */
  holes?: PositionRange[];
  /** sha256 of the stored file. */
  sha256: string;
  /** Parameter hash at `step` (the commit's hash), or null if unknown. */
  hash: string | null;
  /** Local mode: `trainingStateHash` of the stored state (its uploader's inner state), checked at upload. */
  trainingHash?: string | null;
}

/** The last committed step (step 0, hash null: the initial state). */
export interface LastCommit {
  step: number;
  /** Record position after `step` (the record itself, which always agrees). */
  epoch: number;
  cursor: number;
  /** The record's holes after `step`. Absent in states persisted before holes existed: none. */
  holes?: PositionRange[];
  /** First step of the commit that ended at `step` (the evaluation schedule needs it); absent: `step`. */
  firstStep?: number;
  hash: string | null;
  /**
   * Workers that reported `hash` for `step` (the committing round's members). Only they may be the state source for
   * it: a hello that merely claims `haveStep/haveHash` (copied from /api/status) proves nothing. Absent in states
   * persisted before the field existed (then nobody qualifies).
   */
  members?: string[];
  /**
   * The round that committed `step` (its members are `members`, in rank order): its ranks 0 and 1 evaluate the
   * commit, and their reports may arrive after that round closed and another opened or the job ended
   * (evaluation.ts). Absent after a rollback to a checkpoint and in states persisted before the field existed.
   */
  round?: number;
}

/** Sums over step reports (utilization.ts accounts them). */
export interface UsageSums {
  /** Wall time measured by the coordinator (ms). */
  wallMs: number;
  /** Compute time the tabs claimed, each report's claim clamped to its wall time (ms). */
  computeMs: number;
  /** Samples of the reports that carried `wireBytes`. */
  wireSamples: number;
  /** Bytes sent in the step's collectives, as the tabs claimed them. */
  wireBytes: number;
  /** Reports counted (decayed like the rest in the recent sums): per-step averages divide by it. */
  reports: number;
}

/** Decaying sums over the recent window, and the run's totals (since this coordinator started). */
export interface Usage {
  /** Coordinator clock (ms) the recent sums were last decayed to. */
  at: number;
  /** Each report weighted by 2^(−age / USAGE_HALF_LIFE_MS) (utilization.ts). */
  recent: UsageSums;
  total: UsageSums;
}

export type JobStatus = 'active' | 'paused' | 'done' | 'failed';

export interface CoordinatorState {
  runId: string;
  job: JobSpec;
  /** Training images in use (the dataset size after `job.dataset.subset`). */
  datasetSize: number;
  status: JobStatus;
  rendezvous: RendezvousState;
  record: SamplerRecord;
  lastCommit: LastCommit;
  /** Stored checkpoints, ascending by step. */
  checkpoints: CheckpointInfo[];
  /** Checkpoints requested and not yet stored: the step, the commit hash and the record position there. */
  checkpointRequests: CheckpointRequest[];
  /** Failure restarts so far (job fails when this exceeds job.maxRestarts). */
  restarts: number;
  /**
   * A restart on probation. A tab that closes says goodbye on `pagehide`, but its ring neighbours may
   * notice its closed data channel and report a failure before the goodbye arrives. When a failure
   * report blames a peer, the round closes at once but the restart is counted only if the blamed
   * worker does not say goodbye before `deadline` (it crashed, hung or lost its link instead).
   */
  blamedRestart: {
    workerId: string;
    deadline: number;
    reporter?: { workerId: string; addr: string };
    addr?: string;
  } | null;
  /** Open sockets by conn id (worker-table.ts: read with `connectionOf`, written through context.ts). */
  connections: ConnectionTable;
  /** Welcomed workers by id (worker-table.ts: read with `workerOf`/`workersOf`, written through context.ts). */
  workers: WorkerTable;
  /** Counter for worker ids (ids also carry the connection's nonce). */
  nextWorkerSeq: number;
  /**
   * Reports of the group in flight: step → slot → report (a slot is the rank that planned the group,
   * `Participant.slot`; a carried group's reports survive the change of round).
   */
  pending: Record<string, Record<string, PendingReport>>;
  /** The abuse policy (not durable: from the CLI). */
  policy: TrustPolicy;
  /** Charges and bans by `w:<workerId>` / `a:<address>` (not durable). */
  penalties: Record<string, PenaltyRecord>;
  /**
   * The job's compute utilization and wire bytes per sample over every rank's accepted reports, recent
   * and since this coordinator started (utilization.ts; not durable). Absent before the first report.
   */
  usage?: Usage;
  /** Commits being recomputed, oldest first (checks.ts; not durable: a restart drops them). */
  checks?: VerificationState[];
  /** Checks drawn so far: each draw's secret is derived from `verifySalt` and this count (checks.ts). */
  drawSeq?: number;
  /** The next check's id. */
  nextCheckId?: number;
  /** Commits made by this coordinator (never rewound): the gate of checks.ts counts with it. */
  commitSeq?: number;
  /** Local mode: each member's end-of-step moment sketches at the last commit (the next check's continuity). */
  momentClaims?: { step: number; world: number; byWorker: Record<string, MomentClaim> } | null;
  /** The last evaluation reports, for the second rank's to agree with (evaluation.ts; not durable). */
  evaluationClaims?: { step: number; workerId: string; correct: number; testSamples: number; lossSum: number }[];
  /** Trust records by `w:<workerId>`, `a:<address>`, `i:<invite>` (adaptive-trust.ts; not durable). */
  trust?: Record<string, TrustRecord>;
  /**
   * Every-step sync waits on the network longer than the tabs compute: the advice shown on the admin
   * page and in `/api/status` (sync-advice.ts; not durable). Absent or null: none.
   */
  syncAdvice?: SyncAdviceView | null;
  /** First committed step each worker contributed to since the last rollback (the rollback target of a cheat). */
  contributions?: Record<string, number>;
  /** Workers suspected by every recent ring failure (verification.ts `suspectsFailIn`), or null. */
  ringSuspects?: string[] | null;
  /** The last commit when the latest ring failure happened. */
  ringSuspectsAt?: number;
  /** A secret (hex) from the server: which steps are recomputed cannot be predicted from public data. */
  verifySalt?: string;
  /** The step the latest passed check started from: the newest state a recomputation reproduced (check-events.ts). */
  soundStart?: number;
  /** Rollbacks after inconclusive checks, to one target: bounded (check-events.ts `inconclusiveIn`). */
  inconclusive?: { target: number; count: number } | null;
}

/** What must survive `kill -9`: persisted by the server on every `persist` action. */
export interface DurableState {
  version: 1;
  runId: string;
  job: JobSpec;
  datasetSize: number;
  status: JobStatus;
  record: SamplerRecord;
  lastCommit: LastCommit;
  checkpoints: CheckpointInfo[];
  restarts: number;
  /** Last round number used (the next round after a restart is greater). */
  round: number;
  nextWorkerSeq: number;
}

// ---------------------------------------------------------------- events

export const adminActionSchema = z.discriminatedUnion('type', [
  /** Stop training now (the round closes with restore:true, every worker gets `wait {reason:'paused'}`). Not a restart. */
  z.strictObject({ type: z.literal('pause') }),
  /**
   * Resume after a pause: a new rendezvous starts with every enrolled worker. Also resumes a FAILED job:
   * the restart count starts again from 0 and the record rolls back to the last stored checkpoint.
   */
  z.strictObject({ type: z.literal('resume') }),
  /** Ask rank 0 of the running round to upload a checkpoint of the last commit. */
  z.strictObject({ type: z.literal('checkpoint_now') }),
  /** Remove a worker (its socket is closed). Not a restart. */
  z.strictObject({ type: z.literal('kick'), workerId: z.string().min(1).max(64) }),
  /** Change minWorkers/maxWorkers; a smaller max shrinks the world at the next commit boundary. */
  z.strictObject({ type: z.literal('set_workers'), min: z.int().min(1).max(4096), max: z.int().min(1).max(4096) }),
]);
export type AdminAction = z.infer<typeof adminActionSchema>;

export type Event =
  /**
   * A socket opened. `nonce`: a random string from the server (≥ 4 chars of [A-Za-z0-9]) used in the
   * worker id; `addr`: the client address (restarts are charged to it; '' or absent: unknown).
   */
  | { kind: 'connected'; conn: string; nonce: string; addr?: string }
  /** A valid message arrived on `conn` (parsed with parseClientMessage). */
  | { kind: 'message'; conn: string; msg: ClientMessage }
  /** A frame on `conn` failed to parse: the machine answers with `error` and counts it. */
  | { kind: 'invalid'; conn: string; code: ParseErrorCode; message: string }
  /** The socket closed (without goodbye this is a failure if its worker was in a round). */
  | { kind: 'disconnected'; conn: string }
  /** Time passed: heartbeat timeouts and the last-call deadline are checked. Call at least every heartbeatMs/2 or at `nextDeadline`. */
  | { kind: 'tick' }
  /** A checkpoint upload was verified and stored atomically (`trainingHash`: local mode, its uploader's state). */
  | {
      kind: 'checkpoint_stored';
      step: number;
      epoch: number;
      cursor: number;
      sha256: string;
      trainingHash?: string | null;
    }
  /** An admin request (validated with adminActionSchema, authorised by the server). */
  | { kind: 'admin'; action: AdminAction }
  /** The state a check's commit started from was uploaded and hash-checked (the verifier starts), or refused. */
  | { kind: 'verification_upload'; check: number; ok: boolean; reason?: string }
  /** The verifier's recomputation for a check, or why it could not be done. */
  | { kind: 'verification_result'; check: number; result: RecomputedStep | { error: string } };

// ---------------------------------------------------------------- actions

/**
 * One commit: one row of the commit log. A commit covers the group of steps firstStep..step (one epoch
 * at most), which took the front of the epoch's remaining sequence R = holes ++ [cursorStart, n).
 */
export interface CommitRecord {
  /** Last step of the commit. */
  step: number;
  /** First step of the commit (= step when commitEvery is 1). */
  firstStep: number;
  epoch: number;
  /** The record's cursor before the commit: where the group's tail positions start. */
  cursorStart: number;
  /** Positions committed (now processed). */
  count: number;
  /**
   * The positions committed, as ranges of the epoch order, when they are not [cursorStart,
   * cursorStart+count) (the group served holes, or was committed partially). Absent: that range.
   */
  ranges?: PositionRange[];
  /** Positions the group took from R but left as holes (a partial commit: the lost ranks' slices). Absent: none. */
  skipped?: PositionRange[];
  /** Parameter hash after `step`. */
  hash: string;
  round: number;
  world: { workerId: string; rank: number; share: number }[];
  /** Mean loss over the commit's samples. */
  loss: number;
}

// The metrics the machine emits live in metric-names.ts (METRICS, MetricName), re-exported here.
export { METRICS, type MetricName } from './metric-names';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export type Action =
  /** Send a message on a socket. */
  | { kind: 'send'; conn: string; msg: ServerMessage }
  /** Close a socket (after the sends before it). */
  | { kind: 'close'; conn: string; code: number; reason: string }
  /** Write the durable state. Together with a preceding `record_commit`/`rollback_commits`, in ONE transaction, before any later send. */
  | { kind: 'persist'; durable: DurableState }
  /** Append a commit row (always followed by `persist`). */
  | { kind: 'record_commit'; commit: CommitRecord }
  /** Delete commit rows with step > afterStep: the record was rolled back to a checkpoint (or to the start). Followed by `persist`. */
  | { kind: 'rollback_commits'; afterStep: number }
  /** Append to the event log. */
  | { kind: 'log'; level: LogLevel; event: string; data: Record<string, unknown> }
  /** Update a metric; `labels` e.g. {code: 'forged_rank'}. */
  | { kind: 'metric'; name: MetricName; value?: number; labels?: Record<string, string> };

export interface Transition {
  state: CoordinatorState;
  actions: Action[];
}
