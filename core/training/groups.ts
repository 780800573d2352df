/**
 * The group plan: which positions of an epoch's order each step of a commit group covers, as a pure
 * function of the sample record at the group's start (epoch, cursor, holes), the step's offset in the
 * group and the job's plan. Tabs and the coordinator evaluate the same functions, so no index list is
 * ever sent (docs/local-steps.md, "The sample record and its holes").
 *
 * A commit group is the steps between two commits: one step in every-step mode (commitEvery 1), H
 * steps in local sync mode. The epoch's *remaining sequence* is R = holes ++ [cursor, n): the holes a
 * partial commit left (ascending, disjoint, all below the cursor), then the untouched tail. A group
 * takes up to `commitEvery` steps of `globalBatch` positions each from the front of R, and ends early
 * when R runs out (the epoch's end). Without holes this is the layout of every earlier release: step k
 * of the epoch covers [k·B, (k+1)·B), and groups start at multiples of H·B.
 *
 * Within a step the positions are split across ranks by share (`assignStep` over the step's count, in
 * R order), so a rank's slice of a step is a list of ranges (`rankRanges`). A partial commit (local
 * mode: a rank was lost inside the outer step) commits the survivors' slices and leaves the lost
 * slices as new holes (`positionAfterGroup`), served first by the next group.
 *
 * Integer arithmetic only (the split's shares are IEEE doubles, as in `assignStep`): identical in every
 * JavaScript engine.
 */
