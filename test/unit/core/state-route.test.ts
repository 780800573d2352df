/**
 * The state route of a joining round (core/training/state-route.ts), checked by simulating it: for every
 * ring of 1–7 ranks and every non-empty set of holders, each rank lacking the state receives it exactly
 * once, from a rank that has it by then, holders send only to a rank that lacks it and receive nothing,
 * and the deepest chain is what `longestRelayChain` says. `spreadNonHolders` is checked against its
 * contract: holders keep their order, nobody waits behind more than ⌈lacking / holders⌉ of them.
 */
import { describe, expect, it } from 'vitest';
import { longestRelayChain, spreadNonHolders, stateRoute } from '../../../core/training/state-route';

/** Every non-empty subset of 0..size−1, as ascending arrays. */
function subsets(size: number): number[][] {
  const out: number[][] = [];
  for (let mask = 1; mask < 1 << size; mask++)
    out.push(Array.from({ length: size }, (_, r) => r).filter((r) => mask & (1 << r)));
  return out;
}

describe('stateRoute', () => {
  it('reaches every rank lacking the state once, from a rank that has it, along chains as deep as longestRelayChain', () => {
    for (let size = 1; size <= 7; size++) {
      for (const holders of subsets(size)) {
        const routes = Array.from({ length: size }, (_, r) => stateRoute(r, size, holders));
        // Hop by hop: a rank sends once it has the state; its right neighbour receives from it.
        const hopOf = new Array<number>(size).fill(-1);
        for (const h of holders) hopOf[h] = 0;
        for (let hop = 0; hop < size; hop++) {
          for (let r = 0; r < size; r++) {
            if (hopOf[r] !== hop || !routes[r].sendToRight) continue;
            const right = (r + 1) % size;
            expect(routes[right].receiveFromLeft, `size ${size} holders ${holders}: ${right} receives`).toBe(true);
            expect(hopOf[right], `size ${size} holders ${holders}: ${right} receives once`).toBe(-1);
            hopOf[right] = hop + 1;
          }
        }
        expect(
          hopOf.every((h) => h >= 0),
          `size ${size} holders ${holders}: everyone has it`,
        ).toBe(true);
        for (const h of holders) expect(routes[h].receiveFromLeft).toBe(false);
        expect(routes.filter((x) => x.receiveFromLeft)).toHaveLength(size - holders.length);
        expect(Math.max(...hopOf)).toBe(longestRelayChain(size, holders));
      }
    }
  });

  it('refuses a round with no holder', () => {
    expect(() => stateRoute(0, 3, [])).toThrow(RangeError);
  });
});

describe('spreadNonHolders', () => {
  it('keeps holders and others in their planned order, each holder followed by at most its even part', () => {
    for (let size = 1; size <= 9; size++) {
      for (const holding of subsets(size)) {
        // A planned order that is not the identity: reversed.
        const order = Array.from({ length: size }, (_, i) => size - 1 - i);
        const lacks = (m: number) => !holding.includes(m);
        const spread = spreadNonHolders(order, lacks);
        expect([...spread].sort((a, b) => a - b)).toEqual([...order].sort((a, b) => a - b));
        expect(spread.filter((m) => !lacks(m))).toEqual(order.filter((m) => !lacks(m)));
        expect(spread.filter(lacks)).toEqual(order.filter(lacks));
        const holderRanks = spread.flatMap((m, r) => (lacks(m) ? [] : [r]));
        const lacking = size - holding.length;
        expect(longestRelayChain(size, holderRanks)).toBe(Math.ceil(lacking / holding.length));
      }
    }
  });

  it('puts 32 joiners among 32 holders one behind each, and behind one holder in a single chain', () => {
    const order = Array.from({ length: 64 }, (_, i) => i);
    const joiners = (m: number) => m >= 32;
    const spread = spreadNonHolders(order, joiners);
    expect(
      longestRelayChain(
        64,
        spread.flatMap((m, r) => (joiners(m) ? [] : [r])),
      ),
    ).toBe(1);
    const alone = spreadNonHolders(
      Array.from({ length: 33 }, (_, i) => i),
      (m) => m !== 7,
    );
    expect(alone[0]).toBe(7);
    expect(longestRelayChain(33, [0])).toBe(32);
  });
});
