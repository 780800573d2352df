/**
 * Who pays for a restart. A failure report is evidence, not a verdict: every restart has a culprit (the
 * worker whose socket died or whose heartbeat went silent, the peer a failure report blamed if its
 * failure is corroborated, else the reporter itself), and the restart is charged to that worker and to
 * its client address as well as to the job.
 *
 * A worker or an address that has used up its quota of charges in the window is cooled off: its
 * sockets are closed and it is refused until `bannedUntil`, and each further ban lasts twice as long
 * (capped). A restart whose culprit is over quota is absorbed: it does not count against the job's
 * `maxRestarts`, so one visitor (or one address) cannot fail a job however often it breaks rounds.
 *
 * Pure functions over the plain-JSON state (`CoordinatorState.penalties`); not durable: a coordinator
 * restart forgets bans (a restart is also what an operator does to lift one).
 */
import { log, metric, own, sendConn, type Ctx } from './context';
import { CloseCode } from '../../core/protocol/coordinator-messages';
import { chargeCaughtIn } from './adaptive-trust';
import type { CoordinatorState, PenaltyRecord, TrustPolicy } from './state';
import { workerOf } from './worker-table';

/** Defaults of the abuse policy (the CLI can override each). */
export const DEFAULT_TRUST_POLICY: TrustPolicy = {
  readyTimeoutMs: 30_000,
  workerQuota: 3,
  addressQuota: 20,
  chargeWindowMs: 10 * 60_000,
  coolOffMs: 30_000,
  maxCoolOffMs: 60 * 60_000,
};

/** Someone a restart (or a missed deadline) is charged to. `addr` is the client address of its socket. */
export interface Culprit {
  workerId: string;
  addr: string;
}

const workerKey = (workerId: string) => `w:${workerId}`;
const addressKey = (addr: string) => `a:${addr}`;

/** The culprit `workerId` with the address of its socket ('' once the worker is gone). */
export function culpritOf(s: CoordinatorState, workerId: string): Culprit {
  return { workerId, addr: workerOf(s.workers, workerId)?.addr ?? '' };
}

const inviteKey = (invite: string) => `i:${invite}`;

/** The time until which `workerId` or `addr` is refused, or null when neither is cooling off at `now`. */
export function bannedUntil(
  s: CoordinatorState,
  now: number,
  who: { workerId?: string | null; addr?: string },
): number | null {
  let until: number | null = null;
  const keys: string[] = [];
  if (who.workerId) keys.push(workerKey(who.workerId));
  if (who.addr) keys.push(addressKey(who.addr));
  for (const key of keys) {
    const record = own(s.penalties, key);
    if (record && record.bannedUntil > now) until = Math.max(until ?? 0, record.bannedUntil);
  }
  return until;
}

/**
 * The time until which a new socket or `hello` from `who` is refused: its bans (`bannedUntil`), and the
 * cool-off of an address or invite a cheat was caught from (`banIn`); null when none applies at `now`.
 */
export function joinRefusedUntil(
  s: CoordinatorState,
  now: number,
  who: { workerId?: string | null; addr?: string; invite?: string | null },
): number | null {
  let until = bannedUntil(s, now, who);
  const places = [who.addr ? addressKey(who.addr) : null, who.invite ? inviteKey(who.invite) : null];
  for (const key of places) {
    const refused = key ? (own(s.penalties, key)?.refuseJoinsUntil ?? 0) : 0;
    if (refused > now) until = Math.max(until ?? 0, refused);
  }
  return until;
}

/** Addresses cooling off at `now`, or refusing new sockets after a catch (the control channel refuses their sockets at upgrade). */
export function bannedAddresses(s: CoordinatorState, now: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const [key, record] of Object.entries(s.penalties)) {
    const until = Math.max(record.bannedUntil, record.refuseJoinsUntil ?? 0);
    if (key.startsWith('a:') && until > now) out.set(key.slice(2), until);
  }
  return out;
}

/** Length of the next ban of a record that has been banned `bans` times before. */
export function coolOffFor(policy: TrustPolicy, bans: number): number {
  return Math.min(policy.maxCoolOffMs, policy.coolOffMs * 2 ** Math.min(bans, 30));
}

/**
 * Charge one event to the record under `key` (`w:…` or `a:…`, with its `quota`) in `ctx.s.penalties`,
 * which must be this transition's own copy. Returns whether it is now over its quota (then it is
 * banned; the caller closes its sockets with `enforceBansIn`).
 */
