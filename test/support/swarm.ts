/**
 * A swarm of volunteer tabs for browser tests: each tab is a page in its own browser context (its own
 * storage, like a separate person), pointed at a coordinator URL with `?autostart=1`, so it joins the
 * coordinator's job on its own. Faults as the docs/chromium.md vocabulary has them: `close` (page.close →
 * `pagehide` → goodbye), `crash` (CDP `Page.crash`: the renderer dies, sockets drop without goodbye).
 *
 * The tabs' elastic status is `window.tabswarmElastic` (web/elastic/start.ts); helpers wait on it
 * with `page.waitForFunction`, never with sleeps.
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';
import type { StatusReport } from '../../coordinator/audit';
import type { ElasticStatus } from '../../web/elastic/elastic-loop';
import type {} from '../../web/elastic/start';
import { watchPage, type PageProblems } from './browser';
import type { CoordinatorProcess } from './coordinator-process';

/**
 * Poll the coordinator's `GET /api/status` (it pushes no status to tests) every `pollMs` until
 * `check` holds; returns that status and how long it took. Throws with the last status on timeout.
 */
export async function coordinatorStatusUntil(
  coordinator: CoordinatorProcess,
  check: (s: StatusReport) => boolean,
  what: string,
  opts: { timeoutMs: number; pollMs: number },
): Promise<{ status: StatusReport; ms: number }> {
  const started = performance.now();
  let last: StatusReport | null = null;
  while (performance.now() - started < opts.timeoutMs) {
    last = await coordinator.status();
    if (check(last)) return { status: last, ms: performance.now() - started };
    await new Promise((r) => setTimeout(r, opts.pollMs));
  }
  throw new Error(`coordinator status never showed ${what}; last: ${JSON.stringify(last)}`);
}

export interface SwarmTab {
  readonly name: string;
  readonly context: BrowserContext;
  readonly page: Page;
  readonly problems: PageProblems;
  /** Set once the tab was closed or crashed on purpose. */
  gone: 'closed' | 'crashed' | null;
}

export interface SwarmOptions {
  /** Extra query parameters for every tab (e.g. `{ testSubset: '500' }`). */
  query?: Record<string, string>;
  /** Echo the pages' console to the test output. */
  echo?: boolean;
}

export class Swarm {
  readonly tabs: SwarmTab[] = [];
  private counter = 0;

  constructor(
    readonly browser: Browser,
    readonly url: string,
    private readonly opts: SwarmOptions = {},
  ) {}

  /** Open a tab that joins the coordinator; resolves once the page has loaded (not yet joined). */
  async open(name = `tab${++this.counter}`): Promise<SwarmTab> {
    const context = await this.browser.newContext({ viewport: { width: 900, height: 700 } });
    const page = await context.newPage();
    const problems = watchPage(page, { echo: this.opts.echo });
    const query = new URLSearchParams({ autostart: '1', ...this.opts.query });
    await page.goto(`${this.url}/?${query}`);
    const tab: SwarmTab = { name, context, page, problems, gone: null };
    this.tabs.push(tab);
    return tab;
  }

  /** Open `count` tabs in parallel. */
  openMany(count: number): Promise<SwarmTab[]> {
    return Promise.all(Array.from({ length: count }, () => this.open()));
  }

  /** The tab's elastic status, or null before the loop started. */
  async status(tab: SwarmTab): Promise<ElasticStatus | null> {
    return (await tab.page.evaluate(() => window.tabswarmElastic ?? null)) as ElasticStatus | null;
  }

  /**
   * Wait until `predicate(status, arg)` holds in the tab (evaluated in the page; it must be
   * self-contained). On timeout the error shows the tab's last status and console errors.
   */
  async waitFor<A>(
    tab: SwarmTab,
    predicate: (s: ElasticStatus, arg: A) => boolean,
    arg: A,
    timeoutMs = 60_000,
  ): Promise<ElasticStatus> {
    const source = predicate.toString();
    try {
      await tab.page.waitForFunction(
        ({ source, arg }) => {
          const s = window.tabswarmElastic;
          // eslint-disable-next-line no-new-func
          return !!s && (new Function(`return (${source})`)() as (s: unknown, a: unknown) => boolean)(s, arg);
        },
        { source, arg },
        { timeout: timeoutMs, polling: 100 },
      );
    } catch (err) {
      const status = await this.status(tab).catch(() => null);
      throw new Error(
        `${tab.name}: ${(err as Error).message.split('\n')[0]}\n  waiting for ${source}\n  status: ${JSON.stringify(status && { ...status, losses: status.losses.length })}\n  ${tab.problems.errors.join('\n  ')}`,
      );
    }
    return (await this.status(tab))!;
  }

  /** Leave like a person closing the tab: `pagehide` runs and the page says goodbye. */
  async close(tab: SwarmTab): Promise<void> {
    tab.gone = 'closed';
    await tab.page.close();
    await tab.context.close();
  }

  /** Kill the tab's renderer at once (no goodbye, sockets and data channels drop). */
  async crash(tab: SwarmTab): Promise<void> {
    tab.gone = 'crashed';
    const cdp = await tab.context.newCDPSession(tab.page);
    const crashed = new Promise<void>((resolve) => tab.page.once('crash', () => resolve()));
    // The call itself never settles here (its target is gone, headless Chromium 156): wait for the
    // page's crash event instead.
    cdp.send('Page.crash').catch(() => undefined);
    await crashed;
    await tab.context.close().catch(() => undefined);
  }

  /** Tabs still running. */
  get live(): SwarmTab[] {
    return this.tabs.filter((t) => t.gone === null);
  }

  /** Close every tab still open (without waiting for goodbyes to matter). */
  async closeAll(): Promise<void> {
    await Promise.all(
      this.live.map(async (t) => {
        t.gone = 'closed';
        await t.context.close().catch(() => undefined);
      }),
    );
  }

  /**
   * Console errors of live tabs, except those matching `expected` (what a fault is expected to cause,
   * e.g. the browser's own "WebSocket connection … failed" lines while a coordinator restarts).
   */
  problems(expected?: RegExp): string[] {
    return this.live.flatMap((t) => t.problems.errors.filter((e) => !expected?.test(e)).map((e) => `${t.name}: ${e}`));
  }
}
