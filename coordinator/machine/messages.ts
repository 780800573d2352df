/**
 * The messages of a welcomed worker: `onMessage` checks that the socket is the worker it claims to be
 * in the current run, then hands each kind to its handler: heartbeat, ready and failure here, a
 * goodbye to round-close.ts, `step_report` and `outer_report` to commit.ts, `evaluation` to evaluation.ts. A `hello`
 * goes to join.ts.
 */
import { rememberRtts } from './topology';
import { reportOuter, reportStep } from './commit';
import { begin, finish, log, mutWorker, reject } from './context';
import { reportEvaluation } from './evaluation';
import { onHello } from './join';
import { markReadyIn } from './rendezvous';
import { failIn, leaveIn, outerLossFailedIn } from './round-close';
import type { ClientMessage } from '../../core/protocol/tab-messages';
import type { CoordinatorState, Transition } from './state';
import { dataDisputeIn } from './verification';
import { connectionOf } from './worker-table';

/** A message of kind `T` from a tab. */
type MessageOf<T extends ClientMessage['type']> = Extract<ClientMessage, { type: T }>;

/** A valid message arrived on `conn`. */
export function onMessage(state: CoordinatorState, conn: string, msg: ClientMessage, now: number): Transition {
  if (msg.type === 'hello') return onHello(state, conn, msg, now);
  const welcomed = connectionOf(state.connections, conn)?.workerId ?? null;
  if (welcomed === null) return reject(state, conn, 'not_joined', `send hello before ${msg.type}`);
  if (msg.workerId !== welcomed)
    return reject(state, conn, 'forged_worker', `this socket is worker ${welcomed}, not ${msg.workerId}`);
  if (msg.runId !== state.runId)
    return reject(state, conn, 'wrong_run', `run ${msg.runId} is not the current run ${state.runId}`);
  switch (msg.type) {
    case 'heartbeat':
      return onHeartbeat(state, welcomed, msg, now);
    case 'step_report':
      return reportStep(state, now, conn, welcomed, msg);
    case 'outer_report':
      return reportOuter(state, now, conn, welcomed, msg);
    case 'evaluation':
      return reportEvaluation(state, now, conn, welcomed, msg);
    case 'ready':
      return onReady(state, conn, welcomed, msg, now);
    case 'failure':
      return onFailure(state, conn, welcomed, msg, now);
    case 'goodbye': {
      const ctx = begin(state, now);
      leaveIn(ctx, welcomed, 'goodbye');
      return finish(ctx);
    }
  }
}

function onHeartbeat(state: CoordinatorState, welcomed: string, msg: MessageOf<'heartbeat'>, now: number): Transition {
  const ctx = begin(state, now);
  const worker = mutWorker(ctx, welcomed);
  worker.lastSeen = now;
  // A heartbeat without the field (an older tab) leaves the last known value alone.
  if (msg.peerRttMs !== undefined) worker.peerRttMs = msg.peerRttMs;
  if (msg.peerLinks !== undefined) {
    worker.peerLinks = msg.peerLinks;
    if (msg.peerLinks.some((l) => l.rttMs != null)) worker.linkRtts = rememberRtts(worker.linkRtts, msg.peerLinks);
  }
  if (msg.iceError !== undefined) worker.iceError = msg.iceError;
  return finish(ctx);
}

function onReady(
  state: CoordinatorState,
  conn: string,
  welcomed: string,
  msg: MessageOf<'ready'>,
  now: number,
): Transition {
  const rv = state.rendezvous;
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

/** A member's collective failed: the round fails, or, with `bad_data` evidence against a peer, a dispute. */
function onFailure(
  state: CoordinatorState,
  conn: string,
  welcomed: string,
  msg: MessageOf<'failure'>,
  now: number,
): Transition {
  const rv = state.rendezvous;
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
  else if (blame === undefined && outerLossFailedIn(ctx, welcomed, msg.reason)) return finish(ctx);
  else failIn(ctx, [welcomed], 'failure', `failure report: ${msg.reason}`, { remove: false, blame });
  return finish(ctx);
}
