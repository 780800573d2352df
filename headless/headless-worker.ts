/**
 * One headless worker: what a volunteer tab runs, in Node. The training thread (trainer-thread.ts) runs
 * the tab's training Web Worker unchanged, on Dawn; the main thread runs the tab's composition
 * (web/elastic/compose.ts: the PeerJS mesh on node-datachannel, the coordinator client on `ws`, the
 * elastic loop and its collectives) on the same ports a tab's page gives it. To the coordinator it is one
 * more worker with its own worker id, peer id and GPU device; its adapter description says it is
 * headless and names it, so the admin page tells it from a tab.
 *
 * ```ts
 * const w = await startHeadlessWorker({ origin, name: 'hl-1', dataset, invite: null, log });
 * const outcome = await w.ended;   // 'done' when the job is done; 'failed' / 'thread' with why
 * ```
 */
import type { HttpPort } from '../web/elastic/checkpoint-transfer';
import { composeElastic, type ComposedElastic } from '../web/elastic/compose';
import type { ElasticStatus, ElasticTimeouts } from '../web/elastic/elastic-loop';
import { comlinkTrainer, type TrainerPort } from '../web/elastic/ports';
import type { HeadlessDataset } from './dataset';
import { type OuterStepTiming, timedTrainer } from './step-timing';
import { startTrainerThread, type TrainerThread } from './trainer-host';

export type Log = (level: 'info' | 'warn' | 'error', text: string) => void;

export interface HeadlessWorkerOptions {
  /** The coordinator's origin. */
  origin: URL;
  /** This worker's name: its peer id's prefix and its logs' and adapter's label. */
  name: string;
  /** The invite token to join with (the `--url`'s `?invite=`), or null. */
  invite: string | null;
  dataset: HeadlessDataset;
  log: Log;
  timeouts?: Partial<ElasticTimeouts>;
  onStatus?(status: ElasticStatus): void;
  /** Each outer step's time split (local sync mode; step-timing.ts), when given. */
  onOuterStep?(timing: OuterStepTiming): void;
}

/** How a worker's run ended. */
export interface HeadlessOutcome {
  kind: 'done' | 'failed' | 'left' | 'crashed' | 'thread';
  detail: string;
}

export interface HeadlessWorker {
  readonly name: string;
  readonly peerId: string;
  readonly status: ElasticStatus;
  /**
   * Resolves once the run ended (the job is done, the loop failed, the worker left, or its thread died) and
   * the worker's links and thread are closed.
   */
  readonly ended: Promise<HeadlessOutcome>;
  /** Goodbye to the coordinator (synchronously, first), then stop the loop, close the links and the thread. */
  leave(): Promise<void>;
  /** No goodbye: the sockets and links just close, as a crashed tab's (compose.ts `drop`). */
  crash(): Promise<void>;
}

/** Letters, digits, `-` and `_`: what PeerJS and the protocol's ids accept. */
export function peerIdFor(name: string, random: string = crypto.randomUUID()): string {
  const safe = name.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 32);
  return `${safe}-${random.replace(/-/g, '').slice(0, 20)}`;
}

/** The HTTP port outside a page: Node's fetch for both directions (no upload progress). */
export function nodeHttp(origin: URL): HttpPort {
  return { baseUrl: origin.origin, fetch: (url, init) => fetch(url, init) };
}

/** How long a leaving worker waits for its trainer's call in flight before it ends the thread anyway. */
const IDLE_WAIT_MS = 5000;

/**
 * The trainer port with a count of calls in flight, so the thread is ended only between calls: Dawn aborts
 * the whole process when a thread is torn down while a buffer's `mapAsync` is pending.
 */
export function idleTracked(port: TrainerPort): { port: TrainerPort; idle(timeoutMs: number): Promise<void> } {
  let inFlight = 0;
  let wake: (() => void) | null = null;
  const tracked = {} as Record<string, unknown>;
  for (const [name, fn] of Object.entries(port) as [string, (...args: unknown[]) => Promise<unknown>][]) {
    tracked[name] = (...args: unknown[]) => {
      inFlight++;
      return fn(...args).finally(() => {
        inFlight--;
        if (inFlight === 0) wake?.();
      });
    };
  }
  const idle = (timeoutMs: number) =>
    inFlight === 0
      ? Promise.resolve()
      : new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, timeoutMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
  return { port: tracked as unknown as TrainerPort, idle };
}

