/**
 * The state's workers by id, as a persistent map in plain JSON: a fixed array of `WORKER_BUCKETS`
 * buckets, each a record of the workers whose id hashes into it.
 *
 * Why not one record: every heartbeat and every step report edits one worker, and a transition never
 * mutates its input (context.ts), so a write must copy the container it changes. With one record of
 * every worker that copy grew with the swarm: at 1,000 workers `{...workers}` took 41 % of the
 * coordinator's CPU in `npm run bench:coordinator` (docs/performance.md, "A coordinator for hundreds").
 * With buckets a write copies the bucket array (64 references) and one bucket (N/64 workers: 16 at
 * 1,000), the two-level version of the hash array mapped tries that persistent maps use (Clojure's,
 * Immutable.js's), kept shallow because a few thousand workers is the most a coordinator serves.
 *
 * Reads go through `workerOf`, `workersOf` and `workerCount`; writes through context.ts (`putWorker`,
 * `mutWorker`, `deleteWorker`), which copy a bucket once per transition.
 */
import type { WorkerInfo } from './state';

/** Buckets of the table (a power of two; ids hash uniformly over them). */
export const WORKER_BUCKETS = 64;

/** The workers, bucketed by `bucketOf(workerId)`; always `WORKER_BUCKETS` long. */
export type WorkerTable = readonly Record<string, WorkerInfo>[];

export function emptyWorkerTable(): WorkerTable {
  return Array.from({ length: WORKER_BUCKETS }, () => ({}));
}

/** The bucket of an id: FNV-1a over its UTF-16 code units, masked to the bucket count. */
export function bucketOf(workerId: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < workerId.length; i++) {
    h ^= workerId.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) & (WORKER_BUCKETS - 1);
}

/**
 * The worker with this id, or undefined. Ids come from untrusted messages: the lookup never reaches
 * the prototype (`__proto__`, `constructor`).
 */
export function workerOf(table: WorkerTable, workerId: string): WorkerInfo | undefined {
  const bucket = table[bucketOf(workerId)];
  return Object.hasOwn(bucket, workerId) ? bucket[workerId] : undefined;
}

/** Every worker, bucket by bucket (a stable order for a given set of ids, not the order they joined). */
export function workersOf(table: WorkerTable): WorkerInfo[] {
  const all: WorkerInfo[] = [];
  for (const bucket of table) for (const id in bucket) all.push(bucket[id]);
  return all;
}

export function workerCount(table: WorkerTable): number {
  let count = 0;
  for (const bucket of table) for (const _ in bucket) count += 1;
  return count;
}

/** A table from a list of workers (tests, and states built by hand). */
export function workerTableOf(workers: readonly WorkerInfo[]): WorkerTable {
  const table = emptyWorkerTable() as Record<string, WorkerInfo>[];
  for (const w of workers) table[bucketOf(w.workerId)][w.workerId] = w;
  return table;
}
