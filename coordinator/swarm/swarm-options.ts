/**
 * Options of `tabswarm swarm`, validated in one place (pure: the CLI's commander parsers and the unit
 * tests both go through `parseSwarmOptions`). Every problem is one readable message naming the flag.
 */
import { defaultMaxTabs, DEFAULT_HANG_FOR_S, type ChaosOptions } from './chaos-schedule';

export interface SwarmOptions {
  /** The coordinator's base URL (origin + path, no query): `/api/*` lives under it. */
  baseUrl: string;
  /** What each tab opens: the base URL with the given query plus `autostart=1`. */
  tabUrl: string;
  workers: number;
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
  workers?: string | number;
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
    throw new SwarmOptionsError('--url is required: the coordinator to load-test, e.g. --url http://127.0.0.1:8080');
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
  const { baseUrl, tabUrl } = parseSwarmUrl(raw.url);
  const workers = numberOf(
    'workers',
    raw.workers,
    2,
    (n) => Number.isInteger(n) && n >= 1 && n <= MAX_WORKERS,
    `an integer in 1..${MAX_WORKERS}`,
  );
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
    defaultMaxTabs(workers),
    (n) => Number.isInteger(n) && n >= workers && n <= MAX_WORKERS * 2,
    `an integer in ${workers}..${MAX_WORKERS * 2} (at least --workers)`,
  );
  const options: SwarmOptions = {
    baseUrl,
    tabUrl,
    workers,
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

export function chaosOptionsOf(o: SwarmOptions): ChaosOptions {
  return {
    seed: o.seed,
    duration: o.duration,
    workers: o.workers,
    closeEvery: o.closeEvery,
    crashEvery: o.crashEvery,
    hangEvery: o.hangEvery,
    joinEvery: o.joinEvery,
    hangFor: o.hangFor,
    throttleKbps: o.throttleKbps,
    maxTabs: o.maxTabs,
  };
}
