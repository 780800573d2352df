/**
 * The control messages a tab sends to the coordinator (`ClientMessage`: hello, heartbeat, ready,
 * step_report, outer_report, failure, goodbye, evaluation), one zod schema each with a doc comment per field. The
 * protocol's rules and shared fields are in control-fields.ts; the coordinator validates a frame with
 * `parseClientMessage` (control-parse.ts).
 */
import { z } from 'zod';
import { GRADIENT_SKETCH_BUCKETS, PARAMS_SKETCH_BUCKETS } from '../state/sketch';
import {
  hashSchema,
  idSchema,
  rankSchema,
  roundSchema,
  secretSchema,
  stepSchema,
  textSchema,
  versionSchema,
} from './control-fields';

const v = versionSchema;

/** Who sends a message after its welcome: every such message names its run and its worker. */
const sender = {
  /** The current run (welcome.runId); another run's message is rejected as wrong_run. */
  runId: idSchema,
  /** The sender's worker id (must be the one its socket was welcomed with, else forged_worker). */
  workerId: idSchema,
};

/**
 * The hash of a local-mode inner step's report: there is no agreed state to hash between outer steps.
 * 64 zero digits, the shape of every hash (finding bytes whose SHA-256 is all zeros is infeasible).
 */
export const NO_HASH = '0'.repeat(64);

/**
 * The kernels a tab runs with, as its training worker chose them for its adapter (kernels/tuning/:
 * tuned at its first start, then cached). A claim, only shown (admin page, `/api/status`), never used to
 * decide anything: every variant gives the same bits.
 */
export const kernelsReportSchema = z.strictObject({
  /** How the variants were chosen: timed now, read from the tab's cache, or the defaults (not tuned). */
  source: z.enum(['tuned', 'cached', 'default']),
  /** The job's kernel precision it runs (`job.kernels.precision`). */
  precision: z.enum(['f32', 'f16']),
  /** The chosen variant per op family, e.g. `{ family: 'matmul', variant: '4x4 wgmem wg16x16 tk16' }`. */
  variants: z.array(z.strictObject({ family: textSchema(16), variant: textSchema(64) })).max(8),
  /** The model's matmul GFLOP/s with the chosen tile, as the tuner measured it; null when not tuned. */
  gflops: z.number().min(0).max(1e7).nullable(),
  /** How long the tuning took (ms); null when the choice was cached or the defaults. */
  tuneMs: z.number().min(0).max(600_000).nullable(),
  /** The optional WebGPU features its device has that kernels use. */
  features: z.array(z.enum(['subgroups', 'shader-f16'])).max(2),
});
export type KernelsReport = z.infer<typeof kernelsReportSchema>;

export const helloSchema = z.strictObject({
  v,
  type: z.literal('hello'),
  /** The run the tab last trained in, or null for a new tab. A different run's tab is welcomed as new. */
  runId: idSchema.nullable(),
  /** The id the coordinator gave this tab before (reconnect), or null. Refused while that id has a live socket. */
  workerId: idSchema.nullable(),
  /** The tab's PeerJS id, so peers of a round can connect to it. */
  peerId: idSchema,
  /**
   * With `workerId`: the secret `welcome` gave with that id. Without the right one, the tab is welcomed
   * as a new worker (a worker id read from /api/status cannot be taken over).
   */
  secret: secretSchema.optional(),
  /** The invite token the tab was opened with (`/?invite=…`), when the coordinator admits by invite. */
  invite: z.string().min(1).max(128).optional(),
  /** The WebGPU adapter, for the admin page and logs. */
  adapter: z.strictObject({
    vendor: textSchema(256),
    architecture: textSchema(256),
    description: textSchema(256),
  }),
  /** Optional: the kernels its worker chose (`kernelsReportSchema`), for the admin page. */
  kernels: kernelsReportSchema.optional(),
  /** The committed step whose training state the tab holds (after a reconnect), or null. */
  haveStep: stepSchema.nullable(),
  /** The parameter hash of that state, or null. */
  haveHash: hashSchema.nullable(),
  /**
   * Optional: a newer state the tab also holds: the last step it completed and reported but has not
   * seen committed (the coordinator may have committed it just before it restarted).
   */
  pending: z.strictObject({ step: stepSchema, hash: hashSchema }).nullable().optional(),
});

/** An ICE candidate type (RFC 8445; `getStats` `candidateType`). */
export const candidateTypeSchema = z.enum(['host', 'srflx', 'prflx', 'relay']);
export type CandidateType = z.infer<typeof candidateTypeSchema>;

/** Most links a heartbeat describes: ring neighbours, partners across groups, heirs (group-allreduce.ts). */
export const MAX_REPORTED_LINKS = 64;

