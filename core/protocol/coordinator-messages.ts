/**
 * The control protocol between tabs and the coordinator (JSON text frames on the `/ws` WebSocket).
 * Every message is a discriminated union member on `type` (the message kind) with `v: PROTOCOL_VERSION`
 * (a frame of another version is answered with `error {code:'bad_version'}`), validated with zod
 * on receipt on both sides: strict objects (unknown fields rejected), finite numbers only (zod 4 rejects
 * NaN and ±Infinity, e.g. a `1e999` literal), bounded strings, and a bounded frame size.
 *
 * Steps are numbered from 1; "step 0" is the initial state (parameters initialised from the job seed).
 * `stepPosition(step, job)` in sampler.ts maps a step to its epoch and cursor: which samples form a step
 * never depends on the world.
 *
 * Worker life cycle: hello → welcome → (wait)* → round → sync state (stateFrom) + connect the ring → ready →
 * train → step_report per step, waiting for `committed` after each commit point (`isCommitPoint`) →
 * … → round_closed (restore or not) → round … → done. Heartbeats throughout. Rank 0 also sends
 * `evaluation` after the commits that are evaluation points (`isEvaluationPoint` in core/training/evaluation-schedule.ts).
 */
import { z } from 'zod';
import { jobPublicSchema } from '../training/job';
import { GRADIENT_SKETCH_BUCKETS, PARAMS_SKETCH_BUCKETS } from '../state/sketch';

export const PROTOCOL_VERSION = 1;

/**
 * The hash of a local-mode inner step's report: there is no agreed state to hash between outer steps.
 * 64 zero digits, the shape of every hash (finding bytes whose SHA-256 is all zeros is infeasible).
 */
export const NO_HASH = '0'.repeat(64);

/** Largest accepted control frame, in UTF-8 bytes. Control messages are small; bulk data goes elsewhere. */
export const MAX_CONTROL_MESSAGE_BYTES = 16 * 1024;

/** Names an object inherits (`__proto__`, `constructor`, …): never valid ids, so no lookup can reach them. */
const PROTOTYPE_KEYS = new Set(Object.getOwnPropertyNames(Object.prototype));

/** Run ids, worker ids, peer ids: short, printable, no spaces, not an inherited property name. */
export const idSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.:-]+$/, 'ids are [A-Za-z0-9_.:-]{1,64}')
  .refine((id) => !PROTOTYPE_KEYS.has(id), 'ids may not be a property name of Object.prototype');

/** The reconnect secret of `welcome` (base64url). */
export const secretSchema = z
  .string()
  .min(16)
  .max(128)
  .regex(/^[A-Za-z0-9_-]+$/, 'secrets are base64url');
/** A state hash (hash.ts) or a checkpoint file's sha256: both SHA-256, 64 lower-case hex digits. */
export const hashSchema = z.string().regex(/^[0-9a-f]{64}$/, 'hashes are SHA-256: 64 lower-case hex digits');
const stepSchema = z.int().min(0);
const roundSchema = z.int().min(0);
const rankSchema = z.int().min(0).max(4095);
const textSchema = (max: number) => z.string().max(max);

const v = z.literal(PROTOCOL_VERSION);

// ---------------------------------------------------------------- client → server

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

/** The selected ICE candidate pair of one ring link: the peer's worker id and both candidate types. */
export const peerLinkSchema = z.strictObject({
  peer: idSchema,
  local: candidateTypeSchema,
  remote: candidateTypeSchema,
});
export type PeerLink = z.infer<typeof peerLinkSchema>;

