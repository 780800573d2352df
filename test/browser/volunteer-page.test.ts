/**
 * The volunteer page as a person meets it, in two real headless Chromium tabs (WebGPU on SwiftShader)
 * against a real coordinator process:
 * - tab A (1280×800) waits for consent: before Start it downloads no dataset and opens no socket or
 *   peer connection (every request is recorded); tab B (390×844) is opened with `?autostart=1`;
 * - while both train, each page shows its samples processed (> 0), world size 2, a share of each step
 *   of ≈ 0.5, its fraction of all committed samples, the job's progress and the time contributed;
 * - the GPU limit (a pause between steps) slows tab A's steps by about the pause;
 * - Leave removes tab B at once: the coordinator's world drops to 1 far sooner than a heartbeat
 *   timeout could, with no restart counted; the page says it left and Rejoin brings it back;
 * - a coordinator restart shows "reconnecting…", and the tab rejoins by itself;
 * - screenshots at 1280×800 and 390×844 go to test-results/, and the phone layout has no sideways scroll.
 *
 * Small on purpose (docs/chromium.md: SwiftShader is slow): `tiny-mlp`, global batch 32, the first 1,024
 * Fashion-MNIST images (or the seeded fake IDX set when the real one is not installed). The
 * coordinator serves the Vite build in `TABSWARM_DIST` (default `dist/`).
 */
import Database from 'better-sqlite3';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assignStep } from '../../core/training/groups';
import type { StatusResponse } from '../../core/protocol/views';
import { writeDatasetSlice } from '../support/small-dataset';
import { coordinatorStatusUntil } from '../support/swarm';
import type { TabStatus } from '../../web/volunteer/status';
import type {} from '../../web/volunteer/globals';
import {
  FASHION_MNIST_DIR,
  launchChromium,
  skipWithoutChromium,
  skipWithoutWebBuild,
  watchPage,
  WEB_BUILD_DIR,
  type PageProblems,
} from '../support/browser';
import { CoordinatorProcess, REPO_ROOT } from '../support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../support/fake-dataset';

const ARTIFACTS = join(REPO_ROOT, 'test-results');
const TRAIN_IMAGES = 1024;
const TEST_IMAGES = 200;
/** Long, so that a tab removed within a second cannot have been removed by a heartbeat timeout (3 × 5 s). */
const HEARTBEAT_MS = 5000;
const PAUSE_MS = 1000;

const JOB = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  globalBatch: 32,
  epochs: 100,
  minWorkers: 1,
  maxWorkers: 4,
  commitEvery: 1,
  checkpointEvery: 20,
  heartbeatMs: HEARTBEAT_MS,
  lastCallMs: 300,
  seed: 11,
};

const skip = skipWithoutChromium() || skipWithoutWebBuild();

/** The first images of the real Fashion-MNIST as raw IDX files, or a seeded fake set when it is not installed. */
async function writeDataset(): Promise<string> {
  const dir = join(makeTempDir('tabswarm-volunteer-'), 'dataset');
  if (!existsSync(FASHION_MNIST_DIR))
    return writeFakeIdxDataset(dir, { trainCount: TRAIN_IMAGES, testCount: TEST_IMAGES });
  return writeDatasetSlice(FASHION_MNIST_DIR, dir, TRAIN_IMAGES, TEST_IMAGES);
}

/**
 * Samples `workerId` computed in committed steps, from the coordinator's own commit rows (read-only):
 * the independent reference for the page's "samples processed".
 */
function committedSamplesOf(coordinator: CoordinatorProcess, workerId: string): number {
  const db = new Database(join(coordinator.dataDir, 'tabswarm.sqlite'), { readonly: true, fileMustExist: true });
  try {
    const rows = db
      .prepare('SELECT step, first_step, cursor_start, count, world_json FROM commits WHERE rolled_back = 0')
      .all() as {
      step: number;
      first_step: number;
      cursor_start: number;
      count: number;
      world_json: string;
    }[];
    let samples = 0;
    for (const row of rows) {
      expect(row.first_step, 'one step per commit (commitEvery 1)').toBe(row.step);
      const world = JSON.parse(row.world_json) as { workerId: string; rank: number; share: number }[];
      const me = world.find((w) => w.workerId === workerId);
      if (me)
        samples += assignStep(
          row.cursor_start,
          row.count,
          world.map((w) => w.share),
        )[me.rank].count;
    }
    return samples;
  } finally {
    db.close();
  }
}