/** One open link of the tab: the peer, the selected ICE candidate pair's types, and its measured RTT. */
export const peerLinkSchema = z.strictObject({
  /** The peer's PeerJS id. */
  peer: idSchema,
  /** This end's selected candidate type (`relay`: through TURN). */
  local: candidateTypeSchema,
  /** The other end's selected candidate type. */
  remote: candidateTypeSchema,
  /**
   * Optional: this link's round-trip time (ms, the pair's `currentRoundTripTime`), null when not known
   * yet; absent from tabs that predate the field. The coordinator plans ring order and groups from these
   * (core/training/topology.ts); the admin page's topology view shows them.
   */
  rttMs: z.number().finite().min(0).max(60_000).nullable().optional(),
});
export type PeerLink = z.infer<typeof peerLinkSchema>;

export const heartbeatSchema = z.strictObject({
  v,
  type: z.literal('heartbeat'),
  ...sender,
  /**
   * Optional: the WebRTC round-trip time (ms) of this tab's ring links: the MAX over its open links
   * (the slowest link paces a ring all-reduce), from the nominated candidate pair's
   * `currentRoundTripTime`. null when the tab has no open ring link (world of 1, waiting) or no stats
   * yet; absent from tabs that predate the field. Only shown (admin page, `/api/status`).
   */
  peerRttMs: z.number().finite().min(0).max(60_000).nullable().optional(),
  /**
   * Optional: each open link to another tab (at most `MAX_REPORTED_LINKS`): the selected ICE candidate
   * pair's types (e.g. `relay` when it goes through TURN) and its RTT. Shown (admin page, `/api/status`);
   * the RTTs also feed the topology planner (core/training/topology.ts).
   */
  peerLinks: z.array(peerLinkSchema).max(MAX_REPORTED_LINKS).optional(),
  /** Optional: why ICE fails for this tab (e.g. "TURN authentication failed (401) at turn:…"), or null when fine. Only shown. */
  iceError: textSchema(300).nullable().optional(),
});

export const readySchema = z.strictObject({
  v,
  type: z.literal('ready'),
  ...sender,
  /** The round whose state the tab now holds (synced per `stateFrom`) and whose ring it connected. */
  round: roundSchema,
});

/** Bucket sums of a sketch: finite numbers (float64, as computed), at most `max` of them. */
function sketchValues(max: number) {
  return z.array(z.number().refine(Number.isFinite, 'not finite')).min(1).max(max);
}

export const stepReportSchema = z.strictObject({
  v,
  type: z.literal('step_report'),
  ...sender,
  /** The round the step was computed in. */
  round: roundSchema,
  /** The sender's rank in that round (checked against the coordinator's assignment). */
  rank: rankSchema,
  /** The step computed (1-based, global across epochs). */
  step: z.int().min(1),
  /**
   * Hash of the state after the step; every rank must report the same one at a commit point. In local
   * sync mode the ranks' parameters differ between outer steps by design: an inner step reports
   * `NO_HASH`, and the outer step reports the hash of the committed state (parameters and outer momentum).
   */
  hash: hashSchema,
  /** Sum of the per-sample losses of this rank's slice (the mean loss is the sum over ranks / step size). */
  lossSum: z.number().min(0).max(1e12),
  /** Samples this rank processed: must equal its slice of the step (`rankRanges` in core/training/groups.ts). */
  samples: z
    .int()
    .min(0)
    .max(1 << 20),
  /**
   * Time the tab spent computing since its previous report (ms): the wall time less its waits for the
   * allreduce, the commit and its own pause (web/elastic/busy-clock.ts), as it measured it. A claim: the
   * throughput shares use the time the coordinator measured (commit.ts), and the compute utilization
   * clamps it to that time (utilization.ts).
   */
  computeMs: z.number().min(0).max(1e7),
  /**
   * Bytes this rank sent to its ring neighbour in the step's collectives (0 for a local-mode inner step,
   * and absent from older tabs). A claim shown on the admin page (bytes per sample), never used to decide.
   */
  wireBytes: z
    .int()
    .min(0)
    .max(2 ** 40)
    .optional(),
  /**
   * Local sync mode, at a commit point of a round in groups: the ranks (of this round) whose
   * pseudo-gradients the outer sum left out, because they were lost inside their group's reduce
   * (web/net/group-allreduce.ts); the others were re-weighted by the samples still in. Ascending; every
   * rank of the commit reports the same set. Absent: none.
   */
  excluded: z.array(rankSchema).max(4096).optional(),
  /**
   * When the job verifies (`job.verify`): sketches of this rank's own gradient sums, of the all-reduced
   * sums, of what it sent and received in the reduce-scatter (with bucket masses) and of the new
   * parameters, seeded by `hash` (core/state/sketch.ts).
   */
  sketch: z
    .strictObject({
      own: sketchValues(GRADIENT_SKETCH_BUCKETS),
      sum: sketchValues(GRADIENT_SKETCH_BUCKETS),
      sumMass: sketchValues(GRADIENT_SKETCH_BUCKETS),
      sent: sketchValues(GRADIENT_SKETCH_BUCKETS),
      sentMass: sketchValues(GRADIENT_SKETCH_BUCKETS),
      received: sketchValues(GRADIENT_SKETCH_BUCKETS),
      receivedMass: sketchValues(GRADIENT_SKETCH_BUCKETS),
      params: sketchValues(Math.max(PARAMS_SKETCH_BUCKETS, GRADIENT_SKETCH_BUCKETS)),
      /** int8 wire: how far the encodes may have moved what it sent, received and the sum, per bucket. */
      sentSlack: sketchValues(GRADIENT_SKETCH_BUCKETS).optional(),
      receivedSlack: sketchValues(GRADIENT_SKETCH_BUCKETS).optional(),
      sumSlack: sketchValues(GRADIENT_SKETCH_BUCKETS).optional(),
      /** Local mode: the outer momentum after the outer step. */
      outer: sketchValues(GRADIENT_SKETCH_BUCKETS).optional(),
      /** Local mode: this rank's inner optimizer moments after its inner steps (AdamW: m, v; SGD: velocity). */
      moments: z.array(sketchValues(GRADIENT_SKETCH_BUCKETS)).min(1).max(2).optional(),
    })
    .optional(),
  /**
   * Local mode, with a commit point's report when the job verifies: `trainingStateHash` of the inner
   * state this rank started the outer step from (θ_c, its own moments and t). A check of this outer step
   * has it upload that state, which must hash to this.
   */
  innerHash: hashSchema.optional(),
  /**
   * Local mode, with `innerHash`: this rank's inner optimizer step count t after its inner steps (with
   * `sketch.moments`, the state it starts the next outer step from; the next check's upload must continue it).
   */
  innerT: z.int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
});