export const heartbeatSchema = z.strictObject({
  v,
  type: z.literal('heartbeat'),
  /** The current run (welcome.runId); another run's message is rejected as wrong_run. */
  runId: idSchema,
  /** The sender's worker id (must be the one its socket was welcomed with, else forged_worker). */
  workerId: idSchema,
  /**
   * Optional: the WebRTC round-trip time (ms) of this tab's ring links: the MAX over its open links
   * (the slowest link paces a ring all-reduce), from the nominated candidate pair's
   * `currentRoundTripTime`. null when the tab has no open ring link (world of 1, waiting) or no stats
   * yet; absent from tabs that predate the field. Only shown (admin page, `/api/status`).
   */
  peerRttMs: z.number().finite().min(0).max(60_000).nullable().optional(),
  /**
   * Optional: the selected ICE candidate pair of each open ring link (local and remote candidate type,
   * from getStats), e.g. `relay` when the link goes through TURN. Only shown (admin page, `/api/status`).
   */
  peerLinks: z.array(peerLinkSchema).max(8).optional(),
  /** Optional: why ICE fails for this tab (e.g. "TURN authentication failed (401) at turn:…"), or null when fine. Only shown. */
  iceError: textSchema(300).nullable().optional(),
});

export const readySchema = z.strictObject({
  v,
  type: z.literal('ready'),
  /** The current run (welcome.runId); another run's message is rejected as wrong_run. */
  runId: idSchema,
  /** The sender's worker id (must be the one its socket was welcomed with, else forged_worker). */
  workerId: idSchema,
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
  /** The current run (welcome.runId); another run's message is rejected as wrong_run. */
  runId: idSchema,
  /** The sender's worker id (must be the one its socket was welcomed with, else forged_worker). */
  workerId: idSchema,
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
  /** Samples this rank processed: must equal its slice (`indicesForRank(...).length`). */
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
   * When the job verifies (`job.verify`): sketches of this rank's own gradient sums, of the all-reduced
   * sums, of what it sent and received in the reduce-scatter (with bucket masses) and of the new
   * parameters, seeded by `hash` (core/sketch.ts).
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
      params: sketchValues(PARAMS_SKETCH_BUCKETS),
    })
    .optional(),
});

export const failureSchema = z.strictObject({
  v,
  type: z.literal('failure'),
  /** The current run (welcome.runId); another run's message is rejected as wrong_run. */
  runId: idSchema,
  /** The sender's worker id (must be the one its socket was welcomed with, else forged_worker). */
  workerId: idSchema,
  /** The round in which a collective (allreduce, state broadcast) failed. */
  round: roundSchema,
  /** What went wrong, for the log. */
  reason: textSchema(256),
  /** The peer the collective failed with, if known: it is moved out of the next round (to the wait list). */
  peer: idSchema.optional(),
  /**
   * `bad_data`: `peer` sent bytes no honest rank sends (a non-finite value, a malformed frame), not
   * merely went away. One of the two lies; the coordinator narrows it down (core/verification.ts).
   */
  evidence: z.literal('bad_data').optional(),
});

export const goodbyeSchema = z.strictObject({
  v,
  type: z.literal('goodbye'),
  /** The current run (welcome.runId); another run's message is rejected as wrong_run. */
  runId: idSchema,
  /** The sender's worker id (must be the one its socket was welcomed with, else forged_worker). */
  workerId: idSchema,
});

/** Largest test set an evaluation may report (Fashion-MNIST has 10,000; the bound keeps sums exact in float64). */
export const MAX_EVALUATION_SAMPLES = 1 << 24;

export const evaluationSchema = z
  .strictObject({
    v,
    type: z.literal('evaluation'),
    /** The current run (welcome.runId); another run's message is rejected as wrong_run. */
    runId: idSchema,
    /** The sender's worker id (must be the one its socket was welcomed with, else forged_worker). */
    workerId: idSchema,
    /** The round in which `step` was committed (the current round, or the one that just closed). */
    round: roundSchema,
    /** The committed step whose state was evaluated (evaluations never see an uncommitted state). */
    step: z.int().min(1),
    /** The epoch `step` belongs to (`stepPosition(step).epoch`, 0-based). */
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
  failureSchema,
  goodbyeSchema,
  evaluationSchema,
]);
export type ClientMessage = z.infer<typeof clientMessageSchema>;
export type HelloMessage = z.infer<typeof helloSchema>;
export type StepReportMessage = z.infer<typeof stepReportSchema>;
export type EvaluationMessage = z.infer<typeof evaluationSchema>;

