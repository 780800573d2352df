/**
 * The slowest access link a volunteer is expected to bring, and the time-outs that follow from it.
 *
 * A fixed time-out that suits a LAN (a 30 s ready deadline, a 20 s allreduce) livelocks a job on a slow,
 * lossy link: every round misses the same deadline the same way (bench/RESULTS.md, bench:sync on the
 * poor profile). Both ends therefore add the time the bytes in question take at `FLOOR_RATE_BITS_PER_S`
 * to their fixed limits. Both compute it alike from the job (model size) and the world size, so no rank
 * and not the coordinator has a shorter fuse than the others. 1 Mbit/s is a poor DSL uplink or a weak
 * mobile link; below that a volunteer is not expected to help an every-step job (local steps: docs/local-steps.md).
 */
import { type ModelSpec, parameterLayout } from './model-spec';
import type { StateSource } from '../protocol/coordinator-messages';
import { holdersOf, longestRelayChain } from './state-route';

export const FLOOR_RATE_BITS_PER_S = 1e6;

/** Milliseconds `bytes` take at the floor rate. */
export function floorTransferMs(bytes: number): number {
  return ((Math.max(0, bytes) * 8) / FLOOR_RATE_BITS_PER_S) * 1000;
}

/** Bytes of a training state on the wire: parameters and the optimizer's two moment buffers, float32. */
export function stateBytes(model: ModelSpec): number {
  return parameterLayout(model).totalElements * 4 * 3;
}

/** Milliseconds one transfer of the training state takes at the floor rate (a checkpoint download). */
export function stateTransferMs(model: ModelSpec): number {
  return Math.round(floorTransferMs(stateBytes(model)));
}

/**
 * Extra time for a round's state sync: the state relayed along the ring from its holders
 * (core/training/state-route.ts) to a chain of `chainLength` members that lack it. Relays forward each
 * chunk as it arrives, so a chain costs about one transfer; the allowance is one transfer per member of
 * the chain all the same, at the floor rate, because a chain moves at its slowest member's pace and
 * every member of it must have hashed the whole state before it acknowledges.
 */
export function stateSyncAllowanceMs(model: ModelSpec, chainLength: number): number {
  return Math.round(Math.max(0, chainLength) * floorTransferMs(stateBytes(model)));
}

/** The deepest relay chain of a round whose state comes from `stateFrom` (0: nothing relayed). */
export function relayChainOf(stateFrom: StateSource, worldSize: number): number {
  const holders = holdersOf(stateFrom);
  return holders ? longestRelayChain(worldSize, holders) : 0;
}

/**
 * Extra time before a round's ready deadline for the state transfer its sync needs: none for a fresh
 * start or when every member holds the state (`held`: nothing is sent, and a staller gains nothing), one
 * transfer for a checkpoint download, the deepest relay chain's allowance for a sync from holders.
 */
export function readyAllowanceMs(stateFrom: StateSource, model: ModelSpec, worldSize: number): number {
  switch (stateFrom.kind) {
    case 'fresh':
    case 'held':
      return 0;
    case 'checkpoint':
      return stateTransferMs(model);
    case 'peer':
    case 'peers':
      return stateSyncAllowanceMs(model, relayChainOf(stateFrom, worldSize));
  }
}
