/**
 * `tabswarm swarm --netbed [--workers N] [--headless-workers M] [--nat endpoint-independent|symmetric|mixed]
 *  [--link "DELAY JITTER RATE LOSS"] [--duration S] [--warmup S] [--job FILE] [--dataset DIR] [--json]
 *  [--seed X] [--close-every S] [--crash-every S] [--hang-every S] [--hang-for S] [--join-every S]`
 *
 * One command for the whole scene on the network test bed: an HTTPS coordinator (test CA) and coturn
 * in the public segment, each member in its own home behind its own NAT (mixed: every second home
 * symmetric), every access link with the given profile. Members are Chromium tabs (`--workers`) and
 * headless workers (`--headless-workers`, `tabswarm worker` run inside the home's namespace). With the
 * chaos flags the plain swarm's seeded schedule is played on them (netbed-chaos.ts); `--throttle` is
 * refused (the links are shaped by `--link`). It trains for `duration` seconds from the first commit, then
 * prints a table (steps, step time, restarts, audit, events, each rank's ICE path and RTT) and with --json
 * one line `{"swarm": {...}}`. Root only (it refuses in one line otherwise).
 */
import { readFileSync } from 'node:fs';
import type { ChaosEvent } from '../swarm/chaos-schedule';
import { resolve } from 'node:path';
import { STATUS_PAGE_MAX, type StatusResponse } from '../../core/protocol/views';
import type { CommitsPage } from '../../coordinator/admin/audit';
import { loadJobFile, resolveDatasetDir, StartupError } from '../../coordinator/config/startup-config';
import {
  NetbedError,
  netbedUnavailable,
  parseLinkProfile,
  type HomeSpec,
  type LinkProfile,
  type NatKind,
} from './netbed';
import {
  type FiredNetbedEvent,
  type HeadlessMemberOptions,
  homesNeeded,
  type NetbedChaos,
  NetbedMembers,
  netbedSchedule,
  type WorldBeforeFault,
} from './netbed-chaos';
import { Scene } from './scene';
import { commitsFrom } from '../swarm/coordinator-api';
import { secondsToFirstContribution, watchFirstRounds } from '../swarm/join-times';

export interface RawNetbedSwarmOptions {
  netbed?: boolean;
  url?: string;
  workers?: string | number;
  headlessWorkers?: string | number;
  seed?: string | number;
  hangFor?: string | number;
  nat?: string;
  link?: string;
  duration?: string | number;
  warmup?: string | number;
  job?: string;
  dataset?: string;
  json?: boolean;
  closeEvery?: unknown;
  crashEvery?: unknown;
  hangEvery?: unknown;
  joinEvery?: unknown;
  throttle?: unknown;
}

export interface NetbedSwarmOptions {
  /** Chromium tabs at the start, and the most tabs live at once (joins past it are headless). */
  workers: number;
  headlessWorkers: number;
  /** The chaos schedule's settings, or null: no faults. */
  chaos: NetbedChaos | null;
  nat: NatKind | 'mixed';
  link: LinkProfile;
  durationS: number;
  warmupS: number;
  job: Record<string, unknown>;
  datasetDir: string;
  json: boolean;
  /**
   * The measured window starts at the first commit whose world holds every member (bench:scale: a job
   * whose rounds start with half the swarm), not at the first commit. Default false (the CLI).
   */
  warmFullWorld?: boolean;
  /** Extra flags and a line reader for the headless members (bench:scale: `--timings`). */
  headless?: HeadlessMemberOptions;
  /**
   * Read the world just before each crash or close (`FiredNetbedEvent.before`) and return the window's
   * event log and commits (`NetbedSwarmReport.faultLog`): what bench:scale needs to tell what each fault
   * cost. Default false (the CLI).
   */
  faultCosts?: boolean;
}

/** Small enough that tabs on SwiftShader behind slow links make progress within a minute. */
export const NETBED_DEFAULT_JOB = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  dataset: { subset: 8192 },
  globalBatch: 64,
  epochs: 1,
  minWorkers: 1,
  maxWorkers: 16,
  commitEvery: 1,
  checkpointEvery: 32,
  heartbeatMs: 1000,
  lastCallMs: 300,
  seed: 1,
};

