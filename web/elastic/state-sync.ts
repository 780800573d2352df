/**
 * Getting the committed state a round starts from (`planSync` decides where it comes from): fresh
 * from the seed, already held (live, or the backup put back), the durable checkpoint (downloaded,
 * sha256 and parameter hash checked), or relayed along the ring from the members holding it. Ends with
 * the state saved as the backup and checked against the round's committed tag.
 *
 * A round that carries a group on (`round.carry`, local sync mode) keeps what this tab computed of the
 * group instead (`planCarry`): its live inner state over the group's start in the backup, its own
 * parameters back from an outer step that never committed, or the group again from its start.
 */
import type { JobPublic } from '../../core/training/job';
import { stateSyncAllowanceMs, stateTransferMs } from '../../core/training/link-floor';
import { overlapsOuterSteps } from '../../core/training/overlap';
import { longestRelayChain, stateRoute } from '../../core/training/state-route';

import { broadcastReceive, broadcastRelay, broadcastSend } from '../net/broadcast';
import type { Ring } from '../net/link';
import { downloadCheckpoint } from './checkpoint-transfer';
import type { LoopContext } from './loop-context';
import { planCarry, planSync, sameTag, StepPlanner, type StateTag, type SyncPlan } from './plan';
import type { RoundSession } from './round-session';

/** Collective ids: the state broadcast of a round uses step 0, the allreduce of step s uses s (ids must grow per link). */
export const SYNC_ID_STEP = 0;

export async function syncState(ctx: LoopContext, session: RoundSession, ring: Ring, job: JobPublic): Promise<void> {
  const { keeper, box } = ctx;
  const msg = session.msg;
  await keeper.ensureModel(job);
  if (msg.carry) {
    await carryOn(ctx, session, job);
    return;
  }
  const wanted: StateTag = { step: msg.step - 1, hash: msg.committedHash };
  // An overlapped job's consensus this tab reported, committed while it did not hear so (a coordinator
  // restart): it is the state wanted, the backup once committed here.
  if (keeper.consensus && sameTag(keeper.consensus, wanted)) await keeper.commitConsensus(keeper.consensus);
  const plan = planSync(msg, session.rank, keeper.held, msg.world.length, job.sync.mode === 'local');
  ctx.log('info', `round ${msg.round}: rank ${session.rank}/${msg.world.length}, step ${msg.step}, state ${plan.kind}`);
  await obtainState(ctx, session, plan, wanted, job);
  if (plan.kind === 'send' || plan.kind === 'receive') await broadcastState(ctx, session, ring, plan, wanted, job);
  // The round's starting state is committed: make it the backup. A state restored from bytes is saved
  // even when the backup has its tag: the tag covers the agreed part only, and in local mode the bytes
  // carry the sender's own moments, from which this tab's inner steps now start (and which a verifying
  // report commits to: its innerHash is the backup's).
  const restored = plan.kind === 'receive' || plan.kind === 'checkpoint';
  if (restored || !sameTag(keeper.held.backup, keeper.held.live)) await keeper.saveBackup();
  const live = keeper.held.live;
  if (!sameTag(live, wanted) && !(wanted.step === 0 && live?.step === 0)) {
    throw new Error(
      `after sync the tab holds step ${live?.step} (${live?.hash}), the round starts from step ${wanted.step} (${wanted.hash})`,
    );
  }
  // An overlapped job's ranks start afresh from the committed state (web/worker/eager-outer.ts).
  if (overlapsOuterSteps(job)) await keeper.resetOuter();
  box.update({
    lastSync: plan.kind,
    syncs: box.status.syncs + 1,
    localStep: wanted.step,
    committedStep: wanted.step,
  });
}

/** A carried round: keep what this tab computed of the group, and say where its steps go on. */
async function carryOn(ctx: LoopContext, session: RoundSession, job: JobPublic): Promise<void> {
  const { keeper, box } = ctx;
  const msg = session.msg;
  const group = new StepPlanner(job, msg, session.rank).groupOf(msg.step);
  if (!group || !msg.carry) throw new Error(`round ${msg.round} carries no group this tab can plan`);
  // An overlapped job's carry may cover the next group too (core/training/overlap.ts).
  const lastStep = msg.carry.through ?? group.lastStep;
  const plan = planCarry(msg, keeper.held, lastStep);
  if (plan.kind === 'impossible') throw new Error(plan.reason);
  ctx.log(
    'info',
    `round ${msg.round}: rank ${session.rank}/${msg.world.length} carries steps ${msg.step}..${lastStep} on (${plan.from}, from step ${plan.resume})`,
  );
  if (plan.from === 'backup') {
    await keeper.restoreBackup();
    box.update({ restores: box.status.restores + 1 });
  } else if (plan.from === 'revert') {
    await keeper.revertOuter(lastStep);
  } else if (plan.from === 'start' && !sameTag(keeper.held.backup, keeper.held.live)) {
    await keeper.saveBackup();
  }
  // Computed again from the committed state: this rank's own outer state starts there too.
  if (overlapsOuterSteps(job) && (plan.from === 'backup' || plan.from === 'start')) await keeper.resetOuter();
  session.resume = plan.resume;
  session.reportedThrough = msg.carry.reported[session.rank];
  box.update({
    lastSync: 'carry',
    syncs: box.status.syncs + 1,
    localStep: keeper.held.live?.step ?? msg.step - 1,
    committedStep: msg.step - 1,
  });
}

