/**
 * A tab joins and its socket goes away. `hello` is refused (job over, banned, an id in use) or welcomed:
 * a new worker id, or its old one on a reconnect (vouched for by the server's reconnect secret), the
 * committed states it may serve (only if it reported them itself), then the wait list (rendezvous.ts).
 * A socket that closes without goodbye is a failure of its worker while the job runs (round-close.ts).
 */
import {
  begin,
  finish,
  log,
  metric,
  reject,
  sendConn,
  sendError,
  putWorker,
  deleteConnection,
  putConnection,
  type Ctx,
} from './context';
import { holdsState } from './checkpoints';
import type { HelloMessage } from '../../core/protocol/tab-messages';
import { CloseCode } from '../../core/protocol/coordinator-messages';
import { jobPublic } from '../../core/training/job';
import { joinRefusedUntil, refuseConnIn } from './penalties';
import { enrollIn } from './rendezvous';
import { failIn, removeWorkerIn } from './round-close';
import type { CoordinatorState, HeldState, LastCommit, Transition } from './state';
import { connectionOf, workerOf, workersOf } from './worker-table';

/** A safe fragment of the server's nonce for worker ids. */
function nonceFragment(nonce: string, conn: string): string {
  const clean = (nonce.replace(/[^A-Za-z0-9]/g, '') || conn.replace(/[^A-Za-z0-9]/g, '')).slice(0, 12);
  return clean || 'x';
}

/**
 * Why `hello` on `conn` is refused, as the transition that answers it (the state untouched), or null
 * when it is welcome: the socket is a worker already, the job is over, the worker or its address is
 * cooling off, or its worker id or peer id belongs to another live worker.
 */
function helloRefusal(state: CoordinatorState, conn: string, msg: HelloMessage, now: number): Transition | null {
  const existing = connectionOf(state.connections, conn);
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
  const until = joinRefusedUntil(state, now, {
    workerId: sameRun ? msg.workerId : null,
    addr: existing?.addr,
    invite: msg.invite ?? null,
  });
  if (until !== null) {
    const ctx: Ctx = { s: state, now, out: [], copied: new Set() };
    refuseConnIn(ctx, conn, until);
    metric(ctx, 'tabswarm_message_errors_total', 1, { code: 'banned' });
    return finish(ctx);
  }
  if (sameRun && msg.workerId !== null && workerOf(state.workers, msg.workerId)) {
    return reject(state, conn, 'id_in_use', `worker ${msg.workerId} is connected on another socket`);
  }
  const peerOwner = workersOf(state.workers).find((w) => w.peerId === msg.peerId);
  if (peerOwner)
    return reject(state, conn, 'id_in_use', `peer id ${msg.peerId} belongs to worker ${peerOwner.workerId}`);
  return null;
}

/** A fresh worker id: a sequence number and a fragment of the socket's nonce, not taken yet. */
function newWorkerIdIn(ctx: Ctx, nonce: string, conn: string): string {
  const s = ctx.s;
  let workerId: string;
  do {
    workerId = `w${s.nextWorkerSeq}-${nonceFragment(nonce, conn)}`;
    s.nextWorkerSeq += 1;
  } while (workerOf(s.workers, workerId));
  return workerId;
}

/** The committed states a vouched-for hello claims to hold (its backup, and a reported step not seen committed). */
function claimedStates(msg: HelloMessage, lastCommit: LastCommit): HeldState[] {
  const holds: HeldState[] = [];
  if (msg.haveStep !== null && msg.haveStep <= lastCommit.step) holds.push({ step: msg.haveStep, hash: msg.haveHash });
  if (msg.pending && msg.pending.step <= lastCommit.step)
    holds.push({ step: msg.pending.step, hash: msg.pending.hash });
  return holds;
}

/** A `hello` on `conn`: refused, or welcomed and enrolled. */
export function onHello(state: CoordinatorState, conn: string, msg: HelloMessage, now: number): Transition {
  const refused = helloRefusal(state, conn, msg, now);
  if (refused) return refused;
  const ctx = begin(state, now);
  const s = ctx.s;
  const sameRun = msg.runId === s.runId;
  const connection = connectionOf(s.connections, conn) ?? { workerId: null, nonce: conn, addr: '' };
  const workerId = sameRun && msg.workerId !== null ? msg.workerId : newWorkerIdIn(ctx, connection.nonce, conn);
  // Claims of a held state count only from a worker that reported that state's hash itself (its id was
  // vouched for by its reconnect secret before the machine saw the hello).
  const vouched = sameRun && msg.workerId !== null && (s.lastCommit.members ?? []).includes(msg.workerId);
  putWorker(ctx, {
    workerId,
    peerId: msg.peerId,
    conn,
    adapter: msg.adapter,
    joinedAt: now,
    lastSeen: now,
    holds: vouched ? claimedStates(msg, s.lastCommit) : [],
    throughput: null,
    peerRttMs: null,
    addr: connection.addr ?? '',
    invite: msg.invite ?? null,
    ...(msg.kernels ? { kernels: msg.kernels } : {}),
  });
  putConnection(ctx, conn, { ...connection, workerId });
  metric(ctx, 'tabswarm_joins_total');
  log(ctx, 'info', 'join', {
    workerId,
    conn,
    reconnect: sameRun && msg.workerId !== null,
    vouched,
    addr: connection.addr ?? '',
    holdsCommitted: holdsState(workerOf(s.workers, workerId), s.lastCommit),
    adapter: msg.adapter,
  });
  sendConn(ctx, conn, { type: 'welcome', runId: s.runId, workerId, job: jobPublic(s.job, s.datasetSize) });
  enrollIn(ctx, workerId);
  return finish(ctx);
}

/** The socket closed: without goodbye, a failure of its worker while the job runs. */
export function onDisconnected(state: CoordinatorState, conn: string, now: number): Transition {
  const connection = connectionOf(state.connections, conn);
  if (!connection) return { state, actions: [] };
  const ctx = begin(state, now);
  deleteConnection(ctx, conn);
  const workerId = connection.workerId;
  const worker = workerId !== null ? workerOf(ctx.s.workers, workerId) : undefined;
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
