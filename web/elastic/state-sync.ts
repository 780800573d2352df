/**
 * Getting the committed state a round starts from (`planSync` decides where it comes from): fresh
 * from the seed, already held (live, or the backup put back), the durable checkpoint (downloaded,
 * sha256 and parameter hash checked), or a broadcast along the ring from the state's holder. Ends with
 * the state saved as the backup and checked against the round's committed tag.
 *
 * A round that carries a group on (`round.carry`, local sync mode) keeps what this tab computed of the
 * group instead (`planCarry`): its live inner state over the group's start in the backup, its own
 * parameters back from an outer step that never committed, or the group again from its start.
 */
import { hashBytes } from '../../core/state/hash';
import type { JobPublic } from '../../core/training/job';
import { stateSyncAllowanceMs, stateTransferMs } from '../../core/training/link-floor';
import { overlapsOuterSteps } from '../../core/training/overlap';

import { broadcastReceive, broadcastSend } from '../net/broadcast';
import type { Ring } from '../net/link';
import { downloadCheckpoint } from './checkpoint-transfer';
import type { LoopContext } from './loop-context';
import { planCarry, planSync, sameTag, StepPlanner, syncRoute, type StateTag, type SyncPlan } from './plan';
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
  const plan = planSync(msg, session.rank, keeper.held);
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

/** The ring broadcast from the state's holder: receive from the left, forward to the right. */
async function broadcastState(
  ctx: LoopContext,
  session: RoundSession,
  ring: Ring,
  plan: Extract<SyncPlan, { kind: 'send' | 'receive' }>,
  wanted: StateTag,
  job: JobPublic,
): Promise<void> {
  const root = plan.kind === 'send' ? session.rank : plan.root;
  const route = syncRoute(session.rank, ring.size, root);
  const opts = {
    id: { round: session.round, step: SYNC_ID_STEP, seq: 0 },
    hash: hashBytes,
    signal: session.signal,
    // Store and forward around the ring: up to world − 1 transfers at the floor rate (core/training/link-floor.ts).
    timeoutMs: ctx.timeouts.syncMs + stateSyncAllowanceMs(job.model, ring.size),
  };
  if (route.receiveFromLeft) {
    const bytes = await broadcastReceive(ring.left!, opts);
    const forward = route.sendToRight ? broadcastSend([ring.right!], bytes, opts) : Promise.resolve();
    // Restore a copy while the original is still being forwarded to the right (restore consumes its buffer).
    await Promise.all([forward, ctx.keeper.restoreSnapshot(route.sendToRight ? bytes.slice(0) : bytes, wanted)]);
  } else if (route.sendToRight) {
    const position = { step: wanted.step, epoch: session.msg.epoch, cursor: session.msg.cursor };
    const bytes = await ctx.queue.run('snapshot', () => ctx.trainer.snapshot(position));
    await broadcastSend([ring.right!], bytes, opts);
  }
}
