/**
 * How a round's committed state reaches the members that lack it (joiners, a tab that restored an older
 * state): along the ring, from every member that holds it. Both ends compute it from the round message
 * alone (the coordinator for the ring order and the ready deadline, each tab for what it sends and
 * receives), so it lives here.
 *
 * Every holder whose right neighbour lacks the state is the root of a relay chain: the run of
 * non-holders after it. Each non-holder receives from its left neighbour and, if its right neighbour
 * lacks the state too, forwards each verified chunk on as it arrives (cut-through, web/net/broadcast.ts
 * `broadcastRelay`), so a chain of L costs about one transfer plus L chunk times, not L transfers, and
 * no holder sends the state more than once. Holders between holders send and receive nothing.
 *
 * The coordinator orders a joining round's ring so that the chains are as short as the holders allow
 * (`spreadNonHolders`): 32 joiners arriving among 32 holders each receive from a different holder, one
 * hop; 32 joiners and one holder form one chain of 32, fed once by that holder. Either way no donor
 * serves more than one copy, which is what makes many simultaneous joiners cost about what one costs.
 * This is the pipelined chain broadcast of MPI libraries (MPICH's and Open MPI's "pipeline" and "chain"
 * algorithms for large messages) with several roots, on the ring links a round already has.
 */

import type { StateSource } from '../protocol/coordinator-messages';

/** What rank `rank` of a ring of `size` does when `holders` (ranks holding the state) are the sources. */
export interface StateRoute {
  /** Receive the state from the left neighbour (this rank lacks it). */
  readonly receiveFromLeft: boolean;
  /** Send it to the right neighbour (that rank lacks it): as a root, or forwarding as a relay. */
  readonly sendToRight: boolean;
}

/** The route of `rank`; `holders` must hold at least one rank of 0..size−1. */
export function stateRoute(rank: number, size: number, holders: readonly number[]): StateRoute {
  if (size <= 1) return { receiveFromLeft: false, sendToRight: false };
  const holds = new Set(holders);
  if (holds.size === 0) throw new RangeError('stateRoute: no rank holds the state');
  return { receiveFromLeft: !holds.has(rank), sendToRight: !holds.has((rank + 1) % size) };
}

/**
 * The longest run of consecutive non-holders around the ring: the deepest relay chain, which bounds
 * how many hops the state takes to its last receiver (0 when every rank holds it).
 */
export function longestRelayChain(size: number, holders: readonly number[]): number {
  const holds = new Set(holders);
  // No holder, no route (`stateRoute` refuses one): nothing is relayed.
  if (holds.size === 0) return 0;
  let longest = 0;
  let run = 0;
  // Twice around, so a run across the wrap point (rank size−1 to rank 0) is counted whole.
  for (let i = 0; i < 2 * size; i++) {
    run = holds.has(i % size) ? 0 : run + 1;
    longest = Math.max(longest, run);
  }
  return longest;
}

/** The ranks a round's `stateFrom` names as holding the state (`peer`: one, `peers`: several); null for the other sources. */
export function holdersOf(stateFrom: StateSource): readonly number[] | null {
  if (stateFrom.kind === 'peer') return [stateFrom.rank];
  if (stateFrom.kind === 'peers') return stateFrom.ranks;
  return null;
}

/**
 * The deepest relay chain a round's planned order may keep; past it the coordinator spreads the members
 * that lack the state (`spreadNonHolders`). A chain of L costs about one transfer plus L chunk times
 * (16 kB each), so a few relays cost less than one more round trip; spreading reorders the ranks (and
 * with them which slices each member computes, and the planned tour), so it is done only where it pays:
 * many joiners at once.
 */
export const MAX_PLANNED_RELAY_CHAIN = 4;

/**
 * A ring order (`order`: member indices, as the topology planner gave them) with the members that lack
 * the state (`lacks(member)`) spread evenly behind the holders, each holder followed by at most
 * ⌈lacking / holders⌉ of them. Holders keep their planned relative order (the measured part of the
 * tour), and so do the others. Unchanged when nobody or everybody lacks the state.
 */
export function spreadNonHolders(order: readonly number[], lacks: (member: number) => boolean): number[] {
  const holders = order.filter((m) => !lacks(m));
  const others = order.filter((m) => lacks(m));
  if (holders.length === 0 || others.length === 0) return [...order];
  const spread: number[] = [];
  let next = 0;
  for (let i = 0; i < holders.length; i++) {
    spread.push(holders[i]);
    // Of the others still to place, this holder takes its even part of what the remaining holders share.
    const take = Math.ceil((others.length - next) / (holders.length - i));
    for (let k = 0; k < take; k++) spread.push(others[next++]);
  }
  return spread;
}
