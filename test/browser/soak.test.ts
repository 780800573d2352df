/**
 * A short soak (issue: training slowed down as a run went on): one real coordinator, one headless
 * tab training the default `mlp` job elastically on the real Fashion-MNIST for `TABSWARM_SOAK_MINUTES`
 * (default 2.5), sampled every 5 s by bench/soak.ts's own runner. It fails when
 * - the step rate of the last third falls below 0.75× the first third's (thirds, not quarters:
 *   ~50 s windows, so a burst of other load on a shared machine moves the ratio less), or
 * - the tab's renderer (page + training worker) or the coordinator grows by more than
 *   MAX_MB_PER_1K_STEPS per 1,000 steps after warm-up (`trend`: a least-squares slope of RSS against
 *   steps over the last two thirds, with one jump allowed), with a floor of NOISE_FLOOR_MB over the
 *   steps the slope spans for runs with few steps, or
 * - that one jump is over MAX_JUMP_MB.
 *
 * One jump, because a renderer's RSS steps up once and stays flat: +30 MB at 80 s in a run here,
 * +27 MB at 90 s in another, +23 MB at 85 s in a CI run (846 steps), which failed this test when it
 * compared the medians of the last two thirds (80 MB per 1,000 steps read from ~290 steps). Each time
 * it came in the 5 s that held step 469, the end of the first epoch (60,000 images, batch 128): the
 * epoch's evaluation loads the test set into the worker, 10,000 images as float32, 31 MB. On that run the slope with one jump is
 * 11 MB per 1,000 steps (test/unit/bench/soak-stats.test.ts replays it). A leak is a slope: memory kept
 * per step, or per checkpoint (a staircase of many small steps, which one jump cannot absorb; the unit
 * test checks that too). MAX_JUMP_MB, 64, is twice the largest one-off step seen: a single bigger
 * allocation that stays is not a leak, but it is worth a look.
 *
 * The bound, 40 MB per 1,000 steps (40 KB per step):
 * - Nothing the product keeps per step is unbounded any more: the tab's loss log is 2,000 entries
 *   (~100 KB in all), a round's commit deferreds are dropped once awaited, the coordinator keeps
 *   commits in SQLite (its page cache is a fixed 2 MB) and its in-memory windows are fixed-size. So
 *   the true growth is 0 and the bound is about noise.
 * - Noise: a garbage-collected heap's RSS moves in a sawtooth of tens of MB. Over the ~1,000 steps of
 *   the run's last two thirds, medians of thirds kept that to well under 20 MB per 1,000 steps in the
 *   runs recorded in bench/RESULTS.md (solo renderer, after-fix elastic processes), bar the one-off
 *   steps above; 40 is twice that, and the slope with one jump reads those runs no higher.
 * - The leaks this guards against are far above it: the old per-step copy of the 2,000-entry loss log
 *   in the status (~100 KB of garbage per step, retained in bursts), the old one-deferred-per-commit
 *   map, or one retained gradient buffer per step (≥ 1 MB per step for `mlp`, 1,000 MB per 1,000). The
 *   renderer's growth before the fix was measured at ~137 MB per 1,000 steps (bench/RESULTS.md).
 * - With few steps (a slow, loaded machine: ~125 steps between the thirds' medians in one run here,
 *   so ~250 after warm-up) the per-1,000 figure multiplies GC noise fourfold, so a slope worth up to NOISE_FLOOR_MB (10 MB, the size of
 *   the RSS wobble in the flat runs of bench/RESULTS.md) over the steps it spans always passes; past
 *   250 steps the 40 MB/1k bound is the binding one.
 * A slow leak of a few KB per step is below this test's resolution; `npm run bench:soak` with a
 * longer duration is the tool for that.
 *
 * The renderer is held to the same 40. Its old 60–120 KB per step in the elastic path was not ours: the
 * tab was driven by Playwright, whose DevTools Network domain makes Blink keep the body of every request
 * the page sends, so each 2.8 MB checkpoint upload (every 50 steps) stayed in the renderer, ~56 KB per
 * step, up to ~200 MB (docs/performance.md, "The renderer's growth in the elastic path";
 * bench/devtools-upload-retention.ts reproduces it without tabswarm). bench/soak.ts now opens elastic
 * tabs in a Chromium no DevTools client is attached to, as a volunteer's browser is; there the tab's
 * renderer measured 7 MB per 1,000 steps over 434 steps (237 → 240 MB) and its Blink buffer partition
 * 0.3 KB per step; this test's first run so: −0.35 MB per 1,000 steps over 843 steps (2,048 in 150 s,
 * load average ~12), and the after-fix bench:soak figure is in bench/RESULTS.md. A return of that
 * retention (or any other 2.8 MB kept per checkpoint) is 56 MB per 1,000 steps: above the bound.
 *
 * The step rate is the one the machine let the run have (`loadAdjustedLateEarly`): steps per CPU tick
 * that other processes left free, late third over early third. On a quiet machine that is the
 * wall-clock ratio; on a shared one (a CI runner) another job's burst in one third does not count
 * against the run. CI failed this test once on the wall-clock ratio alone: 0.78, a run whose
 * minutes were 799 and 732 steps, where the quiet runs here gave 1.05 and the 10-minute soak 1.07.
 * Measured here with two busy loops taking over both cores for the last 30 s of a 2.5-minute run:
 * wall-clock 0.36 and adjusted 0.84 at the run's own priority; with the run's processes and threads
 * at nice −10 (which the test asks for when it may, i.e. as root, as CI runs), wall-clock 0.58 and
 * adjusted 0.96. A run whose per-step work or waits grow shows the same drop in both figures.
 *
 * Why 0.75 and not the 0.85 it was: the ratio of a healthy run is noisy. One tab's steps per 5 s move
 * between 23 and 42 with no other load on the machine, and the slow stretches last tens of seconds (in
 * one run 33 per 5 s for the first 65 s, then 27 to the end), so two 50-s thirds differ by chance. The
 * clean code's 2.5-minute runs on the 2-core machine gave 0.91, 1.19, 0.94, 0.95, 0.92, 0.84 and 0.845
 * (seven full suites) and 0.96 on CI; a 4-minute bench:soak 0.99, the 10-minute one 1.07 and the
 * 20-minute one 1.17. Mean 0.98, spread 0.12: 0.85 sat 1.1 spreads below the mean and failed two suites
 * of seven (memory figures passing both times). Why the short runs sit below 1: in most runs the first
 * 15–20 s are faster (34–40 steps per 5 s, then 24–33; a start-up transient, not a decay: the longer runs
 * show none), and they fall in the first third; a longer run dilutes them. The slowdowns this test
 * exists for were far below either bound: 0.21 (the elastic tab before the fix, bench/RESULTS.md) and
 * 0.67 and 0.70 (the same fix half done). 0.75 is 2 spreads below the mean and still catches each of them.
 * The final suite of that day then read 0.755 (34 steps per 5 s in the first third, 26 in the last): at the
 * bound. Where the time goes, from /proc in a 3-minute bench:soak beside it (late/early 0.91): Chromium's
 * GPU process (SwiftShader) burned a steady 1.65 cores throughout, the renderer 0.2 and the coordinator
 * 0.03, while the steps per 10 s moved between 45 and 63. So the steps that slow down are SwiftShader's,
 * on a machine it saturates: its CPU per step varies by a fifth over tens of seconds with nothing else
 * running, which this ratio cannot tell from a decay, and the 10- and 20-minute runs show no decay. If
 * CI fails here again, a longer run (bench:soak) is the way to tell noise from a slowdown. The 4-minute
 * bench:soak keeps the stricter 0.9 as its goal, reported, not asserted.
 *
 * Takes about 3 minutes (2.5 of training plus start-up). Cut to 2 minutes once to save CI time, it failed
 * on a slow machine (787 steps, 301 between the thirds' medians, so a bound of 12 MB; the renderer's RSS
 * stepped up 30 MB once, at 80 s, and stayed flat): fewer steps make the bound tighter than GC noise.
 */
