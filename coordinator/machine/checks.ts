/**
 * Recomputed spot checks (docs/threat-model.md), the pure parts: which commits are checked, who uploads
 * what, what the verifier is asked to recompute (`checkedSlices`), how its answer is judged, and the
 * gate that keeps a check from being dodged. The events that drive them are check-events.ts.
 *
 * - **The draw.** After a commit (its reports — the ranks' commitments — are all in), a check is drawn
 *   at the rate adaptive-trust.ts gives its members: in every-step mode one check recomputes every rank's
 *   gradient and the update; in local mode each member's outer step is drawn on its own. Each draw uses a
 *   fresh secret: SHA-256 of the server's random salt and the number of draws so far, which never goes
 *   back (not after a rollback either), so which step numbers are checked cannot be learned.
 * - **The upload.** Every-step mode: the most trusted member (most passed checks) uploads the state the
 *   step started from, which every member holds and whose complete hash they all reported; local mode:
 *   the checked rank uploads its own inner state, which must hash to the commitment it reported
 *   (`innerHash`) and whose committed part (θ_c, u) to the agreed hash. The deadline is
 *   `VERIFY_UPLOAD_BASE_MS` plus the state's transfer at the link floor, judged by the executor's timer
 *   (`nextDeadline` includes it). A withheld upload — missed deadline or refused bytes from an uploader
 *   still connected — is treated as a caught lie of the uploader (banned, the record rolled back past
 *   the step) and a strike against every other member of the step. An uploader that left is banned for
 *   nothing: the record rolls back past the step instead (check-events.ts `departedIn`).
 * - **The gate.** A commit is held while a check drawn `VERIFY_GATE_COMMITS` commits ago has not
 *   resolved, so withholding stalls the withholder's own round instead of letting it run ahead, and the
 *   job is not `done` until every check resolved (commit.ts).
 */
import { log, own, type Ctx } from './context';
import { workerOf } from './worker-table';
import { hashBytes } from '../../core/state/hash';
import { RECOMPUTE_TOLERANCE, worstRatio } from '../../core/state/sketch';
import { floorTransferMs, stateBytes } from '../../core/training/link-floor';
import { groupPlan, indicesAt, planOf, rankRanges, type GroupPlan } from '../../core/training/groups';
import { epochOrder } from '../../core/training/sampler';
import { checkRate, passedChecks } from './adaptive-trust';
import type {
  CheckedMember,
  CoordinatorState,
  MomentClaim,
  RecomputedStep,
  SketchPair,
  VerificationState,
} from './state';

/**
 * Commits a check may fall behind before the next commit waits for it. 8: an honest upload and
 * recomputation take a second or two here (an `mlp` state of 2.8 MB on a LAN, 0.6–0.9 s of
 * SwiftShader: docs/verifier.md), about the time 8 every-step commits of three tabs take, so an honest
 * swarm rarely waits (bench:verify measures it); and whoever withholds an upload gets at most 8
 * commits past the checked one before its round stands still, all of which the withholding rolls back.
 * In local mode a commit is an outer step of H inner steps, so the verifier has 8H steps' time.
 */
export const VERIFY_GATE_COMMITS = 8;

/** The fixed part of an upload's deadline; the state's transfer at the link floor (1 Mbit/s) is added. */
export const VERIFY_UPLOAD_BASE_MS = 20_000;

/** The time a check's uploader has for its upload: the fixed part plus its state at the link floor. */
export function uploadDeadlineMs(job: CoordinatorState['job']): number {
  const outer = job.sync.mode === 'local' ? stateBytes(job.model) / 3 : 0;
  return VERIFY_UPLOAD_BASE_MS + Math.round(floorTransferMs(stateBytes(job.model) + outer));
}

/** URL path where check `id`'s uploader PUTs its state. */
export function verifyPath(runId: string, id: number): string {
  return `/api/verify/${encodeURIComponent(runId)}/${id}`;
}

/**
 * Draw number `seq` for `step`, uniform in [0, 1): from SHA-256 of the server's secret salt, the draw's
 * number and the step. Each draw has its own number, so the same step drawn again (after a rollback)
 * gets an unrelated value.
 */
