/**
 * The swarm's bookkeeping and verdict: committed-sample counts, recovery timing and steps lost, the
 * throughput timeline, and which runs fail (a duplicate or a missing index, a broken audit, no progress).
 */
import { describe, expect, it } from 'vitest';
import {
  epochProgressOf,
  formatProgress,
  formatReportTable,
  RecoveryTracker,
  samplesThrough,
  summarizeAudit,
  swarmVerdict,
  ThroughputTimeline,
  type AuditSummary,
  type StatusSample,
  type SwarmReport,
} from '../../../tools/swarm/swarm-report';
import type { AuditReport } from '../../../coordinator/admin/audit';

// 100 images, batch 32: steps of 32, 32, 32, 4 per epoch.
const plan = { datasetSize: 100, globalBatch: 32, epochs: 2, commitEvery: 1 };

const status = (round: number, step: number, extra: Partial<StatusSample> = {}): StatusSample => ({
  round,
  step,
  state: 'training',
  worldSize: 3,
  waiting: 0,
  restarts: 0,
  ...extra,
});

describe('samplesThrough / epochProgressOf', () => {
  it('counts committed samples with a short last step per epoch', () => {
    const sizes = [32, 32, 32, 4, 32, 32, 32, 4];
    const expected = sizes.map((_, i) => sizes.slice(0, i + 1).reduce((a, b) => a + b, 0));
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((s) => samplesThrough(s, plan))).toEqual(expected);
    expect(samplesThrough(0, plan)).toBe(0);
  });

  it('says which epoch runs and how far it is', () => {
    expect(epochProgressOf(0, plan)).toEqual({ epoch: 1, fraction: 0 });
    expect(epochProgressOf(2, plan)).toEqual({ epoch: 1, fraction: 0.64 });
    expect(epochProgressOf(4, plan)).toEqual({ epoch: 2, fraction: 0 });
    expect(epochProgressOf(8, plan)).toEqual({ epoch: 2, fraction: 1 });
  });
});

describe('RecoveryTracker', () => {
  it('times a member fault to the first commit of a later round; a step the old round still committed is not lost', () => {
    const t = new RecoveryTracker();
    const r = t.fault({
      tab: 't2',
      kind: 'crash',
      atMs: 10_000,
      member: true,
      status: status(3, 10),
      localSteps: [12, 11, 10],
    });
    expect(r).toMatchObject({ stepBefore: 10, inFlight: 2, stepsLost: 2, recovered: false, durationMs: null });
    t.observe(status(3, 11), 10_100); // a commit of the old round (all reports were in before the fault): not a recovery
    expect(r.recovered).toBe(false);
    t.observe(status(4, 11), 10_500); // new round, nothing committed in it yet
    expect(r.recovered).toBe(false);
    t.observe(status(4, 12), 12_345);
    expect(r).toMatchObject({ recovered: true, durationMs: 2345, resumedFrom: 11, inFlight: 1, stepsLost: 1 });
    expect(t.openCount).toBe(0);
    expect(t.recoveredCount).toBe(1);
  });

  it('counts the step in flight when the fault hit as lost when the next round redoes it', () => {
    const t = new RecoveryTracker();
    const r = t.fault({
      tab: 't3',
      kind: 'close',
      atMs: 1000,
      member: true,
      status: status(2, 30),
      localSteps: [31, 31],
    });
    t.observe(status(3, 30), 1200);
    t.observe(status(3, 31), 1700);
    expect(r).toMatchObject({ recovered: true, durationMs: 700, resumedFrom: 30, inFlight: 1, stepsLost: 1 });
  });

  it('counts the step in progress as lost even before any tab applied it, but nothing outside training', () => {
    const t = new RecoveryTracker();
    expect(
      t.fault({ tab: 't1', kind: 'crash', atMs: 0, member: true, status: status(2, 30), localSteps: [30, 30] }),
    ).toMatchObject({ inFlight: 1, stepsLost: 1 });
    expect(
      t.fault({
        tab: 't2',
        kind: 'crash',
        atMs: 0,
        member: true,
        status: status(2, 30, { state: 'syncing' }),
        localSteps: [30],
      }),
    ).toMatchObject({ inFlight: 0, stepsLost: 0 });
  });

  it('adds committed steps rolled back to a checkpoint to the steps lost', () => {
    const t = new RecoveryTracker();
    const r = t.fault({ tab: 't1', kind: 'close', atMs: 0, member: true, status: status(5, 20), localSteps: [21] });
    t.observe(status(6, 16), 1000); // the record went back to the checkpoint at step 16
    expect(r.recovered).toBe(false);
    t.observe(status(6, 17), 1500);
    expect(r).toMatchObject({ recovered: true, durationMs: 1500, resumedFrom: 16, stepsLost: 1 + 4 });
  });

  it('needs no recovery when the tab was not a rank', () => {
    const t = new RecoveryTracker();
    const r = t.fault({
      tab: 't4',
      kind: 'close',
      atMs: 5000,
      member: false,
      status: status(2, 7),
      localSteps: [9, 9],
    });
    expect(r).toMatchObject({ member: false, recovered: true, durationMs: 0, stepsLost: 0, inFlight: 0 });
    expect(t.openCount).toBe(0);
    expect(t.recoveredCount).toBe(0);
  });

  it('keeps overlapping recoveries apart', () => {
    const t = new RecoveryTracker();
    const a = t.fault({ tab: 't1', kind: 'crash', atMs: 0, member: true, status: status(1, 5), localSteps: [6] });
    t.observe(status(2, 5, { state: 'syncing' }), 300);
    const b = t.fault({ tab: 't2', kind: 'hang', atMs: 400, member: true, status: status(2, 5), localSteps: [5] });
    t.observe(status(2, 6), 800); // cannot happen with a hung rank, but if it did, it is round 2's commit: a recovers, b does not
    expect(a).toMatchObject({ recovered: true, durationMs: 800 });
    expect(b).toMatchObject({ recovered: false, inFlight: 1 });
    t.observe(status(3, 7), 7400);
    expect(b).toMatchObject({ recovered: true, durationMs: 7000 });
  });
});