// ---------------------------------------------------------------- server → client

/** Where a round's participants get the committed state from. */
export const stateSourceSchema = z.discriminatedUnion('kind', [
  z.strictObject({
    kind: z.literal('peer'),
    /** The rank that broadcasts its state (it holds the committed state); it does not sync itself. */
    rank: rankSchema,
  }),
  z.strictObject({
    kind: z.literal('checkpoint'),
    /** The checkpoint's step (the record was rolled back to it). */
    step: stepSchema,
    /** Where to GET the checkpoint (`checkpointPath`). */
    url: textSchema(512),
    /** sha256 of the checkpoint file, to verify the download. */
    sha256: hashSchema,
  }),
  z.strictObject({
    /** Initialise parameters from the job seed (step 0); optimizer state zero. */
    kind: z.literal('fresh'),
  }),
  z.strictObject({
    /**
     * Every participant holds the committed state already (by the coordinator's own record: it reported
     * that hash at the commit, or became ready on it): nothing is sent. The usual case after a failed
     * round, where a broadcast would resend the whole state over every ring link for nothing.
     */
    kind: z.literal('held'),
  }),
]);
export type StateSource = z.infer<typeof stateSourceSchema>;

export const worldEntrySchema = z.strictObject({
  workerId: idSchema,
  /** PeerJS id, to connect the ring. */
  peerId: idSchema,
  /** Dense rank 0..world-1. */
  rank: rankSchema,
  /** Fraction of each step's samples this rank computes (shares sum to 1; `assignStep`). */
  share: z.number().min(0).max(1),
});
export type WorldEntry = z.infer<typeof worldEntrySchema>;

const iceUrlSchema = z
  .string()
  .max(512)
  .regex(/^(stun|stuns|turn|turns):/, 'ICE server URLs start with stun:, stuns:, turn: or turns:');
export const iceConfigSchema = z.strictObject({
  iceServers: z
    .array(
      z.strictObject({
        urls: z.array(iceUrlSchema).min(1).max(16),
        username: textSchema(512).optional(),
        credential: textSchema(512).optional(),
      }),
    )
    .max(16),
  iceTransportPolicy: z.enum(['all', 'relay']),
  credentialExpiresAt: z.number().int().min(0).nullable(),
});
export type IceConfigMessage = z.infer<typeof iceConfigSchema>;

export const welcomeSchema = z.strictObject({
  v,
  type: z.literal('welcome'),
  /** The run; send it in every later message, and in a reconnecting hello. */
  runId: idSchema,
  /** The tab's worker id; send it in every later message and in a reconnecting hello. */
  workerId: idSchema,
  /** What the tab needs to train (model, optimizer, dataset size, step plan, seed). */
  job: jobPublicSchema,
  /** Send this back with `workerId` in a reconnecting hello (added by the server; proves the id is yours). */
  secret: secretSchema.optional(),
  /**
   * Optional: how this tab's peer connections find each other (coordinator/http/ice.ts): STUN/TURN servers
   * with this tab's own TURN credential, the transport policy, and when the credential expires (ms
   * since the epoch, or null). Absent: host candidates only. Sent to this tab alone, never logged.
   */
  ice: iceConfigSchema.optional(),
});

/** Why a worker waits: too few workers yet (or a last call), a round is running (admitted at the next commit), the world is full, or an admin paused the job. */
export const waitReasonSchema = z.enum(['gathering', 'round_running', 'full', 'paused']);
export type WaitReason = z.infer<typeof waitReasonSchema>;

export const waitSchema = z.strictObject({
  v,
  type: z.literal('wait'),
  /** Why the tab waits (see waitReasonSchema). */
  reason: waitReasonSchema,
  /** 0-based place in the wait list (admission follows it). */
  position: z.int().min(0),
});

