/**
 * `tabswarm worker --url URL [--count K] [--name N] [--cache-dir DIR | --no-cache] [--start-parallel P]`:
 * K headless workers (headless-worker.ts) join the coordinator at URL, as K tabs opened on it would. The URL
 * is what a volunteer opens (its `?invite=` is used); the process ends when every worker has ended: exit 0
 * when each finished the job or left (Ctrl-C / SIGTERM: each says goodbye first; a second signal exits at
 * once), 1 when any failed.
 *
 * Dawn needs a Vulkan driver. On a machine without a GPU, SwiftShader's (node/gpu-env.ts) must be in the
 * environment when the process starts (the dynamic linker reads LD_LIBRARY_PATH only then): when it is
 * missing, this command runs itself once more as a child with it, and passes signals and the exit code on;
 * the child dies with its parent (a `kill -9` of the parent is a crash of the workers, as it looks), within a
 * second. Launchers that kill workers on purpose (tools/swarm, bench:scale, --local-workers) pass that
 * environment themselves, so no second process stands between them and the workers.
 */
import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { Command, InvalidArgumentError } from 'commander';
import { swiftshaderEnv } from '../node/gpu-env';
import { defaultCacheDir, FileDatasetCache } from './dataset-cache';
import { startFleet, type Fleet } from './fleet';
import type { Log } from './headless-worker';
import { installNodeGlobals, releaseNodeGlobals } from './node-globals';

export const MAX_COUNT = 256;

export interface WorkerFlags {
  url: string;
  count: number;
  name: string;
  cacheDir: string;
  cache: boolean;
  startParallel: number;
  quiet?: boolean;
  timings?: boolean;
  control?: boolean;
}

export class WorkerFlagError extends Error {}

/** The coordinator's origin and invite from `--url` (what a volunteer opens). */
export function parseWorkerUrl(raw: string): { origin: URL; invite: string | null } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new WorkerFlagError(`--url ${raw}: not a URL (expected e.g. http://127.0.0.1:8080)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new WorkerFlagError(`--url ${raw}: expected an http:// or https:// URL`);
  const invite = url.searchParams.get('invite');
  return { origin: new URL(url.origin), invite: invite && invite.length <= 128 ? invite : null };
}

function integerIn(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`an integer in ${min}..${max}`);
    return n;
  };
}

function namePart(value: string): string {
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(value)) throw new InvalidArgumentError('1–32 letters, digits, - or _');
  return value;
}

export function workerCommand(run: (flags: WorkerFlags) => Promise<void>): Command {
  return new Command('worker')
    .description("Join a coordinator as K headless workers (the tab's code in Node: Dawn, WebRTC, the elastic loop).")
    .requiredOption(
      '--url <url>',
      'the coordinator, as a volunteer opens it (https://host/ or http://127.0.0.1:8080/, ?invite= kept)',
    )
    .option('--count <k>', `workers in this process (1..${MAX_COUNT})`, integerIn(1, MAX_COUNT), 1)
    .option(
      '--name <name>',
      'name of the worker(s): the peer id prefix and the label on the admin page',
      namePart,
      `hl-${namePart(
        hostname()
          .replace(/[^A-Za-z0-9_-]/g, '-')
          .slice(0, 20) || 'host',
      )}`,
    )
    .option('--cache-dir <dir>', 'where the dataset is kept between runs', defaultCacheDir())
    .option('--no-cache', 'download the dataset every time')
    .option('--start-parallel <p>', 'workers that prepare (thread, GPU device, kernels) at once', integerIn(1, 64), 2)
    .option('--quiet', 'log warnings and errors only')
    .option(
      '--control',
      'read control lines on stdin: leave NAME, crash NAME (no goodbye), join NAME (tools fault single workers)',
    )
    .option('--timings', "print each outer step's time split (compute, sync, waiting) as a JSON line on stdout")
    .action(run);
}

