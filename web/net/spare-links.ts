/**
 * Spare links: each rank of a ring also links to the ranks two places away, in the background once the
 * ring is up, so that when one rank is lost its two neighbours, the next round's new pair, are already
 * linked.
 *
 * Why: a lost rank's neighbours must link to each other before the survivors' round can train. On a
 * loaded machine that first connection took about a second, and some never opened until dialed again
 * (web/net/dial-budget.ts); bench:scale at N = 32 with churn spent most of each failure round's start on
 * it. A round that carries the survivors on keeps the old order without the lost rank (the coordinator's
 * rendezvous), so the link two places away is exactly the one it needs. This is the ring counterpart of
 * what hivemind gets from its DHT and PCCL from its full mesh: the next partner is known before it is
 * needed.
 *
 * The cost: two more peer connections per rank (each with its own stripes, web/net/stripe-policy.ts),
 * idle but for ICE consent checks. Rings of 3 or fewer have none: two places away is a neighbour.
 *
 * ```ts
 * spareRanks(8, 0);   // [2, 6]
 * spareRanks(4, 1);   // [3]: both ways lead to the same rank
 * spareRanks(3, 0);   // []
 * ```
 */

/** The ranks two places either way from `rank` in a ring of `size`, without ring neighbours or repeats. */
export function spareRanks(size: number, rank: number): number[] {
  if (!Number.isInteger(size) || !Number.isInteger(rank) || size < 4 || rank < 0 || rank >= size) return [];
  return [...new Set([(rank + 2) % size, (rank - 2 + size) % size])];
}
