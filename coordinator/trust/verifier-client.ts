/**
 * The coordinator's side of the verifier: a child process (verifier/main.ts, started through
 * verifier/entry.js) that recomputes committed steps on the same WGSL kernels the tabs run, like a BOINC
 * validator beside its server. The coordinator never imports the verifier (docs/boundaries.md): it spawns
 * a file path and speaks core/protocol/verifier.ts over Node's IPC channel.
 *
 * - `VerifierClient.start(opts)` forks the child with the SwiftShader environment where needed
 *   (gpu-env.ts), sends the job and its training data (the IDX folder, or a user dataset's training
 *   bytes), and resolves once the child is `ready`; a child that finds no adapter or cannot read the
 *   dataset rejects with the child's one line.
 * - `recompute(req)` queues: one request at a time reaches the child, each with its own timeout (default
 *   10× the full step the child timed at start, at least 10 s). An answer is validated with zod; a bad
 *   snapshot path or a refused request rejects that request only and the child serves on.
 * - A child that exits, times out or answers nonsense is killed: the request in flight and every queued
 *   one reject saying so, and later calls reject until `restart()`.
 * - `close()` kills the child (SIGKILL) and resolves once it has exited.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { resolve } from 'node:path';
import type { Sketch } from '../../core/state/sketch';
import {
  type RecomputeRequestMessage,
  type VerifierAnswer,
  verifierAnswerSchema,
  type VerifierDataset,
  type VerifierRequest,
} from '../../core/protocol/verifier';
import { swiftshaderEnv } from '../../node/gpu-env';

/** The verifier's entry file (a path, not an import: the boundary between the two processes). */
export const VERIFIER_ENTRY = resolve(import.meta.dirname, '../../verifier/entry.js');

/** The per-request timeout is this many measured full steps, and at least `MIN_TIMEOUT_MS`. */
export const TIMEOUT_STEPS = 10;
export const MIN_TIMEOUT_MS = 10_000;
const DEFAULT_START_TIMEOUT_MS = 120_000;
const OUTPUT_TAIL = 4000;

export interface VerifierClientOptions {
  /** The job as the coordinator runs it (a parsed `JobSpec`, or a job file's object): the child parses it again. */
  job: unknown;
  /** The training data the coordinator serves the tabs. */
  dataset: VerifierDataset;
  /** Per request, from the moment it reaches the child; default 10× the measured step, ≥ 10 s. */
  timeoutMs?: number;
  /** For the child to open its device, load the data and time a step; default 120 s. */
  startTimeoutMs?: number;
  /** The entry file to fork (tests); default `VERIFIER_ENTRY`. */
  entry?: string;
}

/** One recomputation (core/protocol/verifier.ts `recomputeRequestSchema` without its type and id). */
export type VerifyRequest = Omit<RecomputeRequestMessage, 'type' | 'id'>;

export interface VerifyResult {
  /** Each judged rank's contribution as the verifier recomputed it. */
  own: Sketch[];
  /** The sketch of the parameters the commit should have produced. */
  params: Sketch;
  /** Local mode: the outer momentum, and the rank's moments after its inner steps. */
  outer?: Sketch;
  moments?: Sketch[];
  /** false: the upload is not the fresh state the commit started from. */
  startOk: boolean;
  paramsHash: string;
  /** The child's own time for the recomputation, ms. */
  ms: number;
}

export class VerifierError extends Error {
  override name = 'VerifierError';
}

interface Pending {
  id: number;
  /** Rank sketches the answer must hold (every-step: the world; local: the one rank checked). */
  world: number;
  resolve(result: VerifyResult): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

export class VerifierClient {
  private child: ChildProcess | null = null;
  /** Why the child is gone (null while it serves). */
  private dead: string | null = 'not started';
  private pending: Pending | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private nextId = 1;
  private output = '';
  private exited: Promise<void> = Promise.resolve();
  /** The child's WebGPU adapter, one line. */
  adapter = '';
  /** The full-batch recomputation the child timed at start, ms. */
  stepMs = 0;
  /** The per-request timeout in use (set at every start from the options or `stepMs`; may be changed). */
  timeoutMs = 0;

  private constructor(private readonly opts: VerifierClientOptions) {}

  /** Fork the verifier and wait until it is ready; rejects with the child's reason if it cannot serve. */
  static async start(opts: VerifierClientOptions): Promise<VerifierClient> {
    const client = new VerifierClient(opts);
    await client.spawn();
    return client;
  }

  /** The child's process id, or undefined when it is not running. */
  get pid(): number | undefined {
    return this.dead ? undefined : this.child?.pid;
  }

