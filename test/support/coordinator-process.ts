/**
 * Run the real coordinator as a child process.
 *
 * - `spawnCoordinator(opts)` starts `coordinator/cli.ts coordinator` (through tsx) on a free port
 *   (`--port 0`; the port is read back from the "listening on http://…" line), with a fresh temp data
 *   dir, a job file written from `opts.job`, a small fake IDX dataset and a fixed admin token. It
 *   resolves once the coordinator printed its listening line, and rejects with the process's output
 *   when it exits first. `restart()` starts a new process on the same data dir (and job and dataset).
 * - `runCoordinatorCli(args)` runs the CLI to its exit (for the "clear error, non-zero exit" tests);
 *   `runSwarmCli(['swarm', …])` runs the swarm tool's entry (tools/swarm/cli.ts) the same way.
 *
 * Talk to it with `SimWorker` (sim-worker.ts) and `SimTrainer` (sim-trainer.ts); fake datasets and
 * temp dirs come from fake-dataset.ts. Typical use:
 *   const proc = await spawnCoordinator({ job: { model: 'tiny-mlp', globalBatch: 32, minWorkers: 2 } });
 *   const a = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url });
 *   const b = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url });
 *   await Promise.all([a.untilDone(), b.untilDone()]);
 *   expect((await proc.audit()).ok).toBe(true);
 *   await proc.stop();
 *
 * Every process started here is registered and killed (SIGKILL) when the test process exits, so a
 * failing test never leaves a coordinator running. Call `stop()` / `kill9()` in afterEach anyway.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { AuditReport } from '../../coordinator/admin/audit';
import { type StatusResponse, statusResponseSchema } from '../../core/protocol/views';
import { makeTempDir, sharedFakeDataset } from './fake-dataset';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');
export const CLI_PATH = join(REPO_ROOT, 'coordinator/cli.ts');
/** The swarm tool's entry (`npm run swarm`): a developer tool, apart from the coordinator's CLI. */
export const SWARM_CLI_PATH = join(REPO_ROOT, 'tools/swarm/cli.ts');
export const TEST_ADMIN_TOKEN = 'test-admin-token';

const liveChildren = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of liveChildren) child.kill('SIGKILL');
});