function chargeKeyIn(ctx: Ctx, key: string, quota: number, why: string): boolean {
  const { s, now } = ctx;
  const policy = s.policy;
  const previous = own(s.penalties, key) ?? { charges: [], bans: 0, bannedUntil: 0 };
  const charges = [...previous.charges.filter((t) => now - t < policy.chargeWindowMs), now];
  const record: PenaltyRecord = { ...previous, charges };
  const over = charges.length > quota;
  if (over && record.bannedUntil <= now) {
    record.bannedUntil = now + coolOffFor(policy, record.bans);
    record.bans += 1;
    record.charges = [];
    metric(ctx, 'tabswarm_bans_total', 1, { kind: key.startsWith('a:') ? 'address' : 'worker' });
    log(ctx, 'warn', 'cooled_off', { who: key, until: record.bannedUntil, bans: record.bans, why });
  }
  s.penalties[key] = record;
  return over;
}

/** Charge one event to `culprit`: its worker id and its address. True when either is over its quota. */
function chargeOneIn(ctx: Ctx, culprit: Culprit, why: string): boolean {
  const { policy } = ctx.s;
  let over = chargeKeyIn(ctx, workerKey(culprit.workerId), policy.workerQuota, why);
  if (culprit.addr !== '') over = chargeKeyIn(ctx, addressKey(culprit.addr), policy.addressQuota, why) || over;
  return over;
}

/**
 * Charge `culprits` for one event (a restart, or only a strike: a missed ready deadline). `absorbed`:
 * a culprit is over its quota, so a restart should not count against the job.
 */
export function chargeIn(ctx: Ctx, culprits: Culprit[], why: string): { absorbed: boolean } {
  let absorbed = false;
  ctx.s.penalties = { ...ctx.s.penalties }; // copy-on-write: records are replaced, never edited
  for (const c of culprits) absorbed = chargeOneIn(ctx, c, why) || absorbed;
  for (const c of culprits) log(ctx, 'info', 'charged', { workerId: c.workerId, addr: c.addr, why });
  return { absorbed };
}

/**
 * A proven cheat, not a quota: `culprit`'s worker id is refused for the longest cool-off at once, and the
 * place it joined from (its address, its invite) is marked (adaptive-trust.ts: any id from there is a
 * suspect) and refuses new sockets and hellos for a cool-off that doubles with each catch there (30 s,
 * 60 s, … up to `maxCoolOffMs`). The address is also charged one event towards its quota. Its workers
 * already connected stay: behind a NAT they may be honest, and they are checked at the suspect's rate.
 * The caller closes the culprit's sockets with `enforceBansIn`.
 */
export function banIn(ctx: Ctx, culprit: Culprit & { invite?: string | null }, why: string): void {
  const { s, now } = ctx;
  s.penalties = { ...s.penalties };
  const key = workerKey(culprit.workerId);
  const previous = own(s.penalties, key) ?? { charges: [], bans: 0, bannedUntil: 0 };
  s.penalties[key] = { charges: [], bans: previous.bans + 1, bannedUntil: now + s.policy.maxCoolOffMs };
  metric(ctx, 'tabswarm_bans_total', 1, { kind: 'worker' });
  const caught = chargeCaughtIn(ctx, { ...culprit, invite: culprit.invite ?? null });
  if (culprit.addr !== '') {
    chargeKeyIn(ctx, addressKey(culprit.addr), s.policy.addressQuota, why);
    refuseJoinsIn(ctx, addressKey(culprit.addr), caught.address, why);
  }
  if (culprit.invite) refuseJoinsIn(ctx, inviteKey(culprit.invite), caught.invite, why);
  log(ctx, 'info', 'charged', { workerId: culprit.workerId, addr: culprit.addr, why });
}

/** New sockets and hellos from the place `key` are refused for the cool-off of its `catches`-th catch. */
function refuseJoinsIn(ctx: Ctx, key: string, catches: number, why: string): void {
  const { s, now } = ctx;
  const previous = own(s.penalties, key) ?? { charges: [], bans: 0, bannedUntil: 0 };
  const until = Math.max(previous.refuseJoinsUntil ?? 0, now + coolOffFor(s.policy, Math.max(0, catches - 1)));
  s.penalties[key] = { ...previous, refuseJoinsUntil: until };
  log(ctx, 'warn', 'place_cooled_off', { who: key, until, catches, why });
}

/** Tell a refused socket why and close it. */
export function refuseConnIn(ctx: Ctx, conn: string, until: number): void {
  const seconds = Math.max(1, Math.ceil((until - ctx.now) / 1000));
  sendConn(ctx, conn, {
    type: 'error',
    code: 'banned',
    message: `refused for ${seconds} s: this worker, address or invite is cooling off (too many failures charged to it, or a cheat caught from it)`,
  });
  ctx.out.push({ kind: 'close', conn, code: CloseCode.banned, reason: 'cooling off' });
}