  /** Recompute one step; queued behind the requests before it. */
  recompute(req: VerifyRequest): Promise<VerifyResult> {
    const run = this.queue.then(() => this.send(req));
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Kill the child (whatever it is doing) and start a new one with the same options. */
  async restart(): Promise<void> {
    await this.close();
    await this.spawn();
  }

  /** Kill the child; resolves once it has exited. Pending and queued requests reject. */
  async close(): Promise<void> {
    this.kill('the verifier was closed');
    await this.exited;
  }

  private async spawn(): Promise<void> {
    this.output = '';
    const child = fork(this.opts.entry ?? VERIFIER_ENTRY, [], {
      serialization: 'advanced',
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      env: { ...process.env, ...swiftshaderEnv(process.env) },
      execArgv: [],
    });
    this.child = child;
    this.dead = null;
    const keep = (chunk: Buffer) => {
      this.output = (this.output + chunk.toString()).slice(-OUTPUT_TAIL);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    this.exited = new Promise((done) => child.once('exit', () => done()));
    child.once('exit', (code, signal) => this.kill(`the verifier process exited (code ${code}, signal ${signal})`));
    child.on('error', (error) => this.kill(`the verifier process failed: ${error.message}`));
    child.on('message', (raw) => this.onMessage(raw));
    await this.ready(child);
  }

  /** Send init and wait for `ready`; a `fatal`, an exit or the start timeout rejects with the reason. */
  private ready(child: ChildProcess): Promise<void> {
    const ms = this.opts.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
    return new Promise<void>((done, fail) => {
      const timer = setTimeout(() => this.kill(`the verifier was not ready within ${ms} ms`), ms);
      const onExit = () => {
        clearTimeout(timer);
        child.off('message', onMessage);
        fail(new VerifierError(this.dead ?? 'the verifier exited'));
      };
      const onMessage = (raw: unknown) => {
        // A `fatal` is handled by onMessage (it kills the child, whose exit rejects here with the reason).
        const parsed = verifierAnswerSchema.safeParse(raw);
        if (!parsed.success || parsed.data.type !== 'ready') return;
        clearTimeout(timer);
        child.off('exit', onExit);
        this.adapter = parsed.data.adapter;
        this.stepMs = parsed.data.stepMs;
        this.timeoutMs = this.opts.timeoutMs ?? Math.max(MIN_TIMEOUT_MS, TIMEOUT_STEPS * parsed.data.stepMs);
        done();
      };
      child.on('message', onMessage);
      child.once('exit', onExit);
      this.post({ type: 'init', job: this.opts.job, dataset: this.opts.dataset });
    });
  }

  private send(req: VerifyRequest): Promise<VerifyResult> {
    if (this.dead) return Promise.reject(new VerifierError(`${this.dead}; restart the verifier`));
    const id = this.nextId++;
    return new Promise<VerifyResult>((done, fail) => {
      const timer = setTimeout(
        () => this.kill(`the verifier did not answer request ${id} within ${this.timeoutMs} ms`),
        this.timeoutMs,
      );
      this.pending = { id, world: req.mode === 'local' ? 1 : req.world, resolve: done, reject: fail, timer };
      this.post({ type: 'recompute', id, ...req });
    });
  }

  private post(message: VerifierRequest): void {
    this.child?.send(message, (error) => {
      if (error) this.kill(`cannot write to the verifier process: ${error.message}`);
    });
  }

  private onMessage(raw: unknown): void {
    const parsed = verifierAnswerSchema.safeParse(raw);
    if (!parsed.success) {
      this.kill(`the verifier sent an invalid answer: ${parsed.error.issues[0]?.message}`);
      return;
    }
    const answer: VerifierAnswer = parsed.data;
    if (answer.type === 'ready') return;
    if (answer.type === 'fatal') {
      this.kill(answer.message);
      return;
    }
    const pending = this.pending;
    // An answer to a request already failed (timed out) finds nobody waiting.
    if (!pending || pending.id !== answer.id) return;
    if (answer.type === 'result' && answer.own.length !== pending.world) {
      this.kill(`the verifier answered ${answer.own.length} rank sketches where ${pending.world} were asked for`);
      return;
    }
    clearTimeout(pending.timer);
    this.pending = null;
    if (answer.type === 'error') pending.reject(new VerifierError(`verifier: ${answer.message}`));
    else {
      const { type: _type, id: _id, ...result } = answer;
      pending.resolve(result);
    }
  }

  /** The child is unusable: kill it, fail what is in flight, refuse what comes until a restart. */
  private kill(reason: string): void {
    if (!this.dead) {
      const tail = this.output.trim();
      this.dead = tail ? `${reason}; its last output: ${tail.slice(-1000)}` : reason;
    }
    this.child?.kill('SIGKILL');
    const pending = this.pending;
    this.pending = null;
    if (pending) {
      clearTimeout(pending.timer);
      pending.reject(new VerifierError(`${this.dead}; request ${pending.id} failed`));
    }
  }
}
