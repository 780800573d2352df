/**
 * The coordinator's commit log as browser tests read it (`GET /api/commits`, page by page): one row
 * per committed step with its mean loss per sample, parameter hash and world size.
 */
import type { CoordinatorProcess } from './coordinator-process';

export interface CommitRow {
  step: number;
  loss: number;
  hash: string;
  world: number;
}

/** Every commit row, ascending by step. */
export async function commitRows(coordinator: CoordinatorProcess): Promise<CommitRow[]> {
  const rows: CommitRow[] = [];
  for (let from: number | null = 0; from !== null; ) {
    const page: { commits: { step: number; loss: number; hash: string; worldSize: number }[]; next: number | null } =
      await coordinator.getJson(`/api/commits?from=${from}`);
    rows.push(...page.commits.map((c) => ({ step: c.step, loss: c.loss, hash: c.hash, world: c.worldSize })));
    from = page.next;
  }
  return rows;
}