export const roundMessageSchema = z.strictObject({
  v,
  type: z.literal('round'),
  /** The run. */
  runId: idSchema,
  /** Round number; strictly increasing over the run (also across coordinator restarts). */
  round: roundSchema,
  /** Every participant, sorted by rank. */
  world: z.array(worldEntrySchema).min(1).max(4096),
  /** The next step to compute (= committed step + 1). */
  step: z.int().min(1),
  /** Epoch of that step. */
  epoch: z.int().min(0),
  /** Position of that step in its epoch order. */
  cursor: z.int().min(0),
  /** Hash of the committed state to hold before training (null: fresh start). A tab that holds it already need not sync. */
  committedHash: hashSchema.nullable(),
  stateFrom: stateSourceSchema,
});

export const trainSchema = z.strictObject({
  v,
  type: z.literal('train'),
  /** Every participant is ready: start computing `round.step`. */
  round: roundSchema,
});

/**
 * Why a round closed. `membership`: newcomers admitted (or the world shrunk) at a commit boundary;
 * `rebalance`: shares re-measured at a commit boundary; `goodbye`/`kicked`: a member left; `failure`:
 * a socket closed, a heartbeat was late or a collective failed; `divergence`: ranks reported different
 * hashes; `paused`: an admin paused the job. (If a failure exhausts maxRestarts, `error {code:'job_failed'}` follows.)
 */
export const closeReasonSchema = z.enum([
  'membership',
  'rebalance',
  'goodbye',
  'kicked',
  'failure',
  'divergence',
  'paused',
]);
export type CloseReason = z.infer<typeof closeReasonSchema>;

export const roundClosedSchema = z.strictObject({
  v,
  type: z.literal('round_closed'),
  /** The round that closed (ignore it if you are in a newer one). */
  round: roundSchema,
  /** Why it closed (see closeReasonSchema). */
  reason: closeReasonSchema,
  /**
   * true: a step was in flight; roll back to the last committed state (`committed.hash`).
   * false: the last `committed` is the state to keep; nothing was in flight (discard a step started after it).
   * Either way: stop training, keep the committed state, wait for the next `round`.
   */
  restore: z.boolean(),
});

export const committedSchema = z.strictObject({
  v,
  type: z.literal('committed'),
  /** The round whose ranks computed the step. */
  round: roundSchema,
  /** The committed step: its state is now the one to fall back to (copy it to the backup buffer). */
  step: stepSchema,
  /** Epoch of the record after this commit (where step+1 starts). */
  epoch: z.int().min(0),
  /** Cursor of the record after this commit (0 when step ended an epoch). */
  cursor: z.int().min(0),
  /** Parameter hash of the committed state. */
  hash: hashSchema,
  /**
   * To one rank, when the coordinator checks this step: upload the state of step `upload.step` (the
   * one before it, still this tab's backup) to `upload.url` now, before the next apply replaces it.
   */
  upload: z.strictObject({ step: z.int().min(0), url: textSchema(512) }).optional(),
});

export const checkpointRequestSchema = z.strictObject({
  v,
  type: z.literal('checkpoint_request'),
  /** Upload the committed state of this step (the tab's backup buffer holds it). */
  step: stepSchema,
  /** Where to upload it (`checkpointPath`). */
  url: textSchema(512),
});

/** Error codes sent to a tab. Parse errors first, then rejections of well-formed messages. */
export const errorCodeSchema = z.enum([
  'too_large',
  'bad_json',
  'bad_message',
  'bad_version',
  'wrong_run',
  'not_joined',
  'already_joined',
  'forged_worker',
  'id_in_use',
  'stale_round',
  'not_member',
  'forged_rank',
  'stale_step',
  'wrong_step',
  'duplicate_report',
  'bad_samples',
  'hash_mismatch',
  'bad_sketch',
  'job_failed',
  'job_done',
  'kicked',
  'banned',
  'not_evaluator',
  'no_invite',
]);
export type ErrorCode = z.infer<typeof errorCodeSchema>;

