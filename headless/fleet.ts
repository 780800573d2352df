/**
 * `--count K` headless workers in one process: the dataset fetched once and shared, the workers started
 * a few at a time (each compiles the kernels on its own device: starting 64 at once on 2 cores would
 * starve the heartbeats of those already training), each a separate worker to the coordinator. Ends when
 * every worker has ended; `leaveAll` says goodbye for each first (Ctrl-C).
 *
 * Why threads in one process rather than K processes: docs/headless.md ("One process or many"), with
 * the memory per worker that `npm run bench:scale` measured both ways.
 */
import type { DatasetCache } from '../web/worker/data/dataset-client';
import type { ElasticTimeouts } from '../web/elastic/elastic-loop';
import { type HeadlessDataset, loadHeadlessDataset } from './dataset';
import { type HeadlessOutcome, type HeadlessWorker, type Log, startHeadlessWorker } from './headless-worker';
import type { OuterStepTiming } from './step-timing';

export interface FleetOptions {
  origin: URL;
  invite: string | null;
  count: number;
  /** The workers' names: `name` alone for one, `name-1` … `name-K` for several. */
  name: string;
  cache: DatasetCache | null;
  /** How many workers prepare (thread, device, kernels) at once. */
  startParallel: number;
  log: Log;
  timeouts?: Partial<ElasticTimeouts>;
  /** Each worker's outer-step time split, by worker name (`--timings`). */
  onOuterStep?(name: string, timing: OuterStepTiming): void;
}

export interface Fleet {
  readonly workers: readonly HeadlessWorker[];
  /** Every worker's outcome, in start order (a worker that could not start counts as failed). */
  readonly ended: Promise<HeadlessOutcome[]>;
  /** Goodbye from every worker (and stop starting new ones). */
  leaveAll(): Promise<void>;
  /**
   * One control line (`--control`, for tools that fault single workers of a process): `leave NAME` (goodbye),
   * `crash NAME` (no goodbye, the sockets just close), `join NAME` (one more worker). Returns what it did.
   */
  control(line: string): Promise<string>;
}

export function workerNames(name: string, count: number): string[] {
  return count === 1 ? [name] : Array.from({ length: count }, (_, i) => `${name}-${i + 1}`);
}

/** Tries per worker: a start on a loaded machine can miss the signalling server's or the handshake's deadline. */
export const START_TRIES = 3;

/** Start worker `name`, again (after a pause) when a try fails, up to START_TRIES. */
async function startWithRetries(
  o: FleetOptions,
  name: string,
  dataset: HeadlessDataset,
  stopping: () => boolean,
): Promise<HeadlessWorker> {
  const onOuter = o.onOuterStep;
  for (let attempt = 1; ; attempt++) {
    try {
      return await startHeadlessWorker({ ...o, name, dataset, onOuterStep: onOuter && ((t) => onOuter(name, t)) });
    } catch (err) {
      if (attempt >= START_TRIES || stopping()) throw err;
      o.log('warn', `${name}: start ${attempt} of ${START_TRIES} failed (${(err as Error).message}); trying again`);
      await new Promise((r) => setTimeout(r, 1000 * attempt));
    }
  }
}

/** One `--control` line on `workers`; `join` asks `add` for a new worker (false: the fleet is stopping). */
function controlLine(line: string, workers: readonly HeadlessWorker[], add: (name: string) => boolean): string {
  const [verb, name] = line.trim().split(/\s+/);
  if (verb === 'join' && name && /^[A-Za-z0-9_-]{1,32}$/.test(name))
    return add(name) ? `joining ${name}` : 'stopping: no join';
  const w = workers.find((x) => x.name === name);
  if (!w) return `no worker ${name ?? ''}`;
  if (verb === 'leave') void w.leave();
  else if (verb === 'crash') void w.crash();
  else return `unknown control ${verb}`;
  return `${verb} ${name}`;
}

export async function startFleet(o: FleetOptions): Promise<Fleet> {
  const dataset = await loadHeadlessDataset(o.origin, o.cache);
  const names = workerNames(o.name, o.count);
  const workers: HeadlessWorker[] = [];
  const outcomes: Promise<HeadlessOutcome>[] = [];
  let stopping = false;
  let next = 0;
  const startNamed = async (name: string): Promise<void> => {
    // The next start waits for this one's preparation (thread, device, dataset, hello), not its whole run.
    const prepared = startWithRetries(o, name, dataset, () => stopping);
    outcomes.push(
      prepared.then(
        (w) => w.ended,
        (err: Error): HeadlessOutcome => ({ kind: 'failed', detail: err.message }),
      ),
    );
    try {
      const w = await prepared;
      workers.push(w);
      o.log('info', `${name}: started as peer ${w.peerId}`);
      if (stopping) void w.leave();
    } catch (err) {
      o.log('error', `${name}: could not start: ${(err as Error).message}`);
    }
  };
  const startOne = async (): Promise<void> => {
    while (!stopping && next < names.length) await startNamed(names[next++]!);
  };
  // Starters run in the background: the fleet is returned at once, so a signal can stop it mid-start.
  const starters = Array.from({ length: Math.min(o.startParallel, names.length) }, () => startOne());
  // Workers a control line adds are waited for too: `ended` settles once no start is pending.
  const pending = new Set<Promise<void>>(starters);
  const settle = async (): Promise<HeadlessOutcome[]> => {
    while (pending.size > 0) await Promise.all([...pending]);
    const all = await Promise.all(outcomes);
    return outcomes.length === all.length ? all : settle();
  };
  for (const s of starters) void s.finally(() => pending.delete(s));
  const ended = settle();
  return {
    workers,
    ended,
    leaveAll: async () => {
      stopping = true;
      await Promise.all(workers.map((w) => w.leave()));
    },
    control: async (line) =>
      controlLine(line, workers, (name) => {
        if (stopping) return false;
        const start = startNamed(name);
        pending.add(start);
        void start.finally(() => pending.delete(start));
        return true;
      }),
  };
}