const NATS = ['endpoint-independent', 'symmetric', 'mixed'] as const;

export function parseNetbedSwarmOptions(raw: RawNetbedSwarmOptions): NetbedSwarmOptions {
  const fail = (why: string): never => {
    throw new NetbedError(why);
  };
  if (raw.url !== undefined)
    fail('--netbed starts its own coordinator and coturn in the test bed: drop --url (or drop --netbed)');
  if (raw.throttle !== undefined)
    fail('--throttle does not combine with --netbed: the test bed shapes every access link (--link)');
  const int = (name: string, value: string | number | undefined, fallback: number, min: number, max: number) => {
    const n = value === undefined ? fallback : Number(value);
    if (!Number.isInteger(n) || n < min || n > max) fail(`--${name} ${value}: expected an integer in ${min}..${max}`);
    return n;
  };
  const headlessWorkers = int('headless-workers', raw.headlessWorkers, 0, 0, 64);
  const nat = raw.nat ?? 'mixed';
  if (!(NATS as readonly string[]).includes(nat)) fail(`--nat ${nat}: expected one of ${NATS.join(', ')}`);
  let job: Record<string, unknown> = NETBED_DEFAULT_JOB;
  if (raw.job !== undefined) {
    // Validated as `tabswarm coordinator --job` would (its coordinator reads the file as written).
    try {
      loadJobFile(raw.job);
      job = JSON.parse(readFileSync(raw.job, 'utf8')) as Record<string, unknown>;
    } catch (error) {
      fail(`--job ${raw.job}: ${(error as Error).message}`);
    }
  }
  return {
    workers: int('workers', raw.workers, headlessWorkers > 0 ? 0 : 3, headlessWorkers > 0 ? 0 : 1, 16),
    headlessWorkers,
    chaos: chaosOf(raw, fail),
    nat: nat as NetbedSwarmOptions['nat'],
    link: parseLinkProfile(raw.link ?? '20ms 0ms 50mbit 0%'),
    durationS: int('duration', raw.duration, 60, 1, 86_400),
    warmupS: int('warmup', raw.warmup, 240, 1, 86_400),
    job,
    datasetDir: resolve(datasetDir(raw.dataset, fail)),
    json: raw.json ?? false,
  };
}

/** The chaos flags as seconds (0: none of that kind), or null when none is given. */
function chaosOf(raw: RawNetbedSwarmOptions, fail: (why: string) => never): NetbedChaos | null {
  const kinds = ['closeEvery', 'crashEvery', 'hangEvery', 'joinEvery'] as const;
  if (kinds.every((k) => raw[k] === undefined)) return null;
  const seconds = (flag: string, value: unknown, fallback: number) => {
    const n = value === undefined ? fallback : Number(value);
    if (!Number.isFinite(n) || n < 0 || (n > 0 && n < 1))
      fail(`--${flag} ${String(value)}: expected seconds >= 1 (0: never)`);
    return n;
  };
  const seed = raw.seed === undefined ? Math.floor(Math.random() * 0x100000000) : Number(raw.seed);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff)
    fail(`--seed ${raw.seed}: expected an integer in 0..4294967295`);
  return {
    seed,
    closeEvery: seconds('close-every', raw.closeEvery, 0),
    crashEvery: seconds('crash-every', raw.crashEvery, 0),
    hangEvery: seconds('hang-every', raw.hangEvery, 0),
    joinEvery: seconds('join-every', raw.joinEvery, 0),
    hangFor: seconds('hang-for', raw.hangFor, 10) || 10,
  };
}

/** The dataset as the coordinator finds it (--dataset, $TABSWARM_DATASET, Debian's, the shipped copy). */
function datasetDir(flag: string | undefined, fail: (why: string) => never): string {
  try {
    return resolveDatasetDir(flag, process.env);
  } catch (error) {
    if (error instanceof StartupError) return fail(error.message);
    throw error;
  }
}

