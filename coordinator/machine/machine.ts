/**
 * The coordinator as a pure state machine: `handle(state, event, now) → {state, actions}`.
 *
 * The server is the executor: it turns sockets, HTTP and timers into events, calls `handle`, and
 * executes the actions in the order given. `record_commit`/`rollback_commits` and the `persist` after
 * them go into one store transaction before any later `send` (so a tab never hears of a commit that a
 * `kill -9` could lose). The state is plain JSON; `handle` never mutates its argument (a rejected
 * message returns the same object).
 */
import { reportStep } from './commit';
import {
  begin,
  finish,
  log,
  metric,
  mutWorker,
  own,
  persist,
  reject,
  sendConn,
  sendError,
  writableConnections,
  writableWorkers,
  type Ctx,
} from './context';
import { reportEvaluation } from './evaluation';
import { effectiveDatasetSize, jobPublic, jobSpecSchema, type JobSpec } from '../../core/training/job';
import { bannedUntil, DEFAULT_TRUST_POLICY, refuseConnIn } from './penalties';
import { dataDisputeIn, onVerificationResult, onVerificationUpload, verificationTickIn } from './verification';
import type { ClientMessage } from '../../core/protocol/control';
import type { StatusView } from '../../core/protocol/views';
import { CloseCode } from '../../core/protocol/control';
import { checkpointHolder, holdsState, latestCheckpoint, rollbackIn, requestCheckpointIn } from './checkpoints';
import { enrollIn, evaluateGatheringIn, markReadyIn, notifyWaitingIn } from './rendezvous';
import {
  afterCloseIn,
  closeRoundIn,
  confirmBlamedRestartIn,
  dropNotReadyIn,
  failIn,
  leaveIn,
  removeWorkerIn,
} from './round-close';
import { emptyRecord, planOf, positionAfter, totalSteps } from '../../core/training/sampler';
import type { AdminAction, CoordinatorState, DurableState, Event, HeldState, Transition, TrustPolicy } from './state';
import { USAGE_HALF_LIFE_MS, usageView } from './utilization';

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
export { METRICS, adminActionSchema } from './state';
export { durableOf } from './context';
export { DEFAULT_TRUST_POLICY, bannedAddresses } from './penalties';

/** Stored checkpoints kept in the state (older ones may be garbage-collected by the server). */
export const MAX_CHECKPOINTS_KEPT = 16;

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
    lastCommit: { step: 0, epoch: 0, cursor: 0, hash: null },
    checkpoints: [],
    checkpointRequests: [],
    restarts: 0,
    blamedRestart: null,
    connections: {},
    workers: {},
    nextWorkerSeq: 1,
    pending: {},
    policy,
    penalties: {},
  };
}

