/**
 * The audit behind `GET /api/audit` (invariant (1) of docs/ARCHITECTURE.md) finds what it exists to find:
 * an index committed twice, a gap in the cursor, a record that disagrees with the rows. And the view
 * behind `GET /api/evaluations` leaves out evaluations of steps a later rollback undid.
 */
import { describe, expect, it } from 'vitest';
import { auditRun, evaluationViews } from '../../../../coordinator/admin/audit';
import { parseJobSpec } from '../../../../core/training/job';
import { initialState } from '../../../../coordinator/machine/machine';
import { commitGroup, epochOrder, groupAt } from '../../../../core/training/sampler';
import type { PositionRange } from '../../../../core/training/groups';
import type { CommitRow, EventRow } from '../../../../coordinator/runtime/store';

const N = 40;
const state = initialState(parseJobSpec({ model: 'tiny-mlp', globalBatch: 10, epochs: 2 }), N, 'run-audit');

function row(step: number, cursorStart: number, count: number): CommitRow {
  return {
    step,
    firstStep: step,
    epoch: 0,
    cursorStart,
    count,
    hash: '0'.repeat(64),
    round: 1,
    world: [{ workerId: 'w1', rank: 0, share: 1 }],
    loss: 1,
    rolledBack: false,
    committedAt: step,
  };
}

/** The step plan of `state`'s job: batches of 10, a commit every step. */
const PLAN = { datasetSize: N, globalBatch: 10, epochs: 2, commitEvery: 1 };

/** Step 1 commits [0, 10) but for [4, 6), a lost rank's slice: a partial commit leaving one hole. */
function partialFirstRow(): CommitRow {
  return {
    ...row(1, 0, 8),
    ranges: [
      [0, 4],
      [6, 10],
    ],
    skipped: [[4, 6]],
  };
}

