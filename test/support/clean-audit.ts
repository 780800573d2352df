/**
 * Invariants (1) and (2) of docs/ARCHITECTURE.md as a coordinator's audit (`GET /api/audit`) reports
 * them, asserted for browser tests: no sample committed twice in any epoch, none left out of a finished one.
 */
import { expect } from 'vitest';
import type { CoordinatorProcess } from './coordinator-process';

/**
 * The audit is clean; with `committed` (a finished job), every epoch also has no sample left out and
 * exactly `committed` distinct samples. The failure message is the audit with its index lists cut to 5.
 */
export async function expectCleanAudit(
  coordinator: CoordinatorProcess,
  opts: { committed?: number } = {},
): Promise<void> {
  const audit = await coordinator.audit();
  const summary = JSON.stringify({
    ...audit,
    epochs: audit.epochs.map((e) => ({
      ...e,
      duplicates: e.duplicates.slice(0, 5),
      neverCommitted: e.neverCommitted?.slice(0, 5) ?? null,
    })),
  });
  expect(audit.ok, summary).toBe(true);
  for (const epoch of audit.epochs) {
    expect(epoch.duplicateCount, summary).toBe(0);
    if (epoch.finished) expect(epoch.neverCommittedCount, summary).toBe(0);
  }
  if (opts.committed !== undefined) {
    for (const epoch of audit.epochs) {
      expect(epoch.neverCommittedCount, summary).toBe(0);
      expect(epoch.committed, summary).toBe(opts.committed);
    }
  }
}

/**
 * The first round that admitted `workerId` (its `round_open` event) gave it the committed state from
 * the members holding it: `stateFrom` is `peer` or `peers` and does not name its rank, so it received
 * (core/training/state-route.ts). Read from the coordinator's events, not the tab's status, because a
 * later round may already have made the newcomer a holder that sends.
 */
export async function expectAdmittedFromPeers(coordinator: CoordinatorProcess, workerId: string): Promise<void> {
  const open = (await coordinator.events()).find(
    (e) => e.event === 'round_open' && (e.data.world as { workerId: string }[]).some((w) => w.workerId === workerId),
  );
  expect(open, `a round_open admitting ${workerId}`).toBeDefined();
  const rank = (open!.data.world as { workerId: string; rank: number }[]).findIndex((w) => w.workerId === workerId);
  const from = open!.data.stateFrom as { kind: string; rank?: number; ranks?: number[] };
  expect(['peer', 'peers']).toContain(from.kind);
  expect(from.kind === 'peer' ? [from.rank] : from.ranks).not.toContain(rank);
}
