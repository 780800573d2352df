/**
 * The control messages the coordinator sends to a tab (`ServerMessage`: welcome, wait, round, train,
 * round_closed, members_lost, committed, checkpoint_request, error, done), one zod schema each with a doc comment per
 * field, and what they refer to: error codes, the WebSocket close codes, checkpoint URLs. The protocol's
 * rules and shared fields are in control-fields.ts; a tab validates a frame with `parseServerMessage`
 * (control-parse.ts).
 */
import { z } from 'zod';
import { jobPublicSchema } from '../training/job';
import {
  hashSchema,
  holesBelowCursor,
  holesSchema,
  idSchema,
  rankSchema,
  roundSchema,
  secretSchema,
  stepSchema,
  textSchema,
  versionSchema,
} from './control-fields';

const v = versionSchema;

/** Where a round's participants get the committed state from. */
export const stateSourceSchema = z.discriminatedUnion('kind', [
  z.strictObject({
    kind: z.literal('peer'),
    /** The rank that broadcasts its state (it holds the committed state); it does not sync itself. */
    rank: rankSchema,
  }),
  z.strictObject({
    /**
     * Several participants hold the committed state (ascending ranks, at least two): each is the root of
     * the relay chain of non-holders after it on the ring (core/training/state-route.ts). `peer` is the
     * one-holder case.
     */
    kind: z.literal('peers'),
    ranks: z
      .array(rankSchema)
      .min(2)
      .max(4096)
      .refine((r) => r.every((x, i) => i === 0 || x > r[i - 1]), 'holder ranks must be strictly ascending'),
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

/**
 * A commit group an earlier round started, carried on by this round's members (local sync mode: members
 * were lost inside the outer step; docs/local-steps.md). Each rank computes the slices of its slot
 * under the planning round's shares; the slots of the lost ranks are in no rank's `slots` and become
 * holes when the group commits.
 */
export const carrySchema = z.strictObject({
  /** The group's split: the planning round's shares, by slot (its ranks). */
  shares: z.array(z.number().min(0).max(1)).min(1).max(4096),
  /** Each rank's slot in the split (by rank of this round): whose slices of the group it computes. */
  slots: z.array(rankSchema).min(1).max(4096),
  /** The last step the coordinator has a report of, by rank: a rank re-sends its reports after it. */
  reported: z.array(stepSchema).min(1).max(4096),
  /**
   * An overlapped job (core/training/overlap.ts): the last step of the groups carried on, when the group
   * after the one at `step` is carried too (its inner steps began before the loss; same split, same lost
   * slots, planned where the first one leaves the record when committed whole). Absent: the group at `step` alone.
   */
  through: z.int().min(1).optional(),
  /**
   * Holes of the record (`holes`) that the group at `step` was planned without: its overlapped predecessor
   * committed partially while this group ran. They stay holes through its commit. Absent: none.
   */
  deferred: holesSchema.optional(),
});
export type Carry = z.infer<typeof carrySchema>;

/**
 * How a round's ranks sync (core/training/topology.ts plans it): the sizes of its groups, contiguous
 * blocks of ranks in rank order, each a ring, with an exchange across groups (web/net/group-allreduce.ts).
 */
export const topologySchema = z.strictObject({
  /** Group sizes in rank order (at least two groups; they sum to the world's size). */
  groups: z.array(z.int().min(1).max(4096)).min(2).max(4096),
});
export type TopologyMessage = z.infer<typeof topologySchema>;

/** A carry that fits its round: one slot and one report mark per rank, distinct slots inside the split, `through` not before `step`. */
function carryFits(msg: { world: unknown[]; step: number; carry?: Carry }): boolean {
  const c = msg.carry;
  if (!c) return true;
  return (
    c.slots.length === msg.world.length &&
    c.reported.length === msg.world.length &&
    new Set(c.slots).size === c.slots.length &&
    c.slots.every((slot) => slot < c.shares.length) &&
    (c.through === undefined || c.through >= msg.step)
  );
}

export const roundMessageSchema = z
  .strictObject({
    v,
    type: z.literal('round'),
    /** The run. */
    runId: idSchema,
    /** Round number; strictly increasing over the run (also across coordinator restarts). */
    round: roundSchema,
    /** Every participant, sorted by rank. */
    world: z.array(worldEntrySchema).min(1).max(4096),
    /** The next step to compute (= committed step + 1): the first step of the commit group in flight. */
    step: z.int().min(1),
    /** The sample record where that group starts: its epoch. */
    epoch: z.int().min(0),
    /** The record's cursor there (core/training/groups.ts `RecordPosition`). */
    cursor: z.int().min(0),
    /** The record's holes there (below `cursor`); absent from an older coordinator: none. */
    holes: holesSchema.optional(),
    /** Hash of the committed state to hold before training (null: fresh start). A tab that holds it already need not sync. */
    committedHash: hashSchema.nullable(),
    stateFrom: stateSourceSchema,
    /** Present when this round carries on a group an earlier round started (see carrySchema). */
    carry: carrySchema.optional(),
    /** Present when the ranks sync in groups (see topologySchema); absent: one plain ring in rank order. */
    topology: topologySchema.optional(),
  })
  .refine((m) => holesBelowCursor({ cursor: m.cursor, holes: m.holes ?? [] }), {
    message: 'holes must lie below the cursor',
    path: ['holes'],
  })
  .refine(carryFits, { message: 'carry needs one distinct slot and one report mark per rank', path: ['carry'] })
  .refine((m) => !m.topology || m.topology.groups.reduce((a, b) => a + b, 0) === m.world.length, {
    message: 'topology groups must add up to the world size',
    path: ['topology'],
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

/**
 * Members of the round the coordinator saw leave during a grouped outer sync it lets the survivors finish
 * without them (coordinator/machine/outer-loss.ts): their sockets closed, they said goodbye, or it judged
 * them hung; never ranks only a survivor's report named (their mates must find those out themselves, or
 * one tab's word would push honest members out). The survivors' grouped allreduce leaves these ranks out at once, as if their links had closed
 * (web/net/group-call.ts): a crashed browser's data channels stay open until ICE consent fails, about
 * 30 s, and otherwise only the group's silence watch finds the loss, one silence per attempt it had begun,
 * which outlasts the coordinator's wait. Sent to the round's survivors only; the round goes on.
 */
export const membersLostSchema = z.strictObject({
  v,
  type: z.literal('members_lost'),
  /** The round (ignore it if you are in another one). */
  round: roundSchema,
  /** The lost ranks of that round, ascending. */
  ranks: z.array(rankSchema).min(1).max(4096),
});

export const committedSchema = z
  .strictObject({
    v,
    type: z.literal('committed'),
    /** The round whose ranks computed the step. */
    round: roundSchema,
    /** The committed step: its state is now the one to fall back to (copy it to the backup buffer). */
    step: stepSchema,
    /** Epoch of the record after this commit (where step+1's group starts). */
    epoch: z.int().min(0),
    /** Cursor of the record after this commit (0 when the commit ended an epoch). */
    cursor: z.int().min(0),
    /** Holes of the record after this commit (the slices of ranks lost in a partial commit among them); absent: none. */
    holes: holesSchema.optional(),
    /** Parameter hash of the committed state. */
    hash: hashSchema,
    /**
     * To one rank, when the coordinator checks this step: upload the state of step `upload.step` (the
     * one before it, still this tab's backup) to `upload.url` now, before the next apply replaces it.
     */
    upload: z.strictObject({ step: z.int().min(0), url: textSchema(512) }).optional(),
    /**
     * An overlapped job: the outer step of the group after this commit is synchronous (not overlapped):
     * the round changes at that group's commit (core/training/overlap.ts). Absent: the usual rule.
     */
    drain: z.literal(true).optional(),
  })
  .refine((m) => holesBelowCursor({ cursor: m.cursor, holes: m.holes ?? [] }), {
    message: 'holes must lie below the cursor',
    path: ['holes'],
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
  membersLostSchema,
  committedSchema,
  checkpointRequestSchema,
  errorSchema,
  doneSchema,
]);
export type ServerMessage = z.infer<typeof serverMessageSchema>;
export type RoundMessage = z.infer<typeof roundMessageSchema>;

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
  /**
   * Local sync mode: no inner-step report for twice this worker's learned step time (and a floor): judged
   * hung (coordinator/machine/hang.ts), its share of the outer step dropped. It may reconnect and rejoin.
   */
  noProgress: 4008,
} as const;
