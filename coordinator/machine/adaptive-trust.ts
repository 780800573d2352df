/**
 * Adaptive trust, after BOINC's adaptive replication: how often the steps a worker takes part in are
 * recomputed (checks.ts draws them) depends on what the coordinator knows of it.
 *
 * BOINC replicates every job of a host until the host has returned a run of valid results, then
 * replicates only a fraction of its jobs, and a host that returns an invalid result starts again from
 * the bottom. Here a "valid result" is a recomputed check the worker's contribution passed:
 *
 * - **trusted** (it passed `verify.newcomer.checks` checks, default 10): the job's rate
 *   (`verify.probability`, default `DEFAULT_VERIFY_PROBABILITY`);
 * - **newcomer** (fewer passed checks): `verify.newcomer.probability` (default 0.5), so a liar that
 *   joins and lies is checked within about two commits, whatever the job's rate;
 * - **doubted** (it took part in a commit whose check was inconclusive: a chaotic state, check-events.ts):
 *   every commit it takes part in, until it passed its checks again;
 * - **suspect** (its client address or its invite was caught cheating before, under any worker id):
 *   every commit it takes part in (rate 1) until it passed its checks. A fresh id from the same place
 *   therefore gains nothing over the banned one, and it first waits out the place's cool-off
 *   (penalties.ts `banIn`: 30 s, doubling with each catch up to 1 h).
 *
 * A step is checked at the highest rate of its members (every-step: one check recomputes every rank),
 * or each rank at its own rate (local mode: one check recomputes one rank's outer step). What it costs
 * honest newcomers is the extra checks: their first ten checks come at 0.5 per commit instead of the
 * job's rate, i.e. about twenty commits of extra verifier work and (local mode, where the checked rank
 * uploads its own state) about ten state uploads; behind an address that was caught, every commit
 * until then. Nothing is charged to them. Records are kept in memory only (a coordinator restart
 * forgets them, like bans).
 */
import { own, type Ctx } from './context';
import type { CoordinatorState, TrustRecord } from './state';
import { workerOf } from './worker-table';

/** The job's rate when its `verify` field names none (the cost is measured: bench:verify, bench/RESULTS.md). */
export const DEFAULT_VERIFY_PROBABILITY = 0.05;
/** Rate of a worker whose address or invite was caught cheating, until it passed its checks. */
export const SUSPECT_PROBABILITY = 1;

const workerKey = (id: string) => `w:${id}`;
const addressKey = (addr: string) => `a:${addr}`;
const inviteKey = (invite: string) => `i:${invite}`;

function record(s: CoordinatorState, key: string): TrustRecord {
  return own(s.trust ?? {}, key) ?? { passed: 0, caught: 0 };
}

/** Checks `workerId` passed (0 for one never checked). */
export function passedChecks(s: CoordinatorState, workerId: string): number {
  return record(s, workerKey(workerId)).passed;
}

/** Whether a catch was charged to the worker's address or invite (the place it joins from). */
export function suspectPlace(s: CoordinatorState, who: { addr?: string; invite?: string | null }): boolean {
  return (
    (!!who.addr && record(s, addressKey(who.addr)).caught > 0) ||
    (!!who.invite && record(s, inviteKey(who.invite)).caught > 0)
  );
}

/** The rate at which commits `workerId` takes part in are recomputed (see the module comment). */
export function checkRate(s: CoordinatorState, workerId: string): number {
  const verify = s.job.verify;
  if (!verify) return 0;
  const worker = workerOf(s.workers, workerId);
  if (passedChecks(s, workerId) >= verify.newcomer.checks) return verify.probability;
  if (worker && suspectPlace(s, worker)) return SUSPECT_PROBABILITY;
  if (record(s, workerKey(workerId)).doubted) return SUSPECT_PROBABILITY;
  return Math.max(verify.probability, verify.newcomer.probability);
}

function update(ctx: Ctx, key: string, change: (r: TrustRecord) => TrustRecord): void {
  const s = ctx.s;
  s.trust = { ...(s.trust ?? {}), [key]: change(record(s, key)) };
}

/** Each of `workerIds` passed a check. */
export function creditPassedIn(ctx: Ctx, workerIds: readonly string[]): void {
  for (const id of workerIds) update(ctx, workerKey(id), (r) => ({ ...r, passed: r.passed + 1 }));
}

/**
 * Each of `workerIds` took part in a commit whose check was inconclusive (check-events.ts): its passed
 * checks start again from 0, and it is checked at every commit until it passed `newcomer.checks`.
 */
export function doubtIn(ctx: Ctx, workerIds: readonly string[]): void {
  for (const id of workerIds) update(ctx, workerKey(id), (r) => ({ ...r, passed: 0, doubted: true }));
}

/**
 * A cheat was proven against a worker joined from `addr` with `invite`: the worker, its address and its
 * invite are marked, so any id from the same place is a suspect from now on. Returns how many catches
 * the address and the invite have now (the cool-off grows with them).
 */
export function chargeCaughtIn(
  ctx: Ctx,
  who: { workerId: string; addr: string; invite?: string | null },
): { address: number; invite: number } {
  update(ctx, workerKey(who.workerId), (r) => ({ passed: 0, caught: r.caught + 1 }));
  let address = 0;
  let invite = 0;
  if (who.addr) {
    update(ctx, addressKey(who.addr), (r) => ({ ...r, caught: r.caught + 1 }));
    address = record(ctx.s, addressKey(who.addr)).caught;
  }
  if (who.invite) {
    update(ctx, inviteKey(who.invite), (r) => ({ ...r, caught: r.caught + 1 }));
    invite = record(ctx.s, inviteKey(who.invite)).caught;
  }
  return { address, invite };
}