export interface SpawnOptions {
  /** Data dir; default a fresh temp dir. */
  dataDir?: string;
  /**
   * Job object written to a temp job.json (merged over nothing: the core fills defaults). Without a
   * `verify` field it gets `"verify": false`: a test runs a private swarm of simulated or honest tabs
   * unless it is about checking contributions (the CLI verifies a job open to anyone by default, and
   * simulated workers send no sketches).
   */
  job?: Record<string, unknown>;
  /** An existing job file; wins over `job`. Neither → `{"verify": false}`, or the CLI's default job with `cliDefaults`. */
  jobFile?: string;
  /** With neither `job` nor `jobFile`: pass no --job at all (the CLI's own default job, which verifies). */
  cliDefaults?: boolean;
  /** Dataset dir; default `sharedFakeDataset()`; null passes no --dataset (env/default lookup). */
  datasetDir?: string | null;
  /** Default `TEST_ADMIN_TOKEN`; null passes none (the coordinator picks and prints one). */
  adminToken?: string | null;
  /** Default 0 (a free port chosen by the OS). */
  port?: number;
  host?: string;
  extraArgs?: string[];
  /** Extra environment for the child (TABSWARM_DATASET is removed unless given here). */
  env?: Record<string, string | undefined>;
  /** How long to wait for the listening line. Default 30 s. */
  startTimeoutMs?: number;
  /** Flags for the child's `node` itself, before the script (e.g. `--cpu-prof`, which NODE_OPTIONS refuses). */
  nodeArgs?: string[];
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

function coordinatorArgs(opts: SpawnOptions, dataDir: string, jobFile: string | undefined): string[] {
  const args = [
    'coordinator',
    '--port',
    String(opts.port ?? 0),
    '--host',
    opts.host ?? '127.0.0.1',
    '--data-dir',
    dataDir,
  ];
  if (jobFile) args.push('--job', jobFile);
  const datasetDir = opts.datasetDir === undefined ? sharedFakeDataset() : opts.datasetDir;
  if (datasetDir !== null) args.push('--dataset', datasetDir);
  const token = opts.adminToken === undefined ? TEST_ADMIN_TOKEN : opts.adminToken;
  if (token !== null) args.push('--admin-token', token);
  args.push(...(opts.extraArgs ?? []));
  return args;
}

/** util-linux's setpriv, and its arguments that drop root's permission to read and search any file. */
export const SETPRIV = '/usr/bin/setpriv';
const READ_OVERRIDE_DROPPED = ['--bounding-set=-dac_override,-dac_read_search'];

function spawnCli(
  args: string[],
  env: Record<string, string | undefined> = {},
  withoutReadOverride = false,
  script = CLI_PATH,
  nodeArgs: string[] = [],
): ChildProcess {
  const childEnv: Record<string, string | undefined> = {
    ...process.env,
    TABSWARM_DATASET: undefined,
    FORCE_COLOR: '0',
    ...env,
  };
  // tsx as an --import hook (not the tsx CLI) so the child is one process and kill -9 hits the coordinator itself.
  const argv = [process.execPath, ...nodeArgs, '--import', 'tsx', script, ...args];
  // Root reads every file (CAP_DAC_OVERRIDE): to see a permission error as root, the child runs as root
  // without that capability (setpriv, util-linux). It stays root, so it still reads a checkout that only
  // root may enter (a switch to another user could not: `Cannot find package 'tsx'`).
  const [command, ...rest] = withoutReadOverride ? [SETPRIV, ...READ_OVERRIDE_DROPPED, '--', ...argv] : argv;
  const child = spawn(command, rest, {
    cwd: REPO_ROOT,
    env: childEnv as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
  return child;
}

function exitPromise(child: ChildProcess): Promise<ExitInfo> {
  return new Promise((resolveExit) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolveExit({ code: child.exitCode, signal: child.signalCode });
      return;
    }
    child.once('exit', (code, signal) => resolveExit({ code, signal }));
  });
}

export interface CliRunOptions {
  env?: Record<string, string | undefined>;
  timeoutMs?: number;
  /** As root: run without root's permission to read files it has no mode bits for (setpriv). */
  withoutReadOverride?: boolean;
}

/**
 * Runs the CLI with `args` to its exit (killed after `timeoutMs`) and returns its output;
 * `withoutReadOverride` (as root) runs it without root's permission to read files it has no mode bits for.
 */
export async function runCoordinatorCli(
  args: string[],
  opts: CliRunOptions = {},
  script = CLI_PATH,
): Promise<ExitInfo & { stdout: string; stderr: string }> {
  const child = spawnCli(args, opts.env, opts.withoutReadOverride, script);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
  const exit = await exitPromise(child);
  clearTimeout(timer);
  return { ...exit, stdout, stderr };
}

/** The swarm tool (tools/swarm/cli.ts) with `args` (e.g. `['swarm', '--job', file]`) to its exit, as `runCoordinatorCli`. */
export function runSwarmCli(
  args: string[],
  opts: CliRunOptions = {},
): Promise<ExitInfo & { stdout: string; stderr: string }> {
  return runCoordinatorCli(args, opts, SWARM_CLI_PATH);
}

export class CoordinatorProcess {
  readonly url: string;
  readonly wsUrl: string;
  readonly port: number;
  readonly exited: Promise<ExitInfo>;
  private stdoutText = '';
  private stderrText = '';

  private constructor(
    readonly child: ChildProcess,
    readonly dataDir: string,
    readonly adminToken: string | null,
    readonly options: SpawnOptions,
    url: string,
    output: { stdout: string; stderr: string },
  ) {
    this.url = url.replace(/\/$/, '');
    this.wsUrl = `${this.url.replace(/^http/, 'ws')}/ws`;
    this.port = Number(new URL(this.url).port);
    this.stdoutText = output.stdout;
    this.stderrText = output.stderr;
    child.stdout!.on('data', (d: Buffer) => (this.stdoutText += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (this.stderrText += d.toString()));
    this.exited = exitPromise(child);
  }

  /** Starts a coordinator and waits for its listening line. */
  static async spawn(opts: SpawnOptions = {}): Promise<CoordinatorProcess> {
    const dataDir = opts.dataDir ?? join(makeTempDir('tabswarm-data-'), 'data');
    let jobFile = opts.jobFile;
    if (!jobFile && (opts.job || !opts.cliDefaults)) {
      jobFile = join(makeTempDir('tabswarm-job-'), 'job.json');
      const job = opts.job ?? {};
      writeFileSync(jobFile, JSON.stringify('verify' in job ? job : { ...job, verify: false }, null, 2));
    }
    const child = spawnCli(coordinatorArgs(opts, dataDir, jobFile), opts.env, false, CLI_PATH, opts.nodeArgs);
    const output = { stdout: '', stderr: '' };
    const url = await new Promise<string>((resolveUrl, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(
          new Error(
            `coordinator did not print its listening line within ${opts.startTimeoutMs ?? 30_000} ms:\n${output.stdout}${output.stderr}`,
          ),
        );
      }, opts.startTimeoutMs ?? 30_000);
      const onData = (d: Buffer) => {
        output.stdout += d.toString();
        const match = /listening on (https?:\/\/\S+)/.exec(output.stdout);
        if (match) {
          clearTimeout(timer);
          child.stdout!.off('data', onData);
          child.off('exit', onExit);
          resolveUrl(match[1]);
        }
      };
      const onExit = (code: number | null, signal: string | null) => {
        clearTimeout(timer);
        reject(
          new Error(
            `coordinator exited (code ${code}, signal ${signal}) before listening:\n${output.stdout}${output.stderr}`,
          ),
        );
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', (d: Buffer) => (output.stderr += d.toString()));
      child.once('exit', onExit);
    });
    const adminToken = opts.adminToken === undefined ? TEST_ADMIN_TOKEN : opts.adminToken;
    const resolvedOpts: SpawnOptions = { ...opts, dataDir, jobFile };
    return new CoordinatorProcess(child, dataDir, adminToken, resolvedOpts, url, output);
  }

