/**
 * The coordinator's commit log as browser tests read it (the paging is tools/swarm/coordinator-api.ts
 * `commitsFrom`): the rows (per committed step its mean loss per sample, parameter hash and world size).
 */
import { commitsFrom } from '../../tools/swarm/coordinator-api';
import type { CoordinatorProcess } from './coordinator-process';

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