export function checkDraw(salt: string, seq: number, step: number): number {
  const text = `${salt}:${seq}:${step}`;
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i) & 0xff;
  return Number.parseInt(hashBytes(bytes).slice(0, 8), 16) / 2 ** 32;
}

/** The next draw for `step` (consumes one draw number). */
export function nextDrawIn(ctx: Ctx, step: number): number {
  const s = ctx.s;
  const seq = s.drawSeq ?? 0;
  s.drawSeq = seq + 1;
  return checkDraw(s.verifySalt ?? '', seq, step);
}

/**
 * Whether a commit may be made now: no open check was drawn `VERIFY_GATE_COMMITS` or more commits ago
 * (so at most that many commits follow a checked one before it resolves).
 */
export function gateOpen(s: CoordinatorState): boolean {
  const seq = s.commitSeq ?? 0;
  return !(s.checks ?? []).some((c) => seq - c.commitSeq >= VERIFY_GATE_COMMITS);
}

/** Whether a check of an earlier step than `v`'s is still open (or held itself). */
export function earlierOpen(s: CoordinatorState, v: VerificationState): boolean {
  return (s.checks ?? []).some((c) => c.id !== v.id && c.step < v.step);
}

/** The oldest held check whose earlier checks all resolved (its verdict is due), if any. */
export function releasableHeld(s: CoordinatorState): VerificationState | undefined {
  return (s.checks ?? []).find((c) => c.phase === 'held' && !earlierOpen(s, c));
}

/**
 * The earliest upload deadline of the open checks; `now` (0) when an uploader is gone already or a held
 * verdict is due.
 */
export function nextCheckDeadline(s: CoordinatorState): number | null {
  if (releasableHeld(s)) return 0;
  let next: number | null = null;
  for (const c of s.checks ?? []) {
    if (c.phase !== 'upload') continue;
    const due = workerOf(s.workers, c.uploader) ? c.deadline : 0;
    if (next === null || due < next) next = due;
  }
  return next;
}

/** The `committed` message's upload field for `workerId`: its check drawn at this commit, if any. */
export function uploadFieldFor(
  s: CoordinatorState,
  workerId: string,
  step: number,
): { step: number; url: string } | undefined {
  const c = (s.checks ?? []).find((x) => x.uploader === workerId && x.step === step && x.phase === 'upload');
  return c ? { step: c.firstStep - 1, url: verifyPath(s.runId, c.id) } : undefined;
}

/** The round's members as a check keeps them (with where they joined from). */
export function checkedMembers(s: CoordinatorState): CheckedMember[] {
  return s.rendezvous.participants.map(({ workerId, rank, share, slot }) => {
    const w = workerOf(s.workers, workerId);
    return { workerId, rank, share, slot, addr: w?.addr ?? '', invite: w?.invite ?? null };
  });
}

/** The member of `world` trusted most (most checks passed; the draw breaks ties). */
export function mostTrusted(s: CoordinatorState, world: readonly CheckedMember[], tieBreak: number): string {
  const best = Math.max(...world.map((m) => passedChecks(s, m.workerId)));
  const tied = world.filter((m) => passedChecks(s, m.workerId) === best);
  return tied[Math.min(tied.length - 1, Math.floor(tieBreak * tied.length))].workerId;
}

/** The rate a commit of `world` is checked at in every-step mode: its least trusted member's. */
export function stepRate(s: CoordinatorState, world: readonly CheckedMember[]): number {
  return Math.max(0, ...world.map((m) => checkRate(s, m.workerId)));
}

/** A new check's common fields (the caller adds the mode's claims, ranks and uploader). */
export function newCheck(
  ctx: Ctx,
  fields: Pick<VerificationState, 'mode' | 'step' | 'firstStep' | 'at' | 'prevHash' | 'stepHash' | 'world' | 'split'>,
): Omit<VerificationState, 'ranks' | 'claims' | 'uploader'> {
  const s = ctx.s;
  const id = s.nextCheckId ?? 1;
  s.nextCheckId = id + 1;
  return {
    ...fields,
    id,
    phase: 'upload',
    deadline: ctx.now + uploadDeadlineMs(s.job),
    commitSeq: s.commitSeq ?? 0,
  };
}