export interface NetbedSwarmReport {
  ok: boolean;
  workers: number;
  headlessWorkers: number;
  /** Members opened in all (initial and joins), by kind. */
  opened: { tabs: number; headless: number };
  events: FiredNetbedEvent[];
  seed: number | null;
  nat: string;
  link: LinkProfile;
  steps: number;
  msPerStep: number | null;
  /** The window's live commits (a local-mode commit covers several steps) and the samples they committed. */
  commits: number;
  committedSamples: number;
  /** Seconds from the window's start to its last status, and when it started (ms since the epoch). */
  windowS: number;
  windowStartMs: number;
  /** Compute utilization the coordinator measured over the whole run (`usage.total`), or null. */
  utilization: number | null;
  /** The last status's round: its group sizes when it synced in groups, null for one ring. */
  groups: number[] | null;
  /**
   * Seconds from each join of the schedule to the first commit of a round the joiner was in (its
   * contribution), for the joiners that made one inside the window.
   */
  joinToFirstCommitS: number[];
  /** The window's warnings from the coordinator's event log (failed rounds and why, hung members), oldest first. */
  closures: string[];
  restarts: number;
  auditOk: boolean;
  tabs: { id: string; rank: number; rttMs: number | null; paths: string[]; iceError: string | null }[];
  /** With `faultCosts`: the window's event-log rows and commits, each with the coordinator's `at` (ms). */
  faultLog?: { events: { at: number; event: string; data: unknown }[]; commits: { at: number }[] };
}

export async function runNetbedSwarm(
  opts: NetbedSwarmOptions,
  log: (line: string) => void,
  signal: AbortSignal,
): Promise<NetbedSwarmReport> {
  const why = netbedUnavailable();
  if (why) throw new NetbedError(why);
  const total = opts.workers + opts.headlessWorkers;
  const schedule = opts.chaos ? netbedSchedule(opts.chaos, total, opts.durationS) : [];
  const homes: HomeSpec[] = Array.from({ length: homesNeeded(total, schedule) }, (_, i) => ({
    nat: opts.nat === 'mixed' ? (i % 2 === 1 ? 'symmetric' : 'endpoint-independent') : opts.nat,
    link: opts.link,
  }));
  const scene = await Scene.start({
    homes,
    job: opts.job,
    datasetDir: opts.datasetDir,
    distDir: resolve(import.meta.dirname, '../../dist'),
    log,
  });
  const members = new NetbedMembers(scene, opts.workers, log, opts.headless);
  try {
    log(`netbed: coordinator ${scene.url}, coturn, ${homes.length} home(s) (${homes.map((h) => h.nat).join(', ')})`);
    await Promise.all(
      Array.from({ length: total }, (_, i) => members.open(`t${i + 1}`, i < opts.workers ? 'tab' : 'headless')),
    );
    const status = () => scene.api<StatusResponse>('/api/status');
    const first = await warmUp(status, opts, signal);
    const started = performance.now();
    const windowStartMs = Date.now();
    const membership = watchFirstRounds(
      () => scene.api<StatusResponse>(`/api/status?limit=${STATUS_PAGE_MAX}`).catch(() => null),
      1000,
      undefined,
      signal,
    );
    const worldNow = async (): Promise<WorldBeforeFault> => {
      const s = await scene.api<StatusResponse>(`/api/status?limit=${STATUS_PAGE_MAX}`);
      return {
        step: s.step,
        members: s.world.items.map(({ peerId, lastStep, share }) => ({ peerId, lastStep, share })),
      };
    };
    const events = await playSchedule(schedule, members, started, log, signal, opts.faultCosts ? worldNow : null);
    let last = await status();
    while (!signal.aborted && performance.now() - started < opts.durationS * 1000 && last.state !== 'done') {
      await sleep(1000);
      last = await status();
    }
    const elapsed = performance.now() - started;
    await membership.stop();
    const audit = await scene.api<{ ok: boolean }>('/api/audit');
    const windowEvents = await eventsSince(scene, windowStartMs);
    const closures = windowEvents
      .filter((e) => e.level !== 'info')
      .map((e) => `${e.event} ${JSON.stringify(e.data).slice(0, 200)}`);
    const steps = last.step - first.step;
    const window = (await commitsFrom((path) => scene.api<CommitsPage>(path), first.step + 1)).filter(
      (c) => c.step <= last.step,
    );
    const opened = (kind: string) => members.members.filter((m) => m.kind === kind).length;
    const joinToFirstCommitS = joinTimes(events, membership.of, window, windowStartMs);
    return {
      ok: audit.ok && steps > 0,
      workers: opts.workers,
      headlessWorkers: opts.headlessWorkers,
      opened: { tabs: opened('tab'), headless: opened('headless') },
      events,
      seed: opts.chaos?.seed ?? null,
      nat: opts.nat,
      link: opts.link,
      steps,
      msPerStep: steps > 0 ? Math.round(elapsed / steps) : null,
      commits: window.length,
      committedSamples: window.reduce((n, c) => n + c.count, 0),
      windowS: elapsed / 1000,
      windowStartMs,
      utilization: last.usage?.total.utilization ?? null,
      groups: last.topology?.groups ?? null,
      joinToFirstCommitS,
      closures,
      restarts: last.restarts,
      auditOk: audit.ok,
      tabs: last.world.items.map((w) => ({
        id: w.id,
        rank: w.rank,
        rttMs: w.peerRttMs,
        paths: w.peerLinks.map((l) => `${l.local}→${l.remote}`),
        iceError: w.iceError,
      })),
      ...(opts.faultCosts
        ? {
            faultLog: {
              events: windowEvents.map(({ at, event, data }) => ({ at, event, data })),
              commits: window.map((c) => ({ at: c.committedAt })),
            },
          }
        : {}),
    };
  } finally {
    await members.close();
    await scene.close();
  }
}

