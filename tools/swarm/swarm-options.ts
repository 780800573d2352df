/**
 * Options of `tabswarm swarm`, validated in one place (pure: the CLI's commander parsers and the unit
 * tests both go through `parseSwarmOptions`). Every problem is one readable message naming the flag.
 */
import { defaultMaxTabs, DEFAULT_HANG_FOR_S, type ChaosOptions } from './chaos-schedule';

export interface SwarmOptions {
  /**
   * The coordinator's base URL (origin + path, no query): `/api/*` lives under it. With `ownCoordinator`
   * it is '' until the swarm's own coordinator listens (then `withCoordinatorUrl` fills it in).
   */
  baseUrl: string;
  /** What each tab opens: the base URL with the given query plus `autostart=1` ('' like `baseUrl`). */
  tabUrl: string;
  /**
   * `--job FILE` (instead of `--url`): the swarm starts a coordinator of its own in this process that
   * runs this job file, with `--dataset DIR` (or the default dataset); null: the coordinator at `--url`.
   */
  ownCoordinator: { jobFile: string; dataset: string | undefined; dist: string | undefined } | null;
  /** Chromium tabs open at the start; joins open tabs while fewer than this are live (the machine's tab budget). */
  workers: number;
  /**
   * Headless workers (`tabswarm worker`, one process each) open at the start, beside the tabs; joins past the
   * tab budget open headless workers. The chaos schedule treats both alike.
   */
  headlessWorkers: number;
  /** Seconds of chaos after warm-up. */
  duration: number;
  seed: number;
  /** True when the seed was drawn at random (the report prints it so the run can be replayed). */
  seedDrawn: boolean;
  closeEvery: number;
  crashEvery: number;
  hangEvery: number;
  joinEvery: number;
  hangFor: number;
  /** kbit/s for one tab, 0: none. */
  throttleKbps: number;
  maxTabs: number;
  /** Seconds to wait for the first committed step before the schedule starts. */
  warmup: number;
  json: boolean;
}

/** What the CLI hands over: strings as typed (commander leaves parsing to us), booleans for switches. */
export interface RawSwarmOptions {
  url?: string;
  job?: string;
  dataset?: string;
  dist?: string;
  workers?: string | number;
  headlessWorkers?: string | number;
  duration?: string | number;
  seed?: string | number;
  closeEvery?: string | number;
  crashEvery?: string | number;
  hangEvery?: string | number;
  joinEvery?: string | number;
  hangFor?: string | number;
  throttle?: string | number;
  maxTabs?: string | number;
  warmup?: string | number;
  json?: boolean;
}

export class SwarmOptionsError extends Error {}

const MAX_WORKERS = 64;
/** Headless workers are lighter than tabs (docs/headless.md): a swarm may hold more of them. */
const MAX_HEADLESS = 128;
const MAX_SECONDS = 7 * 24 * 3600;

function numberOf(
  flag: string,
  raw: string | number | undefined,
  fallback: number,
  check: (n: number) => boolean,
  what: string,
): number {
  if (raw === undefined || raw === '') return fallback;
  const n = typeof raw === 'number' ? raw : Number(raw.trim());
  if (!Number.isFinite(n) || !check(n)) throw new SwarmOptionsError(`--${flag} ${raw}: expected ${what}`);
  return n;
}

const seconds = (flag: string, raw: string | number | undefined, fallback: number, allowZero: boolean) =>
  numberOf(
    flag,
    raw,
    fallback,
    (n) => (allowZero ? n >= 0 : n > 0) && n <= MAX_SECONDS,
    allowZero ? 'seconds >= 0 (0: never)' : 'a positive number of seconds',
  );