/** Open `check` (its uploader is told with its `committed`). */
export function openCheckIn(ctx: Ctx, check: VerificationState): void {
  ctx.s.checks = [...(ctx.s.checks ?? []), check];
  log(ctx, 'info', 'verification_requested', {
    check: check.id,
    step: check.step,
    mode: check.mode,
    ranks: check.ranks,
    uploader: check.uploader,
  });
}

/** Where a member's reports are kept (`pending` is by slot: a carried round's members keep theirs). */
const slotOf = (m: CheckedMember) => m.slot ?? m.rank;

/** One step of a check: each rank's dataset sample indices and the step's sample count. */
export interface CheckedStep {
  step: number;
  slices: Uint32Array[];
  count: number;
}

/**
 * THE function that says which samples a check recomputes: for each step firstStep..step of the
 * commit, each rank's slice (in rank order) and the step's samples, as the group plan
 * (core/training/groups.ts) at the record where the commit's group started (`at`, holes included) gave
 * them to the tabs. Each slice follows the world's shares by rank; in a carried commit (`split`) the
 * planning round's shares by the member's slot, and a step's samples are the survivors' alone (the lost
 * slots' are holes), as a carrying tab weighs its pseudo-gradient (web/elastic/plan.ts `total`). Every
 * other part asks here (the verification service, tests).
 */
export function checkedSlices(
  s: Pick<CoordinatorState, 'job' | 'datasetSize'>,
  v: Pick<VerificationState, 'world' | 'step' | 'firstStep' | 'at' | 'split'>,
): CheckedStep[] {
  const members = [...v.world].sort((a, b) => a.rank - b.rank);
  const shares = v.split ?? members.map((w) => w.share);
  const slots = members.map(slotOf); // a round that carries nothing has slot = rank
  // The commit's own length (the plan's H, or fewer at an epoch's end): its steps are firstStep..step.
  const group = groupPlan(v.at, v.firstStep, { ...planOf(s), commitEvery: v.step - v.firstStep + 1 });
  const order = epochOrder(s.job.seed, v.at.epoch, s.datasetSize);
  return group.steps.map((span) => {
    const slices = slots.map((slot) => indicesAt(order, rankRanges(span, shares, slot)).slice());
    const count = v.split ? slices.reduce((n, slice) => n + slice.length, 0) : span.count;
    return { step: span.step, slices, count };
  });
}

/**
 * How many times farther than rounding alone (`RecomputedStep.sensitivity`) a contribution must land from
 * its recomputation to be a lie. Measured (test/kernels/verifier-recompute.test.ts, an honest rank
 * modelled by float64): on a sound state the honest miss is 2× the sensitivity, both near 2e-7, so the
 * limit stays RECOMPUTE_TOLERANCE; on a state poisoned to frame honest ranks (output biases offset by 1e4)
 * the honest miss is 3.7e-4 — over the tolerance — against a sensitivity of 2.8e-2, and a negated
 * contribution still misses by 1.8. 10 leaves a factor of 5 over the sound state's 2×.
 */
export const SENSITIVITY_MARGIN = 10;

/**
 * What a check found: the members caught (none: passed, or inconclusive), the ratios for the log, and
 * whether it is inconclusive: the claims contradict the recomputation by more than RECOMPUTE_TOLERANCE,
 * but not by more than SENSITIVITY_MARGIN × what rounding alone does from this start state.
 */
export interface Verdict {
  cheaters: string[];
  ownRatios: number[];
  paramsRatio: number;
  momentRatios: number[];
  inconclusive: boolean;
}

const within = (claimed: ArrayLike<number> | undefined, r: SketchPair | undefined) =>
  claimed && r ? worstRatio(claimed, r.values, r.mass) : Number.POSITIVE_INFINITY;

