/**
 * A swarm of volunteer tabs for browser tests, on the product's tab pool (tools/swarm/swarm-tabs.ts):
 * each tab is a page in its own browser context (its own storage, like a separate person), pointed at a
 * coordinator URL with `?autostart=1`, so it joins the coordinator's job on its own. Faults as
 * docs/chromium.md has them: `close` (page.close → `pagehide` → goodbye), `crash` (CDP `Page.crash`:
 * the renderer dies, sockets drop without goodbye).
 *
 * The tabs' elastic status is `window.tabswarmElastic` (web/elastic/start.ts); helpers wait on it
 * with `page.waitForFunction`, never with sleeps.
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';
import type { StatusResponse } from '../../core/protocol/views';
import type { ElasticStatus } from '../../web/elastic/elastic-loop';
import type {} from '../../web/elastic/start';
import { type SwarmTab as PooledTab, TabPool } from '../../tools/swarm/swarm-tabs';
import { type PageProblems, watchPage } from './browser';
import type { CoordinatorProcess } from './coordinator-process';

/**
 * Poll the coordinator's `GET /api/status` (it pushes no status to tests) every `pollMs` until
 * `check` holds; returns that status and how long it took. Throws on timeout with the last status and
 * the coordinator's last 60 events (joins, drops, rollbacks, bans: what held the job), and what
 * `explain` adds (a swarm's `report()`: what each tab saw).
 */
export async function coordinatorStatusUntil(
  coordinator: CoordinatorProcess,
  check: (s: StatusResponse) => boolean,
  what: string,
  opts: { timeoutMs: number; pollMs: number; explain?: () => Promise<string> },
): Promise<{ status: StatusResponse; ms: number }> {
  const started = performance.now();
  let last: StatusResponse | null = null;
  while (performance.now() - started < opts.timeoutMs) {
    last = await coordinator.status();
    if (check(last)) return { status: last, ms: performance.now() - started };
    await new Promise((r) => setTimeout(r, opts.pollMs));
  }
  const tail = (await coordinator.events().catch(() => [])).slice(-60);
  const lines = tail.map((e) => `${e.event} ${JSON.stringify(e.data).slice(0, 240)}`);
  const more = opts.explain ? `\n${await opts.explain().catch((err: Error) => `(no tab report: ${err.message})`)}` : '';
  throw new Error(
    `coordinator status never showed ${what}; last: ${JSON.stringify(last)}\nlast events:\n${lines.join('\n')}${more}`,
  );
}

/** A tab's elastic status for a failure message: every field, the loss log as its length. */
function statusLine(status: ElasticStatus | null): string {
  return JSON.stringify(status && { ...status, losses: status.losses.length });
}

export interface SwarmTab {
  readonly name: string;
  readonly context: BrowserContext;
  readonly page: Page;
  readonly problems: PageProblems;
  /** Set once the tab was closed or crashed on purpose. */
  gone: 'closed' | 'crashed' | null;
  /** The product's tab (tools/swarm/swarm-tabs.ts) this one wraps. */
  readonly pooled: PooledTab;
}

export interface SwarmOptions {
  /** Extra query parameters for every tab (e.g. `{ testSubset: '500' }`). */
  query?: Record<string, string>;
  /** Echo the pages' console to the test output. */
  echo?: boolean;
}

/**
 * The product's tab pool (the same open/close/crash code `npm run swarm` uses), plus what tests need:
 * per-tab console errors, and waiting on a tab's elastic status.
 */
export class Swarm {
  readonly tabs: SwarmTab[] = [];
  private counter = 0;
  private readonly pool: TabPool;
  private readonly watched = new Map<string, PageProblems>();

  constructor(
    readonly browser: Browser,
    readonly url: string,
    opts: SwarmOptions = {},
  ) {
    const query = new URLSearchParams({ autostart: '1', ...opts.query });
    const t0 = performance.now();
    this.pool = new TabPool(browser, `${url}/?${query}`, {
      clock: () => performance.now() - t0,
      onPage: (name, page) => this.watched.set(name, watchPage(page, { echo: opts.echo })),
    });
  }

  /** Open a tab that joins the coordinator; resolves once the page has loaded (not yet joined). */
  async open(name = `tab${++this.counter}`): Promise<SwarmTab> {
    const pooled = await this.pool.open(name);
    if (pooled.fate === 'failed') {
      const why = this.pool.problems.filter((p) => p.tab === name).map((p) => p.text);
      throw new Error(`${name}: ${why.join('; ')}`);
    }
    const problems = this.watched.get(name)!;
    const tab: SwarmTab = { name, context: pooled.context, page: pooled.page, problems, gone: null, pooled };
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
          return !!s && (new Function(`return (${source})`)() as (s: unknown, a: unknown) => boolean)(s, arg);
        },
        { source, arg },
        { timeout: timeoutMs, polling: 100 },
      );
    } catch (err) {
      const status = await this.status(tab).catch(() => null);
      throw new Error(
        `${tab.name}: ${(err as Error).message.split('\n')[0]}\n  waiting for ${source}\n  status: ${statusLine(status)}\n  ${tab.problems.errors.join('\n  ')}`,
      );
    }
    return (await this.status(tab))!;
  }

  /**
   * What every live tab is doing, for a failed test's message: its elastic status (as `waitFor`'s
   * timeout gives it), its console errors and its last warnings (the coordinator client logs each close and retry).
   */
  async report(): Promise<string> {
    const parts = await Promise.all(
      this.live.map(async (t) => {
        const status = await this.status(t).catch(() => null);
        const lines = [...t.problems.errors, ...t.problems.warnings.slice(-12)];
        return `tab ${t.name}: ${statusLine(status)}\n  ${lines.join('\n  ')}`;
      }),
    );
    return parts.join('\n');
  }

  /** Leave like a person closing the tab: `pagehide` runs and the page says goodbye. */
  async close(tab: SwarmTab): Promise<void> {
    tab.gone = 'closed';
    await this.pool.close(tab.pooled);
  }

  /** Kill the tab's renderer at once (no goodbye, sockets and data channels drop). */
  async crash(tab: SwarmTab): Promise<void> {
    tab.gone = 'crashed';
    await this.pool.crash(tab.pooled);
  }

  /** Tabs still running. */
  get live(): SwarmTab[] {
    return this.tabs.filter((t) => t.gone === null);
  }

  /** Close every tab still open. */
  async closeAll(): Promise<void> {
    for (const t of this.live) t.gone = 'closed';
    await this.pool.closeAll();
  }

  /**
   * Console errors of live tabs, except those matching `expected` (what a fault is expected to cause,
   * e.g. the browser's own "WebSocket connection … failed" lines while a coordinator restarts).
   */
  problems(expected?: RegExp): string[] {
    return this.live.flatMap((t) => t.problems.errors.filter((e) => !expected?.test(e)).map((e) => `${t.name}: ${e}`));
  }
}