interface Tab {
  name: string;
  context: BrowserContext;
  page: Page;
  problems: PageProblems;
  /** Every request the page (and its workers) made, in order, as paths; WebSockets as `ws:<path>`. */
  requests: string[];
  /** When (performance.now() in the test) each heartbeat frame left the page, per control socket. */
  heartbeats: number[][];
}

/** Wait until `predicate(window.tabswarm, arg)` holds in the page; on timeout, fail with the page's status and errors. */
async function until<A>(
  tab: Tab,
  predicate: (s: Readonly<TabStatus>, arg: A) => boolean,
  arg: A,
  timeoutMs = 30_000,
): Promise<Readonly<TabStatus>> {
  const source = predicate.toString();
  try {
    await tab.page.waitForFunction(
      ({ source, arg }) =>
        (new Function(`return (${source})`)() as (s: unknown, a: unknown) => boolean)(window.tabswarm, arg),
      { source, arg },
      { timeout: timeoutMs, polling: 50 },
    );
  } catch (err) {
    const status = await tab.page.evaluate(() => window.tabswarm).catch(() => null);
    throw new Error(
      `${tab.name}: ${(err as Error).message.split('\n')[0]}\n  waiting for ${source}\n  status: ${JSON.stringify(status && { ...status, losses: status.losses.length })}\n  ${tab.problems.errors.join('\n  ')}`,
    );
  }
  return tab.page.evaluate(() => window.tabswarm);
}

/** The coordinator's status once `check` holds and how long it took (polled every 25 ms: the leave is timed with it). */
const statusUntil = (coordinator: CoordinatorProcess, check: (s: StatusResponse) => boolean, what: string) =>
  coordinatorStatusUntil(coordinator, check, what, { timeoutMs: 20_000, pollMs: 25 });

/** Mean wall time per step this tab computes, over the next `steps` steps (timed in the page, from its own status). */
async function msPerStep(tab: Tab, steps: number): Promise<number> {
  return tab.page.evaluate(
    (steps) =>
      new Promise<number>((resolvePromise, reject) => {
        const read = () => window.tabswarmElastic?.stepsComputed ?? 0;
        // Start timing at a step boundary, so partial steps do not count.
        const first = read();
        let startAt = 0;
        let startSteps = 0;
        const deadline = performance.now() + 60_000;
        const tick = () => {
          const n = read();
          if (startAt === 0 && n > first) {
            startAt = performance.now();
            startSteps = n;
          } else if (startAt > 0 && n >= startSteps + steps) {
            resolvePromise((performance.now() - startAt) / (n - startSteps));
            return;
          }
          if (performance.now() > deadline) reject(new Error(`no ${steps} steps within 60 s (at ${n})`));
          else setTimeout(tick, 5);
        };
        tick();
      }),
    steps,
  );
}

/**
 * Wait until the element's text matches `pattern` (the page renders on the next animation frame after
 * a status change, so the DOM may lag `window.tabswarm` by a frame); fail with the text it has.
 */
async function shows(tab: Tab, selector: string, pattern: RegExp | string, timeoutMs = 5000): Promise<void> {
  const escaped = typeof pattern === 'string' ? pattern.replace(/[.*+?^$()|[\]\\{}]/g, (c) => `\\${c}`) : '';
  const source = typeof pattern === 'string' ? `^${escaped}$` : pattern.source;
  try {
    await tab.page.waitForFunction(
      ({ selector, source }) => new RegExp(source).test(document.querySelector(selector)?.textContent ?? ''),
      { selector, source },
      { timeout: timeoutMs, polling: 'raf' },
    );
  } catch {
    throw new Error(
      `${tab.name}: ${selector} shows ${JSON.stringify(await tab.page.textContent(selector))}, not /${source}/`,
    );
  }
}