/** Make the live state the wanted one where this tab can do it alone (seed, backup, checkpoint). */
async function obtainState(
  ctx: LoopContext,
  session: RoundSession,
  plan: SyncPlan,
  wanted: StateTag,
  job: JobPublic,
): Promise<void> {
  const { keeper, box } = ctx;
  switch (plan.kind) {
    case 'fresh':
      if (!sameTag(keeper.held.live, { step: 0, hash: null })) await keeper.buildFresh(job);
      return;
    case 'local':
    case 'send':
      if (plan.use === 'backup' && !sameTag(keeper.held.live, keeper.held.backup)) {
        await keeper.restoreBackup();
        box.update({ restores: box.status.restores + 1 });
      }
      return;
    case 'checkpoint':
      await fromCheckpoint(ctx, session, plan, wanted, job);
      return;
    case 'receive':
      return;
    case 'impossible':
      throw new Error(plan.reason);
  }
}

async function fromCheckpoint(
  ctx: LoopContext,
  session: RoundSession,
  plan: Extract<SyncPlan, { kind: 'checkpoint' }>,
  wanted: StateTag,
  job: JobPublic,
): Promise<void> {
  const { box } = ctx;
  const progress = (loadedBytes: number, totalBytes: number, done = false) =>
    box.update({
      checkpoint: { step: plan.step, direction: 'download', loadedBytes, totalBytes, done, error: null },
    });
  progress(0, 0);
  const bytes = await downloadCheckpoint(ctx.http, plan.url, plan.sha256, {
    signal: session.signal,
    // One transfer of the state, at worst at the floor rate (core/training/link-floor.ts).
    timeoutMs: ctx.timeouts.syncMs + stateTransferMs(job.model),
    onProgress: (loaded, total) => progress(loaded, total),
  });
  await ctx.keeper.restoreSnapshot(bytes, wanted);
  box.update({ checkpoint: { ...box.status.checkpoint!, done: true } });
}

/**
 * The state along the ring from its holders (core/training/state-route.ts): a holder whose right
 * neighbour lacks it sends it; a member that lacks it receives it from the left, relaying it on as it
 * comes when its right neighbour lacks it too.
 */
async function broadcastState(
  ctx: LoopContext,
  session: RoundSession,
  ring: Ring,
  plan: Extract<SyncPlan, { kind: 'send' | 'receive' }>,
  wanted: StateTag,
  job: JobPublic,
): Promise<void> {
  const route = stateRoute(session.rank, ring.size, plan.holders);
  const base = {
    id: { round: session.round, step: SYNC_ID_STEP, seq: 0 },
    signal: session.signal,
    // One transfer per member of the deepest relay chain at the floor rate (core/training/link-floor.ts).
    timeoutMs: ctx.timeouts.syncMs + stateSyncAllowanceMs(job.model, longestRelayChain(ring.size, plan.holders)),
  };
  // A holder claims the committed hash it holds; a receiver's copy is checked against it before it is
  // acknowledged (or a relay completes its right neighbour's copy), so a holder that sends another state is
  // named by the member after it. The check is the restore itself, in the worker: one decode, off this thread.
  const committed = wanted.hash ?? '';
  if (route.receiveFromLeft) {
    const check = {
      ...base,
      hash: async (bytes: Uint8Array) =>
        (await ctx.keeper.restoreUnchecked(bytes.slice().buffer as ArrayBuffer, wanted)).hash ?? '',
      expectedHash: committed,
    };
    if (route.sendToRight) await broadcastRelay(ring.left!, ring.right!, check);
    else await broadcastReceive(ring.left!, check);
  } else if (route.sendToRight) {
    const position = { step: wanted.step, epoch: session.msg.epoch, cursor: session.msg.cursor };
    const bytes = await ctx.queue.run('snapshot', () => ctx.trainer.snapshot(position));
    await broadcastSend([ring.right!], bytes, { ...base, hash: () => committed });
  }
}