/**
 * Which members the recomputation contradicts (pure). A judged rank whose own contribution (local mode:
 * or its end moments) is off by more than the limit lied. Honest contributions with a wrong new state
 * (parameters; local mode: outer momentum) mean every member applied a wrong update: all of them
 * collude. A start state that is not what the commit started from is its uploader's lie. The limit is
 * RECOMPUTE_TOLERANCE, or SENSITIVITY_MARGIN × the result's sensitivity when that is larger (a
 * recomputation that rounding alone moves that far proves nothing that small); local mode's new state is
 * predicted from the agreed sum, not recomputed, so it is held to RECOMPUTE_TOLERANCE.
 */
export function judge(
  v: Pick<VerificationState, 'world' | 'claims' | 'ranks' | 'uploader' | 'mode'>,
  r: RecomputedStep,
): Verdict {
  const ownRatios = v.ranks.map((_, i) => within(v.claims.own[i], r.own[i]));
  const momentRatios = (r.moments ?? []).map((m, i) => within(v.claims.moments?.[i], m));
  const paramsRatio = Math.max(
    within(v.claims.params, r.params),
    r.outer || v.claims.outer ? within(v.claims.outer, r.outer) : 0,
  );
  const limit = Math.max(RECOMPUTE_TOLERANCE, SENSITIVITY_MARGIN * (r.sensitivity ?? 0));
  const caught = (strict: boolean) => {
    const ok = (x: number) => x <= (strict ? RECOMPUTE_TOLERANCE : limit);
    const paramsOk = v.mode === 'local' ? paramsRatio <= RECOMPUTE_TOLERANCE : ok(paramsRatio);
    const momentsOk = momentRatios.every(ok) && momentRatios.length === (v.claims.moments?.length ?? 0);
    const byRank = (rank: number) => v.world.find((m) => m.rank === rank)!.workerId;
    const liars = v.ranks.filter((_rank, i) => !ok(ownRatios[i]) || !momentsOk).map(byRank);
    if (r.startOk === false && !liars.includes(v.uploader)) liars.push(v.uploader);
    return liars.length > 0 || paramsOk ? liars : v.world.map((m) => m.workerId);
  };
  const cheaters = caught(false);
  const inconclusive = cheaters.length === 0 && caught(true).length > 0;
  return { cheaters, ownRatios, paramsRatio, momentRatios, inconclusive };
}

type SketchLike = { values: ArrayLike<number>; mass: ArrayLike<number> };
/** What a recomputation sketched (the verifier's `Sketch`es, or the machine's `SketchPair`s). */
type Sketched = { own: readonly SketchLike[]; moments?: readonly SketchLike[]; params: SketchLike };

/**
 * How far rounding alone moves a recomputation: the worst ratio between `first` and `perturbed` (the same
 * recomputation from the start moved by a few roundings) over what the verifier recomputed — each own
 * contribution, local mode's moments, every-step mode's new parameters.
 */
export function sensitivityOf(mode: VerificationState['mode'], first: Sketched, perturbed: Sketched): number {
  const pairs: [SketchLike, SketchLike | undefined][] = first.own.map((o, i) => [o, perturbed.own[i]]);
  for (const [i, m] of (first.moments ?? []).entries()) pairs.push([m, perturbed.moments?.[i]]);
  if (mode === 'every-step') pairs.push([first.params, perturbed.params]);
  return Math.max(0, ...pairs.map(([a, b]) => (b ? worstRatio(b.values, a.values, a.mass) : Number.POSITIVE_INFINITY)));
}

/**
 * While committing `group` (hash `stepHash`, the previous commit's `prevHash`; called before the record
 * moves, with the reports still pending): note each member's first contribution (a cheat's rollback
 * target), count the commit, draw its checks, and keep the members' moment claims (local mode). The
 * checks' uploaders find their upload field in their `committed` (`uploadFieldFor`).
 */
