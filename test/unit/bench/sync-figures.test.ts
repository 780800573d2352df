/**
 * bench/sync.ts's figures (bench/lib/sync-figures.ts) on hand-built step reports and commits: samples/s over the
 * window and over the commit span, bytes per sample from the reports, busy time from report times (a
 * commit point counts one typical inner step), and the ring formula.
 */
import { describe, expect, it } from 'vitest';
import {
  boundarySteps,
  busyMs,
  type Commit,
  formulaBytesPerSample,
  type Report,
  windowFigures,
} from '../../../bench/lib/sync-figures';
import { configName, parseConfig, syncField, withoutOverlap } from '../../../bench/lib/sync-configs';

/** Local H = 4: inner steps every 100 ms, the commit point's report 1,000 ms after the previous one. */
function localReports(firstStep: number, steps: number, start: number): Report[] {
  const out: Report[] = [];
  let at = start;
  for (let step = firstStep; step < firstStep + steps; step++) {
    at += step % 4 === 0 ? 1000 : 100;
    out.push({ step, samples: 43, computeMs: 250, wireBytes: step % 4 === 0 ? 1000 : 0, at });
  }
  return out;
}

describe('bench:sync figures', () => {
  it('busy time: inner gaps in full, a commit point as the median inner gap, only inside the window', () => {
    const reports = localReports(1, 8, 0); // steps 1..8 at 100, 200, 300, 1300, 1400, 1500, 1600, 2600
    const commitPoints = new Set([4, 8]);
    // Gaps inside [0, 2600]: 100,100,(1000→100),100,100,100,(1000→100) after the first report = 700.
    expect(busyMs(reports, commitPoints, 0, 2600)).toBe(700);
    // A window starting at 1350 cuts the gap before step 5 at the window's start.
    expect(busyMs(reports, commitPoints, 1350, 2600)).toBe(50 + 100 + 100 + 100);
    // No inner steps (every-step mode): a commit point counts the tab's own computeMs, at most the gap.
    const every: Report[] = [1, 2, 3].map((step) => ({
      step,
      samples: 43,
      computeMs: 250,
      wireBytes: 0,
      at: step * 2000,
    }));
    expect(busyMs(every, new Set([1, 2, 3]), 0, 6000)).toBe(500);
  });

  it('window figures from commits and reports', () => {
    const commits: Commit[] = [
      { step: 4, count: 512, committedAt: 1300, worldSize: 3 },
      { step: 8, count: 512, committedAt: 2600, worldSize: 3 },
    ];
    const tabs = [localReports(1, 8, 0), localReports(1, 8, 0)];
    const f = windowFigures(commits, tabs, 0, 1000, 3000);
    expect(f.windowSamples).toBe(1024);
    expect(f.samplesPerSec).toBeCloseTo(1024 / 2, 9);
    expect(f.spanSamplesPerSec).toBeCloseTo(512 / 1.3, 9);
    expect(f.reportedBytesPerSample).toBeCloseTo((2 * 2 * 1000) / 1024, 9); // two tabs × two commit points
    expect(f.claimedUtilization).toBeCloseTo((5 * 250) / 2000, 9); // steps 4..8 reported inside [1000, 3000]
    expect(f.commits).toBe(2);
    // Nothing committed: zero samples/s, no span, no bytes per sample.
    const none = windowFigures([], tabs, 0, 1000, 3000);
    expect([none.samplesPerSec, none.spanSamplesPerSec, none.reportedBytesPerSample]).toEqual([0, null, null]);
  });

  it('overlapped outer steps: the gap before a group’s first step holds the sync, and outer reports count bytes only', () => {
    // H = 4: the commit point's report goes out at once; the next step waits 1,000 ms for the previous
    // outer step; each commit point's outer report (its bytes) goes out meanwhile.
    const reports: Report[] = [];
    let at = 0;
    for (let step = 1; step <= 8; step++) {
      at += step === 5 ? 1000 : 100;
      reports.push({ step, samples: 43, computeMs: 90, wireBytes: 0, at });
      if (step % 4 === 0) reports.push({ step, samples: 0, computeMs: 0, wireBytes: 1000, at: at + 50, outer: true });
    }
    const boundaries = boundarySteps([4, 8], true);
    expect([...boundaries]).toEqual([5, 9]);
    // Gaps after the first report: 100 ×3, (1000 → 100), 100 ×3 = 700; the outer reports are no steps.
    expect(busyMs(reports, boundaries, 0, at)).toBe(700);
    // Without overlap the same boundaries are the commit points.
    expect([...boundarySteps([4, 8], false)]).toEqual([4, 8]);
    const commits: Commit[] = [{ step: 4, count: 172, committedAt: 900, worldSize: 3 }];
    const f = windowFigures(commits, [reports], 0, 0, 2000, true);
    // The bytes are the outer report's, over the commit's samples.
    expect(f.reportedBytesPerSample).toBeCloseTo(1000 / 172, 9);
    expect(parseConfig('overlap32:int8')).toEqual({
      mode: 'local',
      innerSteps: 32,
      compression: 'int8',
      overlap: true,
    });
    expect(syncField(parseConfig('overlap32:int8'))).toMatchObject({ mode: 'local', innerSteps: 32, overlap: true });
    expect(configName(parseConfig('overlap32:int8'))).toBe('overlapped H=32 int8');
    expect(withoutOverlap(parseConfig('overlap32:int8'))).toEqual(parseConfig('local32:int8'));
  });

  it('the ring formula: fp32 every step against int8 every 32 steps', () => {
    const fp32 = formulaBytesPerSample(parseConfig('every-step:none'));
    const int8 = formulaBytesPerSample(parseConfig('local32:int8'));
    // 3 tabs × 2·(2/3)·n·4 bytes per 128 samples, n the padded mlp gradient (≥ 235,146 parameters).
    expect(fp32).toBeGreaterThan((3 * (4 / 3) * 235_146 * 4) / 128 - 1);
    expect(fp32 / int8).toBeCloseTo((32 * 4) / (1 + 4 / 256), 6);
    expect(() => parseConfig('local:int8')).toThrow(/bad config/);
  });
});