describe('ThroughputTimeline', () => {
  it('reports committed samples per second, one sample per interval', () => {
    const tl = new ThroughputTimeline(plan, 2000);
    expect(tl.observe(0, 0, 2)).toBeNull();
    tl.observe(1000, 1, 2); // inside the interval: no sample
    expect(tl.samples).toHaveLength(0);
    expect(tl.observe(2000, 2, 2)).toBeCloseTo(32, 6); // 64 samples in 2 s
    expect(tl.observe(4000, 4, 3)).toBeCloseTo(18, 6); // 36 samples in 2 s (32 + 4)
    expect(tl.samples).toEqual([
      { t: 2, step: 2, worldSize: 2, samplesPerSec: 32 },
      { t: 4, step: 4, worldSize: 3, samplesPerSec: 18 },
    ]);
  });
});

function cleanAudit(overrides: Partial<AuditSummary> = {}): AuditSummary {
  return {
    ok: true,
    duplicates: 0,
    missing: 0,
    discontinuities: 0,
    recordAgrees: true,
    lastRowStep: 12,
    lastCommitStep: 12,
    commitRows: 12,
    rolledBackRows: 0,
    epochs: [{ epoch: 0, committed: 384, duplicates: 0, missing: null, finished: false }],
    ...overrides,
  };
}
const steps = (overrides: Partial<SwarmReport['steps']> = {}): SwarmReport['steps'] => ({
  atStart: 0,
  atChaosStart: 3,
  atEnd: 12,
  committedDuringChaos: 9,
  total: 60,
  jobState: 'training',
  ...overrides,
});

describe('swarmVerdict', () => {
  const cases: [string, Parameters<typeof swarmVerdict>[0], RegExp | null][] = [
    ['passes a clean audit with progress', { audit: cleanAudit(), steps: steps() }, null],
    [
      'fails on an index committed twice',
      {
        audit: cleanAudit({
          ok: false,
          duplicates: 3,
          epochs: [{ epoch: 0, committed: 384, duplicates: 3, missing: null, finished: false }],
        }),
        steps: steps(),
      },
      /3 dataset indices committed more than once in epoch 0/,
    ],
    [
      'fails on an index never committed in a finished epoch',
      {
        audit: cleanAudit({
          ok: false,
          missing: 2,
          epochs: [{ epoch: 0, committed: 98, duplicates: 0, missing: 2, finished: true }],
        }),
        steps: steps(),
      },
      /2 dataset indices never committed in finished epoch 0/,
    ],
    [
      'fails when the record disagrees',
      { audit: cleanAudit({ ok: false, recordAgrees: false }), steps: steps() },
      /record disagrees/,
    ],
    [
      'fails when rows and durable state disagree',
      { audit: cleanAudit({ ok: false, lastRowStep: 11 }), steps: steps() },
      /step 11 but the durable state says 12/,
    ],
    [
      'fails on an audit that says not ok for another reason',
      { audit: cleanAudit({ ok: false }), steps: steps() },
      /audit: not ok/,
    ],
    [
      'fails when the audit cannot be read',
      { audit: { error: 'HTTP 500' }, steps: steps() },
      /audit could not be read: HTTP 500/,
    ],
    [
      'fails with no step committed at all',
      { audit: cleanAudit(), steps: steps({ atChaosStart: 0, atEnd: 0, committedDuringChaos: 0 }) },
      /no progress: no step committed/,
    ],
    [
      'fails when stuck under chaos',
      { audit: cleanAudit(), steps: steps({ atChaosStart: 12, atEnd: 12, committedDuringChaos: 0 }) },
      /no progress under chaos: stuck at step 12/,
    ],
    [
      'passes a job that finished during warm-up',
      { audit: cleanAudit(), steps: steps({ atChaosStart: 60, atEnd: 60, committedDuringChaos: 0, jobState: 'done' }) },
      null,
    ],
    ['fails a failed job', { audit: cleanAudit(), steps: steps({ jobState: 'failed' }) }, /the job failed/],
  ];
  for (const [name, input, failure] of cases) {
    it(name, () => {
      const verdict = swarmVerdict(input);
      expect(verdict.ok).toBe(failure === null);
      if (failure) expect(verdict.failures.join('\n')).toMatch(failure);
      else expect(verdict.failures).toEqual([]);
    });
  }
});