export function afterCommitIn(ctx: Ctx, group: GroupPlan, stepHash: string, prevHash: string | null): void {
  const s = ctx.s;
  const step = group.lastStep;
  s.contributions = { ...(s.contributions ?? {}) };
  for (const p of s.rendezvous.participants) if (!own(s.contributions, p.workerId)) s.contributions[p.workerId] = step;
  // This commit's number first: a check drawn at it counts the commits after it (`gateOpen`).
  s.commitSeq = (s.commitSeq ?? 0) + 1;
  if (!s.job.verify) return;
  const carry = s.rendezvous.carry;
  const fields = {
    step,
    firstStep: group.firstStep,
    at: group.start,
    prevHash,
    stepHash,
    world: checkedMembers(s),
    ...(carry ? { split: [...carry.shares] } : {}),
  };
  if (s.verifySalt && s.job.sync.mode === 'local') drawLocalIn(ctx, fields);
  else if (s.verifySalt) drawEveryStepIn(ctx, fields);
  noteMomentClaimsIn(ctx, step);
}

/** Local mode: each member's claim of its end-of-step moments, which the next checks' uploads must continue. */
function noteMomentClaimsIn(ctx: Ctx, point: number): void {
  const s = ctx.s;
  if (s.job.sync.mode !== 'local') return;
  const byWorker: Record<string, MomentClaim> = {};
  for (const p of s.rendezvous.participants) {
    const report = s.pending[point]?.[p.slot];
    const moments = report?.sketch?.moments;
    if (moments && report.innerT !== undefined) byWorker[p.workerId] = { moments, t: report.innerT };
  }
  s.momentClaims = { step: point, world: s.rendezvous.participants.length, byWorker };
}

type DrawFields = Pick<VerificationState, 'step' | 'firstStep' | 'at' | 'prevHash' | 'stepHash' | 'world' | 'split'>;

/** Every-step mode: one check of every rank, at the rate of the least trusted member. */
function drawEveryStepIn(ctx: Ctx, fields: DrawFields): void {
  const s = ctx.s;
  const rate = stepRate(s, fields.world);
  const draw = nextDrawIn(ctx, fields.step);
  if (!(draw < rate)) return;
  const reports = s.pending[fields.step] ?? {};
  const own = fields.world.map((m) => reports[slotOf(m)]?.sketch?.own);
  const params = reports[slotOf(fields.world[0])]?.sketch?.params;
  if (!params || own.some((o) => !o)) return;
  openCheckIn(ctx, {
    ...newCheck(ctx, { ...fields, mode: 'every-step' }),
    ranks: fields.world.map((m) => m.rank),
    claims: { own: own as number[][], params },
    uploader: mostTrusted(s, fields.world, draw / rate),
  });
}

/** Local mode: each member that computed samples in the outer step, at its own rate; it uploads its own state. */
function drawLocalIn(ctx: Ctx, fields: DrawFields): void {
  const s = ctx.s;
  const reports = s.pending[fields.step] ?? {};
  for (const member of fields.world) {
    let samples = 0;
    for (let st = fields.firstStep; st <= fields.step; st++) samples += s.pending[st]?.[slotOf(member)]?.samples ?? 0;
    const report = reports[slotOf(member)];
    const k = report?.sketch;
    if (samples === 0 || !k || !report.innerHash) continue;
    if (!(nextDrawIn(ctx, fields.step) < checkRate(s, member.workerId))) continue;
    openCheckIn(ctx, {
      ...newCheck(ctx, { ...fields, mode: 'local' }),
      ranks: [member.rank],
      claims: { own: [k.own], params: k.params, sum: k.sum, sumMass: k.sumMass, outer: k.outer, moments: k.moments },
      continuity: continuityOf(s, fields.firstStep - 1),
      innerHash: report.innerHash,
      uploader: member.workerId,
    });
  }
}

/**
 * What a local check's uploaded inner state must continue at commit `prev`: the members' claims of their
 * end moments there, or the checkpoint stored there (its uploader's checked state), or nothing known.
 * At step 0 the verifier checks the fresh state itself.
 */
function continuityOf(s: CoordinatorState, prev: number): VerificationState['continuity'] {
  if (prev === 0) return null;
  if (s.momentClaims?.step === prev)
    return { claims: Object.values(s.momentClaims.byWorker), world: s.momentClaims.world };
  const checkpoint = s.checkpoints.find((c) => c.step === prev && c.trainingHash);
  return checkpoint?.trainingHash ? { trainingHash: checkpoint.trainingHash } : null;
}