/** Join → first commit of a round it was in (tools/swarm/join-times.ts; `NetbedSwarmReport.joinToFirstCommitS`). */
export function joinTimes(
  fired: readonly FiredNetbedEvent[],
  firstRound: (name: string) => number | null,
  commits: readonly { round: number; committedAt: number }[],
  windowStartMs: number,
): number[] {
  const joins = fired
    .filter((e) => e.kind === 'join' && e.outcome === 'done')
    .map((e) => ({ at: windowStartMs + e.at * 1000, memberRound: firstRound(e.tab) }));
  return secondsToFirstContribution(
    joins,
    commits.map((c) => ({ round: c.round, at: c.committedAt })),
  );
}

/** Pages of the admin event log read at most, 1,000 rows each: a bound on the loop below. */
const EVENT_PAGES_MAX = 200;

/**
 * The event-log rows at or after `sinceMs` (every level), oldest first. The log is paged from its start
 * (`?after=ID`, oldest first), so a long run is read a page at a time, up to `EVENT_PAGES_MAX` pages.
 */
async function eventsSince(
  scene: Scene,
  sinceMs: number,
): Promise<{ id: number; at: number; level: string; event: string; data: unknown }[]> {
  const rows: { id: number; at: number; level: string; event: string; data: unknown }[] = [];
  let after = 0;
  for (let page = 0; page < EVENT_PAGES_MAX; page++) {
    const { events } = await scene.api<{ events: typeof rows }>(`/api/admin/events?after=${after}&limit=1000`);
    rows.push(...events.filter((e) => e.at >= sinceMs));
    if (events.length < 1000) break;
    after = events.at(-1)!.id;
  }
  return rows;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** Waits for the first committed step (the schedule's clock starts there); resolves with that status. */
async function warmUp(
  status: () => Promise<StatusResponse>,
  opts: NetbedSwarmOptions,
  signal: AbortSignal,
): Promise<StatusResponse> {
  const warmupEnd = performance.now() + opts.warmupS * 1000;
  const members = opts.workers + opts.headlessWorkers;
  const warm = (s: StatusResponse) => s.step > 0 && (!opts.warmFullWorld || s.world.total >= members);
  let first = await status();
  while (!warm(first) && !signal.aborted && first.state !== 'done') {
    if (performance.now() > warmupEnd)
      throw new NetbedError(
        opts.warmFullWorld
          ? `no commit by all ${members} within --warmup ${opts.warmupS} s (world ${first.world.total}, step ${first.step})`
          : `no committed step within --warmup ${opts.warmupS} s`,
      );
    await sleep(500);
    first = await status();
  }
  return first;
}

/** Fires each event at its time from `started` (ms, performance clock). */
async function playSchedule(
  schedule: readonly ChaosEvent[],
  members: NetbedMembers,
  started: number,
  log: (line: string) => void,
  signal: AbortSignal,
  worldNow: (() => Promise<WorldBeforeFault>) | null,
): Promise<FiredNetbedEvent[]> {
  const fired: FiredNetbedEvent[] = [];
  for (const event of schedule) {
    await sleep(started + event.at * 1000 - performance.now());
    if (signal.aborted) break;
    const fault = event.kind === 'crash' || event.kind === 'close';
    const before = fault && worldNow ? await worldNow().catch(() => undefined) : undefined;
    const atMs = Date.now();
    const result = await members
      .fire(event)
      .catch((error: Error): FiredNetbedEvent => ({ ...event, outcome: 'failed', note: error.message.split('\n')[0] }));
    if (before) Object.assign(result, { before, atMs });
    log(
      `${event.at.toFixed(1)} s ${event.kind} ${event.tab}: ${result.outcome}${result.note ? ` (${result.note})` : ''}`,
    );
    fired.push(result);
  }
  return fired;
}

export function formatNetbedReport(r: NetbedSwarmReport): string {
  const link = `${r.link.delayMs} ms ±${r.link.jitterMs} ms, ${r.link.rateMbit} Mbit/s, ${r.link.lossPercent}% loss`;
  const lines = [
    `netbed swarm: ${r.workers} tab(s) + ${r.headlessWorkers} headless at the start (${r.opened.tabs} tabs and ${r.opened.headless} headless in all), NAT ${r.nat}, access links ${link}`,
    ...(r.seed === null
      ? []
      : [
          `chaos: seed ${r.seed}, ${r.events.filter((e) => e.outcome === 'done').length}/${r.events.length} events done (${r.events.map((e) => `${e.kind} ${e.tab} ${e.outcome}`).join(', ')})`,
        ]),
    `steps ${r.steps} · ${r.msPerStep ?? '–'} ms/step · restarts ${r.restarts} · audit ${r.auditOk ? 'clean' : 'BROKEN'} · ${r.ok ? 'PASS' : 'FAIL'}`,
    'rank  worker            rtt ms  ICE path (local→remote per link)',
    ...r.tabs.map(
      (t) =>
        `${String(t.rank).padEnd(6)}${t.id.padEnd(18)}${String(t.rttMs ?? '–').padStart(6)}  ${t.iceError ?? t.paths.join(', ')}`,
    ),
  ];
  return lines.join('\n');
}

/** The CLI's --netbed branch: one line on stderr for anything that stops the run; exit code. */
export async function netbedSwarmMain(raw: RawNetbedSwarmOptions): Promise<number> {
  const interrupt = new AbortController();
  const onSignal = () => interrupt.abort();
  process.on('SIGINT', onSignal);
  try {
    const opts = parseNetbedSwarmOptions(raw);
    const report = await runNetbedSwarm(opts, (line) => process.stderr.write(`${line}\n`), interrupt.signal);
    const table = `${formatNetbedReport(report)}\n`;
    if (opts.json) {
      process.stderr.write(table);
      process.stdout.write(`${JSON.stringify({ swarm: report })}\n`);
    } else process.stdout.write(table);
    return report.ok ? 0 : 1;
  } catch (error) {
    const message =
      error instanceof NetbedError ? error.message : `unexpected error: ${(error as Error).stack ?? error}`;
    process.stderr.write(`tabswarm swarm: ${message}\n`);
    return 1;
  } finally {
    process.off('SIGINT', onSignal);
  }
}