/**
 * An overlapped job's outer step (docs/local-steps.md "Overlapped outer steps"): this rank finished the
 * allreduce of the outer step whose commit point is `step` and holds the committed state it leads to.
 * In such a job every step report is an inner one (`NO_HASH`), the commit point's included; the group
 * commits when every rank reported its steps and this, with the same hash.
 */
export const outerReportSchema = z.strictObject({
  v,
  type: z.literal('outer_report'),
  ...sender,
  /** The round the outer step's allreduce ran in. */
  round: roundSchema,
  /** The sender's rank in that round (checked against the coordinator's assignment). */
  rank: rankSchema,
  /** The commit point (last step) of the group whose outer step this is. */
  step: z.int().min(1),
  /** `stateHash` of the committed state after the outer step (parameters and outer momentum): every rank must report the same. */
  hash: hashSchema,
  /** Bytes this rank sent to its ring neighbour in the outer step's allreduce. A claim shown on the admin page, never used to decide. */
  wireBytes: z
    .int()
    .min(0)
    .max(2 ** 40),
});

export const failureSchema = z.strictObject({
  v,
  type: z.literal('failure'),
  ...sender,
  /** The round in which a collective (allreduce, state broadcast) failed. */
  round: roundSchema,
  /** What went wrong, for the log. */
  reason: textSchema(256),
  /** The peer the collective failed with, if known: it is moved out of the next round (to the wait list). */
  peer: idSchema.optional(),
  /**
   * `bad_data`: `peer` sent bytes no honest rank sends (a non-finite value, a malformed frame), not
   * merely went away. One of the two lies; the coordinator narrows it down (coordinator/machine/verification.ts).
   */
  evidence: z.literal('bad_data').optional(),
});

export const goodbyeSchema = z.strictObject({
  v,
  type: z.literal('goodbye'),
  ...sender,
});

/** Largest test set an evaluation may report (Fashion-MNIST has 10,000; the bound keeps sums exact in float64). */
export const MAX_EVALUATION_SAMPLES = 1 << 24;

export const evaluationSchema = z
  .strictObject({
    v,
    type: z.literal('evaluation'),
    ...sender,
    /** The round in which `step` was committed (the current round, or the one that just closed). */
    round: roundSchema,
    /** The committed step whose state was evaluated (evaluations never see an uncommitted state). */
    step: z.int().min(1),
    /** The epoch whose data the commit of `step` trained on (its group's epoch, 0-based). */
    epoch: z.int().min(0),
    /** Test images evaluated: the first `testSamples` of the test set (`job.evalSamples`, or the whole set if smaller). */
    testSamples: z.int().min(1).max(MAX_EVALUATION_SAMPLES),
    /** Of those, how many the model classified correctly (accuracy = correct / testSamples). */
    correct: z.int().min(0).max(MAX_EVALUATION_SAMPLES),
    /** Sum of the per-image cross-entropy losses (mean test loss = lossSum / testSamples). */
    lossSum: z.number().min(0).max(1e12),
  })
  .refine((m) => m.correct <= m.testSamples, { message: 'correct must be <= testSamples', path: ['correct'] });

export const clientMessageSchema = z.discriminatedUnion('type', [
  helloSchema,
  heartbeatSchema,
  readySchema,
  stepReportSchema,
  outerReportSchema,
  failureSchema,
  goodbyeSchema,
  evaluationSchema,
]);
export type ClientMessage = z.infer<typeof clientMessageSchema>;
export type HelloMessage = z.infer<typeof helloSchema>;
export type StepReportMessage = z.infer<typeof stepReportSchema>;
export type OuterReportMessage = z.infer<typeof outerReportSchema>;
export type EvaluationMessage = z.infer<typeof evaluationSchema>;