describe('auditRun', () => {
  it('passes an empty run', () => {
    expect(auditRun(state, [], 0)).toMatchObject({ ok: true, recordAgrees: true, lastRowStep: 0 });
  });

  it('reports an overlap as duplicate indices (the first ones listed), and a skipped range as a discontinuity', () => {
    const order = epochOrder(state.job.seed, 0, N);
    // Steps 1 and 2 both cover positions 5..9; step 3 jumps from 15 to 20.
    const report = auditRun(state, [row(1, 0, 10), row(2, 5, 10), row(3, 20, 10)], 0);
    const [epoch] = report.epochs;
    expect(epoch.duplicateCount).toBe(5);
    expect(epoch.duplicates).toEqual(Array.from(order.subarray(5, 10)).sort((a, b) => a - b));
    expect(epoch.discontinuities).toBe(2);
    expect(epoch.committed).toBe(25);
    // The machine's record saw none of these commits and is at step 0.
    expect(report).toMatchObject({ ok: false, recordAgrees: false, lastRowStep: 3, lastCommitStep: 0 });
  });

  it('replays partial commits: skipped positions are holes until a later row commits them first', () => {
    // Step 2 takes step 1's hole [4, 6), then [10, 18).
    const partial = partialFirstRow();
    const serving: CommitRow = {
      ...row(2, 10, 10),
      ranges: [
        [4, 6],
        [10, 18],
      ],
    };
    const order = epochOrder(state.job.seed, 0, N);
    let record = commitGroup(state.record, order, groupAt(state.record, 1, PLAN), [[4, 6]]);
    const afterPartial = { ...state, record, lastCommit: { ...state.lastCommit, step: 1 } };
    expect(auditRun(afterPartial, [partial], 0)).toMatchObject({ ok: true, recordAgrees: true });
    expect(auditRun(afterPartial, [partial], 0).epochs[0]).toMatchObject({ skipped: 2, holesLeft: 2 });
    record = commitGroup(record, order, groupAt(record, 2, PLAN));
    const afterServing = { ...state, record, lastCommit: { ...state.lastCommit, step: 2 } };
    const report = auditRun(afterServing, [partial, serving], 0);
    expect(report).toMatchObject({ ok: true, recordAgrees: true });
    expect(report.epochs[0]).toMatchObject({ committed: 18, discontinuities: 0, holesLeft: 0 });
  });

  it('counts a row that does not serve the holes first as a discontinuity', () => {
    const partial = partialFirstRow();
    // Step 2 skips the hole and takes the tail: the hole would never be served.
    const jumping: CommitRow = { ...row(2, 10, 10), ranges: [[10, 20]] as PositionRange[] };
    expect(auditRun(state, [partial, jumping], 0).epochs[0].discontinuities).toBe(1);
  });

  it('takes an overlapped job’s row planned before its predecessor’s partial commit, and only in such a job', () => {
    const overlapped = initialState(
      parseJobSpec({
        model: 'tiny-mlp',
        globalBatch: 10,
        epochs: 2,
        sync: { mode: 'local', innerSteps: 1, overlap: true },
      }),
      N,
      'run-audit',
    );
    const partial = partialFirstRow();
    // Planned as if step 1 had committed whole: it takes the tail, the hole stays for step 3.
    const successor: CommitRow = { ...row(2, 10, 10), ranges: [[10, 20]] as PositionRange[] };
    const serving: CommitRow = {
      ...row(3, 20, 10),
      ranges: [
        [4, 6],
        [20, 28],
      ],
    };
    const order = epochOrder(overlapped.job.seed, 0, N);
    let record = commitGroup(overlapped.record, order, groupAt(overlapped.record, 1, PLAN), [[4, 6]]);
    const second = groupAt({ ...record, holes: [] }, 2, PLAN);
    record = commitGroup(record, order, second, [], [[4, 6]]);
    record = commitGroup(record, order, groupAt(record, 3, PLAN));
    const after = { ...overlapped, record, lastCommit: { ...overlapped.lastCommit, step: 3 } };
    const report = auditRun(after, [partial, successor, serving], 0);
    expect(report).toMatchObject({ ok: true, recordAgrees: true });
    expect(report.epochs[0]).toMatchObject({ discontinuities: 0, holesLeft: 0, committed: 28 });
    // The same rows in a job without overlap: the successor did not serve the hole first (and the replay
    // stays behind it, so the row after it is out of place too).
    const plain = auditRun({ ...after, job: state.job }, [partial, successor, serving], 0);
    expect(plain.ok).toBe(false);
    expect(plain.epochs[0].discontinuities).toBe(2);
  });

  it('ignores rolled-back rows', () => {
    const rolledBack = { ...row(1, 0, 10), rolledBack: true };
    expect(auditRun(state, [rolledBack], 1)).toMatchObject({ ok: true, commitRows: 0, rolledBackRows: 1 });
  });

  it('leaves out an evaluation a later rollback undid, even a verified one, and keeps its step’s new one', () => {
    const evaluation = (id: number, step: number, accuracy: number, verified: boolean): EventRow => ({
      id,
      at: id,
      level: 'info',
      event: 'evaluation',
      data: { step, epoch: 0, accuracy, loss: 1, testSamples: 100, workerId: 'w1', round: 1, verified },
    });
    const rollback = (id: number, to: number): EventRow => ({
      id,
      at: id,
      level: 'warn',
      event: 'record_rolled_back',
      data: { from: 128, to, reason: 'cheater: a contribution is not what it claims' },
    });
    // A poisoned timeline evaluated at steps 64 and 128 (two ranks agreed on 128), a cheater caught and the
    // record rolled back to 64, then step 128 committed again and evaluated by one rank only.
    const rows = [evaluation(1, 64, 0.7, true), evaluation(2, 128, 0.095, true), evaluation(9, 128, 0.75, false)];
    const views = evaluationViews(rows, [rollback(5, 64)]);
    expect(views.map((v) => [v.step, v.accuracy])).toEqual([
      [64, 0.7],
      [128, 0.75],
    ]);
    // Without the rollback rows, the undone verified number would replace the live one.
    expect(evaluationViews(rows).map((v) => [v.step, v.accuracy])).toEqual([
      [64, 0.7],
      [128, 0.095],
    ]);
    // A rollback BEFORE an evaluation does not undo it; one to the step itself keeps it.
    expect(evaluationViews([evaluation(6, 128, 0.7, false)], [rollback(5, 64)])).toHaveLength(1);
    expect(evaluationViews([evaluation(4, 64, 0.7, false)], [rollback(5, 64)])).toHaveLength(1);
  });
});
