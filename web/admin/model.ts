/**
 * The admin page's state, rebuilt from the feed: a snapshot replaces everything, later messages patch
 * it (deltas in their numbered order; a gap asks the page to reconnect for a new snapshot). Pure (no
 * DOM): test/unit/web/admin/model.test.ts checks it.
 */
import {
  type AdminJobSummary,
  type AdminStatus,
  applyWorkersDelta,
  type FeedCheckpoint,
  type FeedCommit,
  type FeedEvaluation,
  type FeedEvent,
  type FeedMessage,
  type FeedWorker,
} from '../../core/protocol/admin-feed';

/** Event lines kept in the page. */
export const MAX_EVENTS = 1000;
/** Commits kept for the charts and the timeline. */
export const MAX_COMMITS = 20_000;

/** World size over time, one point per change (a stepped line). */
export interface WorldPoint {
  at: number;
  size: number;
}

export interface AdminModel {
  runId: string;
  job: AdminJobSummary;
  status: AdminStatus;
  /** Coordinator clock of the last status. */
  statusAt: number;
  /** Number of the last delta applied (the snapshot's to begin with). */
  seq: number;
  /** Every worker, by id (members and waiting). */
  workers: Map<string, FeedWorker>;
  commits: FeedCommit[];
  events: FeedEvent[];
  checkpoints: FeedCheckpoint[];
  evaluations: FeedEvaluation[];
  world: WorldPoint[];
}

/** What a message changed, so the page redraws only that. */
export interface Changes {
  status?: boolean;
  /** Workers were added, changed or removed. */
  workers?: boolean;
  /** A delta was missed: the page must reconnect for a new snapshot. */
  resync?: boolean;
  commits?: boolean;
  events?: boolean;
  checkpoints?: boolean;
  evaluations?: boolean;
  all?: boolean;
}

function pushWorld(world: WorldPoint[], at: number, size: number): void {
  const last = world[world.length - 1];
  if (last && last.size === size) return;
  if (last && at < last.at) return;
  world.push({ at, size });
}

/** A new model from a snapshot (replacing whatever the page held). */
function modelOfSnapshot(msg: Extract<FeedMessage, { type: 'snapshot' }>): AdminModel {
  const world: WorldPoint[] = [];
  for (const c of msg.commits) pushWorld(world, c.at, c.worldSize);
  pushWorld(world, msg.at, msg.status.counts.members);
  return {
    runId: msg.runId,
    job: msg.job,
    status: msg.status,
    statusAt: msg.at,
    seq: msg.seq,
    workers: new Map(msg.workers.map((w) => [w.id, w])),
    commits: msg.commits.slice(-MAX_COMMITS),
    events: msg.events.slice(-MAX_EVENTS),
    checkpoints: msg.checkpoints,
    evaluations: msg.evaluations,
    world,
  };
}

/** Applies one feed message; returns the new model (the snapshot) or the patched one, and what changed. */
export function applyFeedMessage(
  model: AdminModel | null,
  msg: FeedMessage,
): { model: AdminModel | null; changes: Changes } {
  if (msg.type === 'snapshot') return { model: modelOfSnapshot(msg), changes: { all: true } };
  if (!model) return { model, changes: {} };
  switch (msg.type) {
    case 'delta': {
      if (msg.seq !== model.seq + 1) return { model, changes: { resync: true } };
      model.seq = msg.seq;
      model.status = msg.status;
      model.statusAt = msg.at;
      pushWorld(model.world, msg.at, msg.status.counts.members);
      applyWorkersDelta(model.workers, msg);
      const workers = msg.added.length > 0 || msg.changed.length > 0 || msg.removed.length > 0;
      return { model, changes: { status: true, workers } };
    }
    case 'commit': {
      const last = model.commits[model.commits.length - 1];
      // A commit already known (sent in the snapshot and live around the same instant) is kept once.
      if (last && msg.commit.step <= last.step) return { model, changes: {} };
      model.commits.push(msg.commit);
      if (model.commits.length > MAX_COMMITS) model.commits.splice(0, model.commits.length - MAX_COMMITS);
      pushWorld(model.world, msg.commit.at, msg.commit.worldSize);
      return { model, changes: { commits: true } };
    }
    case 'rollback':
      model.commits = model.commits.filter((c) => c.step <= msg.afterStep);
      model.evaluations = model.evaluations.filter((e) => e.step <= msg.afterStep);
      return { model, changes: { commits: true, evaluations: true } };
    case 'event':
      model.events.push(msg.event);
      if (model.events.length > MAX_EVENTS) model.events.splice(0, model.events.length - MAX_EVENTS);
      return { model, changes: { events: true } };
    case 'checkpoints':
      model.checkpoints = msg.checkpoints;
      return { model, changes: { checkpoints: true } };
    case 'evaluation':
      // A step's verified number (two ranks agreed) replaces its unverified one.
      model.evaluations = [...model.evaluations.filter((e) => e.step !== msg.evaluation.step), msg.evaluation];
      return { model, changes: { evaluations: true } };
  }
}

/** Merges `b` into `a` (for changes coalesced over one animation frame). */
export function mergeChanges(a: Changes, b: Changes): Changes {
  return {
    status: a.status || b.status,
    workers: a.workers || b.workers,
    resync: a.resync || b.resync,
    commits: a.commits || b.commits,
    events: a.events || b.events,
    checkpoints: a.checkpoints || b.checkpoints,
    evaluations: a.evaluations || b.evaluations,
    all: a.all || b.all,
  };
}
