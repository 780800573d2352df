/**
 * `tabswarm swarm --netbed [--workers N] [--nat endpoint-independent|symmetric|mixed]
 *  [--link "DELAY JITTER RATE LOSS"] [--duration S] [--warmup S] [--job FILE] [--dataset DIR] [--json]`
 *
 * One command for the whole scene on the network test bed: an HTTPS coordinator (test CA) and coturn
 * in the public segment, each tab a Chromium in its own home behind its own NAT (mixed: every second
 * home symmetric), every access link with the given profile. It trains for `duration` seconds from
 * the first commit, then prints a table (steps, step time, restarts, audit, each tab's ICE path and
 * RTT) and with --json one line `{"swarm": {...}}`. Root only (it refuses in one line otherwise).
 * The chaos flags of the plain swarm are not combined with --netbed yet.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { StatusResponse } from '../../core/protocol/views';
import { loadJobFile, resolveDatasetDir, StartupError } from '../../coordinator/config/startup-config';
import {
  NetbedError,
  netbedUnavailable,
  parseLinkProfile,
  type HomeSpec,
  type LinkProfile,
  type NatKind,
} from './netbed';
import { Scene } from './scene';

export interface RawNetbedSwarmOptions {
  netbed?: boolean;
  url?: string;
  workers?: string | number;
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
  workers: number;
  nat: NatKind | 'mixed';
  link: LinkProfile;
  durationS: number;
  warmupS: number;
  job: Record<string, unknown>;
  datasetDir: string;
  json: boolean;
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
  for (const flag of ['closeEvery', 'crashEvery', 'hangEvery', 'joinEvery', 'throttle'] as const)
    if (raw[flag] !== undefined) fail('the chaos flags (--close-every … --throttle) do not combine with --netbed yet');
  const int = (name: string, value: string | number | undefined, fallback: number, min: number, max: number) => {
    const n = value === undefined ? fallback : Number(value);
    if (!Number.isInteger(n) || n < min || n > max) fail(`--${name} ${value}: expected an integer in ${min}..${max}`);
    return n;
  };
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
    workers: int('workers', raw.workers, 3, 1, 16),
    nat: nat as NetbedSwarmOptions['nat'],
    link: parseLinkProfile(raw.link ?? '20ms 0ms 50mbit 0%'),
    durationS: int('duration', raw.duration, 60, 1, 86_400),
    warmupS: int('warmup', raw.warmup, 240, 1, 86_400),
    job,
    datasetDir: resolve(datasetDir(raw.dataset, fail)),
    json: raw.json ?? false,
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
  nat: string;
  link: LinkProfile;
  steps: number;
  msPerStep: number | null;
  restarts: number;
  auditOk: boolean;
  tabs: { id: string; rank: number; rttMs: number | null; paths: string[]; iceError: string | null }[];
}

export async function runNetbedSwarm(
  opts: NetbedSwarmOptions,
  log: (line: string) => void,
  signal: AbortSignal,
): Promise<NetbedSwarmReport> {
  const why = netbedUnavailable();
  if (why) throw new NetbedError(why);
  const homes: HomeSpec[] = Array.from({ length: opts.workers }, (_, i) => ({
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
  try {
    log(`netbed: coordinator ${scene.url}, coturn, ${opts.workers} home(s) (${homes.map((h) => h.nat).join(', ')})`);
    await Promise.all(homes.map((_, i) => scene.openTab(i)));
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const status = () => scene.api<StatusResponse>('/api/status');
    const warmupEnd = performance.now() + opts.warmupS * 1000;
    let first = await status();
    while (first.step === 0 && !signal.aborted && first.state !== 'done') {
      if (performance.now() > warmupEnd) throw new NetbedError(`no committed step within --warmup ${opts.warmupS} s`);
      await sleep(500);
      first = await status();
    }
    const started = performance.now();
    let last = first;
    while (!signal.aborted && performance.now() - started < opts.durationS * 1000 && last.state !== 'done') {
      await sleep(1000);
      last = await status();
      log(`step ${last.step} · world ${last.world.total} · restarts ${last.restarts}`);
    }
    const elapsed = performance.now() - started;
    const audit = await scene.api<{ ok: boolean }>('/api/audit');
    const steps = last.step - first.step;
    return {
      ok: audit.ok && steps > 0,
      workers: opts.workers,
      nat: opts.nat,
      link: opts.link,
      steps,
      msPerStep: steps > 0 ? Math.round(elapsed / steps) : null,
      restarts: last.restarts,
      auditOk: audit.ok,
      tabs: last.world.items.map((w) => ({
        id: w.id,
        rank: w.rank,
        rttMs: w.peerRttMs,
        paths: w.peerLinks.map((l) => `${l.local}→${l.remote}`),
        iceError: w.iceError,
      })),
    };
  } finally {
    await scene.close();
  }
}

export function formatNetbedReport(r: NetbedSwarmReport): string {
  const link = `${r.link.delayMs} ms ±${r.link.jitterMs} ms, ${r.link.rateMbit} Mbit/s, ${r.link.lossPercent}% loss`;
  const lines = [
    `netbed swarm: ${r.workers} tab(s), NAT ${r.nat}, access links ${link}`,
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
