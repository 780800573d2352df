/**
 * The sampler record, after Horovod's ElasticSampler but kept by the coordinator: each epoch has one
 * order (a permutation of 0..n-1 drawn from seed+epoch), and the record says how far committed groups
 * have consumed it: a cursor, the holes partial commits left behind it, and the processed bitset (the
 * audit). Which positions a group's steps cover, and who computes which part, is the group plan
 * (groups.ts), a pure function of the record that tabs and coordinator evaluate alike, so no index
 * list is ever sent. Everything here is integer arithmetic (Math.imul, >>> 0): identical in every JS engine.
 */
import {
  groupPlan,
  indicesAt,
  mergeRanges,
  positionAfterGroup,
  rangesCount,
  sameRanges,
  validHoles,
  type GroupPlan,
  type PositionRange,
  type RecordPosition,
  type StepPlan,
} from './groups';

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

// ---------------------------------------------------------------- the record

/**
 * Progress through the current epoch. `processed` is a bitset over dataset indices (bit i of byte
 * i>>3, LSB first) as base64, so the state stays plain JSON; it always equals order[0..cursor) less
 * the holes, kept for audit. R = holes ++ [cursor, n) is what the epoch has left (groups.ts).
 */
export interface SamplerRecord {
  epoch: number;
  /** Positions [0, cursor) of the epoch order were consumed by committed groups (less the holes). */
  cursor: number;
  /**
   * Consumed positions a partial commit left unprocessed (ascending, disjoint, below `cursor`): the next
   * groups serve them first. Absent in states persisted before holes existed: read as none (`withHoles`).
   */
  holes: PositionRange[];
  /** Dataset size the bitset covers. */
  n: number;
  /** base64 bitset of processed dataset indices in this epoch. */
  processed: string;
  /** Number of set bits (= cursor − the holes' positions). */
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

function recordAt(at: RecordPosition, order: Uint32Array): SamplerRecord {
  const n = order.length;
  if (!(Number.isInteger(at.cursor) && at.cursor >= 0 && at.cursor <= n) || !validHoles(at.holes, at.cursor))
    throw new RangeError(`recordAt: bad position (cursor ${at.cursor} of ${n}, ${at.holes.length} holes)`);
  const bits = new Uint8Array((n + 7) >> 3);
  let hole = 0;
  for (let p = 0; p < at.cursor; p++) {
    while (hole < at.holes.length && at.holes[hole][1] <= p) hole++;
    if (hole < at.holes.length && at.holes[hole][0] <= p) continue;
    bits[order[p] >> 3] |= 1 << (order[p] & 7);
  }
  return {
    epoch: at.epoch,
    cursor: at.cursor,
    holes: at.holes.map(([s, e]): PositionRange => [s, e]),
    n,
    processed: bytesToBase64(bits),
    processedCount: at.cursor - rangesCount(at.holes),
  };
}

/** A record at the start of epoch 0 over n indices. */
export function emptyRecord(n: number): SamplerRecord {
  return {
    epoch: 0,
    cursor: 0,
    holes: [],
    n,
    processed: bytesToBase64(new Uint8Array((n + 7) >> 3)),
    processedCount: 0,
  };
}

/** A record as persisted, with `holes` filled in when it predates them (a store written by an older release). */
export function withHoles(record: Omit<SamplerRecord, 'holes'> & { holes?: PositionRange[] }): SamplerRecord {
  return { ...record, holes: (record.holes ?? []).map(([s, e]): PositionRange => [s, e]) };
}

/** Where the record stands (the start of the next group). */
export function recordPosition(record: SamplerRecord): RecordPosition {
  return { epoch: record.epoch, cursor: record.cursor, holes: record.holes };
}

/**
 * Commit `group` (the group plan at the record's position), less the positions in `lost` (a partial
 * commit: they become holes). `order` is the record's epoch order. Throws if the group does not start
 * at the record, `lost` is not part of it, or an index was already processed (a bug upstream, never a
 * client's doing). Finishing the epoch (tail and holes all processed) moves to the next epoch.
 *
 * `deferred`: holes the record holds that the group was planned without (the successor of an overlapped
 * group that committed partially, core/training/overlap.ts): the group starts at the record less them,
 * and they stay holes after it.
 */
export function commitGroup(
  record: SamplerRecord,
  order: Uint32Array,
  group: GroupPlan,
  lost: readonly PositionRange[] = [],
  deferred: readonly PositionRange[] = [],
): SamplerRecord {
  if (order.length !== record.n) throw new Error(`commitGroup: order of ${order.length}, record of ${record.n}`);
  const start = withDeferredHoles(group.start, deferred);
  if (!samePosition(start, recordPosition(record)))
    throw new Error(
      `commitGroup: the group starts at ${describePosition(start)}, the record is at ${describePosition(record)}`,
    );
  const consumed = mergeRanges(group.steps.flatMap((s) => s.ranges));
  const committed = subtractRanges(consumed, mergeRanges(lost));
  if (rangesCount(committed) + rangesCount(lost) !== rangesCount(consumed))
    throw new Error('commitGroup: lost positions outside the group');
  const after = positionAfterGroup(group.start, group, [...lost, ...deferred], record.n);
  const bits = base64ToBytes(record.processed);
  for (const [start, end] of committed) {
    for (let p = start; p < end; p++) {
      const index = order[p];
      const mask = 1 << (index & 7);
      if (bits[index >> 3] & mask)
        throw new Error(`commitGroup: index ${index} already processed in epoch ${record.epoch}`);
      bits[index >> 3] |= mask;
    }
  }
  if (after.epoch !== record.epoch) return emptyRecordForEpoch(after.epoch, record.n);
  return {
    epoch: record.epoch,
    cursor: after.cursor,
    holes: [...after.holes],
    n: record.n,
    processed: bytesToBase64(bits),
    processedCount: record.processedCount + rangesCount(committed),
  };
}

/** `at` with the `deferred` holes added (see `commitGroup`); `at` itself when there are none. */
export function withDeferredHoles(at: RecordPosition, deferred: readonly PositionRange[]): RecordPosition {
  return deferred.length === 0 ? at : { ...at, holes: mergeRanges([...at.holes, ...deferred]) };
}

/** Whether two record positions are the same (epoch, cursor and holes). */
export function samePosition(a: RecordPosition, b: RecordPosition): boolean {
  return a.epoch === b.epoch && a.cursor === b.cursor && sameRanges(a.holes, b.holes);
}

/** A record position for messages: `epoch 2 cursor 96 holes [8,12) [40,44)`. */
export function describePosition(at: RecordPosition): string {
  const holes = at.holes.length > 0 ? ` holes ${at.holes.map(([s, e]) => `[${s},${e})`).join(' ')}` : '';
  return `epoch ${at.epoch} cursor ${at.cursor}${holes}`;
}

/** `a` less `b` (both merged: ascending, disjoint). */
export function subtractRanges(a: readonly PositionRange[], b: readonly PositionRange[]): PositionRange[] {
  const out: PositionRange[] = [];
  let j = 0;
  for (const [start, end] of a) {
    let from = start;
    while (j < b.length && b[j][1] <= from) j++;
    let k = j;
    while (from < end && k < b.length && b[k][0] < end) {
      if (b[k][0] > from) out.push([from, b[k][0]]);
      from = Math.max(from, b[k][1]);
      k++;
    }
    if (from < end) out.push([from, end]);
  }
  return out;
}

function emptyRecordForEpoch(epoch: number, n: number): SamplerRecord {
  return { ...emptyRecord(n), epoch };
}

/** The record at `at` (a rollback to a checkpoint or to a commit). `order` is that epoch's order. */
export function rollbackTo(at: RecordPosition, order: Uint32Array): SamplerRecord {
  return recordAt(at, order);
}

/**
 * The unconsumed part of the epoch in R order (holes, then the tail): Horovod's `all − processed`, without
 * re-shuffling. A view of `order` when it is one range (`indicesAt`), else a copy.
 */
export function remaining(record: SamplerRecord, order: Uint32Array): Uint32Array {
  const ranges: PositionRange[] = [...record.holes];
  if (record.cursor < order.length) ranges.push([record.cursor, order.length]);
  return indicesAt(order, ranges);
}

/** The group plan that starts at the record (`firstStep`: the step after the last commit). */
export function groupAt(record: SamplerRecord, firstStep: number, plan: StepPlan): GroupPlan {
  return groupPlan(recordPosition(record), firstStep, plan);
}