export async function startHeadlessWorker(opts: HeadlessWorkerOptions): Promise<HeadlessWorker> {
  const thread = startTrainerThread(opts.origin, opts.name);
  try {
    const adapter = await prepareTrainer(thread, opts);
    return await run(thread, adapter, opts);
  } catch (err) {
    await thread.terminate();
    throw err;
  }
}

/** Probe the thread's adapter and hand it the dataset; resolves to the adapter as the coordinator records it. */
async function prepareTrainer(
  thread: TrainerThread,
  opts: HeadlessWorkerOptions,
): Promise<{ vendor: string; architecture: string; description: string }> {
  const probe = await Promise.race([thread.api.probe(), thread.ended.then((why) => Promise.reject(new Error(why)))]);
  if (!probe.ok) throw new Error(`${opts.name}: ${probe.reason}`);
  if (opts.dataset.kind === 'images') await thread.api.loadData(opts.dataset.bytes);
  else await thread.api.loadChunked(opts.dataset.meta);
  const a = probe.adapter;
  return {
    vendor: a.vendor,
    architecture: a.architecture,
    description: `${a.description} (headless ${opts.name})`.slice(0, 256),
  };
}

/**
 * How a worker ends: `end` (a goodbye, or none for a crash) closes the composition, waits for the trainer's
 * call in flight and ends the thread, once; `closed` resolves with the outcome after that, whatever ended
 * the run (the job done, the loop failed, the thread died), so the links and thread always go with it.
 */
function ending(
  c: ComposedElastic,
  trainer: ReturnType<typeof idleTracked>,
  thread: TrainerThread,
  ended: Promise<HeadlessOutcome>,
  finish: (o: HeadlessOutcome) => void,
): { end(how: 'left' | 'crashed'): Promise<void>; closed: Promise<HeadlessOutcome> } {
  let leaving: Promise<void> | null = null;
  const end = (how: 'left' | 'crashed') => {
    leaving ??= (async () => {
      if (how === 'left') c.leave();
      else c.drop();
      finish({ kind: how, detail: how });
      await trainer.idle(IDLE_WAIT_MS);
      await thread.terminate();
    })();
    return leaving;
  };
  const closed = ended.then(async (outcome) => {
    await end('left');
    return outcome;
  });
  return { end, closed };
}

async function run(
  thread: TrainerThread,
  adapter: { vendor: string; architecture: string; description: string },
  opts: HeadlessWorkerOptions,
): Promise<HeadlessWorker> {
  let finish!: (o: HeadlessOutcome) => void;
  const ended = new Promise<HeadlessOutcome>((resolve) => (finish = resolve));
  const log: Log = (level, text) => opts.log(level, `${opts.name}: ${text}`);
  const onOuter = opts.onOuterStep;
  const port = comlinkTrainer(thread.api);
  const trainer = idleTracked(onOuter ? timedTrainer(port, onOuter) : port);
  let composed: ComposedElastic | null = null;
  composed = await composeElastic(
    {
      trainer: trainer.port,
      http: nodeHttp(opts.origin),
      adapter,
      origin: opts.origin,
      peerId: peerIdFor(opts.name),
      invite: opts.invite,
      timeouts: opts.timeouts,
    },
    {
      log,
      onStatus: (status) => {
        opts.onStatus?.(status);
        if (status.phase === 'done') finish({ kind: 'done', detail: `job done at step ${status.committedStep}` });
        if (status.phase === 'failed') finish({ kind: 'failed', detail: status.error ?? 'the loop failed' });
      },
      onIceError: (message) => message && log('warn', message),
    },
  );
  void thread.ended.then((why) => finish({ kind: 'thread', detail: why }));
  const c = composed;
  const { end, closed } = ending(c, trainer, thread, ended, finish);
  const leave = () => end('left');
  return {
    name: opts.name,
    peerId: c.peerId,
    get status() {
      return c.status;
    },
    ended: closed,
    leave,
    crash: () => end('crashed'),
  };
}
