/**
 * One tab learns: the volunteer page in real headless Chromium (WebGPU on SwiftShader here) downloads
 * the real Fashion-MNIST from the server, and its training worker trains on it.
 * The one long test of the suite is the `mlp` epoch; everything else runs for seconds.
 */
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadIdxDataset } from '../../node/idx';
import type { TabStatus } from '../../web/volunteer/status';
import type {} from '../../web/volunteer/globals';
import {
  FASHION_MNIST_DIR,
  launchChromium,
  skipWithoutChromium,
  skipWithoutFashionMnist,
  skipWithoutWebBuild,
  watchPage,
  type PageProblems,
} from '../support/browser';
import { startWebServer, type WebServer } from '../support/web-server';

const ARTIFACTS = process.env.TABSWARM_ARTIFACTS ?? join(tmpdir(), 'tabswarm-artifacts');
/** A host name that resolves to 127.0.0.1 but is not "localhost": an insecure origin. */
const INSECURE_HOST = 'tabswarm.test';
const FINISHED: readonly TabStatus['state'][] = ['done', 'stopped', 'error', 'unsupported'];

const skip = skipWithoutChromium() || skipWithoutFashionMnist() || skipWithoutWebBuild();

describe.skipIf(skip)('one tab learns Fashion-MNIST', () => {
  let server: WebServer;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    const dataset = await loadIdxDataset(FASHION_MNIST_DIR);
    server = await startWebServer({ dataset });
    browser = await launchChromium({ args: [`--host-resolver-rules=MAP ${INSECURE_HOST} 127.0.0.1`] });
  });

  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  async function openPage(
    query: string,
    opts: { context?: BrowserContext; origin?: string; viewport?: { width: number; height: number } } = {},
  ) {
    let context = opts.context;
    if (!context) {
      context = await browser.newContext({ viewport: opts.viewport ?? { width: 1280, height: 800 } });
      contexts.push(context);
    }
    const page = await context.newPage();
    const problems = watchPage(page);
    await page.goto(`${opts.origin ?? server.url}/${query}`);
    return { page, problems, context };
  }

  /** Wait until the page's run ends, then return its status; fail with the page's own error if it has one. */
  async function finished(page: Page, problems: PageProblems, timeoutMs: number): Promise<Readonly<TabStatus>> {
    try {
      await page.waitForFunction((states) => states.includes(window.tabswarm.state), FINISHED, {
        timeout: timeoutMs,
        polling: 250,
      });
    } catch (err) {
      const status = await page.evaluate(() => window.tabswarm).catch(() => undefined);
      throw new Error(
        `the page did not finish: ${(err as Error).message}\nstatus: ${JSON.stringify({ ...status, losses: status?.losses.length })}\n${problems.errors.join('\n')}`,
      );
    }
    const status = await page.evaluate(() => window.tabswarm);
    expect(status.error, 'page error').toBeNull();
    return status;
  }

  it('waits for consent, shows the adapter, and downloads nothing before Start', async () => {
    const { page, problems } = await openPage('?mode=solo');
    await page.waitForFunction(() => window.tabswarm.state !== 'checking', undefined, { polling: 100 });
    const status = await page.evaluate(() => window.tabswarm);
    expect(status.state).toBe('ready');
    expect(status.adapter).not.toBeNull();
    const adapterText = await page.textContent('#adapter');
    expect(adapterText).toContain(status.adapter!.vendor || status.adapter!.architecture);
    if (status.adapter!.architecture) expect(adapterText).toContain(status.adapter!.architecture);
    expect(await page.isEnabled('#start')).toBe(true);
    expect([...server.requests.keys()].filter((p) => p.startsWith('/api/dataset'))).toEqual([]);
    // The status object is a read-only copy.
    expect(await page.evaluate(() => Object.isFrozen(window.tabswarm))).toBe(true);
    problems.assertNone();
  });

  it('says clearly why WebGPU is unavailable (here: a page served from an insecure origin)', async () => {
    const { page } = await openPage('?mode=solo&autostart=1', {
      origin: server.url.replace('127.0.0.1', INSECURE_HOST),
    });
    await page.waitForFunction(() => window.tabswarm.state !== 'checking', undefined, { polling: 100 });
    const status = await page.evaluate(() => window.tabswarm);
    expect(status.state).toBe('unsupported');
    expect(status.error).toMatch(/WebGPU needs HTTPS/);
    expect(await page.isVisible('#gpu-problem')).toBe(true);
    expect(await page.textContent('#gpu-problem')).toMatch(
      /WebGPU needs HTTPS: .* not a secure context\. Open the https:\/\/ address .*--tls-cert.*http:\/\/localhost/,
    );
    expect(await page.isDisabled('#start')).toBe(true);
  });

  it('trains a short cnn run (20 steps of 32) that lowers the loss', async () => {
    const { page, problems } = await openPage(
      '?mode=solo&autostart=1&model=cnn&batch=32&subset=640&lossEvery=1&testSubset=0',
    );
    const status = await finished(page, problems, 300_000);
    expect(status.state).toBe('done');
    expect(status.step).toBe(20);
    expect(status.losses.map((l) => l.step)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    const mean = (xs: { loss: number }[]) => xs.reduce((s, l) => s + l.loss, 0) / xs.length;
    const first = mean(status.losses.slice(0, 5));
    const last = mean(status.losses.slice(-5));
    console.log(
      `cnn: loss ${first.toFixed(3)} (steps 1-5) → ${last.toFixed(3)} (steps 16-20), ${status.samplesPerSec?.toFixed(0)} samples/s`,
    );
    // Untrained, the loss is about ln 10 = 2.30; 20 Adam steps must bring it well down.
    expect(first).toBeGreaterThan(1.9);
    expect(last).toBeLessThan(first - 0.5);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'volunteer-1280x800.png') });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(ARTIFACTS, 'volunteer-390x844.png'), fullPage: true });
    // Nothing sticks out sideways on a phone.
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    problems.assertNone();
  });

  it('keeps the dataset in the browser: a reload trains without downloading it again', async () => {
    const query = '?mode=solo&autostart=1&model=tiny-mlp&batch=64&subset=256&testSubset=500';
    const before = server.requests.get('/api/dataset/train/images') ?? 0;
    const first = await openPage(query);
    const firstStatus = await finished(first.page, first.problems, 120_000);
    expect(firstStatus.dataset).toMatchObject({ cachedBytes: 0, done: true });
    expect(firstStatus.dataset!.loadedBytes).toBe(firstStatus.dataset!.totalBytes);
    expect(server.requests.get('/api/dataset/train/images')).toBe(before + 1);

    await first.page.reload();
    const second = await finished(first.page, first.problems, 120_000);
    expect(second.state).toBe('done');
    expect(second.dataset!.cachedBytes).toBe(second.dataset!.totalBytes);
    expect(server.requests.get('/api/dataset/train/images')).toBe(before + 1);
    // Same data, same seed, same order: the same model comes out of it.
    expect(second.accuracy).toBe(firstStatus.accuracy);
    first.problems.assertNone();
  });

  it('trains the mlp for one epoch (batch 128, Adam lr 1e-3) to at least 0.84 accuracy on the 10,000 test images', async () => {
    const began = Date.now();
    const { page, problems } = await openPage(
      '?mode=solo&autostart=1&model=mlp&batch=128&epochs=1&optimizer=adamw&lr=0.001&wd=0',
    );
    const status = await finished(page, problems, 580_000);
    const seconds = (Date.now() - began) / 1000;
    console.log(
      `mlp one epoch: test accuracy ${status.accuracy}, test loss ${status.testLoss?.toFixed(4)}, ${status.step} steps, ` +
        `training ${status.seconds?.toFixed(1)} s in the worker, ${seconds.toFixed(1)} s page to finish, last ${status.samplesPerSec?.toFixed(0)} samples/s`,
    );
    expect(status.state).toBe('done');
    expect(status.step).toBe(Math.ceil(60000 / 128));
    expect(status.accuracy).toBeGreaterThanOrEqual(0.84);
    problems.assertNone();
  });
});
