/**
 * The machine's state as `GET /api/status` and the admin page show it: `statusView` builds the
 * `StatusView` of core/protocol/views.ts (the wire type lives in core; the state it reads lives here).
 */
import type { StatusView } from '../../core/protocol/views';
import { planOf, remainingSteps } from '../../core/training/groups';
import { recordPosition } from '../../core/training/sampler';
import type { CoordinatorState } from './state';
import { USAGE_HALF_LIFE_MS, usageView } from './utilization';

/** A worker's WebGPU adapter as views show it: vendor and architecture ('' when unknown). */
export function adapterLabel(adapter: { vendor: string; architecture: string } | undefined): string {
  return adapter ? [adapter.vendor, adapter.architecture].filter(Boolean).join(' ') : '';
}

/** The body of `GET /api/status` (the server adds heartbeat ages and raw fields: coordinator/admin/audit.ts). */
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
        kernels: w?.kernels ?? null,
        invite: w?.invite ?? null,
        ...usageView(w?.usage?.recent),
      };
    }),
    waiting: s.rendezvous.waitList.map((id, position) => ({ id, position, iceError: s.workers[id]?.iceError ?? null })),
    processedInEpoch: s.record.processedCount,
    datasetSize: s.datasetSize,
    // An estimate: exact unless a later outer step is committed partially (its holes add steps).
    totalSteps: s.lastCommit.step + remainingSteps(recordPosition(s.record), plan),
    restarts: s.restarts,
    maxRestarts: s.job.maxRestarts,
    minWorkers: s.job.minWorkers,
    maxWorkers: s.job.maxWorkers,
    lastCommit: { step: s.lastCommit.step, hash: s.lastCommit.hash },
    checkpoints: s.checkpoints.map((c) => ({ step: c.step, sha256: c.sha256 })),
    usage: { recent: usageView(s.usage?.recent), total: usageView(s.usage?.total), halfLifeMs: USAGE_HALF_LIFE_MS },
    syncAdvice: s.syncAdvice ?? null,
  };
}
