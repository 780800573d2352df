/**
 * The coordinator as a pure state machine: `handle(state, event, now) → {state, actions}`.
 *
 * The server is the executor: it turns sockets, HTTP and timers into events, calls `handle`, and
 * executes the actions in the order given. `record_commit`/`rollback_commits` and the `persist` after
 * them go into one store transaction before any later `send` (so a tab never hears of a commit that a
 * `kill -9` could lose). The state is plain JSON; `handle` never mutates its argument (a rejected
 * message returns the same object).
 *
 * This file owns the entry points (`initialState`, `restoreState`, `handle`) and the tick; each kind of
 * event has its handler: join.ts (hello, disconnect), messages.ts (a worker's messages), admin.ts,
 * checkpoints.ts (a stored checkpoint), verification.ts (the verifier's upload and result).
 */
import { begin, finish, log, metric, putConnection, sendError, type Ctx } from './context';
import { onAdmin } from './admin';
import { onCheckpointStored } from './checkpoints';
import { onDisconnected } from './join';
import { onMessage } from './messages';
import { effectiveDatasetSize, type JobSpec } from '../../core/training/job';
import { DEFAULT_TRUST_POLICY } from './penalties';
import { CloseCode } from '../../core/protocol/coordinator-messages';
import { evaluateGatheringIn } from './rendezvous';
import { afterCloseIn, closeRoundIn, confirmBlamedRestartIn, dropNotReadyIn, failIn } from './round-close';
import { emptyRecord, withHoles } from '../../core/training/sampler';
import type { PositionRange } from '../../core/training/groups';
import { hangIn, nextHangDeadline } from './hang';
import type { CoordinatorState, DurableState, Event, Transition, TrustPolicy } from './state';
import { checksTickIn, onVerificationResult, onVerificationUpload } from './check-events';
import { nextCheckDeadline } from './checks';

export type {
  Action,
  AdminAction,
  CheckpointInfo,
  CommitRecord,
  CoordinatorState,
  DurableState,
  Event,
  HeldState,
  JobStatus,
  LastCommit,
  LogLevel,
  MetricName,
  Participant,
  PendingReport,
  PenaltyRecord,
  RendezvousState,
  TrustPolicy,
  Transition,
  WorkerInfo,
} from './state';
import { emptyTable, workerOf, workersOf } from './worker-table';
export { METRICS, adminActionSchema } from './state';
export { durableOf } from './context';
export { committedPosition } from './checkpoints';
export { DEFAULT_TRUST_POLICY, bannedAddresses } from './penalties';

/** A new run over `datasetSize` training images (the full set; `job.dataset.subset` is applied here). */
export function initialState(
  job: JobSpec,
  datasetSize: number,
  runId: string,
  policy: TrustPolicy = DEFAULT_TRUST_POLICY,
): CoordinatorState {
  const n = effectiveDatasetSize(job, datasetSize);
  if (!Number.isInteger(n) || n < 1) throw new Error(`initialState: dataset of ${datasetSize} images`);
  return {
    runId,
    job,
    datasetSize: n,
    status: 'active',
    rendezvous: {
      round: 0,
      phase: 'gathering',
      participants: [],
      waitList: [],
      deadline: null,
      gatheringSince: null,
      baseStep: 0,
      roundCommits: 0,
      closedRound: null,
      readyDeadline: null,
      stepStartedAt: null,
    },
    record: emptyRecord(n),
    lastCommit: { step: 0, epoch: 0, cursor: 0, holes: [], hash: null },
    checkpoints: [],
    checkpointRequests: [],
    restarts: 0,
    blamedRestart: null,
    connections: emptyTable(),
    workers: emptyTable(),
    nextWorkerSeq: 1,
    pending: {},
    policy,
    penalties: {},
  };
}

/**
 * The state after a coordinator restart: no sockets, no round open; every tab must say hello again.
 * A state persisted before the record held holes reads as one without holes.
 */
export function restoreState(durable: DurableState, policy: TrustPolicy = DEFAULT_TRUST_POLICY): CoordinatorState {
  const s = initialState(durable.job, durable.datasetSize, durable.runId, policy);
  const copy = (holes: PositionRange[] | undefined) => (holes ?? []).map(([a, b]): PositionRange => [a, b]);
  return {
    ...s,
    status: durable.status,
    record: withHoles(durable.record),
    lastCommit: { ...durable.lastCommit, holes: copy(durable.lastCommit.holes) },
    checkpoints: durable.checkpoints.map((c) => ({ ...c, holes: copy(c.holes) })),
    restarts: durable.restarts,
    rendezvous: { ...s.rendezvous, round: durable.round },
    nextWorkerSeq: durable.nextWorkerSeq,
  };
}

