/**
 * Run the real coordinator as a child process, and talk to it as simulated workers.
 *
 * - `spawnCoordinator(opts)` starts `coordinator/cli.ts coordinator` (through tsx) on a free port
 *   (`--port 0`; the port is read back from the "listening on http://…" line), with a fresh temp data
 *   dir, a job file written from `opts.job`, a small fake IDX dataset and a fixed admin token. It
 *   resolves once the coordinator printed its listening line, and rejects with the process's output
 *   when it exits first. `restart()` starts a new process on the same data dir (and job and dataset).
 * - `runCoordinatorCli(args)` runs the CLI to its exit (for the "clear error, non-zero exit" tests).
 * - `writeFakeIdxDataset(dir)` writes the four IDX files (a few hundred seeded images) so tests never
 *   depend on the real Fashion-MNIST.
 * - `SimWorker` is a plain WebSocket client speaking the control protocol: it keeps every server
 *   message in an inbox, and `next(type | predicate)` takes the first matching one (waiting for it).
 * - `SimTrainer` drives a SimWorker through whole rounds without gradients (ready, step reports with
 *   the right sample counts and a hash that is a pure function of the step, waiting for `committed`,
 *   checkpoint uploads of a valid simulated snapshot); `untilCommitted(step)` / `untilDone()` await
 *   progress, `SimTrainer.rejoin(old, wsUrl, …)` reconnects like a tab after a coordinator restart.
 *
 * Typical use:
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
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { gzipSync } from 'node:zlib';
import WebSocket from 'ws';
import type { AuditReport, StatusReport } from '../../coordinator/audit';
import { hashParams } from '../../coordinator/core/hash';
import type { JobPublic } from '../../coordinator/core/job';
import { parameterLayout, type ModelSpec } from '../../coordinator/core/model-spec';
import { assignStep, isCommitPoint, positionAfter, stepPosition, totalSteps } from '../../coordinator/core/sampler';
import { encodeSnapshot, OPTIMIZER_MOMENTS } from '../../coordinator/core/snapshot';
import { mulberry32 } from './rng';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');
export const CLI_PATH = join(REPO_ROOT, 'coordinator/cli.ts');
export const TEST_ADMIN_TOKEN = 'test-admin-token';

// ---------------------------------------------------------------------------------------------------
// Fake dataset

export interface FakeIdxOptions {
  trainCount?: number;
  testCount?: number;
  rows?: number;
  cols?: number;
  classes?: number;
  /** Write `.gz` files like the Debian package does. Default false (raw files). */
  gzip?: boolean;
  seed?: number;
}

/** One IDX file: big-endian magic and dims, then the bytes. */
export function idxFile(magic: number, dims: number[], data: Uint8Array): Buffer {
  const header = Buffer.alloc(4 + 4 * dims.length);
  header.writeUInt32BE(magic, 0);
  dims.forEach((d, i) => {
    header.writeUInt32BE(d, 4 + 4 * i);
  });
  return Buffer.concat([header, data]);
}

/**
 * Writes `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte` and
 * `t10k-labels-idx1-ubyte` into `dir` (created if needed): seeded random pixels, label i mod classes.
 * Returns `dir`.
 */
export function writeFakeIdxDataset(dir: string, opts: FakeIdxOptions = {}): string {
  const { trainCount = 300, testCount = 50, rows = 28, cols = 28, classes = 10, gzip = false, seed = 7 } = opts;
  mkdirSync(dir, { recursive: true });
  const random = mulberry32(seed);
  const split = (prefix: string, count: number) => {
    const pixels = new Uint8Array(count * rows * cols);
    for (let i = 0; i < pixels.length; i++) pixels[i] = Math.floor(random() * 256);
    const labels = new Uint8Array(count);
    for (let i = 0; i < count; i++) labels[i] = i % classes;
    const write = (name: string, bytes: Buffer) =>
      writeFileSync(join(dir, gzip ? `${name}.gz` : name), gzip ? gzipSync(bytes) : bytes);
    write(`${prefix}-images-idx3-ubyte`, idxFile(0x803, [count, rows, cols], pixels));
    write(`${prefix}-labels-idx1-ubyte`, idxFile(0x801, [count], labels));
  };
  split('train', trainCount);
  split('t10k', testCount);
  return dir;
}