/** Run this same command as a child with SwiftShader's environment, if it is missing; null: not needed. */
function reexecWithGpuEnv(argv: string[]): Promise<number> | null {
  const extra = swiftshaderEnv(process.env);
  if (Object.keys(extra).length === 0) return null;
  const child = spawn(process.execPath, [...process.execArgv, ...argv.slice(1)], {
    env: { ...process.env, ...extra, [PARENT_ENV]: String(process.pid) },
    stdio: 'inherit',
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))));
}

/** Set in the re-executed child: its parent's pid. */
const PARENT_ENV = 'TABSWARM_WORKER_PARENT';

/** In a re-executed child: die at once (no goodbye, as a crash) when the parent is gone. */
function dieWithParent(): void {
  const parent = Number(process.env[PARENT_ENV]);
  if (!parent) return;
  setInterval(() => {
    if (process.ppid !== parent) process.kill(process.pid, 'SIGKILL');
  }, 1000).unref();
}

function logger(quiet: boolean): Log {
  return (level, text) => {
    if (quiet && level === 'info') return;
    const line = `${new Date().toISOString()} ${level} ${text}\n`;
    (level === 'info' ? process.stdout : process.stderr).write(line);
  };
}

/** Ctrl-C / SIGTERM: every worker says goodbye, then the process exits 0; a second signal exits at once. */
function leaveOnSignals(fleet: Fleet, log: Log): void {
  let leaving = false;
  const onSignal = (signal: string) => {
    if (leaving) process.exit(1);
    leaving = true;
    log('info', `${signal}: every worker says goodbye`);
    const deadline = setTimeout(() => process.exit(0), 5000);
    void fleet.leaveAll().finally(() => {
      clearTimeout(deadline);
      releaseNodeGlobals();
      process.exit(0);
    });
  };
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));
}

/** `--control`: one command per stdin line (fleet.ts `control`). */
function readControl(fleet: Fleet, log: Log): void {
  let partial = '';
  process.stdin.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop()!;
    for (const line of lines) if (line.trim()) void fleet.control(line).then((done) => log('info', `control: ${done}`));
  });
}

export async function runWorkers(flags: WorkerFlags): Promise<void> {
  const { origin, invite } = parseWorkerUrl(flags.url);
  const log = logger(!!flags.quiet);
  installNodeGlobals();
  const fleet = await startFleet({
    origin,
    invite,
    count: flags.count,
    name: flags.name,
    cache: flags.cache ? new FileDatasetCache(flags.cacheDir) : null,
    startParallel: flags.startParallel,
    log,
    onOuterStep: flags.timings
      ? (name, t) => process.stdout.write(`${JSON.stringify({ timing: { name, ...t } })}\n`)
      : undefined,
  });
  leaveOnSignals(fleet, log);
  if (flags.control) readControl(fleet, log);
  const outcomes = await fleet.ended;
  for (const [i, o] of outcomes.entries())
    log(o.kind === 'done' ? 'info' : 'warn', `worker ${i + 1}: ${o.kind}: ${o.detail}`);
  releaseNodeGlobals();
  // A worker that left (Ctrl-C), was crashed on a control line or finished the job ended as asked; one whose
  // loop or thread failed did not.
  process.exit(outcomes.every((o) => o.kind === 'done' || o.kind === 'left' || o.kind === 'crashed') ? 0 : 1);
}

/** `argv` as `process.argv` (node, script, 'worker', flags…). */
export async function main(argv: string[]): Promise<void> {
  const child = reexecWithGpuEnv(argv);
  if (child) process.exit(await child);
  dieWithParent();
  try {
    await workerCommand(runWorkers).parseAsync(argv.slice(3), { from: 'user' });
  } catch (error) {
    const message =
      error instanceof WorkerFlagError ? error.message : `unexpected error: ${(error as Error).stack ?? error}`;
    process.stderr.write(`tabswarm worker: ${message}\n`);
    process.exit(1);
  }
}
