/**
 * Kernel tuning in a real tab (headless Chromium, WebGPU on SwiftShader) against a real coordinator:
 * with a job that tunes on any adapter (`kernels.tune: 'always'`; the default tunes only on a hardware
 * GPU), the volunteer page says "tuning for your GPU…" while its worker times the variants, and the
 * coordinator's status (the admin page's feed) shows the tab's chosen variants and measured GFLOP/s.
 * The same browser profile opened again takes the choice from IndexedDB: no tuning, source `cached`.
 * Small on purpose: `tiny-mlp`, a fake IDX set.
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusResponse } from '../../core/protocol/views';
import type { TabStatus } from '../../web/volunteer/status';
import type {} from '../../web/volunteer/globals';
import { launchChromium, skipWithoutChromium, skipWithoutWebBuild, watchPage, WEB_BUILD_DIR } from '../support/browser';
import { CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../support/fake-dataset';
import { coordinatorStatusUntil } from '../support/swarm';

const JOB = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  globalBatch: 32,
  epochs: 100,
  minWorkers: 1,
  maxWorkers: 2,
  lastCallMs: 300,
  kernels: { tune: 'always' },
};

/** Every state the page went through, sampled every 10 ms from its start (tuning lasts seconds here). */
const RECORD_STATES = `
  window.__states = [];
  setInterval(() => {
    const s = window.tabswarm && window.tabswarm.state;
    if (s && window.__states[window.__states.length - 1] !== s) window.__states.push(s);
  }, 10);
`;

async function statesOf(page: Page): Promise<string[]> {
  return page.evaluate(() => (window as unknown as { __states: string[] }).__states);
}

async function trainingStatus(page: Page): Promise<TabStatus> {
  await page.waitForFunction(() => window.tabswarm.state === 'training' || window.tabswarm.state === 'error', null, {
    timeout: 120_000,
  });
  const status = (await page.evaluate(() => window.tabswarm)) as TabStatus;
  expect(status.error).toBeNull();
  return status;
}

describe.skipIf(skipWithoutChromium() || skipWithoutWebBuild())('kernel tuning in the volunteer page', () => {
  let browser: Browser;
  let coordinator: CoordinatorProcess;
  let context: BrowserContext;
  const statusUntil = (check: (s: StatusResponse) => boolean, what: string) =>
    coordinatorStatusUntil(coordinator, check, what, { timeoutMs: 60_000, pollMs: 200 });

  beforeAll(async () => {
    const datasetDir = await writeFakeIdxDataset(makeTempDir('tabswarm-tuning-'), { trainCount: 512, testCount: 64 });
    [coordinator, browser] = await Promise.all([
      CoordinatorProcess.spawn({ job: JOB, datasetDir, extraArgs: ['--dist', WEB_BUILD_DIR] }),
      launchChromium(),
    ]);
    context = await browser.newContext();
    await context.addInitScript(RECORD_STATES);
  });

  afterAll(async () => {
    await context?.close().catch(() => undefined);
    await browser?.close();
    await coordinator?.stop();
  });

  it('says "tuning for your GPU…" at the first start, reports the choice to the coordinator, and takes it from the cache at the next', async () => {
    const page = await context.newPage();
    const problems = watchPage(page);
    await page.goto(`${coordinator.url}/?autostart=1`);
    await page.waitForFunction(() => window.tabswarm.state === 'tuning', null, { timeout: 60_000, polling: 20 });
    expect(await page.textContent('#badge')).toBe('tuning for your GPU…');
    const first = await trainingStatus(page);
    expect(await statesOf(page)).toContain('tuning');
    expect(first.kernels).toMatchObject({ source: 'tuned', precision: 'f32' });
    expect(first.kernels!.variants.map((v) => v.family)).toEqual([
      'matmul',
      'conv2d',
      'attention',
      'layernorm',
      'optimizer',
    ]);
    expect(first.kernels!.gflops).toBeGreaterThan(0);
    expect(first.kernels!.tuneMs).toBeGreaterThan(0);

    const { status } = await statusUntil((s) => s.world.total === 1, 'the tab in the world');
    expect(status.world.items[0].kernels).toEqual(first.kernels);
    problems.assertNone();

    // The same profile again: the worker finds its choice in IndexedDB and times nothing.
    await page.close();
    await statusUntil((s) => s.world.total === 0, 'the closed tab to leave');
    const again = await context.newPage();
    const againProblems = watchPage(again);
    await again.goto(`${coordinator.url}/?autostart=1`);
    const second = await trainingStatus(again);
    expect(await statesOf(again)).not.toContain('tuning');
    expect(second.kernels).toEqual({ ...first.kernels, source: 'cached', tuneMs: null });
    const later = await statusUntil((s) => s.world.total === 1, 'the tab back in the world');
    expect(later.status.world.items[0].kernels?.source).toBe('cached');
    againProblems.assertNone();
  });
});
