/**
 * Headless Chromium for browser tests, with WebGPU on SwiftShader where there is no GPU (docs/chromium.md).
 *
 * The executable is `CHROMIUM_PATH`, else Debian's `/usr/bin/chromium`, else Playwright's own
 * browser if one was installed (`npx playwright install chromium`), so the tests also run on a
 * laptop with a real GPU. Without any, tests skip — except under `CI`, where they must fail.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { chromium, type Browser, type ConsoleMessage, type Page } from 'playwright-core';
import { resolveDatasetDir } from '../../coordinator/config/startup-config';
import { skipWithout } from './skip';
import { SWARM_CHROMIUM_ARGS, findChromium as findSwarmChromium } from '../../tools/swarm/chromium';

/** The swarm's flags and lookup (one list for product and tests; docs/chromium.md explains them). */
export const CHROMIUM_ARGS: readonly string[] = SWARM_CHROMIUM_ARGS;

/** The Chromium to drive, or undefined when none is installed. */
export function findChromium(): string | undefined {
  return findSwarmChromium();
}

export { skipWithout } from './skip';

/** True when browser tests should skip (no Chromium, not CI). */
export const skipWithoutChromium = (): boolean =>
  skipWithout('Chromium (set CHROMIUM_PATH or apt-get install chromium)', !!findChromium());

/** The Vite build the browser tests serve: `TABSWARM_DIST`, else the repository's `dist/` (`npm test` builds it first). */
export const WEB_BUILD_DIR = resolve(process.env.TABSWARM_DIST ?? join(import.meta.dirname, '../../dist'));

/**
 * The real Fashion-MNIST IDX files, found as `npm start` finds them: `$TABSWARM_DATASET`, then Debian's
 * dataset-fashion-mnist, then the copy shipped in `data/fashion-mnist/` (so this is always set in a clone).
 */
export const FASHION_MNIST_DIR = resolveDatasetDir(undefined, process.env);

/** True when a test needing the web build should skip (not built, not CI). */
export const skipWithoutWebBuild = (): boolean =>
  skipWithout(
    `the web build in ${WEB_BUILD_DIR} (npx vite build, or set TABSWARM_DIST)`,
    existsSync(join(WEB_BUILD_DIR, 'index.html')),
  );

/** True when a test needing the real Fashion-MNIST should skip (not installed, not CI). */
export const skipWithoutFashionMnist = (): boolean =>
  skipWithout(
    `Fashion-MNIST in ${FASHION_MNIST_DIR} (the repository ships it in data/fashion-mnist/)`,
    existsSync(FASHION_MNIST_DIR),
  );

export async function launchChromium(
  opts: { args?: readonly string[]; executablePath?: string } = {},
): Promise<Browser> {
  const executablePath = opts.executablePath ?? findChromium();
  if (!executablePath) {
    throw new Error(
      'no Chromium found: set CHROMIUM_PATH, apt-get install chromium, or npx playwright install chromium',
    );
  }
  return chromium.launch({ executablePath, headless: true, args: [...CHROMIUM_ARGS, ...(opts.args ?? [])] });
}

/** Errors a page reported: console errors (page and its workers), uncaught exceptions, crashes. */
export interface PageProblems {
  readonly errors: string[];
  /** The last console warnings (page and workers, at most 100): what a failed test prints to say why. */
  readonly warnings: string[];
  readonly crashed: boolean;
  /** Throw listing every problem seen so far, if any. */
  assertNone(): void;
}

/** Start collecting a page's console errors (also from its Web Workers), page errors and crashes. */
export function watchPage(page: Page, opts: { echo?: boolean } = {}): PageProblems {
  const errors: string[] = [];
  const warnings: string[] = [];
  let crashed = false;
  const onConsole = (where: string) => (msg: ConsoleMessage) => {
    if (opts.echo ?? process.env.TABSWARM_ECHO_BROWSER) console.log(`[${where} ${msg.type()}] ${msg.text()}`);
    if (msg.type() === 'error') errors.push(`${where} console.error: ${msg.text()}`);
    if (msg.type() === 'warning' && warnings.push(`${where}: ${msg.text()}`) > 100) warnings.shift();
  };
  page.on('console', onConsole('page'));
  page.on('worker', (worker) => worker.on('console', onConsole('worker')));
  page.on('pageerror', (err) => errors.push(`page error: ${err.message}`));
  page.on('crash', () => {
    crashed = true;
    errors.push('page crashed');
  });
  return {
    errors,
    warnings,
    get crashed() {
      return crashed;
    },
    assertNone() {
      if (errors.length > 0)
        throw new Error(`the page reported ${errors.length} problem(s):\n  ${errors.join('\n  ')}`);
    },
  };
}