export const errorSchema = z.strictObject({
  v,
  type: z.literal('error'),
  /** What was wrong (see errorCodeSchema); the offending message changed nothing. */
  code: errorCodeSchema,
  /** Human-readable detail. */
  message: textSchema(1024),
});

export const doneSchema = z.strictObject({
  v,
  type: z.literal('done'),
  /** The last step of the job (committed). The final checkpoint was requested from rank 0 just before. */
  step: stepSchema,
});

export const serverMessageSchema = z.discriminatedUnion('type', [
  welcomeSchema,
  waitSchema,
  roundMessageSchema,
  trainSchema,
  roundClosedSchema,
  committedSchema,
  checkpointRequestSchema,
  errorSchema,
  doneSchema,
]);
export type ServerMessage = z.infer<typeof serverMessageSchema>;
export type RoundMessage = z.infer<typeof roundMessageSchema>;

// ---------------------------------------------------------------- parsing

/** Why a frame was not a message. */
export type ParseErrorCode = 'too_large' | 'bad_json' | 'bad_message' | 'bad_version';
export type ParseResult<M> = { ok: true; msg: M } | { ok: false; code: ParseErrorCode; message: string };

/** UTF-8 byte length of a string (no TextEncoder: the core has no DOM/Node types). */
export function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

function parseWith<M>(schema: z.ZodType<M>, text: string, maxBytes: number): ParseResult<M> {
  // Cheap bounds first: a UTF-16 unit is 1..3 UTF-8 bytes.
  if (text.length > maxBytes || (text.length * 3 > maxBytes && utf8Length(text) > maxBytes)) {
    return { ok: false, code: 'too_large', message: `frame larger than ${maxBytes} bytes` };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, code: 'bad_json', message: `not JSON: ${(err as Error).message}`.slice(0, 200) };
  }
  if (
    raw !== null &&
    typeof raw === 'object' &&
    !Array.isArray(raw) &&
    'v' in raw &&
    (raw as { v: unknown }).v !== PROTOCOL_VERSION
  ) {
    return {
      ok: false,
      code: 'bad_version',
      message: `protocol version ${JSON.stringify((raw as { v: unknown }).v).slice(0, 20)}, expected ${PROTOCOL_VERSION}`,
    };
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const detail = parsed.error.issues
      .slice(0, 3)
      .map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`)
      .join('; ');
    return { ok: false, code: 'bad_message', message: detail.slice(0, 500) };
  }
  return { ok: true, msg: parsed.data };
}

/** Parse and validate one frame from a tab. */
export function parseClientMessage(text: string, maxBytes = MAX_CONTROL_MESSAGE_BYTES): ParseResult<ClientMessage> {
  return parseWith(clientMessageSchema, text, maxBytes);
}

/** Parse and validate one frame from the coordinator (used by the tabs). */
export function parseServerMessage(text: string, maxBytes = 1024 * 1024): ParseResult<ServerMessage> {
  return parseWith(serverMessageSchema, text, maxBytes);
}

/**
 * URL path of a run's checkpoint of `step`: the tab PUTs the snapshot there on `checkpoint_request`
 * and GETs it when `stateFrom.kind === 'checkpoint'`. The server serves this path.
 */
export function checkpointPath(runId: string, step: number): string {
  return `/api/checkpoints/${encodeURIComponent(runId)}/${step}`;
}

/** WebSocket close codes the coordinator uses (4000–4999 are application codes). */
export const CloseCode = {
  /** An admin removed the worker. */
  kicked: 4001,
  /** No heartbeat (or other message) for 3× heartbeatMs. */
  heartbeatTimeout: 4002,
  /** The job is over (done or failed). */
  jobOver: 4003,
  /** Another socket took over this worker id, or the id was refused. */
  replaced: 4004,
  /** The worker or its address is cooling off after too many failures charged to it (penalties.ts). */
  banned: 4005,
  /** Not ready in time: the round went on without it (no restart was counted). */
  notReady: 4006,
  /** Admission is by invite and the hello carried no valid invite. */
  noInvite: 4007,
} as const;
