/**
 * `npm start -- --local-workers N`: N headless tabs training against the coordinator this process just
 * started, the quickest demo of the whole system. No chaos; tab problems are printed (at most a burst,
 * then a count) and state changes announced, so a broken tab is visible, not silent.
 *
 * ```ts
 * const workers = await startLocalWorkers({ url: coordinator.url, workers: 3 });
 * // on SIGINT: await workers.stop();   (tabs say goodbye, then the browser exits)
 * ```
 */
import { launchSwarmChromium } from './chromium';
import { parseSwarmUrl } from './swarm-options';
import { TabPool } from './swarm-tabs';

export interface LocalWorkersOptions {
  /** The coordinator, e.g. `http://127.0.0.1:8080` (a query is passed on to the tabs). */
  url: string;
  workers: number;
  /** Where status lines go (default: stdout). */
  log?: (line: string) => void;
  /** How often tab states are checked and changes printed. Default 5000 ms. */
  watchEveryMs?: number;
}

export interface LocalWorkers {
  readonly count: number;
  /** Closes every tab (each says goodbye) and the browser. Idempotent. */
  stop(): Promise<void>;
}

const MAX_PROBLEM_LINES = 20;

export async function startLocalWorkers(opts: LocalWorkersOptions): Promise<LocalWorkers> {
  if (!Number.isInteger(opts.workers) || opts.workers < 1 || opts.workers > 64) {
    throw new RangeError(`--local-workers ${opts.workers}: expected an integer in 1..64`);
  }
  const log = opts.log ?? ((line: string) => console.log(line));
  const { tabUrl } = parseSwarmUrl(opts.url);
  const t0 = performance.now();
  const browser = await launchSwarmChromium();
  let problemLines = 0;
  let problemsHidden = 0;
  const pool = new TabPool(browser, tabUrl, {
    clock: () => performance.now() - t0,
    maxProblems: 0,
    onProblem: (p) => {
      if (problemLines++ < MAX_PROBLEM_LINES)
        log(`local worker ${p.tab} ${p.kind}: ${p.text.split('\n')[0].slice(0, 300)}`);
      else problemsHidden += 1;
    },
  });
  await Promise.all(Array.from({ length: opts.workers }, (_, i) => pool.open(`tab${i + 1}`)));
  log(`${opts.workers} local worker tab(s) open at ${tabUrl}`);

  const lastState = new Map<string, string>();
  let stopped: Promise<void> | null = null;
  let watching = true;
  const watch = async () => {
    while (watching) {
      await pool.readAll();
      for (const tab of pool.tabs) {
        const state = tab.live ? (tab.reading?.state ?? 'loading') : tab.fate;
        const detail = tab.reading?.error ? ` (${tab.reading.error})` : '';
        if (lastState.get(tab.name) !== state) log(`local worker ${tab.name}: ${state}${detail}`);
        lastState.set(tab.name, state);
      }
      if (problemsHidden > 0) {
        log(`local workers: ${problemsHidden} more tab problem(s) not shown`);
        problemsHidden = 0;
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, opts.watchEveryMs ?? 5000);
        timer.unref();
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  };
  let wake: () => void = () => undefined;
  const watcher = watch();

  return {
    count: opts.workers,
    stop() {
      stopped ??= (async () => {
        watching = false;
        wake();
        await watcher.catch(() => undefined);
        await pool.closeAll().catch(() => undefined);
        await browser.close().catch(() => undefined);
      })();
      return stopped;
    },
  };
}
