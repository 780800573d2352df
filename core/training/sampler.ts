/**
 * The sampler record, after Horovod's ElasticSampler but kept by the coordinator: each epoch has one
 * order (a permutation of 0..n-1 drawn from seed+epoch), committed steps consume it in order,
 * `globalBatch` positions at a time, the last step of an epoch may be short (no padding, no duplicates).
 * Which positions form a step depends only on the step number; the world only decides who computes
 * which part (`assignStep`), so tabs and coordinator evaluate the same pure functions and never ship
 * index lists. Everything here is integer arithmetic (Math.imul, >>> 0): identical in every JS engine.
 */

// ---------------------------------------------------------------- epoch order

/** A 32-bit mix (splitmix32 finaliser) so nearby seeds/epochs give unrelated streams. */
function mix32(x: number): number {
  x = (x + 0x9e3779b9) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** mulberry32: a small, well-tested 32-bit generator; returns uint32. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** Uniform integer in [0, bound) by rejection (no modulo bias), bound ≤ 2^32. */
function below(next: () => number, bound: number): number {
  const limit = 4294967296 - (4294967296 % bound);
  for (;;) {
    const x = next();
    if (x < limit) return x % bound;
  }
}

const orderCache: { key: string; order: Uint32Array }[] = [];

/**
 * The order of epoch `epoch`: a permutation of 0..n-1 (Fisher–Yates driven by mulberry32 seeded from
 * seed and epoch). Deterministic everywhere. The result is cached (a few recent orders) and frozen in
 * spirit: do not modify it.
 */
export function epochOrder(seed: number, epoch: number, n: number): Uint32Array {
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new RangeError(`epochOrder: bad n ${n}`);
  const key = `${seed >>> 0}:${epoch}:${n}`;
  const hit = orderCache.find((c) => c.key === key);
  if (hit) return hit.order;
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  const next = mulberry32(mix32(mix32(seed >>> 0) ^ (epoch >>> 0)));
  for (let i = n - 1; i > 0; i--) {
    const j = below(next, i + 1);
    const t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  orderCache.unshift({ key, order });
  if (orderCache.length > 4) orderCache.pop();
  return order;
}

// ---------------------------------------------------------------- steps

/** What fixes the step → samples mapping (a `JobPublic` satisfies it). */
export interface StepPlan {
  /** Training images in use; epoch orders permute 0..datasetSize-1. */
  datasetSize: number;
  globalBatch: number;
  epochs: number;
  commitEvery: number;
}

/** The step plan of a job over `datasetSize` images (a coordinator state satisfies the argument). */
export function planOf(s: { datasetSize: number; job: Omit<StepPlan, 'datasetSize'> }): StepPlan {
  return {
    datasetSize: s.datasetSize,
    globalBatch: s.job.globalBatch,
    epochs: s.job.epochs,
    commitEvery: s.job.commitEvery,
  };
}

export function stepsPerEpoch(plan: StepPlan): number {
  return Math.ceil(plan.datasetSize / plan.globalBatch);
}

export function totalSteps(plan: StepPlan): number {
  return stepsPerEpoch(plan) * plan.epochs;
}

/** Positions in the step starting at `cursor` of an epoch of n: globalBatch, or fewer at the end. */
export function stepSize(cursor: number, n: number, globalBatch: number): number {
  return Math.max(0, Math.min(globalBatch, n - cursor));
}

/** Where step `step` (1-based) reads: its epoch, first position and size. */
export function stepPosition(step: number, plan: StepPlan): { epoch: number; cursor: number; count: number } {
  if (!Number.isInteger(step) || step < 1) throw new RangeError(`stepPosition: bad step ${step}`);
  const perEpoch = stepsPerEpoch(plan);
  const epoch = Math.floor((step - 1) / perEpoch);
  const cursor = ((step - 1) % perEpoch) * plan.globalBatch;
  return { epoch, cursor, count: stepSize(cursor, plan.datasetSize, plan.globalBatch) };
}

/** Record position after `step` steps have been committed (step 0: epoch 0, cursor 0). */
export function positionAfter(step: number, plan: StepPlan): { epoch: number; cursor: number } {
  if (step === 0) return { epoch: 0, cursor: 0 };
  const { epoch, cursor, count } = stepPosition(step, plan);
  return cursor + count >= plan.datasetSize ? { epoch: epoch + 1, cursor: 0 } : { epoch, cursor: cursor + count };
}

/**
 * Steps after which ranks wait for `committed` and the coordinator commits: every commitEvery-th step
 * of each epoch (counted from the epoch's first step, so in local sync mode every outer step but an
 * epoch's last consumes commitEvery · globalBatch positions), each epoch's last step and the job's last
 * step. A pure function of the step number, so tabs and coordinator agree without history.
 */
export function isCommitPoint(step: number, plan: StepPlan): boolean {
  const perEpoch = stepsPerEpoch(plan);
  const inEpoch = ((step - 1) % perEpoch) + 1;
  return inEpoch % plan.commitEvery === 0 || inEpoch === perEpoch || step === totalSteps(plan);
}

/** The first commit point after `committedStep` (a commit point, or 0). */
export function nextCommitPoint(committedStep: number, plan: StepPlan): number {
  const perEpoch = stepsPerEpoch(plan);
  const epochStart = Math.floor(committedStep / perEpoch) * perEpoch;
  const byEvery = epochStart + (Math.floor((committedStep - epochStart) / plan.commitEvery) + 1) * plan.commitEvery;
  return Math.min(byEvery, epochStart + perEpoch, totalSteps(plan));
}

/** The last commit point before `step` (0 at the start): the committed state step `step` builds on. */
export function previousCommitPoint(step: number, plan: StepPlan): number {
  const perEpoch = stepsPerEpoch(plan);
  const epochStart = Math.floor((step - 1) / perEpoch) * perEpoch;
  return epochStart + Math.floor((step - 1 - epochStart) / plan.commitEvery) * plan.commitEvery;
}

/**
 * Commit points after which rank 0 is asked for a durable checkpoint: the first commit point at or
 * after each multiple of `checkpointEvery` (with commits every step: exactly the multiples), each
 * epoch's last step and the job's last step.
 */
export function isCheckpointPoint(step: number, plan: StepPlan & { checkpointEvery: number }): boolean {
  if (!isCommitPoint(step, plan)) return false;
  if (step % stepsPerEpoch(plan) === 0 || step === totalSteps(plan)) return true;
  return passesMultiple(step, plan.checkpointEvery, plan);
}

/**
 * Whether commit point `step` is the first at or after a multiple of `every`: a multiple lies in
 * (previous commit point, step]. Checkpoints and evaluations are scheduled by it.
 */
export function passesMultiple(step: number, every: number, plan: StepPlan): boolean {
  return Math.floor(step / every) > Math.floor(previousCommitPoint(step, plan) / every);
}

// ---------------------------------------------------------------- split across ranks

/**
 * Split `count` positions starting at `cursor` into contiguous slices, one per rank, sized in
 * proportion to `shares` by the largest-remainder method (ties to the lower rank). Slices are in rank
 * order, disjoint, and cover [cursor, cursor+count) exactly. Deterministic (IEEE arithmetic only).
 */
export function assignStep(
  cursor: number,
  count: number,
  shares: readonly number[],
): { start: number; count: number }[] {
  const world = shares.length;
  if (world === 0) throw new RangeError('assignStep: empty world');
  let total = 0;
  for (const s of shares) {
    if (!(s >= 0) || !Number.isFinite(s)) throw new RangeError(`assignStep: bad share ${s}`);
    total += s;
  }
  const weights = total > 0 ? shares.map((s) => s / total) : shares.map(() => 1 / world);
  const sizes = weights.map((w) => Math.floor(w * count));
  let left = count - sizes.reduce((a, b) => a + b, 0);
  // Floating error can only make floor() undershoot by a unit or so; never overshoot past count.
  if (left < 0) throw new Error('assignStep: internal rounding error');
  const byRemainder = weights
    .map((w, rank) => ({ rank, rem: w * count - sizes[rank] }))
    .sort((a, b) => b.rem - a.rem || a.rank - b.rank);
  for (let i = 0; left > 0; i = (i + 1) % world, left--) sizes[byRemainder[i].rank]++;
  const slices: { start: number; count: number }[] = [];
  let start = cursor;
  for (const size of sizes) {
    slices.push({ start, count: size });
    start += size;
  }
  return slices;
}

/** The dataset indices `rank` computes in the step starting at `cursor` of `order`. A view, not a copy. */
export function indicesForRank(
  order: Uint32Array,
  cursor: number,
  globalBatch: number,
  shares: readonly number[],
  rank: number,
): Uint32Array {
  const count = stepSize(cursor, order.length, globalBatch);
  const slice = assignStep(cursor, count, shares)[rank];
  if (!slice) throw new RangeError(`indicesForRank: rank ${rank} outside a world of ${shares.length}`);
  return order.subarray(slice.start, slice.start + slice.count);
}

// ---------------------------------------------------------------- the record

/**
 * Progress through the current epoch. `processed` is a bitset over dataset indices (bit i of byte
 * i>>3, LSB first) as base64, so the state stays plain JSON; it always equals the set of
 * order[0..cursor), kept for audit.
 */
export interface SamplerRecord {
  epoch: number;
  /** Positions of the epoch order consumed by committed steps. */
  cursor: number;
  /** Dataset size the bitset covers. */
  n: number;
  /** base64 bitset of processed dataset indices in this epoch. */
  processed: string;
  /** Number of set bits (= cursor). */
  processedCount: number;
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_INDEX = new Int16Array(128).fill(-1);
for (let i = 0; i < 64; i++) B64_INDEX[B64.charCodeAt(i)] = i;

export function bytesToBase64(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i];
    const b = i + 1 < bytes.length ? bytes[i + 1] : 0;
    const c = i + 2 < bytes.length ? bytes[i + 2] : 0;
    out += B64[a >> 2] + B64[((a & 3) << 4) | (b >> 4)];
    out += i + 1 < bytes.length ? B64[((b & 15) << 2) | (c >> 6)] : '=';
    out += i + 2 < bytes.length ? B64[c & 63] : '=';
  }
  return out;
}

export function base64ToBytes(text: string): Uint8Array {
  if (text.length % 4 !== 0) throw new Error('base64: length not a multiple of 4');
  const pad = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const out = new Uint8Array((text.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < text.length; i += 4) {
    const q = [0, 1, 2, 3].map((k) => {
      const ch = text.charCodeAt(i + k);
      if (ch === 61 /* = */ && i + k >= text.length - pad) return 0;
      const v = ch < 128 ? B64_INDEX[ch] : -1;
      if (v < 0) throw new Error('base64: bad character');
      return v;
    });
    const triple = (q[0] << 18) | (q[1] << 12) | (q[2] << 6) | q[3];
    if (o < out.length) out[o++] = (triple >> 16) & 255;
    if (o < out.length) out[o++] = (triple >> 8) & 255;
    if (o < out.length) out[o++] = triple & 255;
  }
  return out;
}

/** The processed set as dataset indices (ascending). */
export function processedIndices(record: SamplerRecord): number[] {
  const bits = base64ToBytes(record.processed);
  const out: number[] = [];
  for (let i = 0; i < record.n; i++) if (bits[i >> 3] & (1 << (i & 7))) out.push(i);
  return out;
}

function recordAt(epoch: number, cursor: number, order: Uint32Array): SamplerRecord {
  const n = order.length;
  const bits = new Uint8Array((n + 7) >> 3);
  for (let p = 0; p < cursor; p++) bits[order[p] >> 3] |= 1 << (order[p] & 7);
  return { epoch, cursor, n, processed: bytesToBase64(bits), processedCount: cursor };
}

/** A record at the start of epoch 0 over n indices. */
export function emptyRecord(n: number): SamplerRecord {
  return { epoch: 0, cursor: 0, n, processed: bytesToBase64(new Uint8Array((n + 7) >> 3)), processedCount: 0 };
}

/**
 * Mark `count` positions from the cursor as processed (a committed step or group of steps).
 * `order` is the record's epoch order. Throws if the positions run past the epoch or an index was
 * already processed (that would be a bug upstream, never a client's doing). Finishing the epoch moves
 * the record to the next epoch with an empty set.
 */
export function commitStep(record: SamplerRecord, order: Uint32Array, count: number): SamplerRecord {
  if (order.length !== record.n) throw new Error(`commitStep: order of ${order.length}, record of ${record.n}`);
  if (!Number.isInteger(count) || count < 0 || record.cursor + count > record.n) {
    throw new Error(`commitStep: ${count} positions from ${record.cursor} exceed the epoch of ${record.n}`);
  }
  const end = record.cursor + count;
  const bits = base64ToBytes(record.processed);
  for (let p = record.cursor; p < end; p++) {
    const index = order[p];
    const mask = 1 << (index & 7);
    if (bits[index >> 3] & mask)
      throw new Error(`commitStep: index ${index} already processed in epoch ${record.epoch}`);
    bits[index >> 3] |= mask;
  }
  if (end === record.n) return emptyRecordForEpoch(record.epoch + 1, record.n);
  return {
    epoch: record.epoch,
    cursor: end,
    n: record.n,
    processed: bytesToBase64(bits),
    processedCount: record.processedCount + count,
  };
}

function emptyRecordForEpoch(epoch: number, n: number): SamplerRecord {
  return { ...emptyRecord(n), epoch };
}

/** The record as it was at (epoch, cursor): a rollback to a checkpoint. `order` is that epoch's order. */
export function rollbackTo(epoch: number, cursor: number, order: Uint32Array): SamplerRecord {
  if (cursor < 0 || cursor > order.length)
    throw new RangeError(`rollbackTo: cursor ${cursor} outside 0..${order.length}`);
  return recordAt(epoch, cursor, order);
}

/** The unconsumed part of the epoch, in order (Horovod's `all − processed`, without re-shuffling). */
export function remaining(record: SamplerRecord, order: Uint32Array): Uint32Array {
  return order.subarray(record.cursor);
}