  /** Everything the process printed so far (stdout then stderr). */
  get output(): string {
    return `${this.stdoutText}${this.stderrText}`;
  }
  get stdout(): string {
    return this.stdoutText;
  }
  get stderr(): string {
    return this.stderrText;
  }

  /** SIGKILL: the process gets no chance to flush anything (what the store must survive). */
  async kill9(): Promise<ExitInfo> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    return this.exited;
  }

  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`. */
  async stop(graceMs = 10_000): Promise<ExitInfo> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.exited;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    const exit = await this.exited;
    clearTimeout(timer);
    return exit;
  }

  /** Starts a new coordinator on the same data dir, job and dataset (this one must have exited). */
  async restart(overrides: SpawnOptions = {}): Promise<CoordinatorProcess> {
    if (this.child.exitCode === null && this.child.signalCode === null)
      throw new Error('restart(): the coordinator is still running');
    return CoordinatorProcess.spawn({ ...this.options, ...overrides });
  }

  async fetch(path: string, init: RequestInit = {}): Promise<Response> {
    return fetch(`${this.url}${path}`, init);
  }

  async getJson<T = any>(path: string): Promise<T> {
    const res = await this.fetch(path);
    if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as T;
  }

  /** `/api/status` (a query such as `?offset=64&limit=64` pages the lists), checked against its zod schema. */
  async status(query = ''): Promise<StatusResponse> {
    return statusResponseSchema.parse(await this.getJson(`/api/status${query}`));
  }
  audit(): Promise<AuditReport> {
    return this.getJson('/api/audit');
  }
  /** Every event-log row of the run, oldest first (`GET /api/admin/events`, paged, with the admin token). */
  async events(): Promise<{ id: number; at: number; event: string; data: Record<string, unknown> }[]> {
    const rows: { id: number; at: number; event: string; data: Record<string, unknown> }[] = [];
    for (let page = 0, after = 0; page < 100; page++) {
      const res = await this.fetch(`/api/admin/events?after=${after}&limit=1000`, {
        headers: { authorization: `Bearer ${this.adminToken}` },
      });
      if (!res.ok) throw new Error(`GET /api/admin/events: ${res.status} ${await res.text()}`);
      const { events } = (await res.json()) as {
        events: { id: number; at: number; event: string; data: Record<string, unknown> }[];
      };
      rows.push(...events);
      if (events.length < 1000) break;
      after = events.at(-1)!.id;
    }
    return rows;
  }
  async metrics(): Promise<string> {
    const res = await this.fetch('/metrics');
    return res.text();
  }
  /** Value of one metric sample in /metrics, e.g. `metricValue(text, 'tabswarm_message_errors_total{code="bad_json"}')`; 0 when absent. */
  static metricValue(text: string, sample: string): number {
    for (const line of text.split('\n')) {
      if (line.startsWith(`${sample} `)) return Number(line.slice(sample.length + 1));
    }
    return 0;
  }

  /** POST /api/admin/<action> with the admin token (or `token`, or none when null). */
  admin(action: string, body: unknown = {}, token: string | null | undefined = this.adminToken): Promise<Response> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (token) headers.authorization = `Bearer ${token}`;
    return this.fetch(`/api/admin/${action}`, { method: 'POST', headers, body: JSON.stringify(body) });
  }
}

export function spawnCoordinator(opts: SpawnOptions = {}): Promise<CoordinatorProcess> {
  return CoordinatorProcess.spawn(opts);
}