/** Apply one event. `now` is the server's clock in ms. Execute the returned actions in order. */
export function handle(state: CoordinatorState, event: Event, now: number): Transition {
  switch (event.kind) {
    case 'connected': {
      const ctx = begin(state, now);
      putConnection(ctx, event.conn, { workerId: null, nonce: event.nonce, addr: event.addr ?? '' });
      return finish(ctx);
    }
    case 'invalid': {
      const ctx: Ctx = { s: state, now, out: [], copied: new Set() };
      sendError(ctx, event.conn, event.code, event.message);
      metric(ctx, 'tabswarm_message_errors_total', 1, { code: event.code });
      log(ctx, 'warn', 'message_invalid', { conn: event.conn, code: event.code, message: event.message });
      return finish(ctx);
    }
    case 'message':
      return onMessage(state, event.conn, event.msg, now);
    case 'disconnected':
      return onDisconnected(state, event.conn, now);
    case 'tick': {
      const ctx = begin(state, now);
      tickIn(ctx);
      return finish(ctx);
    }
    case 'checkpoint_stored':
      return onCheckpointStored(state, event, now);
    case 'admin':
      return onAdmin(state, event.action, now);
    case 'verification_upload':
      return onVerificationUpload(state, event, now);
    case 'verification_result':
      return onVerificationResult(state, event, now);
  }
}

// ---------------------------------------------------------------- the tick

/** A worker silent for longer than this many heartbeat periods has failed. */
export const HEARTBEAT_TIMEOUT_FACTOR = 3;

/**
 * Heartbeat timeouts, hung members (hang.ts), the blamed restart's grace period, the ready deadline,
 * the checks' upload deadlines and the last-call deadline. Here rather than in rendezvous.ts: it drives both the rounds and
 * the verification (which itself closes rounds), so neither of those two imports the other back.
 */
export function tickIn(ctx: Ctx): void {
  const { s, now } = ctx;
  if (s.status === 'done' || s.status === 'failed') return;
  if (s.blamedRestart && now >= s.blamedRestart.deadline) {
    // Still connected and in good health: nothing corroborates the accusation.
    confirmBlamedRestartIn(ctx, 'no goodbye within the grace period', !workerOf(s.workers, s.blamedRestart.workerId));
    if ((s.status as string) === 'failed') return; // countRestartIn may fail the job
  }
  const rv = s.rendezvous;
  checksTickIn(ctx);
  if (rv.phase === 'syncing' && rv.readyDeadline != null && now >= rv.readyDeadline) dropNotReadyIn(ctx);
  if (rv.outerLoss && now >= rv.outerLoss.deadline) {
    // The survivors did not commit without the lost members in time: they carry the group on.
    log(ctx, 'warn', 'outer_loss_expired', { round: rv.round, lost: rv.outerLoss.workers });
    closeRoundIn(ctx, 'failure', true, false, { lost: rv.outerLoss.workers });
    afterCloseIn(ctx);
  }
  hangIn(ctx);
  if (s.status !== 'active' && s.status !== 'paused') return;
  const limit = HEARTBEAT_TIMEOUT_FACTOR * s.job.heartbeatMs;
  const late = workersOf(s.workers).filter((w) => now - w.lastSeen > limit);
  for (const w of late)
    ctx.out.push({ kind: 'close', conn: w.conn, code: CloseCode.heartbeatTimeout, reason: 'heartbeat timeout' });
  if (late.length)
    failIn(
      ctx,
      late.map((w) => w.workerId),
      'failure',
      'heartbeat_timeout',
      { remove: true },
    );
  evaluateGatheringIn(ctx);
}

/** The earliest time at which `tick` can change something, or null. */
export function nextDeadline(s: CoordinatorState): number | null {
  return earliest(roundDeadline(s), heartbeatDeadline(s));
}

function earliest(a: number | null, b: number | null): number | null {
  return a === null ? b : b === null ? a : Math.min(a, b);
}

/**
 * The deadlines of `nextDeadline` but the heartbeats': last call, ready, blamed restart, a grouped outer
 * sync's lost members (O(1)), the checks' upload deadlines (O(checks)), and the
 * hung members' (hang.ts: O(world), and only in local sync mode while a round trains).
 */
export function roundDeadline(s: CoordinatorState): number | null {
  if (s.status === 'done' || s.status === 'failed') return null;
  const lastCall = s.status === 'active' && s.rendezvous.phase === 'gathering' ? s.rendezvous.deadline : null;
  const ready = s.rendezvous.phase === 'syncing' ? (s.rendezvous.readyDeadline ?? null) : null;
  const outer = s.rendezvous.outerLoss?.deadline ?? null;
  const hang = earliest(outer, nextHangDeadline(s));
  const rounds = earliest(earliest(lastCall, ready), earliest(s.blamedRestart?.deadline ?? null, hang));
  // The checks' upload deadlines: judged on this timer, never on a tick that traffic keeps re-arming.
  return earliest(rounds, nextCheckDeadline(s));
}

/**
 * When the first worker's heartbeat times out, or null. O(workers): the executor calls it only when
 * its last answer has passed (a worker's `lastSeen` only grows, and a new one's is now, so an earlier
 * answer is a lower bound of this one).
 */
export function heartbeatDeadline(s: CoordinatorState): number | null {
  if (s.status === 'done' || s.status === 'failed') return null;
  const limit = HEARTBEAT_TIMEOUT_FACTOR * s.job.heartbeatMs;
  let next: number | null = null;
  for (const w of workersOf(s.workers)) {
    const due = w.lastSeen + limit + 1;
    if (next === null || due < next) next = due;
  }
  return next;
}
