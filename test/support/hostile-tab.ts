/**
 * The hostile tab for browser tests: test/browser/pages/hostile/ (the normal elastic tab with one
 * port decorated to attack), served by a Vite dev server over the repository — never by the
 * coordinator, whose `dist/` cannot contain it.
 *
 * The page's origin is the Vite server's, so the coordinator must be started with
 * `--allow-origin <server.origin>`. Vite proxies the page's `/api`, `/ws` and `/peer` to the
 * coordinator from `HOSTILE_ADDRESS`, so the coordinator sees the hostile tab at its own client
 * address (honest tabs come from 127.0.0.1) and its per-address defences can tell them apart.
 *
 * ```ts
 * const hostile = await HostileTabServer.start();
 * const coordinator = await CoordinatorProcess.spawn({ extraArgs: ['--allow-origin', hostile.origin] });
 * hostile.pointAt(coordinator);
 * const tab = await hostile.open(browser, { mode: 'scale', factor: 1000, fromStep: 5 });
 * await tab.waitFor((v) => v.hostile.tally.gradients > 0, null);
 * ```
 *
 * Two colluding hostile tabs: `open` twice (both come from `HOSTILE_ADDRESS`).
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';
import type { ProxyOptions } from 'vite';
import type { ElasticStatus } from '../../web/elastic/elastic-loop';
import type { HostileState } from '../browser/pages/hostile/main';
import { type PageProblems, watchPage } from './browser';
import type { CoordinatorProcess } from './coordinator-process';
import { startViteServer, type TestViteServer } from './vite-server';

/** The hostile tab's client address as the coordinator sees it (Linux routes all of 127/8 to `lo`). */
export const HOSTILE_ADDRESS = '127.0.0.2';

export const HOSTILE_PAGE = '/test/browser/pages/hostile/hostile.html';

/** The page's query: `mode` and the attack's numbers (test/browser/pages/hostile/attacks.ts). */
export interface HostileQuery {
  mode: string;
  factor?: number;
  std?: number;
  claim?: number;
  fromStep?: number;
  seed?: number;
}

/** What a test reads from the hostile tab: its own state and the elastic loop's status. */
export interface HostileView {
  hostile: HostileState;
  elastic: ElasticStatus | null;
}

export class HostileTab {
  constructor(
    readonly context: BrowserContext,
    readonly page: Page,
    readonly problems: PageProblems,
  ) {}

  async view(): Promise<HostileView> {
    return (await this.page.evaluate(() => ({
      hostile: window.tabswarmHostile!,
      elastic: window.tabswarmElastic ?? null,
    }))) as HostileView;
  }

  /**
   * Wait until `predicate(view, arg)` holds in the page (self-contained: it is evaluated there). On
   * timeout the error shows the last view and the page's console errors.
   */
  async waitFor<A>(predicate: (v: HostileView, arg: A) => boolean, arg: A, timeoutMs = 60_000): Promise<HostileView> {
    const source = predicate.toString();
    try {
      await this.page.waitForFunction(
        ({ source, arg }) => {
          const v = { hostile: window.tabswarmHostile, elastic: window.tabswarmElastic ?? null };
          if (!v.hostile) return false;
          if (v.hostile.phase === 'error') throw new Error(`hostile tab: ${v.hostile.error}`);
          return (new Function(`return (${source})`)() as (v: unknown, a: unknown) => boolean)(v, arg);
        },
        { source, arg },
        { timeout: timeoutMs, polling: 100 },
      );
    } catch (err) {
      const view = await this.view().catch(() => null);
      const elastic = view?.elastic && { ...view.elastic, losses: view.elastic.losses.length };
      throw new Error(
        `hostile tab: ${(err as Error).message.split('\n')[0]}\n  waiting for ${source}\n  view: ${JSON.stringify({ ...view, elastic })}\n  ${this.problems.errors.join('\n  ')}`,
      );
    }
    return this.view();
  }

  /** A tab opened with `hold`: wait until it is ready (at most `timeoutMs`), then let it join. */
  async release(timeoutMs = 120_000): Promise<void> {
    await this.waitFor((v) => v.hostile.phase === 'held', null, timeoutMs);
    await this.page.evaluate(() => window.tabswarmHostileRelease!());
  }

  async close(): Promise<void> {
    await this.context.close().catch(() => undefined);
  }
}

export class HostileTabServer {
  private readonly tabs: HostileTab[] = [];

  private constructor(
    private readonly vite: TestViteServer,
    private readonly routes: ProxyOptions[],
  ) {}

  static async start(): Promise<HostileTabServer> {
    const routes: ProxyOptions[] = [];
    // http-proxy reads its options object at every request: `pointAt` retargets these in place.
    const route = (ws: boolean): ProxyOptions => ({
      target: 'http://127.0.0.1:9',
      ws,
      localAddress: HOSTILE_ADDRESS,
      configure: (_proxy, options) => routes.push(options),
    });
    const vite = await startViteServer({
      optimizeDeps: ['peerjs', 'comlink', 'zod'],
      cacheDir: 'node_modules/.vite-hostile-tab',
      proxy: { '/api': route(false), '/ws': route(true), '/peer': route(true) },
      // The coordinator refuses a banned tab's upgrades and closes its sockets: expected in these tests.
      quiet: /ws proxy (socket )?error/,
    });
    return new HostileTabServer(vite, routes);
  }

  /** The hostile page's origin: pass it to the coordinator as `--allow-origin`. */
  get origin(): string {
    return this.vite.url;
  }

  /** Send the hostile tabs' `/api`, `/ws` and `/peer` to this coordinator (or URL) from now on. */
  pointAt(coordinator: CoordinatorProcess | string): void {
    if (this.routes.length !== 3) throw new Error(`expected 3 proxy routes, have ${this.routes.length}`);
    const url = typeof coordinator === 'string' ? coordinator : coordinator.url;
    for (const route of this.routes) route.target = url;
  }

  /**
   * Open a hostile tab (its own browser context) attacking as `query` says; resolves once loaded. With
   * `hold`, the tab readies itself and waits for `HostileTab.release` before it joins (the page's file
   * comment says why).
   */
  async open(
    browser: Browser,
    query: HostileQuery,
    opts: { echo?: boolean; hold?: boolean } = {},
  ): Promise<HostileTab> {
    const context = await browser.newContext();
    const page = await context.newPage();
    const problems = watchPage(page, { echo: opts.echo });
    const params = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]));
    if (opts.hold) params.set('hold', '1');
    await page.goto(`${this.origin}${HOSTILE_PAGE}?${params}`);
    const tab = new HostileTab(context, page, problems);
    this.tabs.push(tab);
    return tab;
  }

  /** Close every hostile tab opened so far. */
  async closeTabs(): Promise<void> {
    for (const tab of this.tabs.splice(0)) await tab.close();
  }

  async close(): Promise<void> {
    await this.closeTabs();
    await this.vite.close();
  }
}