// ---------------------------------------------------------------------------------------------------
// Temp dirs and process registry

const tempDirs: string[] = [];
const liveChildren = new Set<ChildProcess>();

export function makeTempDir(prefix = 'tabswarm-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

process.on('exit', () => {
  for (const child of liveChildren) child.kill('SIGKILL');
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

let sharedDataset: string | null = null;
/** A fake dataset shared by every coordinator of this test process (300 train / 50 test images). */
export function sharedFakeDataset(): string {
  sharedDataset ??= writeFakeIdxDataset(join(makeTempDir('tabswarm-dataset-'), 'fake-mnist'));
  return sharedDataset;
}

// ---------------------------------------------------------------------------------------------------
// The coordinator process

export interface SpawnOptions {
  /** Data dir; default a fresh temp dir. */
  dataDir?: string;
  /** Job object written to a temp job.json (merged over nothing: the core fills defaults). */
  job?: Record<string, unknown>;
  /** An existing job file; wins over `job`. Neither → the CLI's default job. */
  jobFile?: string;
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

function spawnCli(args: string[], env: Record<string, string | undefined> = {}): ChildProcess {
  const childEnv: Record<string, string | undefined> = {
    ...process.env,
    TABSWARM_DATASET: undefined,
    FORCE_COLOR: '0',
    ...env,
  };
  // tsx as an --import hook (not the tsx CLI) so the child is one process and kill -9 hits the coordinator itself.
  const child = spawn(process.execPath, ['--import', 'tsx', CLI_PATH, ...args], {
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

/** Runs the CLI with `args` to its exit (killed after `timeoutMs`) and returns its output. */
export async function runCoordinatorCli(
  args: string[],
  opts: { env?: Record<string, string | undefined>; timeoutMs?: number } = {},
): Promise<ExitInfo & { stdout: string; stderr: string }> {
  const child = spawnCli(args, opts.env);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
  const exit = await exitPromise(child);
  clearTimeout(timer);
  return { ...exit, stdout, stderr };
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
    if (!jobFile && opts.job) {
      jobFile = join(makeTempDir('tabswarm-job-'), 'job.json');
      writeFileSync(jobFile, JSON.stringify(opts.job, null, 2));
    }
    const child = spawnCli(coordinatorArgs(opts, dataDir, jobFile), opts.env);
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

  status(): Promise<StatusReport> {
    return this.getJson('/api/status');
  }
  audit(): Promise<AuditReport> {
    return this.getJson('/api/audit');
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

// ---------------------------------------------------------------------------------------------------
// Simulated workers

/** A server message: `{v, type, ...}` (typed loosely here so the helper does not pin the protocol). */
export type ServerMsg = { type: string; [key: string]: any };
type MessageMatcher = string | ((msg: ServerMsg) => boolean);

function matches(matcher: MessageMatcher | undefined, msg: ServerMsg): boolean {
  if (matcher === undefined) return true;
  return typeof matcher === 'string' ? msg.type === matcher : matcher(msg);
}

export interface CloseInfo {
  code: number;
  reason: string;
}

/**
 * A plain WebSocket control client. It computes nothing: tests drive it message by message.
 * `workerId` / `runId` are filled from the `welcome` message by `join()`.
 */
export class SimWorker {
  readonly inbox: ServerMsg[] = [];
  /** Every message received, in order (the inbox minus nothing). */
  readonly received: ServerMsg[] = [];
  readonly closed: Promise<CloseInfo>;
  runId: string | null = null;
  workerId: string | null = null;
  /** The reconnect secret of the last welcome. */
  secret: string | null = null;
  private waiters: { matcher?: MessageMatcher; resolve: (msg: ServerMsg) => void }[] = [];
  private closeInfo: CloseInfo | null = null;
  /** When set, messages go to this handler instead of the inbox (still recorded in `received`). */
  onMessage: ((msg: ServerMsg) => void) | null = null;
  /** Keep every message in `received` (turn off for long-running load to bound memory). */
  keepReceived = true;

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data: WebSocket.RawData) => {
      let msg: ServerMsg;
      try {
        msg = JSON.parse(data.toString());
      } catch {
        msg = { type: '__unparsable', text: data.toString() };
      }
      if (this.keepReceived) this.received.push(msg);
      if (this.onMessage) {
        this.onMessage(msg);
        return;
      }
      const waiter = this.waiters.findIndex((w) => matches(w.matcher, msg));
      if (waiter >= 0) {
        const [w] = this.waiters.splice(waiter, 1);
        w.resolve(msg);
      } else {
        this.inbox.push(msg);
      }
    });
    this.closed = new Promise((resolveClose) => {
      socket.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString() };
        resolveClose(this.closeInfo);
      });
    });
    socket.on('error', () => {});
  }

  /** `localAddress`: the loopback address to connect from (e.g. 127.0.0.2, a second "client"); `origin`: the Origin header. */
  static connect(
    wsUrl: string,
    opts: { timeoutMs?: number; localAddress?: string; origin?: string } = {},
  ): Promise<SimWorker> {
    return new Promise((resolveWorker, reject) => {
      const socket = new WebSocket(wsUrl, {
        handshakeTimeout: opts.timeoutMs ?? 10_000,
        ...(opts.localAddress ? { localAddress: opts.localAddress } : {}),
        ...(opts.origin ? { origin: opts.origin } : {}),
      });
      const worker = new SimWorker(socket);
      socket.once('open', () => resolveWorker(worker));
      socket.once('error', reject);
    });
  }

  get isClosed(): boolean {
    return this.closeInfo !== null;
  }

  /** Sends `{v: 1, ...msg}` as JSON. */
  send(msg: Record<string, unknown>): void {
    this.socket.send(JSON.stringify({ v: 1, ...msg }));
  }

  sendRaw(data: string | Buffer): void {
    this.socket.send(data);
  }

  /** Takes the first message matching `matcher` from the inbox, or waits for one. */
  next(matcher?: MessageMatcher, timeoutMs = 10_000): Promise<ServerMsg> {
    const index = this.inbox.findIndex((m) => matches(matcher, m));
    if (index >= 0) return Promise.resolve(this.inbox.splice(index, 1)[0]);
    return new Promise((resolveMsg, reject) => {
      const waiter = {
        matcher,
        resolve: (msg: ServerMsg) => {
          clearTimeout(timer);
          resolveMsg(msg);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(
          new Error(
            `SimWorker ${this.workerId ?? '?'}: no message matching ${typeof matcher === 'function' ? 'predicate' : (matcher ?? 'any')} within ${timeoutMs} ms; got: ${JSON.stringify(this.received.slice(-5))}`,
          ),
        );
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** Removes and returns every inbox message of `type` (or all). */
  drain(type?: string): ServerMsg[] {
    const taken = this.inbox.filter((m) => type === undefined || m.type === type);
    const kept = this.inbox.filter((m) => !(type === undefined || m.type === type));
    this.inbox.length = 0;
    this.inbox.push(...kept);
    return taken;
  }

  /** Sends `hello` and waits for `welcome`; remembers runId and workerId. */
  async join(
    opts: {
      peerId?: string;
      haveStep?: number | null;
      haveHash?: string | null;
      pending?: { step: number; hash: string } | null;
      workerId?: string | null;
      runId?: string | null;
      secret?: string | null;
      invite?: string;
    } = {},
  ): Promise<ServerMsg> {
    this.send({
      type: 'hello',
      runId: opts.runId ?? null,
      workerId: opts.workerId ?? null,
      ...(opts.secret ? { secret: opts.secret } : {}),
      ...(opts.invite ? { invite: opts.invite } : {}),
      peerId: opts.peerId ?? `peer-${Math.random().toString(36).slice(2, 10)}`,
      adapter: { vendor: 'sim', architecture: 'none', description: 'simulated worker' },
      haveStep: opts.haveStep ?? null,
      haveHash: opts.haveHash ?? null,
      ...(opts.pending ? { pending: opts.pending } : {}),
    });
    const welcome = await this.next((m) => m.type === 'welcome' || m.type === 'error' || m.type === 'done');
    if (welcome.type !== 'welcome') throw new Error(`hello refused: ${JSON.stringify(welcome)}`);
    this.runId = welcome.runId;
    this.workerId = welcome.workerId;
    this.secret = welcome.secret ?? null;
    return welcome;
  }

  heartbeat(): void {
    this.send({ type: 'heartbeat', runId: this.runId, workerId: this.workerId });
  }

  ready(round: number): void {
    this.send({ type: 'ready', runId: this.runId, workerId: this.workerId, round });
  }

  /** Reports `step` with `simulatedHash(step)` unless overridden. */
  report(fields: {
    round: number;
    rank: number;
    step: number;
    hash?: string;
    lossSum?: number;
    samples?: number;
    computeMs?: number;
  }): void {
    this.send({
      type: 'step_report',
      runId: this.runId,
      workerId: this.workerId,
      round: fields.round,
      rank: fields.rank,
      step: fields.step,
      hash: fields.hash ?? simulatedHash(fields.step),
      lossSum: fields.lossSum ?? 1,
      samples: fields.samples ?? 1,
      computeMs: fields.computeMs ?? 1,
    });
  }

  goodbye(): void {
    this.send({ type: 'goodbye', runId: this.runId, workerId: this.workerId });
  }

  close(): Promise<CloseInfo> {
    if (!this.isClosed) this.socket.close(1000, 'bye');
    return this.closed;
  }

  /** Drops the TCP connection without a close frame (a crashed tab). */
  terminate(): Promise<CloseInfo> {
    if (!this.isClosed) this.socket.terminate();
    return this.closed;
  }
}

/**
 * The parameter hash a simulated worker reports after `step` when it does not upload checkpoints:
 * equal across ranks, different per step, 16 hex digits like `hashParams`.
 */
export function simulatedHash(step: number): string {
  let h = (0x811c9dc5 ^ step) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)).toString(16).padStart(8, '0').repeat(2);
}

/** Simulated parameters after `step` (deterministic, the same in every simulated rank). */
export function simulatedParams(spec: ModelSpec, step: number): Float32Array {
  const params = new Float32Array(parameterLayout(spec).totalElements);
  for (let i = 0; i < params.length; i++) params[i] = step * 1e-3 + (i % 17) * 1e-4;
  return params;
}

const paramsHashCache = new Map<string, string>();
/** `hashParams(simulatedParams(spec, step))`, cached: what a simulated rank that uploads checkpoints reports. */
export function simulatedParamsHash(spec: ModelSpec, step: number): string {
  const key = `${spec.name}:${step}`;
  let hash = paramsHashCache.get(key);
  if (!hash) {
    hash = hashParams(simulatedParams(spec, step));
    paramsHashCache.set(key, hash);
    if (paramsHashCache.size > 256) paramsHashCache.delete(paramsHashCache.keys().next().value!);
  }
  return hash;
}

/** A checkpoint snapshot of simulated state at `step`, as a tab would upload it. */
export function simulatedSnapshot(job: JobPublic, step: number): Uint8Array<ArrayBuffer> {
  const params = simulatedParams(job.model, step);
  const { epoch, cursor } = positionAfter(step, job);
  const moments = OPTIMIZER_MOMENTS[job.optimizer.kind].map(() => new Float32Array(params.length));
  return new Uint8Array(
    encodeSnapshot({
      spec: job.model,
      step,
      epoch,
      cursor,
      optimizer: { kind: job.optimizer.kind, t: step },
      params,
      moments,
    }),
  );
}

export interface SimTrainerOptions {
  /** Coordinator base URL (for checkpoint uploads), e.g. `proc.url`. */
  httpUrl: string;
  /** Do not compute steps after this one (default: the job's last step). */
  stopAfterStep?: number;
  /** Delay before each report (simulated compute), ms. Default 0. */
  computeMs?: number;
  /** The `computeMs` the reports claim (default 1): a liar claims far less than it takes. */
  claimedComputeMs?: number;
  /** Send heartbeats every this many ms. Default: the job's heartbeatMs / 2. 0 disables. */
  heartbeatMs?: number;
  /** Upload checkpoints when asked. Default true. */
  uploadCheckpoints?: boolean;
  /** Called on every step report sent (`at`: performance.now()) — for latency measurements. */
  onReport?: (step: number, at: number, round: number) => void;
  /** Called on every `committed` received. */
  onCommitted?: (step: number, at: number, round: number) => void;
  /** Keep every received message in `worker.received` (default true; turn off under load). */
  keepReceived?: boolean;
}

/**
 * Drives a joined SimWorker through the protocol with no gradients: ready on `round`, on `train` report
 * steps up to the next commit point (hash = `simulatedParamsHash(step)`, samples = its slice), wait for
 * `committed`, go on; stop on `round_closed`; upload a simulated snapshot on `checkpoint_request`.
 */
export class SimTrainer {
  readonly job: JobPublic;
  /** Steps this worker saw committed, in order. */
  readonly committed: number[] = [];
  /** Last step this worker reported (0: none). */
  lastReported = 0;
  readonly errors: ServerMsg[] = [];
  readonly uploads: { step: number; status: number }[] = [];
  done = false;
  private round: { round: number; rank: number; shares: number[]; step: number } | null = null;
  private training = false;
  private heartbeat: NodeJS.Timeout | null = null;
  private stopped = false;
  private progressWaiters: { ready: () => boolean; resolve: () => void }[] = [];

  constructor(
    readonly worker: SimWorker,
    welcome: ServerMsg,
    private readonly options: SimTrainerOptions,
  ) {
    this.job = welcome.job as JobPublic;
    if (options.keepReceived === false) {
      worker.keepReceived = false;
      worker.received.length = 0;
    }
    worker.onMessage = (msg) => this.onMessage(msg);
    for (const msg of worker.drain()) this.onMessage(msg);
    const period = options.heartbeatMs ?? Math.floor(this.job.heartbeatMs / 2);
    if (period > 0) {
      this.heartbeat = setInterval(() => {
        if (!worker.isClosed) worker.heartbeat();
      }, period);
    }
    void worker.closed.then(() => this.stop());
  }

  /** Joins a new simulated worker and starts training with it. */
  static async join(wsUrl: string, options: SimTrainerOptions): Promise<SimTrainer> {
    const worker = await SimWorker.connect(wsUrl);
    const welcome = await worker.join();
    return new SimTrainer(worker, welcome, options);
  }

  /**
   * A tab reconnecting (after its socket or the coordinator died): same run and worker id, and it says
   * which states it holds — its last committed step and, as `pending`, the last step it reported.
   */
  static async rejoin(previous: SimTrainer, wsUrl: string, options: SimTrainerOptions): Promise<SimTrainer> {
    previous.stop();
    const worker = await SimWorker.connect(wsUrl);
    const model = previous.job.model;
    const pending =
      previous.lastReported > previous.lastCommitted
        ? { step: previous.lastReported, hash: simulatedParamsHash(model, previous.lastReported) }
        : null;
    const welcome = await worker.join({
      runId: previous.worker.runId,
      workerId: previous.worker.workerId,
      secret: previous.worker.secret,
      haveStep: previous.lastCommitted,
      haveHash: previous.lastCommitted > 0 ? simulatedParamsHash(model, previous.lastCommitted) : null,
      pending,
    });
    const trainer = new SimTrainer(worker, welcome, options);
    trainer.committed.unshift(...previous.committed);
    trainer.lastReported = Math.max(trainer.lastReported, previous.lastReported);
    return trainer;
  }

  get lastCommitted(): number {
    return this.committed.length > 0 ? this.committed[this.committed.length - 1] : 0;
  }

  get rank(): number | null {
    return this.round?.rank ?? null;
  }

  /** In a round that has not closed (syncing or training). */
  get inRound(): boolean {
    return this.round !== null;
  }

  /** Resolves once this worker has seen `step` (or a later one) committed. */
  untilCommitted(step: number, timeoutMs = 20_000): Promise<void> {
    return this.until(() => this.lastCommitted >= step, `step ${step} committed`, timeoutMs);
  }

  /** Resolves once this worker received `done`. */
  untilDone(timeoutMs = 30_000): Promise<void> {
    return this.until(() => this.done, 'done', timeoutMs);
  }

  /** Resolves once `ready()` holds (checked after every message). */
  until(ready: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolveWait, reject) => {
      const timer = setTimeout(() => {
        this.progressWaiters = this.progressWaiters.filter((w) => w !== waiter);
        reject(
          new Error(
            `SimTrainer ${this.worker.workerId}: not ${what} within ${timeoutMs} ms (last committed ${this.lastCommitted}, errors ${JSON.stringify(this.errors.slice(-3))})`,
          ),
        );
      }, timeoutMs);
      const waiter = {
        ready,
        resolve: () => {
          clearTimeout(timer);
          resolveWait();
        },
      };
      this.progressWaiters.push(waiter);
    });
  }

  stop(): void {
    this.stopped = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = null;
  }

  private onMessage(msg: ServerMsg): void {
    if (this.stopped) return;
    this.handleMessage(msg);
    this.notifyProgress();
  }

  private notifyProgress(): void {
    for (const waiter of [...this.progressWaiters]) {
      if (waiter.ready()) {
        this.progressWaiters = this.progressWaiters.filter((w) => w !== waiter);
        waiter.resolve();
      }
    }
  }

  private handleMessage(msg: ServerMsg): void {
    switch (msg.type) {
      case 'round': {
        const me = (msg.world as { workerId: string; rank: number; share: number }[]).find(
          (w) => w.workerId === this.worker.workerId,
        );
        if (!me) return;
        this.round = {
          round: msg.round,
          rank: me.rank,
          shares: msg.world.map((w: { share: number }) => w.share),
          step: msg.step,
        };
        this.training = false;
        this.worker.ready(msg.round);
        break;
      }
      case 'train':
        if (this.round && msg.round === this.round.round) {
          this.training = true;
          this.compute(this.round.step);
        }
        break;
      case 'committed':
        this.committed.push(msg.step);
        this.options.onCommitted?.(msg.step, performance.now(), msg.round);
        if (this.training && this.round && msg.round === this.round.round) this.compute(msg.step + 1);
        break;
      case 'round_closed':
        this.training = false;
        if (this.round && msg.round === this.round.round) this.round = null;
        break;
      case 'checkpoint_request':
        if (this.options.uploadCheckpoints !== false) void this.upload(msg.step, msg.url);
        break;
      case 'done':
        this.done = true;
        this.training = false;
        break;
      case 'error':
        this.errors.push(msg);
        break;
    }
  }

  private compute(step: number): void {
    const limit = Math.min(this.options.stopAfterStep ?? Infinity, totalSteps(this.job));
    if (step > limit || !this.round) return;
    const round = this.round;
    const send = () => {
      if (this.stopped || !this.training || this.round !== round || this.worker.isClosed) return;
      const { cursor, count } = stepPosition(step, this.job);
      const samples = assignStep(cursor, count, round.shares)[round.rank].count;
      this.worker.report({
        round: round.round,
        rank: round.rank,
        step,
        hash: simulatedParamsHash(this.job.model, step),
        samples,
        lossSum: samples * 0.5,
        computeMs: this.options.claimedComputeMs ?? 1,
      });
      this.lastReported = step;
      this.options.onReport?.(step, performance.now(), round.round);
      // Between commit points a rank goes straight on to the next step.
      if (!isCommitPoint(step, this.job)) this.compute(step + 1);
    };
    if (this.options.computeMs) setTimeout(send, this.options.computeMs);
    else send();
  }

  private async upload(step: number, url: string): Promise<void> {
    try {
      const res = await fetch(`${this.options.httpUrl}${url}`, {
        method: 'PUT',
        body: simulatedSnapshot(this.job, step),
        headers: { 'content-type': 'application/octet-stream' },
      });
      await res.arrayBuffer();
      this.uploads.push({ step, status: res.status });
    } catch {
      this.uploads.push({ step, status: 0 });
    }
    this.notifyProgress();
  }
}
