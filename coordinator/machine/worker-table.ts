/**
 * The state's workers by id and its sockets by connection id, as persistent maps in plain JSON: a
 * fixed array of `TABLE_BUCKETS` buckets, each a record of the entries whose key hashes into it.
 *
 * Why not one record: every heartbeat and every step report edits one worker (and every join and
 * leave one connection), and a transition never mutates its input (context.ts), so a write must copy
 * the container it changes. With one record of every worker that copy grew with the swarm: at 1,000
 * workers `{...workers}` took 41 % of the coordinator's CPU in `npm run bench:coordinator`
 * (docs/performance.md, "A coordinator for hundreds"). With buckets a write copies the bucket array
 * (64 references) and one bucket (N/64 entries: 16 at 1,000), the two-level version of the hash array
 * mapped tries that persistent maps use (Clojure's, Immutable.js's), kept shallow because a few
 * thousand workers is the most a coordinator serves.
 *
 * Reads go through `workerOf`, `workersOf`, `workerCount` and `connectionOf`; writes through
 * context.ts (`putWorker`, `mutWorker`, `deleteWorker`, `putConnection`, `deleteConnection`), which
 * copy a bucket once per transition.
 */

/** Buckets of a table (a power of two; keys hash uniformly over them). */
export const TABLE_BUCKETS = 64;

/** Entries bucketed by `bucketOf(key)`; always `TABLE_BUCKETS` long. state.ts names the two the state has. */
export type BucketTable<T> = readonly Record<string, T>[];

export function emptyTable<T>(): BucketTable<T> {
  return Array.from({ length: TABLE_BUCKETS }, () => ({}));
}

/** The bucket of a key: FNV-1a over its UTF-16 code units, masked to the bucket count. */
export function bucketOf(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) & (TABLE_BUCKETS - 1);
}

/**
 * The entry under this key, or undefined. Keys come from untrusted messages: the lookup never reaches
 * the prototype (`__proto__`, `constructor`).
 */
export function entryOf<T>(table: BucketTable<T>, key: string): T | undefined {
  const bucket = table[bucketOf(key)];
  return Object.hasOwn(bucket, key) ? bucket[key] : undefined;
}

/** Every entry, bucket by bucket (a stable order for a given set of keys, not the order they came in). */
export function entriesOf<T>(table: BucketTable<T>): T[] {
  const all: T[] = [];
  for (const bucket of table) for (const key in bucket) all.push(bucket[key]);
  return all;
}

export function countOf(table: BucketTable<unknown>): number {
  let count = 0;
  for (const bucket of table) for (const _ in bucket) count += 1;
  return count;
}

/** A table of these entries under their keys (tests, and states built by hand). */
export function tableOf<T>(entries: Iterable<readonly [string, T]>): BucketTable<T> {
  const table = emptyTable<T>() as Record<string, T>[];
  for (const [key, value] of entries) table[bucketOf(key)][key] = value;
  return table;
}

/** The worker with this id (`state.workers`), the workers, their count; the connection of a conn id. */
export const workerOf = entryOf;
export const workersOf = entriesOf;
export const workerCount = countOf;
export const connectionOf = entryOf;

/** A table of these workers under their ids (tests, and states built by hand). */
export function workerTableOf<T extends { workerId: string }>(workers: readonly T[]): BucketTable<T> {
  return tableOf(workers.map((w) => [w.workerId, w] as const));
}