/** What fixes the layout of steps and commit groups (a `JobPublic` satisfies it). */
export interface StepPlan {
  /** Training images in use; epoch orders permute 0..datasetSize-1. */
  datasetSize: number;
  globalBatch: number;
  epochs: number;
  /** Steps per commit group (groups.ts): 1 in every-step mode by default, H in local sync mode. */
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

/** Steps of an epoch without holes: ceil(datasetSize / globalBatch). */
export function stepsPerEpoch(plan: Pick<StepPlan, 'datasetSize' | 'globalBatch'>): number {
  return Math.ceil(plan.datasetSize / plan.globalBatch);
}

/**
 * The job's steps if no outer step is ever committed partially: an estimate for progress bars. The job
 * ends when the record passes its last epoch (`jobDone` in groups.ts), which a partial commit delays by
 * the steps that serve its holes.
 */
export function plannedSteps(plan: Pick<StepPlan, 'datasetSize' | 'globalBatch' | 'epochs'>): number {
  return stepsPerEpoch(plan) * plan.epochs;
}

/**
 * Where the record would stand after `step` committed steps had no outer step ever been committed
 * partially (step 0: epoch 0, cursor 0). For displays only (progress, samples per second): what
 * decides positions, commit points or the job's end follows the record itself (groups.ts).
 */
export function holeFreePosition(
  step: number,
  plan: Pick<StepPlan, 'datasetSize' | 'globalBatch'>,
): { epoch: number; cursor: number } {
  if (!Number.isInteger(step) || step < 0) throw new RangeError(`holeFreePosition: bad step ${step}`);
  const perEpoch = stepsPerEpoch(plan);
  const epoch = Math.floor(step / perEpoch);
  return { epoch, cursor: Math.min(plan.datasetSize, (step % perEpoch) * plan.globalBatch) };
}

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

// ---------------------------------------------------------------- groups

/** Positions [start, end) of an epoch's order (start < end). JSON: a two-element array. */
export type PositionRange = [start: number, end: number];

/**
 * Most holes a record may hold. A partial commit that would leave more is refused (the group is redone
 * instead): the list travels in every `round` and `committed` message and in the durable state.
 */
export const MAX_HOLES = 1024;

/** Where the record stands: the start of the next commit group. */
export interface RecordPosition {
  epoch: number;
  /** Positions [0, cursor) of the epoch order were consumed, less the holes. */
  cursor: number;
  /** Consumed positions left unprocessed by partial commits: ascending, disjoint, all below `cursor`. */
  holes: readonly PositionRange[];
}

/** One step of a group: its number, its positions (in R order) and their count. */
export interface StepSpan {
  step: number;
  ranges: PositionRange[];
  count: number;
}

/** The steps of one commit group and where the record stands once all of it is committed. */
export interface GroupPlan {
  epoch: number;
  /** The record position the group starts at. */
  start: RecordPosition;
  firstStep: number;
  /** The commit point: the group's last step. */
  lastStep: number;
  steps: StepSpan[];
  /** Positions in the group (all steps). */
  count: number;
  /** The record's cursor after the group: the tail it consumed. */
  cursorAfter: number;
  /** The holes the group did not reach (still holes after it). */
  holesAfter: PositionRange[];
}

/** Positions in `ranges`. */
export function rangesCount(ranges: readonly PositionRange[]): number {
  let count = 0;
  for (const [start, end] of ranges) count += end - start;
  return count;
}

/**
 * `ranges` sorted by start with adjacent ranges joined; throws on an overlap (a position twice is
 * a bug upstream, never a client's doing) or an empty or reversed range.
 */
export function mergeRanges(ranges: readonly PositionRange[]): PositionRange[] {
  const sorted = ranges.map(([s, e]): PositionRange => [s, e]).sort((a, b) => a[0] - b[0]);
  const out: PositionRange[] = [];
  for (const [start, end] of sorted) {
    if (!(Number.isInteger(start) && Number.isInteger(end) && start >= 0 && start < end))
      throw new RangeError(`mergeRanges: bad range [${start}, ${end})`);
    const last = out[out.length - 1];
    if (last && start < last[1])
      throw new RangeError(`mergeRanges: [${start}, ${end}) overlaps [${last[0]}, ${last[1]})`);
    if (last && start === last[1]) last[1] = end;
    else out.push([start, end]);
  }
  return out;
}

/** Whether two range lists are the same ranges in the same order. */
export function sameRanges(a: readonly PositionRange[], b: readonly PositionRange[]): boolean {
  return a.length === b.length && a.every(([s, e], i) => s === b[i][0] && e === b[i][1]);
}

/** Whether `holes` is a valid hole list below `cursor` (ascending, disjoint, non-adjacent, non-empty ranges). */
export function validHoles(holes: readonly PositionRange[], cursor: number): boolean {
  let previousEnd = -1;
  for (const [start, end] of holes) {
    if (!(Number.isInteger(start) && Number.isInteger(end) && start > previousEnd && start < end && end <= cursor))
      return false;
    previousEnd = end;
  }
  return true;
}

/** Positions of the epoch not yet consumed by a commit: |R| = |holes| + n − cursor. */
export function remainingCount(at: RecordPosition, n: number): number {
  return rangesCount(at.holes) + Math.max(0, n - at.cursor);
}

/** Whether the job is over at `at`: the record passed the last epoch. */
export function jobDone(at: Pick<RecordPosition, 'epoch'>, plan: Pick<StepPlan, 'epochs'>): boolean {
  return at.epoch >= plan.epochs;
}

/**
 * The commit group that starts at `at` with step `firstStep`: up to `commitEvery` steps of
 * `globalBatch` positions from the front of R = holes ++ [cursor, n), fewer at the epoch's end.
 * Throws when the job is done or the position is not a valid record position.
 */
export function groupPlan(at: RecordPosition, firstStep: number, plan: StepPlan): GroupPlan {
  const n = plan.datasetSize;
  if (jobDone(at, plan)) throw new RangeError(`groupPlan: epoch ${at.epoch} is past the job's ${plan.epochs}`);
  if (!Number.isInteger(firstStep) || firstStep < 1) throw new RangeError(`groupPlan: bad step ${firstStep}`);
  if (!(Number.isInteger(at.cursor) && at.cursor >= 0 && at.cursor <= n) || !validHoles(at.holes, at.cursor))
    throw new RangeError(`groupPlan: bad record position (cursor ${at.cursor}, ${at.holes.length} holes, n ${n})`);
  const sequence: PositionRange[] = [...at.holes.map(([s, e]): PositionRange => [s, e])];
  if (at.cursor < n) sequence.push([at.cursor, n]);
  if (sequence.length === 0) throw new RangeError(`groupPlan: nothing left in epoch ${at.epoch}`);
  const steps: StepSpan[] = [];
  let next = 0; // index into `sequence`
  let offset = sequence[0][0]; // position within sequence[next]
  for (let k = 0; k < plan.commitEvery && next < sequence.length; k++) {
    const ranges: PositionRange[] = [];
    let want = plan.globalBatch;
    while (want > 0 && next < sequence.length) {
      const end = Math.min(sequence[next][1], offset + want);
      ranges.push([offset, end]);
      want -= end - offset;
      offset = end;
      if (offset === sequence[next][1]) {
        next += 1;
        if (next < sequence.length) offset = sequence[next][0];
      }
    }
    steps.push({ step: firstStep + k, ranges, count: plan.globalBatch - want });
  }
  return finishGroup(at, firstStep, steps, sequence, next, offset);
}

/** The group's record bookkeeping once its steps are known: the cursor and holes it leaves. */
function finishGroup(
  at: RecordPosition,
  firstStep: number,
  steps: StepSpan[],
  sequence: PositionRange[],
  next: number,
  offset: number,
): GroupPlan {
  const holesAfter: PositionRange[] = [];
  for (let i = next; i < sequence.length; i++) {
    const [start, end] = sequence[i];
    if (end <= at.cursor) holesAfter.push([i === next ? offset : start, end]);
  }
  // Hole ends are at most the cursor, so the cursor moves only when the group reached the tail.
  const cursorAfter = Math.max(at.cursor, steps[steps.length - 1].ranges.at(-1)![1]);
  return {
    epoch: at.epoch,
    start: { epoch: at.epoch, cursor: at.cursor, holes: at.holes.map(([s, e]): PositionRange => [s, e]) },
    firstStep,
    lastStep: firstStep + steps.length - 1,
    steps,
    count: steps.reduce((a, s) => a + s.count, 0),
    cursorAfter,
    holesAfter,
  };
}

/**
 * The positions `slot` computes in `step`: its share of the step's count (`assignStep`, in rank order
 * over the step's positions in R order), as ranges of the epoch order. Empty when its share is empty.
 */
export function rankRanges(step: StepSpan, shares: readonly number[], slot: number): PositionRange[] {
  const slice = assignStep(0, step.count, shares)[slot];
  if (!slice) throw new RangeError(`rankRanges: slot ${slot} outside a split of ${shares.length}`);
  const out: PositionRange[] = [];
  let skip = slice.start;
  let want = slice.count;
  for (const [start, end] of step.ranges) {
    if (want === 0) break;
    const length = end - start;
    if (skip >= length) {
      skip -= length;
      continue;
    }
    const from = start + skip;
    const to = Math.min(end, from + want);
    out.push([from, to]);
    want -= to - from;
    skip = 0;
  }
  return out;
}

/** The positions the given slots compute over the whole group (merged ranges). */
export function slotsRanges(group: GroupPlan, shares: readonly number[], slots: readonly number[]): PositionRange[] {
  const all: PositionRange[] = [];
  for (const step of group.steps) for (const slot of slots) all.push(...rankRanges(step, shares, slot));
  return mergeRanges(all);
}

/** Samples the given slots compute over the whole group (the weights' denominator of a partial outer step). */
export function slotsSamples(group: GroupPlan, shares: readonly number[], slots: readonly number[]): number {
  let count = 0;
  for (const step of group.steps) {
    const slices = assignStep(0, step.count, shares);
    for (const slot of slots) count += slices[slot]?.count ?? 0;
  }
  return count;
}

/**
 * Where the record stands once `group` (started at `at`) is committed with the positions in `lost`
 * left unprocessed (a partial commit; empty: the whole group). The lost positions join the holes the
 * group did not reach; an epoch whose tail and holes are all consumed moves the record to the next
 * epoch. Throws when `lost` is not inside the group or the holes would exceed `MAX_HOLES`.
 */
export function positionAfterGroup(
  at: RecordPosition,
  group: GroupPlan,
  lost: readonly PositionRange[],
  n: number,
): RecordPosition {
  const holes = mergeRanges([...group.holesAfter, ...lost]);
  for (const [start, end] of lost)
    if (end > group.cursorAfter) throw new RangeError(`positionAfterGroup: lost [${start}, ${end}) past the group`);
  if (holes.length > MAX_HOLES) throw new RangeError(`positionAfterGroup: ${holes.length} holes exceed ${MAX_HOLES}`);
  if (group.cursorAfter >= n && holes.length === 0) return { epoch: at.epoch + 1, cursor: 0, holes: [] };
  return { epoch: at.epoch, cursor: group.cursorAfter, holes };
}

/** The dataset indices at `ranges` of `order` (a view when it is one range, else a copy). */
export function indicesAt(order: Uint32Array, ranges: readonly PositionRange[]): Uint32Array {
  if (ranges.length === 1) return order.subarray(ranges[0][0], ranges[0][1]);
  const out = new Uint32Array(rangesCount(ranges));
  let o = 0;
  for (const [start, end] of ranges) {
    out.set(order.subarray(start, end), o);
    o += end - start;
  }
  return out;
}

/**
 * Steps left in the job from `at`: the current epoch's remaining sequence in steps of `globalBatch`,
 * then whole epochs. Exact while no further partial commit happens; an estimate for progress bars.
 */
export function remainingSteps(at: RecordPosition, plan: StepPlan): number {
  if (jobDone(at, plan)) return 0;
  const perEpoch = Math.ceil(plan.datasetSize / plan.globalBatch);
  return Math.ceil(remainingCount(at, plan.datasetSize) / plan.globalBatch) + (plan.epochs - at.epoch - 1) * perEpoch;
}
