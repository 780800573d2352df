/**
 * The types of the abuse policy and of the charges it keeps (state.ts re-exports them; penalties.ts applies
 * them): apart from state.ts only to keep that file within the size limit.
 */

/** The abuse policy (penalties.ts; the CLI sets it, defaults in DEFAULT_TRUST_POLICY). */
export interface TrustPolicy {
  /** A round member not `ready` this long after the round opened is dropped (no restart). */
  readyTimeoutMs: number;
  /**
   * Local sync mode: a member whose next inner-step report is later than this (ms) and than twice its
   * learned step time has hung (hang.ts). Absent: `HANG_FLOOR_MS` (core/training/hang.ts).
   */
  hangFloorMs?: number;
  /** Charges a worker may collect within `chargeWindowMs` before it is cooled off. */
  workerQuota: number;
  /** Charges a client address may collect within `chargeWindowMs` before it is cooled off. */
  addressQuota: number;
  chargeWindowMs: number;
  /** First cooling-off period; each further one doubles, up to `maxCoolOffMs`. */
  coolOffMs: number;
  maxCoolOffMs: number;
}

/** Charges and bans of one worker (`w:<id>`) or one client address (`a:<addr>`). */
export interface PenaltyRecord {
  /** Times (ms) of charges inside the window. */
  charges: number[];
  /** Bans so far (the next lasts coolOffMs · 2^bans). */
  bans: number;
  /** Refused until this time (ms); 0 or past: not banned. */
  bannedUntil: number;
  /**
   * An address or invite a cheat was caught from: new sockets and hellos from it are refused until then
   * (ms), while its workers already connected stay (each is checked on its own: adaptive-trust.ts).
   */
  refuseJoinsUntil?: number;
}
