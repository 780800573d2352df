/**
 * The admin feed carries the sync settings and the job's usage (utilization, bytes per sample): each
 * live commit with the usage at that moment, a new page's snapshot with the usage remembered per step
 * (and none for commits from before this process), a rollback forgetting what was rolled back; and the
 * page's sync line for both modes.
 */
import { describe, expect, it } from 'vitest';
import { FeedProjection, jobUsage } from '../../../../coordinator/admin/admin-feed-projection';
import { parseJobSpec } from '../../../../core/training/job';
import { initialState } from '../../../../coordinator/machine/machine';
import type { CommitRecord } from '../../../../coordinator/machine/state';
import { addUsage } from '../../../../coordinator/machine/utilization';
import type { CommitRow } from '../../../../coordinator/runtime/store';
import { formatBytesPerSample, syncLabel } from '../../../../web/admin/format';

/** The feed's worker rows are feed-workers.test.ts's business: none here. */
const NO_WORKERS = { seq: 0, rows: [] };

function commit(step: number): CommitRecord {
  return {
    step,
    firstStep: step,
    epoch: 0,
    cursorStart: (step - 1) * 8,
    count: 8,
    hash: 'ab'.repeat(32),
    round: 1,
    world: [{ workerId: 'w1', rank: 0, share: 1 }],
    loss: 1,
  };
}

describe('the admin feed and usage', () => {
  const job = parseJobSpec({
    model: 'tiny-mlp',
    sync: { mode: 'local', innerSteps: 32, compression: 'int8' },
  });
  const base = initialState(job, 512, 'run-u');

  it('puts the job’s recent usage on each live commit and in a later snapshot, and forgets rolled-back steps', () => {
    const state = { ...base, usage: addUsage(undefined, { samples: 64, computeMs: 300, wireBytes: 6400 }, 400, 1000) };
    const usage = jobUsage(state);
    expect(usage).toEqual({ utilization: 0.75, bytesPerSample: 100 });
    const projection = new FeedProjection(10, 100);
    const live = projection.apply([{ kind: 'record_commit', commit: commit(1) }], 1000, usage);
    expect(live.messages).toEqual([expect.objectContaining({ type: 'commit' })]);
    expect((live.messages[0] as { commit: { usage: unknown } }).commit.usage).toEqual(usage);
    projection.apply([{ kind: 'record_commit', commit: commit(2) }], 1100, { utilization: 0.5, bytesPerSample: 90 });

    // The stored rows of steps 1 and 2.
    const rows: CommitRow[] = [1, 2].map((step) => ({ ...commit(step), rolledBack: false, committedAt: 900 + step }));
    const snap = projection.snapshot('run-u', state, rows, [], 1200, NO_WORKERS);
    expect(snap.commits.map((c) => c.usage)).toEqual([usage, { utilization: 0.5, bytesPerSample: 90 }]);
    expect(snap.job.sync).toEqual({
      mode: 'local',
      innerSteps: 32,
      outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9 },
      compression: 'int8',
      overlap: false,
    });
    expect(snap.status.usage.recent).toEqual(usage);

    projection.apply([{ kind: 'rollback_commits', afterStep: 1 }], 1300);
    // A new step 2 from a later round, recorded without usage: the old step 2's is not shown for it.
    projection.apply([{ kind: 'record_commit', commit: commit(2) }], 1400, null);
    const after = projection.snapshot('run-u', state, rows, [], 1500, NO_WORKERS);
    expect(after.commits.map((c) => c.usage)).toEqual([usage, null]);
    // A commit from before this process started has no usage.
    const older = new FeedProjection(10, 100).snapshot('run-u', state, rows, [], 1500, NO_WORKERS);
    expect(older.commits.map((c) => c.usage)).toEqual([null, null]);
  });

  it('remembers usage only for the commits a snapshot sends (the newest maxCommits), all of them', () => {
    const projection = new FeedProjection(10, 2);
    const usageOf = (step: number) => ({ utilization: step / 10, bytesPerSample: step });
    for (const step of [1, 2, 3]) {
      projection.apply([{ kind: 'record_commit', commit: commit(step) }], 1000 + step, usageOf(step));
    }
    const rows: CommitRow[] = [1, 2, 3].map((step) => ({
      ...commit(step),
      rolledBack: false,
      committedAt: 1000 + step,
    }));
    const snap = projection.snapshot('run-u', base, rows, [], 1100, NO_WORKERS);
    expect(snap.commits.map((c) => [c.step, c.usage])).toEqual([
      [2, usageOf(2)],
      [3, usageOf(3)],
    ]);
    // Step 1 was forgotten: a snapshot with a larger window would find nothing for it.
    expect((projection as unknown as { usageByStep: Map<number, unknown> }).usageByStep.has(1)).toBe(false);
  });

  it('formats the sync line of both modes and bytes per sample', () => {
    expect(syncLabel(job.sync)).toBe('local, H = 32, int8, outer Nesterov lr 0.7 m 0.9');
    expect(syncLabel(parseJobSpec({}).sync)).toBe('every step, fp32');
    expect(syncLabel({ ...job.sync, overlap: true } as typeof job.sync)).toBe(
      'local, H = 32, int8, outer Nesterov lr 0.7 m 0.9, overlapped',
    );
    expect(syncLabel(parseJobSpec({ sync: { mode: 'every-step', compression: 'fp16' } }).sync)).toBe(
      'every step, fp16',
    );
    expect(formatBytesPerSample(7372.8)).toBe('7.2 KiB');
    expect(formatBytesPerSample(412.4)).toBe('412 B');
    expect(formatBytesPerSample(null)).toBe('–');
  });

  it('forgets the evaluations of rolled-back steps: a new page is not shown a state the record no longer has', () => {
    const projection = new FeedProjection(10, 100);
    const evaluation = (step: number, accuracy: number) => ({
      kind: 'log' as const,
      level: 'info' as const,
      event: 'evaluation',
      data: { step, epoch: 0, accuracy, loss: 1, testSamples: 100, workerId: 'w1', round: 1, verified: true },
    });
    projection.apply([evaluation(4, 0.5), evaluation(8, 0.095)], 1000);
    expect(projection.evaluations.map((e) => e.step)).toEqual([4, 8]);
    projection.apply([{ kind: 'rollback_commits', afterStep: 4 }], 1100);
    expect(projection.evaluations.map((e) => [e.step, e.accuracy])).toEqual([[4, 0.5]]);
    projection.apply([evaluation(8, 0.7)], 1200);
    expect(projection.evaluations.map((e) => [e.step, e.accuracy])).toEqual([
      [4, 0.5],
      [8, 0.7],
    ]);
  });
});
