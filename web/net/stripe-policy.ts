/**
 * How many stripes (peer connections, each its own SCTP association) a link to a ring neighbour gets:
 * a pure decision from what the link measured, tested as a table (test/unit/web/net/stripe-policy.test.ts).
 * The reasons and the measurements behind the numbers are in docs/networking.md ("Lossy links").
 */

/** Never more stripes than this per neighbour (each is a peer connection: ICE, DTLS, SCTP, a TURN allocation). */
export const MAX_STRIPES = 16;

/** `stripes` as the mesh takes it: a fixed count, or `'auto'` (decided per link from what it measured). */
export type StripeSetting = number | 'auto';

/** Round-trip time per stripe of the `auto` rule (see `stripesForRtt`). */
export const RTT_PER_STRIPE_MS = 20;

/**
 * The `auto` count for a link with round-trip time `rttMs` (null: not measured): one stripe up to
 * `RTT_PER_STRIPE_MS`, then one more per `RTT_PER_STRIPE_MS`, at most `MAX_STRIPES`.
 */
export function stripesForRtt(rttMs: number | null): number {
  if (rttMs === null || !Number.isFinite(rttMs) || rttMs <= 0) return 1;
  return Math.max(1, Math.min(MAX_STRIPES, Math.round(rttMs / RTT_PER_STRIPE_MS)));
}

/** A fixed `setting` clamped to 1 … MAX_STRIPES, or the `auto` count for `rttMs`. */
export function stripesFor(setting: StripeSetting, rttMs: number | null): number {
  if (setting === 'auto') return stripesForRtt(rttMs);
  if (!Number.isInteger(setting) || setting < 1) return 1;
  return Math.min(MAX_STRIPES, setting);
}