import { describe, expect, it } from 'vitest';
import { timeline } from '../../bench/lib/soak-stats';
import { runConfigSampled } from '../../bench/soak';
import {
  FASHION_MNIST_DIR,
  skipWithoutChromium,
  skipWithoutFashionMnist,
  skipWithoutWebBuild,
  WEB_BUILD_DIR,
} from '../support/browser';

const MINUTES = Number(process.env.TABSWARM_SOAK_MINUTES ?? 2.5);
const MIN_LATE_EARLY = 0.75;
const MAX_MB_PER_1K_STEPS = 40;
const NOISE_FLOOR_MB = 10;
const MAX_JUMP_MB = 64;
/** The run's nice value where raising priority is allowed (root); elsewhere its inherited one. */
const NICE = process.getuid?.() === 0 ? -10 : undefined;

const skip = skipWithoutChromium() || skipWithoutFashionMnist() || skipWithoutWebBuild();

describe.skipIf(skip)('soak: one elastic tab keeps its speed and its memory', () => {
  it(
    `trains ${MINUTES} min with late/early ≥ ${MIN_LATE_EARLY} (other load taken out) and ≤ ${MAX_MB_PER_1K_STEPS} MB per 1,000 steps`,
    async () => {
      const { result: r, samples } = await runConfigSampled(
        { kind: 'elastic', tabs: 1 },
        {
          minutes: MINUTES,
          configs: [],
          sampleEverySec: 5,
          dataset: FASHION_MNIST_DIR,
          dist: WEB_BUILD_DIR,
          nice: NICE,
        },
      );
      console.log(`soak: ${JSON.stringify(r)}`);
      console.log(
        `soak timeline (s, steps since the last sample, other processes' share, renderer RSS): ${timeline(samples)}`,
      );
      // It trained at all (1,744 steps in 2.5 min in a run here): with under 50 the thirds' rates are noise.
      expect(r.steps).toBeGreaterThan(50);
      expect(r.lateEarlyAdjusted).toBeGreaterThanOrEqual(MIN_LATE_EARLY);
      // The slope may carry NOISE_FLOOR_MB over the steps it spans, or MAX_MB_PER_1K_STEPS per 1,000.
      const allowedPer1k = Math.max(MAX_MB_PER_1K_STEPS, (1000 * NOISE_FLOOR_MB) / Math.max(1, r.trend.overSteps));
      expect(r.trend.renderers).toHaveLength(1);
      for (const [name, t] of [
        ['renderer', r.trend.renderers[0]],
        ['coordinator', r.trend.coordinator],
      ] as const) {
        expect(t.leak, `${name}: MB per 1,000 steps`).toBeLessThanOrEqual(allowedPer1k);
        expect(t.jumpMb, `${name}: its one jump, MB`).toBeLessThanOrEqual(MAX_JUMP_MB);
      }
    },
    (MINUTES * 60 + 240) * 1000,
  );
});