/** Parses the URL: http(s) only; query kept for the tabs; the API base drops query and hash. */
export function parseSwarmUrl(raw: string | undefined): { baseUrl: string; tabUrl: string } {
  if (!raw)
    throw new SwarmOptionsError(
      '--url or --job is required: the coordinator to load-test (e.g. --url http://127.0.0.1:8080), or a job file for a coordinator the swarm starts itself',
    );
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new SwarmOptionsError(`--url ${raw}: not a URL (expected e.g. http://127.0.0.1:8080)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new SwarmOptionsError(`--url ${raw}: expected an http:// or https:// URL`);
  const path = url.pathname.replace(/\/+$/, '');
  const baseUrl = `${url.origin}${path}`;
  const query = new URLSearchParams(url.search);
  query.set('autostart', '1');
  return { baseUrl, tabUrl: `${baseUrl}/?${query}` };
}

export function parseSwarmOptions(
  raw: RawSwarmOptions,
  randomSeed: () => number = () => Math.floor(Math.random() * 0x100000000),
): SwarmOptions {
  const { baseUrl, tabUrl, ownCoordinator } = coordinatorOf(raw);
  const headlessWorkers = numberOf(
    'headless-workers',
    raw.headlessWorkers,
    0,
    (n) => Number.isInteger(n) && n >= 0 && n <= MAX_HEADLESS,
    `an integer in 0..${MAX_HEADLESS}`,
  );
  const workers = numberOf(
    'workers',
    raw.workers,
    headlessWorkers > 0 ? 0 : 2,
    (n) => Number.isInteger(n) && n >= (headlessWorkers > 0 ? 0 : 1) && n <= MAX_WORKERS,
    headlessWorkers > 0
      ? `an integer in 0..${MAX_WORKERS}`
      : `an integer in 1..${MAX_WORKERS} (or 0 with --headless-workers)`,
  );
  const total = workers + headlessWorkers;
  const seedDrawn = raw.seed === undefined || raw.seed === '';
  const seed = seedDrawn
    ? randomSeed() >>> 0
    : numberOf(
        'seed',
        raw.seed,
        0,
        (n) => Number.isInteger(n) && n >= 0 && n <= 0xffffffff,
        'an integer in 0..4294967295',
      );
  const maxTabs = numberOf(
    'max-tabs',
    raw.maxTabs,
    defaultMaxTabs(total),
    (n) => Number.isInteger(n) && n >= total && n <= (MAX_WORKERS + MAX_HEADLESS) * 2,
    `an integer in ${total}..${(MAX_WORKERS + MAX_HEADLESS) * 2} (at least --workers plus --headless-workers)`,
  );
  const options: SwarmOptions = {
    baseUrl,
    tabUrl,
    ownCoordinator,
    workers,
    headlessWorkers,
    duration: seconds('duration', raw.duration, 60, false),
    seed,
    seedDrawn,
    closeEvery: seconds('close-every', raw.closeEvery, 0, true),
    crashEvery: seconds('crash-every', raw.crashEvery, 0, true),
    hangEvery: seconds('hang-every', raw.hangEvery, 0, true),
    joinEvery: seconds('join-every', raw.joinEvery, 0, true),
    hangFor: seconds('hang-for', raw.hangFor, DEFAULT_HANG_FOR_S, false),
    throttleKbps: numberOf(
      'throttle',
      raw.throttle,
      0,
      (n) => n >= 0 && n <= 10_000_000,
      'kbit/s >= 0 (0: no throttling)',
    ),
    maxTabs,
    warmup: seconds('warmup', raw.warmup, 180, false),
    json: !!raw.json,
  };
  for (const flag of ['closeEvery', 'crashEvery', 'hangEvery', 'joinEvery'] as const) {
    // A period below a second would fault faster than any tab can rejoin: almost surely a typo (ms for s).
    if (options[flag] > 0 && options[flag] < 1) {
      throw new SwarmOptionsError(
        `--${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} ${options[flag]}: periods are in seconds (>= 1)`,
      );
    }
  }
  return options;
}

/**
 * `--url` (a coordinator that runs its own job) or `--job` (the swarm starts one with that job), never
 * both: a job file cannot change the job of a coordinator that is already running.
 */
function coordinatorOf(raw: RawSwarmOptions): Pick<SwarmOptions, 'baseUrl' | 'tabUrl' | 'ownCoordinator'> {
  const job = raw.job?.trim();
  if (raw.job !== undefined && !job) throw new SwarmOptionsError('--job needs a file name');
  if (job && raw.url !== undefined)
    throw new SwarmOptionsError(
      `--job ${raw.job} and --url ${raw.url}: the coordinator at --url already runs its own job; drop --url to let the swarm start a coordinator with the job file, or drop --job`,
    );
  for (const flag of ['dataset', 'dist'] as const) {
    if (!job && raw[flag] !== undefined)
      throw new SwarmOptionsError(
        `--${flag} ${raw[flag]}: only for the coordinator the swarm starts itself (--job FILE)${flag === 'dataset' ? ' or --netbed' : ''}`,
      );
  }
  if (job) return { baseUrl: '', tabUrl: '', ownCoordinator: { jobFile: job, dataset: raw.dataset, dist: raw.dist } };
  return { ...parseSwarmUrl(raw.url), ownCoordinator: null };
}

/** The options once the swarm's own coordinator listens at `url`. */
export function withCoordinatorUrl(o: SwarmOptions, url: string): SwarmOptions {
  return { ...o, ...parseSwarmUrl(url) };
}

/**
 * A job the swarm's tabs can run: its first round needs `minWorkers` tabs, and the swarm opens only
 * `--workers` at the start (joins come after the first commit), so more would never start. Returns the
 * problem, or null.
 */
export function jobProblem(o: SwarmOptions, job: { minWorkers: number }): string | null {
  const total = o.workers + o.headlessWorkers;
  if (job.minWorkers <= total) return null;
  const opened =
    o.headlessWorkers > 0
      ? `--workers ${o.workers} + --headless-workers ${o.headlessWorkers}`
      : `--workers ${o.workers}`;
  return `the job's minWorkers is ${job.minWorkers} but the swarm opens ${opened}: no round would start; raise --workers or lower minWorkers`;
}

export function chaosOptionsOf(o: SwarmOptions): ChaosOptions {
  return {
    seed: o.seed,
    duration: o.duration,
    workers: o.workers + o.headlessWorkers,
    closeEvery: o.closeEvery,
    crashEvery: o.crashEvery,
    hangEvery: o.hangEvery,
    joinEvery: o.joinEvery,
    hangFor: o.hangFor,
    throttleKbps: o.throttleKbps,
    maxTabs: o.maxTabs,
  };
}