/** The state after a coordinator restart: no sockets, no round open; every tab must say hello again. */
export function restoreState(durable: DurableState, policy: TrustPolicy = DEFAULT_TRUST_POLICY): CoordinatorState {
  const s = initialState(durable.job, durable.datasetSize, durable.runId, policy);
  return {
    ...s,
    status: durable.status,
    record: { ...durable.record },
    lastCommit: { ...durable.lastCommit },
    checkpoints: durable.checkpoints.map((c) => ({ ...c })),
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
      writableConnections(ctx)[event.conn] = { workerId: null, nonce: event.nonce, addr: event.addr ?? '' };
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
 * Heartbeat timeouts, the blamed restart's grace period, the ready deadline, the verifier's upload
 * deadline and the last-call deadline. Here rather than in rendezvous.ts: it drives both the rounds and
 * the verification (which itself closes rounds), so neither of those two imports the other back.
 */
export function tickIn(ctx: Ctx): void {
  const { s, now } = ctx;
  if (s.status === 'done' || s.status === 'failed') return;
  if (s.blamedRestart && now >= s.blamedRestart.deadline) {
    // Still connected and in good health: nothing corroborates the accusation.
    confirmBlamedRestartIn(ctx, 'no goodbye within the grace period', !own(s.workers, s.blamedRestart.workerId));
    if ((s.status as string) === 'failed') return; // countRestartIn may fail the job
  }
  const rv = s.rendezvous;
  verificationTickIn(ctx);
  if (rv.phase === 'syncing' && rv.readyDeadline != null && now >= rv.readyDeadline) dropNotReadyIn(ctx);
  const limit = HEARTBEAT_TIMEOUT_FACTOR * s.job.heartbeatMs;
  const late = Object.values(s.workers).filter((w) => now - w.lastSeen > limit);
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
  if (s.status === 'done' || s.status === 'failed') return null;
  let next: number | null = s.status === 'active' && s.rendezvous.phase === 'gathering' ? s.rendezvous.deadline : null;
  const ready = s.rendezvous.phase === 'syncing' ? (s.rendezvous.readyDeadline ?? null) : null;
  if (ready !== null && (next === null || ready < next)) next = ready;
  if (s.blamedRestart && (next === null || s.blamedRestart.deadline < next)) next = s.blamedRestart.deadline;
  const limit = HEARTBEAT_TIMEOUT_FACTOR * s.job.heartbeatMs;
  for (const w of Object.values(s.workers)) {
    const due = w.lastSeen + limit + 1;
    if (next === null || due < next) next = due;
  }
  return next;
}

// ---------------------------------------------------------------- messages

function onMessage(state: CoordinatorState, conn: string, msg: ClientMessage, now: number): Transition {
  if (msg.type === 'hello') return onHello(state, conn, msg, now);
  const welcomed = own(state.connections, conn)?.workerId ?? null;
  if (welcomed === null) return reject(state, conn, 'not_joined', `send hello before ${msg.type}`);
  if (msg.workerId !== welcomed)
    return reject(state, conn, 'forged_worker', `this socket is worker ${welcomed}, not ${msg.workerId}`);
  if (msg.runId !== state.runId)
    return reject(state, conn, 'wrong_run', `run ${msg.runId} is not the current run ${state.runId}`);
  const rv = state.rendezvous;
  switch (msg.type) {
    case 'heartbeat': {
      const ctx = begin(state, now);
      const worker = mutWorker(ctx, welcomed);
      worker.lastSeen = now;
      // A heartbeat without the field (an older tab) leaves the last known value alone.
      if (msg.peerRttMs !== undefined) worker.peerRttMs = msg.peerRttMs;
      if (msg.peerLinks !== undefined) worker.peerLinks = msg.peerLinks;
      if (msg.iceError !== undefined) worker.iceError = msg.iceError;
      return finish(ctx);
    }
    case 'step_report':
      return reportStep(state, now, conn, welcomed, msg);
    case 'evaluation':
      return reportEvaluation(state, now, conn, welcomed, msg);
    case 'ready': {
      if (msg.round !== rv.round)
        return reject(state, conn, 'stale_round', `round ${msg.round} is not the current round ${rv.round}`);
      const p = rv.participants.find((q) => q.workerId === welcomed);
      if (rv.phase === 'gathering' || !p)
        return reject(state, conn, 'not_member', `worker ${welcomed} is not in round ${msg.round}`);
      const ctx = begin(state, now);
      mutWorker(ctx, welcomed).lastSeen = now;
      // A repeated ready (or one after train) is harmless and changes nothing else.
      markReadyIn(ctx, welcomed);
      return finish(ctx);
    }
    case 'failure': {
      if (msg.round !== rv.round || rv.phase === 'gathering') {
        return reject(state, conn, 'stale_round', `round ${msg.round} is not open (current ${rv.round}, ${rv.phase})`);
      }
      if (!rv.participants.some((q) => q.workerId === welcomed))
        return reject(state, conn, 'not_member', `worker ${welcomed} is not in round ${msg.round}`);
      const ctx = begin(state, now);
      mutWorker(ctx, welcomed).lastSeen = now;
      const blame =
        msg.peer !== undefined && msg.peer !== welcomed && rv.participants.some((q) => q.workerId === msg.peer)
          ? msg.peer
          : undefined;
      log(ctx, 'warn', 'failure_report', {
        workerId: welcomed,
        round: msg.round,
        reason: msg.reason,
        peer: msg.peer ?? null,
      });
      if (msg.evidence === 'bad_data' && blame !== undefined) dataDisputeIn(ctx, welcomed, blame, msg.reason);
      else failIn(ctx, [welcomed], 'failure', `failure report: ${msg.reason}`, { remove: false, blame });
      return finish(ctx);
    }
    case 'goodbye': {
      const ctx = begin(state, now);
      leaveIn(ctx, welcomed, 'goodbye');
      return finish(ctx);
    }
  }
}

/** A safe fragment of the server's nonce for worker ids. */
function nonceFragment(nonce: string, conn: string): string {
  const clean = (nonce.replace(/[^A-Za-z0-9]/g, '') || conn.replace(/[^A-Za-z0-9]/g, '')).slice(0, 12);
  return clean || 'x';
}

function onHello(
  state: CoordinatorState,
  conn: string,
  msg: Extract<ClientMessage, { type: 'hello' }>,
  now: number,
): Transition {
  const existing = own(state.connections, conn);
  if (existing && existing.workerId !== null)
    return reject(state, conn, 'already_joined', `this socket is already worker ${existing.workerId}`);
  if (state.status === 'done' || state.status === 'failed') {
    const ctx: Ctx = { s: state, now, out: [], copied: new Set() };
    if (state.status === 'done') sendConn(ctx, conn, { type: 'done', step: state.lastCommit.step });
    else sendError(ctx, conn, 'job_failed', 'the job failed (too many restarts)');
    ctx.out.push({ kind: 'close', conn, code: CloseCode.jobOver, reason: `job ${state.status}` });
    return finish(ctx);
  }
  const sameRun = msg.runId === state.runId;
  const until = bannedUntil(state, now, { workerId: sameRun ? msg.workerId : null, addr: existing?.addr });
  if (until !== null) {
    const ctx: Ctx = { s: state, now, out: [], copied: new Set() };
    refuseConnIn(ctx, conn, until);
    metric(ctx, 'tabswarm_message_errors_total', 1, { code: 'banned' });
    return finish(ctx);
  }
  if (sameRun && msg.workerId !== null && own(state.workers, msg.workerId)) {
    return reject(state, conn, 'id_in_use', `worker ${msg.workerId} is connected on another socket`);
  }
  const peerOwner = Object.values(state.workers).find((w) => w.peerId === msg.peerId);
  if (peerOwner)
    return reject(state, conn, 'id_in_use', `peer id ${msg.peerId} belongs to worker ${peerOwner.workerId}`);
  const ctx = begin(state, now);
  const s = ctx.s;
  const connection = own(s.connections, conn) ?? { workerId: null, nonce: conn, addr: '' };
  let workerId: string;
  if (sameRun && msg.workerId !== null) {
    workerId = msg.workerId;
  } else {
    do {
      workerId = `w${s.nextWorkerSeq}-${nonceFragment(connection.nonce, conn)}`;
      s.nextWorkerSeq += 1;
    } while (own(s.workers, workerId));
  }
  const holds: HeldState[] = [];
  // Claims of a held state count only from a worker that reported that state's hash itself (its id was
  // vouched for by its reconnect secret before the machine saw the hello).
  const vouched = sameRun && msg.workerId !== null && (s.lastCommit.members ?? []).includes(msg.workerId);
  if (vouched) {
    if (msg.haveStep !== null && msg.haveStep <= s.lastCommit.step)
      holds.push({ step: msg.haveStep, hash: msg.haveHash });
    if (msg.pending && msg.pending.step <= s.lastCommit.step)
      holds.push({ step: msg.pending.step, hash: msg.pending.hash });
  }
  writableWorkers(ctx)[workerId] = {
    workerId,
    peerId: msg.peerId,
    conn,
    adapter: msg.adapter,
    joinedAt: now,
    lastSeen: now,
    holds,
    throughput: null,
    peerRttMs: null,
    addr: connection.addr ?? '',
    invite: msg.invite ?? null,
  };
  writableConnections(ctx)[conn] = { ...connection, workerId };
  metric(ctx, 'tabswarm_joins_total');
  log(ctx, 'info', 'join', {
    workerId,
    conn,
    reconnect: sameRun && msg.workerId !== null,
    vouched,
    addr: connection.addr ?? '',
    holdsCommitted: holdsState(s.workers[workerId], s.lastCommit),
    adapter: msg.adapter,
  });
  sendConn(ctx, conn, { type: 'welcome', runId: s.runId, workerId, job: jobPublic(s.job, s.datasetSize) });
  enrollIn(ctx, workerId);
  return finish(ctx);
}

function onDisconnected(state: CoordinatorState, conn: string, now: number): Transition {
  const connection = own(state.connections, conn);
  if (!connection) return { state, actions: [] };
  const ctx = begin(state, now);
  delete writableConnections(ctx)[conn];
  const workerId = connection.workerId;
  const worker = workerId !== null ? own(ctx.s.workers, workerId) : undefined;
  if (workerId !== null && worker && worker.conn === conn) {
    if (ctx.s.status === 'active' || ctx.s.status === 'paused') {
      failIn(ctx, [workerId], 'failure', 'socket closed without goodbye', { remove: true });
    } else {
      // The job is over: a departure is no failure.
      removeWorkerIn(ctx, workerId);
    }
  }
  return finish(ctx);
}

// ---------------------------------------------------------------- checkpoints and admin

function onCheckpointStored(
  state: CoordinatorState,
  event: Extract<Event, { kind: 'checkpoint_stored' }>,
  now: number,
): Transition {
  const ctx = begin(state, now);
  const s = ctx.s;
  const expected = positionAfter(event.step, planOf(s));
  if (
    event.step < 1 ||
    event.step > s.lastCommit.step ||
    expected.epoch !== event.epoch ||
    expected.cursor !== event.cursor
  ) {
    log(ctx, 'warn', 'checkpoint_ignored', {
      step: event.step,
      epoch: event.epoch,
      cursor: event.cursor,
      lastCommit: s.lastCommit.step,
    });
    return { state, actions: ctx.out };
  }
  const hash =
    s.checkpointRequests.find((r) => r.step === event.step)?.hash ??
    (event.step === s.lastCommit.step ? s.lastCommit.hash : null);
  s.checkpoints = s.checkpoints.filter((c) => c.step !== event.step);
  s.checkpoints.push({ step: event.step, epoch: event.epoch, cursor: event.cursor, sha256: event.sha256, hash });
  s.checkpoints.sort((a, b) => a.step - b.step);
  if (s.checkpoints.length > MAX_CHECKPOINTS_KEPT) s.checkpoints = s.checkpoints.slice(-MAX_CHECKPOINTS_KEPT);
  s.checkpointRequests = s.checkpointRequests.filter((r) => r.step > event.step);
  persist(ctx);
  metric(ctx, 'tabswarm_checkpoints_total');
  log(ctx, 'info', 'checkpoint_stored', { step: event.step, sha256: event.sha256 });
  return finish(ctx);
}

/**
 * Why the machine would refuse `action` in `state`, or null when it would apply it. The server answers
 * an admin request with this reason (409) instead of an `ok` that changes nothing.
 */
export function adminRefusal(s: CoordinatorState, action: AdminAction): string | null {
  if (s.status === 'done') return 'the job is done';
  if (s.status === 'failed' && action.type !== 'resume')
    return 'the job failed: resume it first (POST /api/admin/resume)';
  switch (action.type) {
    case 'pause':
      return s.status === 'paused' ? 'already paused' : null;
    case 'resume':
      return s.status === 'paused' || s.status === 'failed' ? null : `the job is ${s.status}, not paused or failed`;
    case 'checkpoint_now':
      return s.lastCommit.step > 0 && checkpointHolder(s) !== undefined
        ? null
        : 'no round member holds the last commit, or nothing is committed yet';
    case 'kick':
      return own(s.workers, action.workerId) ? null : `unknown worker ${action.workerId}`;
    case 'set_workers': {
      // The same validation as the job file: the changed job must still be a valid job.
      const checked = jobSpecSchema.safeParse({ ...s.job, minWorkers: action.min, maxWorkers: action.max });
      return checked.success
        ? null
        : checked.error.issues.map((i) => `${i.path.join('.') || 'job'}: ${i.message}`).join('; ');
    }
  }
}

/** Resume a failed job: restarts from 0, the record back to the latest stored checkpoint (or step 0). */
function resumeFailedIn(ctx: Ctx): void {
  const s = ctx.s;
  const checkpoint = latestCheckpoint(s);
  const target = checkpoint ?? { step: 0, epoch: 0, cursor: 0, hash: null };
  if (target.step !== s.lastCommit.step) rollbackIn(ctx, target, 'resume after failure');
  s.status = 'active';
  s.restarts = 0;
  s.blamedRestart = null;
  s.rendezvous.gatheringSince = null;
  log(ctx, 'warn', 'job_resumed_after_failure', { fromStep: target.step, checkpoint: checkpoint?.step ?? null });
  persist(ctx);
  afterCloseIn(ctx);
}

function onAdmin(state: CoordinatorState, action: AdminAction, now: number): Transition {
  const ctx = begin(state, now);
  const s = ctx.s;
  const refusal = adminRefusal(s, action);
  if (refusal !== null) {
    log(ctx, 'warn', 'admin_ignored', { action, why: refusal });
    return { state, actions: ctx.out };
  }
  log(ctx, 'info', 'admin', { action });
  switch (action.type) {
    case 'pause': {
      s.status = 'paused';
      closeRoundIn(ctx, 'paused', true, false);
      s.rendezvous.deadline = null;
      persist(ctx);
      notifyWaitingIn(ctx);
      break;
    }
    case 'resume': {
      if (s.status === 'failed') {
        resumeFailedIn(ctx);
        break;
      }
      s.status = 'active';
      s.rendezvous.gatheringSince = null;
      persist(ctx);
      afterCloseIn(ctx);
      break;
    }
    case 'checkpoint_now': {
      requestCheckpointIn(ctx);
      break;
    }
    case 'kick': {
      const worker = own(s.workers, action.workerId)!;
      sendError(ctx, worker.conn, 'kicked', 'removed by an admin');
      ctx.out.push({ kind: 'close', conn: worker.conn, code: CloseCode.kicked, reason: 'kicked' });
      leaveIn(ctx, action.workerId, 'kicked');
      break;
    }
    case 'set_workers': {
      s.job = { ...s.job, minWorkers: action.min, maxWorkers: action.max };
      persist(ctx);
      evaluateGatheringIn(ctx);
      break;
    }
  }
  return finish(ctx);
}

// ---------------------------------------------------------------- views

/** A worker's WebGPU adapter as views show it: vendor and architecture ('' when unknown). */
export function adapterLabel(adapter: { vendor: string; architecture: string } | undefined): string {
  return adapter ? [adapter.vendor, adapter.architecture].filter(Boolean).join(' ') : '';
}

export function statusView(s: CoordinatorState): StatusView {
  const plan = planOf(s);
  return {
    runId: s.runId,
    state: s.status === 'active' ? s.rendezvous.phase : s.status,
    round: s.rendezvous.round,
    step: s.lastCommit.step,
    epoch: s.lastCommit.epoch,
    world: s.rendezvous.participants.map((p) => {
      const w = s.workers[p.workerId];
      return {
        id: p.workerId,
        peerId: p.peerId,
        rank: p.rank,
        share: p.share,
        ready: p.ready,
        lastStep: p.lastStep,
        throughput: w?.throughput ?? null,
        peerRttMs: w?.peerRttMs ?? null,
        peerLinks: w?.peerLinks ?? [],
        iceError: w?.iceError ?? null,
        adapter: adapterLabel(w?.adapter),
        invite: w?.invite ?? null,
        ...usageView(w?.usage?.recent),
      };
    }),
    waiting: s.rendezvous.waitList.map((id, position) => ({ id, position, iceError: s.workers[id]?.iceError ?? null })),
    processedInEpoch: s.record.processedCount,
    datasetSize: s.datasetSize,
    totalSteps: totalSteps(plan),
    restarts: s.restarts,
    maxRestarts: s.job.maxRestarts,
    minWorkers: s.job.minWorkers,
    maxWorkers: s.job.maxWorkers,
    lastCommit: { step: s.lastCommit.step, hash: s.lastCommit.hash },
    checkpoints: s.checkpoints.map((c) => ({ step: c.step, sha256: c.sha256 })),
    usage: { recent: usageView(s.usage?.recent), total: usageView(s.usage?.total), halfLifeMs: USAGE_HALF_LIFE_MS },
  };
}
