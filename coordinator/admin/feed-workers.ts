/**
 * The admin feed's worker rows and their deltas (no I/O): `FeedWorkers` keeps the rows it last sent
 * (the baseline every connected page holds) and, at each `diff`, builds the rows of the current state
 * and returns what changed against the baseline: workers added, fields changed, workers removed, with
 * the next sequence number. A new page's snapshot carries the baseline and its number, so the deltas
 * after it apply to exactly what it holds.
 *
 * A diff costs O(workers) comparisons of references and only builds the rows whose sources changed:
 * the machine replaces a worker or participant object when it edits it (copy-on-write, context.ts), so
 * an unchanged worker has the very same objects as at the previous diff.
 */
import type { FeedWorker, FeedWorkerChange, FeedWorkerState } from '../../core/protocol/admin-feed';
import type { CoordinatorState, Participant, WorkerInfo } from '../machine/machine';
import { adapterLabel } from '../machine/status-view';
import { usageView } from '../machine/utilization';
import { workerOf, workersOf } from '../machine/worker-table';

/**
 * `lastSeen` is floored to a grain: a row changes about once a second, not at every report. A quarter of
 * the heartbeat period, at most a second, so the page's late marks (1.5 periods) are off by a quarter at most.
 */
export function clockGrainMs(heartbeatMs: number): number {
  return Math.min(1000, Math.max(50, Math.floor(heartbeatMs / 4)));
}

/** 3 significant digits (null stays null): display values that move with every report. */
function rounded(x: number | null): number | null {
  return x === null ? null : Number(x.toPrecision(3));
}

/** The inputs a row was built from: when all are the same objects, the row is the same. */
interface Sources {
  worker: WorkerInfo;
  member: Participant | undefined;
  position: number | null;
  phase: CoordinatorState['rendezvous']['phase'];
  row: FeedWorker;
}

function memberState(p: Participant, phase: CoordinatorState['rendezvous']['phase']): FeedWorkerState {
  if (!p.ready) return 'syncing';
  return phase === 'training' ? 'training' : 'ready';
}

/** One worker's row. */
export function feedWorker(
  w: WorkerInfo,
  member: Participant | undefined,
  position: number | null,
  phase: CoordinatorState['rendezvous']['phase'],
  grainMs: number,
): FeedWorker {
  const usage = usageView(w.usage?.recent);
  return {
    id: w.workerId,
    peerId: w.peerId,
    state: member ? memberState(member, phase) : 'waiting',
    rank: member ? member.rank : null,
    position: member ? null : position,
    share: member ? rounded(member.share) : null,
    lastStep: member ? member.lastStep : null,
    throughput: rounded(w.throughput),
    utilization: usage.utilization === null ? null : Math.round(usage.utilization * 100) / 100,
    bytesPerSample: rounded(usage.bytesPerSample),
    peerRttMs: rounded(w.peerRttMs),
    peerLinks: w.peerLinks ?? [],
    iceError: w.iceError ?? null,
    adapter: adapterLabel(w.adapter),
    kernels: w.kernels ?? null,
    invite: w.invite ?? null,
    joinedAt: w.joinedAt,
    lastSeen: Math.floor(w.lastSeen / grainMs) * grainMs,
  };
}

/** The fields of `next` that differ from `prev` (arrays and objects compared by value). */
export function changedFields(prev: FeedWorker, next: FeedWorker): FeedWorkerChange | null {
  let change: FeedWorkerChange | null = null;
  for (const key of Object.keys(next) as (keyof FeedWorker)[]) {
    const a = prev[key];
    const b = next[key];
    const same = typeof b === 'object' && b !== null ? JSON.stringify(a) === JSON.stringify(b) : a === b;
    if (same) continue;
    change ??= { id: next.id };
    (change as Record<string, unknown>)[key] = b;
  }
  return change;
}

/** Members by rank, then the wait list, then anyone else (a worker between a leave and its removal). */
function orderOf(s: CoordinatorState): string[] {
  const seen = new Set<string>();
  const order: string[] = [];
  for (const id of [...s.rendezvous.participants.map((p) => p.workerId), ...s.rendezvous.waitList]) {
    if (!seen.has(id)) {
      seen.add(id);
      order.push(id);
    }
  }
  for (const w of workersOf(s.workers)) if (!seen.has(w.workerId)) order.push(w.workerId);
  return order;
}

export interface WorkersDelta {
  seq: number;
  added: FeedWorker[];
  changed: FeedWorkerChange[];
  removed: string[];
}

export class FeedWorkers {
  private seqNo = 0;
  private sources = new Map<string, Sources>();

  /** The number of the last delta taken (0 before the first). */
  get seq(): number {
    return this.seqNo;
  }

  /** The rows as of the last delta: members by rank, then the wait list. */
  rows(): FeedWorker[] {
    return [...this.sources.values()].map((s) => s.row);
  }

  /**
   * What changed since the last delta; the baseline moves to the current state. Always numbered.
   * Rows are visited in table order (members by rank, then the wait list), so `added` and the
   * baseline's `rows()` come in that order.
   */
  diff(s: CoordinatorState): WorkersDelta {
    const members = new Map(s.rendezvous.participants.map((p) => [p.workerId, p]));
    const positions = new Map(s.rendezvous.waitList.map((id, i) => [id, i]));
    const phase = s.rendezvous.phase;
    const delta: WorkersDelta = { seq: ++this.seqNo, added: [], changed: [], removed: [] };
    const next = new Map<string, Sources>();
    for (const id of orderOf(s)) {
      const w = workerOf(s.workers, id);
      if (!w) continue;
      const member = members.get(id);
      const position = positions.get(id) ?? null;
      const prev = this.sources.get(id);
      if (prev && prev.worker === w && prev.member === member && prev.position === position && prev.phase === phase) {
        next.set(id, prev);
        continue;
      }
      const row = feedWorker(w, member, position, phase, clockGrainMs(s.job.heartbeatMs));
      next.set(id, { worker: w, member, position, phase, row });
      if (!prev) delta.added.push(row);
      else {
        const change = changedFields(prev.row, row);
        if (change) delta.changed.push(change);
      }
    }
    for (const id of this.sources.keys()) if (!next.has(id)) delta.removed.push(id);
    this.sources = next;
    return delta;
  }
}
