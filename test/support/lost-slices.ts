/**
 * The independent reference browser tests check partial commits against (issue 22): which positions a
 * lost rank computed in an outer step, from the shares the coordinator logged in `round_open`, with a
 * largest-remainder split written out here and not imported from the product (core/training/groups.ts
 * `assignStep` is what it is checked against). Also which round's split a group trained on
 * (`splitRound`), since a round that carries a group keeps its predecessor's split for that group only.
 */

export type Range = [number, number];

/** A round member as `round_open` logs it. */
export interface Member {
  workerId: string;
  rank: number;
  share: number;
  /** Its slot in the group a carried round carries (its old rank); its rank otherwise. */
  slot: number;
}

/** A round as its `round_open` event logged it. */
export interface Opened {
  round: number;
  /** The step after the last commit when it opened: a carrying round's carried group starts there. */
  step: number;
  carried: boolean;
  world: Member[];
}

/** The rounds the coordinator's event log opened, in order. */
export function openedRounds(events: readonly { event: string; data: Record<string, unknown> }[]): Opened[] {
  return events
    .filter((e) => e.event === 'round_open')
    .map((e) => ({
      round: e.data.round as number,
      step: e.data.step as number,
      carried: e.data.carried === true,
      world: e.data.world as Member[],
    }));
}

/**
 * The round whose split a group starting at `firstStep` trained on: the last round opened at or before
 * that step, except that a round opened carrying the group in flight (carried, at the group's first step)
 * trains it on the split of the round it carries it from, the one before it (walked back, as carries
 * follow each other). Every other group trains on its round's own shares, indexed by rank: a carried
 * round's members keep their old slots only for the carried group (the `slot` its event lists).
 */
export function splitRound(opens: readonly Opened[], firstStep: number): Opened {
  let i = opens.length - 1;
  while (i > 0 && opens[i].step > firstStep) i--;
  while (i > 0 && opens[i].carried && opens[i].step === firstStep) i--;
  return opens[i];
}

/** The round's shares indexed by rank. */
export function sharesByRank(round: Opened): number[] {
  const shares: number[] = [];
  for (const m of round.world) shares[m.rank] = m.share;
  return shares;
}

/**
 * The positions `slot` computes of a step of `count` positions from `start`: `count` split in proportion
 * to the shares (by slot) by largest remainders, ties to the lower slot, slices in slot order.
 */
export function sliceOf(start: number, count: number, shares: readonly number[], slot: number): Range {
  const total = shares.reduce((a, b) => a + b, 0);
  const exact = shares.map((s) => (s / total) * count);
  const sizes = exact.map(Math.floor);
  const order = exact.map((x, i) => ({ i, rem: x - sizes[i] })).sort((a, b) => b.rem - a.rem || a.i - b.i);
  for (let left = count - sizes.reduce((a, b) => a + b, 0), k = 0; left > 0; left--, k++) sizes[order[k].i]++;
  const from = start + sizes.slice(0, slot).reduce((a, b) => a + b, 0);
  return [from, from + sizes[slot]];
}

/** Positions in `ranges`. */
export const rangesCount = (ranges: readonly Range[]): number => ranges.reduce((n, [a, b]) => n + b - a, 0);

/**
 * The positions `slots` compute in an outer step whose positions, in the record's order (holes first,
 * then the tail: ascending, as holes lie below the cursor), are `group`: the group cut into steps of
 * `batch` positions, each step split by `sliceOf` and mapped back onto the group's ranges; merged.
 */
export function lostSlices(
  group: readonly Range[],
  shares: readonly number[],
  slots: readonly number[],
  batch: number,
): Range[] {
  const positions: number[] = [];
  for (const [a, b] of [...group].sort((x, y) => x[0] - y[0])) for (let p = a; p < b; p++) positions.push(p);
  const mine: number[] = [];
  for (let k = 0; k * batch < positions.length; k++) {
    const step = positions.slice(k * batch, (k + 1) * batch);
    for (const slot of slots) {
      const [from, to] = sliceOf(0, step.length, shares, slot);
      mine.push(...step.slice(from, to));
    }
  }
  mine.sort((a, b) => a - b);
  const out: Range[] = [];
  for (const p of mine) {
    const last = out.at(-1);
    if (last && last[1] === p) last[1] = p + 1;
    else out.push([p, p + 1]);
  }
  return out;
}
