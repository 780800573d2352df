/**
 * The tabs of a swarm: each a page in its own browser context (its own storage, like a separate
 * person), opened at the coordinator's URL with `autostart=1`, and the faults docs/chromium.md measured:
 * close (`page.close`, `pagehide` → goodbye), crash (CDP `Page.crash`), hang (CDP `Debugger.pause`:
 * sockets stay open, only heartbeats notice), resume, throttle (CDP `Network.emulateNetworkConditions`).
 *
 * Every console error (page and its Web Workers), uncaught page error and renderer crash is kept as a
 * `TabProblem`, marked `expected` when the swarm caused it (a crash it ordered), so nothing is lost.
 *
 * The one tab driver: `npm run swarm` and the browser tests (test/support/swarm.ts
 * wraps it) all open, close, crash and read tabs through this pool.
 */
import type { Browser, BrowserContext, CDPSession, ConsoleMessage, Page } from 'playwright-core';

export type TabFate = 'opening' | 'open' | 'hung' | 'closed' | 'crashed' | 'failed';

/** What a tab says about itself: `window.tabswarm` (the page) and `window.tabswarmElastic` (the loop). */
export interface TabReading {
  /** `window.tabswarm.state`: checking, loading-data, building, training, done, error, … */
  state: string | null;
  error: string | null;
  samplesPerSec: number | null;
  /** Elastic loop phase: connecting, waiting, syncing, training, recovering, done, failed, stopped. */
  phase: string | null;
  workerId: string | null;
  worldSize: number;
  committedStep: number;
  localStep: number;
  restores: number;
  stepsComputed: number;
}

export interface TabProblem {
  tab: string;
  /** Milliseconds since the swarm started. */
  atMs: number;
  kind: 'console' | 'pageerror' | 'crash' | 'open';
  text: string;
  /** Caused by the swarm on purpose (a crash it ordered). */
  expected: boolean;
}

/** Evaluated in the page as a string: coordinator/ code is compiled without the DOM library. */
const READ_TAB = `(() => {
  const t = window.tabswarm ?? null;
  const e = window.tabswarmElastic ?? null;
  return {
    state: t ? t.state : null,
    error: (t && t.error) || (e && e.error) || null,
    samplesPerSec: e && e.samplesPerSec != null ? e.samplesPerSec : t ? t.samplesPerSec : null,
    phase: e ? e.phase : null,
    workerId: e ? e.workerId : null,
    worldSize: e ? e.worldSize : 0,
    committedStep: e ? e.committedStep : t ? t.step : 0,
    localStep: e ? e.localStep : 0,
    restores: e ? e.restores : 0,
    stepsComputed: e ? e.stepsComputed : 0,
  };
})()`;

export class SwarmTab {
  /** A Chromium tab (a swarm may also hold headless workers: swarm-pool.ts). */
  readonly kind = 'tab' as const;
  fate: TabFate = 'opening';
  cdp: CDPSession | null = null;
  reading: TabReading | null = null;
  /** When the swarm last read the tab (ms since start). */
  readAtMs = -1;
  closedAtMs: number | null = null;

  constructor(
    readonly name: string,
    readonly context: BrowserContext,
    readonly page: Page,
    readonly openedAtMs: number,
  ) {}

  /** Open and neither hung nor gone: the tabs a fault may hit and a reading may reach. */
  get live(): boolean {
    return this.fate === 'open' || this.fate === 'opening';
  }

  async session(): Promise<CDPSession> {
    this.cdp ??= await this.context.newCDPSession(this.page);
    return this.cdp;
  }
}