async function setGpuLimit(tab: Tab, ms: number): Promise<void> {
  await tab.page.locator('#gpu-limit').evaluate((input: HTMLInputElement, value) => {
    input.value = String(value);
    input.dispatchEvent(new Event('input', { bubbles: true }));
  }, ms);
}

/** Called at the next heartbeat frame any tab sends. */
const beatListeners: (() => void)[] = [];

describe.skipIf(skip)('the volunteer page', () => {
  let browser: Browser;
  let coordinator: CoordinatorProcess;
  const tabs: Tab[] = [];

  async function openTab(name: string, viewport: { width: number; height: number }, query = ''): Promise<Tab> {
    const context = await browser.newContext({ viewport });
    const page = await context.newPage();
    const tab: Tab = { name, context, page, problems: watchPage(page), requests: [], heartbeats: [] };
    const path = (url: string) => {
      const u = new URL(url);
      return u.origin === coordinator.url ? `${u.pathname}${u.search}` : url;
    };
    context.on('request', (req) => tab.requests.push(path(req.url())));
    page.on('websocket', (ws) => {
      tab.requests.push(`ws:${path(ws.url())}`);
      if (!ws.url().endsWith('/ws')) return;
      const beats: number[] = [];
      tab.heartbeats.push(beats);
      ws.on('framesent', (frame) => {
        if (typeof frame.payload === 'string' && frame.payload.includes('"type":"heartbeat"')) {
          beats.push(performance.now());
          for (const listener of beatListeners.splice(0)) listener();
        }
      });
    });
    await page.goto(`${coordinator.url}/${query}`);
    tabs.push(tab);
    return tab;
  }

  beforeAll(async () => {
    const datasetDir = await writeDataset();
    [coordinator, browser] = await Promise.all([
      CoordinatorProcess.spawn({ job: JOB, datasetDir, extraArgs: ['--dist', WEB_BUILD_DIR] }),
      launchChromium(),
    ]);
    mkdirSync(ARTIFACTS, { recursive: true });
  });

  afterAll(async () => {
    await Promise.all(tabs.map((t) => t.context.close().catch(() => undefined)));
    await browser?.close();
    await coordinator?.stop();
  });

  it('asks for consent, shows the contribution, limits the GPU, leaves cleanly, rejoins, and survives a coordinator restart', async () => {
    const t0 = performance.now();
    const lap = (what: string) => console.log(`${((performance.now() - t0) / 1000).toFixed(1)} s: ${what}`);

    // --- consent: tab A waits; tab B starts by itself
    const a = await openTab('A', { width: 1280, height: 800 });
    const b = await openTab('B', { width: 390, height: 844 }, '?autostart=1');
    const ready = await until(a, (s) => s.state !== 'checking', null);
    expect(ready.state, ready.error ?? '').toBe('ready');
    expect(ready.mode).toBe('elastic');
    expect(ready.adapter).not.toBeNull();
    await shows(a, '#adapter', new RegExp(ready.adapter!.vendor || ready.adapter!.architecture));
    await shows(a, '#job', /tiny-mlp/);
    await shows(a, '#start', 'Start contributing');
    expect(await a.page.isEnabled('#start')).toBe(true);
    await a.page.screenshot({ path: join(ARTIFACTS, 'volunteer-ready-1280x800.png') });
    // Before consent: the page's own code and /api/job only. No dataset, no socket, no signaling, no checkpoint.
    const beforeStart = [...a.requests];
    console.log(`tab A before Start: ${beforeStart.length} requests: ${beforeStart.join(', ')}`);
    expect(beforeStart.filter((p) => /^\/api\/(dataset|checkpoints|status)|^\/peer|^ws:/.test(p))).toEqual([]);
    expect(beforeStart.filter((p) => p.startsWith('/api/'))).toEqual(['/api/job']);
    expect(beforeStart.every((p) => p.startsWith('/'))).toBe(true);
    lap('A ready, nothing downloaded');

    // --- both contributing
    await until(b, (s) => s.state === 'training', null);
    lap('B training alone');
    await a.page.click('#start');
    const [sa, sb] = await Promise.all(
      [a, b].map((t) =>
        until(
          t,
          (s) => s.state === 'training' && s.worldSize === 2 && s.samplesProcessed > 0 && s.contributedMs > 0,
          null,
          45_000,
        ),
      ),
    );
    expect(a.requests.some((p) => p.startsWith('/api/dataset'))).toBe(true);
    lap('both training in a world of 2');
    for (const s of [sa, sb]) {
      expect(s.share).toBeGreaterThan(0.45);
      expect(s.share).toBeLessThan(0.55);
      expect(s.samplesProcessed).toBeLessThanOrEqual(s.jobSamples);
      expect(s.jobShare).toBeGreaterThan(0);
      expect(s.jobShare).toBeLessThanOrEqual(1);
      expect(s.totalSteps).toBe((TRAIN_IMAGES / JOB.globalBatch) * JOB.epochs);
    }
    // B trained alone first, so it holds the larger part of what was committed.
    expect(sb.jobShare!).toBeGreaterThan(sa.jobShare!);
    // The page shows what the status says.
    await shows(a, '#world', '2');
    await shows(a, '#share', /^(4[5-9]|5[0-5]) %$/);
    await shows(a, '#samples', /^[1-9][\d,]*$/);
    await shows(a, '#step', new RegExp(`^\\d+ / ${sa.totalSteps}$`));
    await shows(a, '#badge', 'training');
    expect(await a.page.isVisible('#stop')).toBe(true);

    // --- the GPU limit: a pause between steps slows this tab's steps by about the pause
    const fullSpeed = await msPerStep(a, 6);
    await setGpuLimit(a, PAUSE_MS);
    await until(a, (s, ms) => s.stepPauseMs === ms, PAUSE_MS);
    expect(await a.page.evaluate(() => window.tabswarmElastic?.stepPauseMs)).toBe(PAUSE_MS);
    await shows(a, '#gpu-limit-value', `pause ${PAUSE_MS} ms`);
    const limited = await msPerStep(a, 3);
    console.log(
      `tab A: ${fullSpeed.toFixed(0)} ms per step at full speed, ${limited.toFixed(0)} ms with a ${PAUSE_MS} ms pause`,
    );
    // Every step interval now holds a whole pause. The other tab computes during it, so this tab then
    // computes with less contention: the interval is about pause + its compute alone, which on two
    // shared cores is less than pause + a full-speed step (both tabs computing at once).
    expect(limited).toBeGreaterThanOrEqual(0.98 * PAUSE_MS);
    expect(limited).toBeGreaterThan(fullSpeed + 0.3 * PAUSE_MS);
    // Screenshots while training (A with the limit set, B at phone size).
    await a.page.screenshot({ path: join(ARTIFACTS, 'volunteer-1280x800.png') });
    await b.page.screenshot({ path: join(ARTIFACTS, 'volunteer-390x844.png'), fullPage: true });
    expect(await b.page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await setGpuLimit(a, 0);
    await until(a, (s) => s.stepPauseMs === 0, null);
    lap('GPU limit measured');

    // --- Leave: the coordinator drops the tab at once (a goodbye, not a heartbeat timeout), no restart counted
    const before = await coordinator.status();
    expect(before.world.total).toBe(2);
    await b.page.click('#stop');
    const { status: after, ms: leaveMs } = await statusUntil(
      coordinator,
      (s) => s.world.total < 2,
      'the world shrinking',
    );
    console.log(
      `tab B left: the coordinator's world shrank (to ${after.world.total} while its next round opens) after ${leaveMs.toFixed(0)} ms; a heartbeat timeout takes ${3 * HEARTBEAT_MS} ms`,
    );
    expect(leaveMs).toBeLessThan(HEARTBEAT_MS);
    expect(after.restarts).toBe(before.restarts);
    await statusUntil(coordinator, (s) => s.world.total === 1 && s.state === 'training', 'a world of 1 training');
    const left = await until(b, (s) => s.state === 'left', null);
    expect(left.samplesProcessed).toBeGreaterThan(0);
    // What the page counts is what the coordinator committed for it. A tab waits for each commit before
    // its next step (commitEvery 1), so at most its last step was in flight when it left: the coordinator
    // may have committed it without the tab hearing so, and the page counts only what it heard.
    const workerB = (await b.page.evaluate(() => window.tabswarmElastic?.workerId))!;
    const committedForB = committedSamplesOf(coordinator, workerB);
    console.log(
      `tab B: ${left.samplesProcessed} samples processed on the page, ${committedForB} in the coordinator's commits`,
    );
    expect(left.samplesProcessed).toBeLessThanOrEqual(committedForB);
    expect(committedForB - left.samplesProcessed).toBeLessThanOrEqual(Math.ceil(0.55 * JOB.globalBatch));
    await shows(b, '#start', 'Rejoin');
    expect(await b.page.isEnabled('#start')).toBe(true);
    expect(await b.page.isVisible('#stop')).toBe(false);
    await shows(b, '#note', /You left the job/);
    await b.page.screenshot({ path: join(ARTIFACTS, 'volunteer-left-390x844.png'), fullPage: true });
    // Training goes on in A alone.
    const stepA = (await a.page.evaluate(() => window.tabswarm)).step;
    await until(a, (s, n) => s.worldSize === 1 && s.step > n, stepA);
    lap('B left, A goes on alone');

    // --- Rejoin: B is back, and its earlier contribution still counts
    await b.page.click('#start');
    const rejoined = await until(
      b,
      (s, n) => s.state === 'training' && s.worldSize === 2 && s.samplesProcessed > n,
      left.samplesProcessed,
      45_000,
    );
    expect((await coordinator.status()).restarts).toBe(before.restarts);
    expect(rejoined.samplesProcessed).toBeGreaterThan(left.samplesProcessed);
    lap('B rejoined');

    // Heartbeats: besides the client's own interval (heartbeatMs), the page beats from a worker timer
    // every heartbeatMs / 2 (hidden tabs do not throttle it), so gaps stay well under heartbeatMs.
    const beats = a.heartbeats[0];
    await new Promise<void>((resolveBeats, reject) => {
      const timer = setTimeout(() => reject(new Error(`tab A sent only ${beats.length} heartbeats`)), 4 * HEARTBEAT_MS);
      const check = () => {
        if (beats.length < 4) return beatListeners.push(check);
        clearTimeout(timer);
        resolveBeats();
      };
      check();
    });
    const gaps = beats.slice(1).map((t, i) => t - beats[i]);
    console.log(
      `tab A: ${beats.length} heartbeats, largest gap ${Math.max(...gaps).toFixed(0)} ms (heartbeatMs ${HEARTBEAT_MS})`,
    );
    expect(Math.max(...gaps)).toBeLessThan(0.75 * HEARTBEAT_MS);

    // --- the coordinator restarts: the page says it reconnects, and then it trains again by itself
    const port = coordinator.port;
    await coordinator.kill9();
    await until(a, (s) => s.state === 'reconnecting', null, 10_000);
    await shows(a, '#badge', 'reconnecting…');
    await shows(a, '#note', /reconnects by itself/);
    await a.page.screenshot({ path: join(ARTIFACTS, 'volunteer-reconnecting-1280x800.png') });
    coordinator = await coordinator.restart({ port });
    const stepBefore = (await a.page.evaluate(() => window.tabswarm)).step;
    await until(a, (s, n) => s.state === 'training' && s.step > n, stepBefore, 45_000);
    lap('A reconnected after a coordinator restart');

    // The browser logs failed WebSocket/fetch attempts while the coordinator is down; nothing else may fail.
    const expected = /WebSocket connection|ERR_CONNECTION_REFUSED|Failed to load resource|peer|PeerJS|Lost connection/i;
    for (const t of tabs)
      expect(
        t.problems.errors.filter((e) => !expected.test(e)),
        t.name,
      ).toEqual([]);
  });
});