describe('summarizeAudit', () => {
  it('adds up duplicates, missing indices and discontinuities over epochs', () => {
    const epoch = (e: number, dup: number, never: number | null, disc: number) => ({
      epoch: e,
      commits: 4,
      positions: 100,
      committed: 100 - (never ?? 0),
      duplicates: [],
      duplicateCount: dup,
      finished: never !== null,
      neverCommitted: never === null ? null : [],
      neverCommittedCount: never,
      discontinuities: disc,
      skipped: 0,
      holesLeft: 0,
    });
    const audit: AuditReport = {
      runId: 'r',
      datasetSize: 100,
      seed: 1,
      epochs: [epoch(0, 1, 2, 0), epoch(1, 4, null, 1)],
      commitRows: 8,
      rolledBackRows: 1,
      lastRowStep: 8,
      lastCommitStep: 8,
      recordAgrees: true,
      ok: false,
    };
    expect(summarizeAudit(audit)).toMatchObject({
      ok: false,
      duplicates: 5,
      missing: 2,
      discontinuities: 1,
      rolledBackRows: 1,
    });
  });
});

describe('report text', () => {
  it('shows every field of the progress line', () => {
    const line = formatProgress({
      elapsedS: 23.4,
      durationS: 60,
      warmingUp: false,
      step: 123,
      totalSteps: 630,
      epoch: 1,
      epochs: 5,
      epochFraction: 0.426,
      worldSize: 3,
      waiting: 1,
      samplesPerSec: 812.4,
      tabs: 4,
      hung: 1,
      eventsFired: 3,
      eventsPlanned: 7,
      recoveries: 2,
      recoveriesOpen: 1,
      phase: 'training',
    });
    expect(line).toBe(
      'swarm 00:23/01:00 · step 123/630 · epoch 1/5 42% · world 3 (+1 waiting) training · 812 samples/s · tabs 4 (1 hung) · events 3/7 · recoveries 2 (1 open)',
    );
  });

  it('prints the events with their recoveries and the verdict', () => {
    const report: SwarmReport = {
      ok: false,
      failures: ['no progress under chaos: stuck at step 12 for the whole chaos window'],
      url: 'http://127.0.0.1:8080',
      seed: 7,
      workers: 3,
      headlessWorkers: 0,
      durationS: 30,
      elapsedS: 30.2,
      warmupS: 9.5,
      job: {
        runId: 'r1',
        model: 'tiny-mlp',
        globalBatch: 32,
        datasetSize: 2000,
        epochs: 5,
        totalSteps: 315,
        sync: 'local, H = 16, int8, outer Nesterov lr 0.7 m 0.9',
      },
      schedule: [],
      events: [
        { at: 5, kind: 'close', tab: 't1', firedAtS: 5.01, outcome: 'done', note: 'rank 0 of 3' },
        { at: 9, kind: 'join', tab: 't4', firedAtS: 9, outcome: 'done' },
        { at: 12, kind: 'crash', tab: 't9', firedAtS: null, outcome: 'skipped', note: 'no such tab' },
      ],
      steps: steps({ atChaosStart: 12, atEnd: 12, committedDuringChaos: 0 }),
      throughput: [],
      meanSamplesPerSec: 0,
      usage: { utilization: 0.8312, bytesPerSample: 7372.6 },
      recoveries: [
        {
          tab: 't1',
          kind: 'close',
          atS: 5.01,
          member: true,
          stepBefore: 12,
          inFlight: 1,
          resumedFrom: 12,
          stepsLost: 1,
          durationMs: 640,
          recovered: true,
        },
      ],
      joins: [{ tab: 't4', atS: 9, admittedAfterMs: 4200 }],
      restarts: { atStart: 0, atEnd: 0 },
      audit: cleanAudit(),
      tabs: [],
      problems: {
        errors: [{ tab: 't2', atMs: 6000, kind: 'console', text: 'page: tabswarm: peer t1 closed', expected: false }],
        crashes: [],
        unexpectedCrashes: 0,
        dropped: 0,
      },
    };
    const text = formatReportTable(report);
    expect(text).toContain('= 315 steps, sync local, H = 16, int8, outer Nesterov lr 0.7 m 0.9 (run r1)');
    expect(text).toContain('usage (whole run): compute utilization 83.1%, 7373 B sent per sample');
    expect(text).toMatch(/5\.0 +close +t1 +done +640 +1 +rank 0 of 3/);
    expect(text).toMatch(/join +t4 +done +admitted 4200/);
    expect(text).toMatch(/\(12\.0\) +crash +t9 +skipped/);
    expect(text).toMatch(/recoveries: 1\/1 recovered, median 640 ms/);
    expect(text).toMatch(/t2 @6\.0s console: page: tabswarm: peer t1 closed/);
    expect(text).toMatch(/verdict: FAIL — no progress under chaos/);
  });
});
