/**
 * The machine's state as `GET /api/status` and the admin feed show it: `statusSummary` (aggregates over
 * every worker, O(workers) per call) and `statusResponse` (the summary plus one page of the world and
 * one of the wait list). The wire types and their bounds are core/protocol/views.ts; the state they
 * read lives here. Pure: the caller passes its clock (heartbeat ages are relative to it).
 */
import type {
  StatusCounts,
  StatusPage,
  StatusResponse,
  StatusSummary,
  WaitingView,
  WorldView,
} from '../../core/protocol/views';
import { planOf, remainingSteps } from '../../core/training/groups';
import { recordPosition } from '../../core/training/sampler';
import type { CoordinatorState, Participant, WorkerInfo } from './state';
import { USAGE_HALF_LIFE_MS, usageView } from './utilization';
import { workerOf, workersOf } from './worker-table';

/** A worker silent this many heartbeat periods is counted `late` (the admin page marks it; 3 drop it). */
export const LATE_HEARTBEATS = 1.5;

/** A worker's WebGPU adapter as views show it: vendor and architecture ('' when unknown). */
export function adapterLabel(adapter: { vendor: string; architecture: string } | undefined): string {
  return adapter ? [adapter.vendor, adapter.architecture].filter(Boolean).join(' ') : '';
}

/**
 * The group of `rank` in a round's topology (`RendezvousState.topology`): 0 in a plain ring (null), and
 * for a rank outside the groups (none is: ranks do not change while a round runs).
 */
export function groupOfRank(topology: readonly number[] | null | undefined, rank: number): number {
  if (!topology) return 0;
  let base = 0;
  for (let group = 0; group < topology.length; group++) {
    base += topology[group];
    if (rank < base) return group;
  }
  return 0;
}

function ageOf(worker: WorkerInfo | undefined, now: number): number {
  return worker ? Math.max(0, now - worker.lastSeen) : 0;
}

/** One member as the world page shows it. */
export function worldView(s: CoordinatorState, p: Participant, now: number): WorldView {
  const w = workerOf(s.workers, p.workerId);
  return {
    id: p.workerId,
    adapter: adapterLabel(w?.adapter),
    invite: w?.invite ?? null,
    iceError: w?.iceError ?? null,
    lastHeartbeatAgeMs: ageOf(w, now),
    peerId: p.peerId,
    rank: p.rank,
    group: groupOfRank(s.rendezvous.topology, p.rank),
    share: p.share,
    ready: p.ready,
    lastStep: p.lastStep,
    throughput: w?.throughput ?? null,
    peerRttMs: w?.peerRttMs ?? null,
    peerLinks: w?.peerLinks ?? [],
    ...usageView(w?.usage?.recent),
    kernels: w?.kernels ?? null,
  };
}

function waitingView(s: CoordinatorState, id: string, position: number, now: number): WaitingView {
  const w = workerOf(s.workers, id);
  return {
    id,
    adapter: adapterLabel(w?.adapter),
    invite: w?.invite ?? null,
    iceError: w?.iceError ?? null,
    lastHeartbeatAgeMs: ageOf(w, now),
    position,
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** The aggregates over every worker and member. */
export function statusCounts(s: CoordinatorState, now: number): StatusCounts {
  const members = s.rendezvous.participants;
  const lateAfter = LATE_HEARTBEATS * s.job.heartbeatMs;
  const links = { host: 0, srflx: 0, prflx: 0, relay: 0 };
  const rtts: number[] = [];
  let throughput: number | null = null;
  let workers = 0;
  let late = 0;
  let iceErrors = 0;
  for (const w of workersOf(s.workers)) {
    workers += 1;
    if (now - w.lastSeen > lateAfter) late += 1;
    if (w.iceError) iceErrors += 1;
  }
  for (const p of members) {
    const w = workerOf(s.workers, p.workerId);
    if (!w) continue;
    for (const link of w.peerLinks ?? []) links[link.local] += 1;
    if (w.peerRttMs !== null) rtts.push(w.peerRttMs);
    if (w.throughput !== null) throughput = (throughput ?? 0) + w.throughput;
  }
  const ready = members.filter((p) => p.ready).length;
  return {
    workers,
    members: members.length,
    ready,
    syncing: members.length - ready,
    waiting: s.rendezvous.waitList.length,
    late,
    iceErrors,
    links,
    throughput,
    peerRttMs: rtts.length > 0 ? { median: median(rtts), max: Math.max(...rtts) } : null,
  };
}

/** Everything `/api/status` says but its two pages; the admin feed's `status`. */
export function statusSummary(s: CoordinatorState, now: number): StatusSummary {
  const latest = s.checkpoints[s.checkpoints.length - 1];
  // The oldest open check (several may be in flight: checks.ts).
  const v = s.checks?.[0];
  return {
    runId: s.runId,
    state: s.status === 'active' ? s.rendezvous.phase : s.status,
    phase: s.rendezvous.phase,
    status: s.status,
    round: s.rendezvous.round,
    step: s.lastCommit.step,
    epoch: s.lastCommit.epoch,
    cursor: s.record.cursor,
    processedInEpoch: s.record.processedCount,
    datasetSize: s.datasetSize,
    topology: s.rendezvous.topology ? { groups: [...s.rendezvous.topology] } : null,
    // An estimate: exact unless a later outer step is committed partially (its holes add steps).
    totalSteps: s.lastCommit.step + remainingSteps(recordPosition(s.record), planOf(s)),
    restarts: s.restarts,
    maxRestarts: s.job.maxRestarts,
    minWorkers: s.job.minWorkers,
    maxWorkers: s.job.maxWorkers,
    lastCommit: { step: s.lastCommit.step, hash: s.lastCommit.hash },
    latestCheckpoint: latest ? { step: latest.step, sha256: latest.sha256 } : null,
    checkpoints: s.checkpoints.map((c) => ({ step: c.step, sha256: c.sha256 })),
    usage: { recent: usageView(s.usage?.recent), total: usageView(s.usage?.total), halfLifeMs: USAGE_HALF_LIFE_MS },
    counts: statusCounts(s, now),
    verification: { enabled: Boolean(s.job.verify), step: v?.step ?? null, phase: v?.phase ?? null },
    syncAdvice: s.syncAdvice ?? null,
    at: now,
  };
}

/** The body of `GET /api/status`: the summary, and the rows of `page` (core/protocol/views.ts bounds it). */
export function statusResponse(s: CoordinatorState, now: number, page: StatusPage): StatusResponse {
  const members = s.rendezvous.participants;
  const waitList = s.rendezvous.waitList;
  const worldRows = members.slice(page.offset, page.offset + page.limit);
  const waitingRows = waitList.slice(page.waitingOffset, page.waitingOffset + page.waitingLimit);
  return {
    ...statusSummary(s, now),
    world: {
      offset: page.offset,
      limit: page.limit,
      total: members.length,
      items: worldRows.map((p) => worldView(s, p, now)),
    },
    waiting: {
      offset: page.waitingOffset,
      limit: page.waitingLimit,
      total: waitList.length,
      items: waitingRows.map((id, i) => waitingView(s, id, page.waitingOffset + i, now)),
    },
  };
}
