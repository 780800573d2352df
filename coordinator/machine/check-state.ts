/**
 * The machine's state of recomputed spot checks and adaptive trust (checks.ts, check-events.ts,
 * adaptive-trust.ts): the checks in flight, the members they judge, the claims they compare with the
 * verifier's recomputation, and what an address, invite or worker id has shown. Types only; state.ts
 * re-exports them.
 */
import type { RecordPosition } from '../../core/training/groups';

/** A member of a checked commit, as it was then (it may have left since). */
export interface CheckedMember {
  workerId: string;
  rank: number;
  share: number;
  /**
   * Its slot in the split (`split`): the slices it computed follow the slot, not the rank. Absent: its
   * rank (a round that carries nothing keeps slot = rank).
   */
  slot?: number;
  /** Its client address and invite: a withheld upload or a caught lie is charged to them. */
  addr: string;
  invite: string | null;
}

/**
 * A commit being recomputed by the verifier (checks.ts): one member uploads the state the commit
 * started from, then the verifier recomputes what was claimed. Several may be in flight.
 */
export interface VerificationState {
  /** Unique per check (never reused while the coordinator runs): the upload's URL names it. */
  id: number;
  /** `every-step`: every rank's gradient and the update of `step`; `local`: one rank's outer step. */
  mode: 'every-step' | 'local';
  /** The commit point checked. */
  step: number;
  /** First step of the commit (local: previous commit point + 1). */
  firstStep: number;
  /** The sample record where the commit's group started (its slices follow from it: `checkedSlices`). */
  at: RecordPosition;
  /** Committed hash at `firstStep − 1` (null: the fresh initial state): the upload must be that state. */
  prevHash: string | null;
  /** Committed hash of `step`: the sketches' seed. */
  stepHash: string;
  /** The round's world at `step` (the slices follow from the shares). */
  world: CheckedMember[];
  /**
   * A carried commit (carry.ts): the planning round's shares by slot, which every slice of the group
   * followed; the world's members hold their slots, and the lost slots' slices are holes, so a step's
   * samples are only the survivors'. Absent: the world's own shares, by rank.
   */
  split?: number[];
  /** Ranks whose contributions this check recomputes (every-step: all; local: the uploader's). */
  ranks: number[];
  /** The claims: judged ranks' own sketches (in `ranks` order), the agreed params; local: sum, outer, the rank's moments. */
  claims: {
    own: number[][];
    params: number[];
    sum?: number[];
    sumMass?: number[];
    outer?: number[];
    moments?: number[][];
  };
  /**
   * Local mode: what the uploaded inner state must continue (its start moments): the members' claims of
   * their end moments at the previous commit point (seeded by `prevHash`), a stored checkpoint's own
   * commitment, or nothing known (after a coordinator restart).
   */
  continuity?: { claims: MomentClaim[]; world: number } | { trainingHash: string } | null;
  /** Local mode: the checked rank's commitment to its inner state at `firstStep − 1`. */
  innerHash?: string;
  /** The member asked to upload the state of `firstStep − 1`. */
  uploader: string;
  /** `held`: its verdict found a lie, and waits for the checks of earlier steps (check-events.ts). */
  phase: 'upload' | 'recompute' | 'held';
  /** The verifier's answer of a `held` check. */
  result?: RecomputedStep;
  /** The upload must arrive by then (ms); the recompute has no deadline here (the verifier's own timeout). */
  deadline: number;
  /** `commitSeq` when it was drawn: later commits are held once `VERIFY_GATE_COMMITS` passed it (checks.ts). */
  commitSeq: number;
}

/** Local mode: what a rank said it ended an outer step with (its moments' sketches, its optimizer's t). */
export interface MomentClaim {
  moments: number[][];
  t: number;
}

/** What a client address, an invite or a worker id has shown (adaptive-trust.ts). */
export interface TrustRecord {
  /** Recomputed checks its contributions passed. */
  passed: number;
  /** Times it was caught cheating (for an address or invite: under any worker id). */
  caught: number;
  /** It took part in a commit whose check was inconclusive: checked at every commit until it passed its checks. */
  doubted?: boolean;
}

/** A sketch the verifier computed: bucket values and L1 masses. */
export interface SketchPair {
  values: number[];
  mass: number[];
}

/**
 * What the verifier recomputed: each judged rank's own sketch (in the check's `ranks` order), the
 * parameter sketch the commit should have produced; in local mode also the rank's end moments and the
 * outer momentum. `startOk: false`: the uploaded state is not what the commit started from (not the
 * fresh initial state where it had to be), which its uploader answers for.
 */
export interface RecomputedStep {
  own: SketchPair[];
  params: SketchPair;
  moments?: SketchPair[];
  outer?: SketchPair;
  startOk?: boolean;
  /** The verifier's time for the recomputation (ms), for the log. */
  ms?: number;
  /**
   * How far a second recomputation from the start moved by a few roundings lands from this one (the
   * worst ratio over the recomputed sketches): asked only when this one contradicts the claims.
   */
  sensitivity?: number;
}
