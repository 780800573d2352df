/**
 * The coordinator's commit log (`GET /api/commits`, page by page): every live commit, and the rows
 * browser tests read from it (per committed step its mean loss per sample, parameter hash and world size).
 */
import type { CommitsPage, CommitView } from '../../coordinator/admin/audit';
import type { CoordinatorProcess } from './coordinator-process';

/**
 * Every live commit from step `from` on, ascending, through `get` (a JSON GET of a coordinator path: a
 * CoordinatorProcess's getJson, a test-bed Scene's api).
 */
export async function commitsFrom(get: (path: string) => Promise<CommitsPage>, from = 0): Promise<CommitView[]> {
  const commits: CommitView[] = [];
  for (let next: number | null = from; next !== null; ) {
    const page = await get(`/api/commits?from=${next}`);
    commits.push(...page.commits);
    next = page.next;
  }
  return commits;
}

export interface CommitRow {
  step: number;
  firstStep: number;
  /** NaN where the log holds no finite loss (null in the API), so no bound on it can pass. */
  loss: number;
  hash: string;
  world: number;
  /** Samples committed. */
  count: number;
  /** Positions a partial commit left as holes (local sync mode: a rank lost inside the outer step); [] if none. */
  skipped: [number, number][];
  /** The positions committed ([cursorStart, cursorStart + count) unless the commit served holes or was partial). */
  ranges: [number, number][];
}

/** Every commit row, ascending by step. */
export async function commitRows(coordinator: CoordinatorProcess): Promise<CommitRow[]> {
  return (await commitsFrom((path) => coordinator.getJson(path))).map((c) => ({
    step: c.step,
    firstStep: c.firstStep,
    loss: c.loss ?? Number.NaN,
    hash: c.hash,
    world: c.worldSize,
    count: c.count,
    skipped: c.skipped ?? [],
    ranges: c.ranges ?? (c.count > 0 ? [[c.cursorStart, c.cursorStart + c.count]] : []),
  }));
}
