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