export interface TabPoolOptions {
  /** Milliseconds since the swarm started. */
  clock: () => number;
  /** Every problem, as it happens (the pool also keeps them). */
  onProblem?: (problem: TabProblem) => void;
  /** Problems kept in memory; later ones are counted in `droppedProblems`. */
  maxProblems?: number;
  /** Page load timeout. */
  openTimeoutMs?: number;
  /** Called with each new page before it loads (the tests attach their own console watcher here). */
  onPage?: (name: string, page: Page) => void;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export class TabPool {
  readonly tabs: SwarmTab[] = [];
  readonly problems: TabProblem[] = [];
  droppedProblems = 0;
  private readonly expectedCrash = new Set<string>();

  constructor(
    readonly browser: Browser,
    readonly tabUrl: string,
    private readonly opts: TabPoolOptions,
  ) {}

  get liveTabs(): SwarmTab[] {
    return this.tabs.filter((t) => t.live);
  }

  byName(name: string): SwarmTab | undefined {
    return this.tabs.find((t) => t.name === name);
  }

  private problem(tab: string, kind: TabProblem['kind'], text: string, expected = false): void {
    const p: TabProblem = { tab, atMs: Math.round(this.opts.clock()), kind, text: text.slice(0, 2000), expected };
    if (this.problems.length < (this.opts.maxProblems ?? 1000)) this.problems.push(p);
    else this.droppedProblems += 1;
    this.opts.onProblem?.(p);
  }

  private watch(tab: SwarmTab): void {
    const onConsole = (where: string) => (msg: ConsoleMessage) => {
      if (msg.type() === 'error') this.problem(tab.name, 'console', `${where}: ${msg.text()}`);
    };
    tab.page.on('console', onConsole('page'));
    tab.page.on('worker', (worker) => worker.on('console', onConsole('worker')));
    tab.page.on('pageerror', (err) => this.problem(tab.name, 'pageerror', err.message));
    tab.page.on('crash', () => {
      const expected = this.expectedCrash.has(tab.name);
      if (tab.fate !== 'closed') tab.fate = 'crashed';
      tab.closedAtMs ??= this.opts.clock();
      this.problem(
        tab.name,
        'crash',
        expected ? 'renderer crashed (ordered by the swarm)' : 'renderer crashed',
        expected,
      );
    });
  }

  /**
   * Opens a tab and loads the page (the tab joins the job on its own). Resolves once the page has
   * loaded; a tab whose page fails to load is kept with fate `failed` and an `open` problem.
   */
  async open(name: string): Promise<SwarmTab> {
    const context = await this.browser.newContext({ viewport: { width: 900, height: 700 } });
    const page = await context.newPage();
    const tab = new SwarmTab(name, context, page, this.opts.clock());
    this.tabs.push(tab);
    this.watch(tab);
    this.opts.onPage?.(name, page);
    try {
      const response = await page.goto(this.tabUrl, { timeout: this.opts.openTimeoutMs ?? 30_000, waitUntil: 'load' });
      if (response && !response.ok())
        throw new Error(`HTTP ${response.status()} (is the web app built? npm start builds it)`);
      if (tab.fate === 'opening') tab.fate = 'open';
    } catch (error) {
      tab.fate = 'failed';
      tab.closedAtMs = this.opts.clock();
      this.problem(name, 'open', `could not load ${this.tabUrl}: ${(error as Error).message.split('\n')[0]}`);
      await context.close().catch(() => undefined);
    }
    return tab;
  }

  /** Leave like a person closing the tab: `pagehide` runs and the page says goodbye. */
  async close(tab: SwarmTab): Promise<void> {
    tab.fate = 'closed';
    tab.closedAtMs = this.opts.clock();
    await withTimeout(tab.page.close(), 10_000, `closing ${tab.name}`).catch(() => undefined);
    await tab.context.close().catch(() => undefined);
  }

  /** Kill the renderer at once: no goodbye, its sockets and data channels drop. */
  async crash(tab: SwarmTab): Promise<void> {
    this.expectedCrash.add(tab.name);
    const cdp = await tab.session();
    const crashed = new Promise<void>((resolve) => {
      tab.page.once('crash', () => resolve());
      tab.page.once('close', () => resolve());
    });
    tab.fate = 'crashed';
    tab.closedAtMs = this.opts.clock();
    // The call itself never answers (its target is gone): wait for the crash instead.
    cdp.send('Page.crash').catch(() => undefined);
    await withTimeout(crashed, 5000, `crashing ${tab.name}`).catch(() => undefined);
    await tab.context.close().catch(() => undefined);
  }

  /** Stop the page's main thread in the debugger; its sockets stay open, so only a heartbeat notices. */
  async hang(tab: SwarmTab): Promise<void> {
    const cdp = await tab.session();
    await cdp.send('Debugger.enable');
    await cdp.send('Debugger.pause');
    tab.fate = 'hung';
  }

  async resume(tab: SwarmTab): Promise<void> {
    const cdp = await tab.session();
    await cdp.send('Debugger.resume').catch(() => undefined);
    await cdp.send('Debugger.disable').catch(() => undefined);
    tab.fate = 'open';
  }

  /** Throttle the tab's HTTP and WebSocket traffic (whether WebRTC data channels slow down is not verified). */
  async throttle(tab: SwarmTab, kbps: number): Promise<void> {
    const cdp = await tab.session();
    const bytesPerSecond = (kbps * 1000) / 8;
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false,
      latency: 0,
      downloadThroughput: bytesPerSecond,
      uploadThroughput: bytesPerSecond,
    });
  }

  /** Reads a live tab's status (null when it cannot be read: not loaded yet, gone, or too slow). */
  async read(tab: SwarmTab, timeoutMs = 2000): Promise<TabReading | null> {
    if (!tab.live) return null;
    try {
      const reading = await withTimeout(
        tab.page.evaluate(READ_TAB) as Promise<TabReading>,
        timeoutMs,
        `reading ${tab.name}`,
      );
      tab.reading = reading;
      tab.readAtMs = this.opts.clock();
      return reading;
    } catch {
      return null;
    }
  }

  async readAll(): Promise<void> {
    await Promise.all(this.liveTabs.map((t) => this.read(t)));
  }

  /** Closes every tab (hung ones are resumed first so their `pagehide` can run). */
  async closeAll(): Promise<void> {
    await Promise.all(
      this.tabs.map(async (tab) => {
        if (tab.fate === 'hung') await this.resume(tab).catch(() => undefined);
        if (tab.fate === 'open' || tab.fate === 'opening') await this.close(tab);
        else await tab.context.close().catch(() => undefined);
      }),
    );
  }
}
