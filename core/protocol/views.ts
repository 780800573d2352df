/**
 * The read-only views of the coordinator's state that leave the process: the body of `GET /api/status`
 * and the worker rows the admin feed (admin-feed.ts) sends. zod schemas, so that a client can check what
 * it reads (the tests, the swarm and the test bed parse every status they poll) and so that each field
 * has its doc comment in one place; the types are inferred from them.
 *
 * Bounded in size whatever the swarm's size: `/api/status` carries aggregates over every worker plus
 * one page of the world (by rank) and one of the wait list (by position), `?offset&limit` and
 * `?waitingOffset&waitingLimit`, each page at most `STATUS_PAGE_MAX` rows (`STATUS_PAGE_DEFAULT` when
 * not asked). A page's `total` says how many there are. Everything else in it is bounded by the
 * protocol (peer links per worker, text lengths) or by the coordinator (stored checkpoints).
 *
 * Only the wire types live here, in the pure core, so that the admin page, the tools and the tests
 * can name them without importing the coordinator's state machine; the machine builds them
 * (coordinator/machine/status-view.ts, utilization.ts).
 */
import { z } from 'zod';
import { hashSchema, idSchema, rankSchema, roundSchema, stepSchema, textSchema } from './control-fields';
import { candidateTypeSchema, kernelsReportSchema, MAX_REPORTED_LINKS, peerLinkSchema } from './tab-messages';

/** Rows in a page of `/api/status` when the query does not ask for a number. */
export const STATUS_PAGE_DEFAULT = 64;
/** Most rows a page of `/api/status` returns, whatever the query asks (the largest world a job allows is 4096). */
export const STATUS_PAGE_MAX = 256;
/** Checkpoints the coordinator keeps, hence the most `/api/status` lists (coordinator/machine/checkpoints.ts). */
export const STATUS_CHECKPOINTS_MAX = 16;
/**
 * Groups a round's topology has at most, hence the most `/api/status` lists: the planner makes ⌊√N⌋
 * groups (core/training/topology.ts) and the largest world a job allows is 4096.
 */
export const STATUS_TOPOLOGY_GROUPS_MAX = 64;

const count = z.int().min(0);
const ms = z.number().min(0);
/** Milliseconds since the Unix epoch, coordinator clock. */
const clock = z.number();

/** What the views show of usage sums (coordinator/machine/utilization.ts): null where nothing was measured yet. */
export const usageViewSchema = z.strictObject({
  /** Time computing / wall time, in [0, 1]. */
  utilization: z.number().min(0).max(1).nullable(),
  /** Bytes sent in collectives per sample computed (the tabs' claim). */
  bytesPerSample: z.number().min(0).nullable(),
});
export type UsageView = z.infer<typeof usageViewSchema>;

/** Fields every worker row shows, member or waiting. */
const workerFields = {
  id: idSchema,
  /** WebGPU adapter vendor and architecture ('' unknown). */
  adapter: textSchema(513),
  /** The invite it joined through (its id), or null. */
  invite: idSchema.nullable(),
  /** Why ICE fails for it (e.g. "TURN authentication failed …"), as its last heartbeat said, or null. */
  iceError: textSchema(300).nullable(),
  /** Milliseconds since its last message, by the coordinator's clock when the status was taken. */
  lastHeartbeatAgeMs: ms,
};

/** One member of the world as `/api/status` shows it. */
export const worldViewSchema = z.strictObject({
  ...workerFields,
  peerId: idSchema,
  rank: rankSchema,
  /**
   * Its group in the round's topology (`StatusSummary.topology`; 0 in a plain ring). Who it syncs with:
   * `groupPartners` in core/training/group-geometry.ts over the topology's groups.
   */
  group: z
    .int()
    .min(0)
    .max(STATUS_TOPOLOGY_GROUPS_MAX - 1),
  /** Fraction of each step's samples (the round's shares sum to 1). */
  share: z.number().min(0).max(1),
  /** Sent `ready` for this round. */
  ready: z.boolean(),
  /** Last step it reported in this round (the round's base step before its first report). */
  lastStep: stepSchema,
  /** Smoothed samples per compute-ms the coordinator measured, or null before its first step. */
  throughput: z.number().min(0).nullable(),
  /** WebRTC round-trip time (ms) of its ring links (max over them) from its last heartbeat, or null. */
  peerRttMs: ms.nullable(),
  /** Selected ICE candidate types (local/remote) of its ring links, and each link's RTT, from its last heartbeat ([] unknown). */
  peerLinks: z.array(peerLinkSchema).max(MAX_REPORTED_LINKS),
  /** Recent compute utilization in [0, 1] (utilization.ts), or null before a report. */
  utilization: usageViewSchema.shape.utilization,
  /** Recent bytes it sent in collectives per sample it computed (its claim), or null. */
  bytesPerSample: usageViewSchema.shape.bytesPerSample,
  /** The kernels its hello reported (variants, GFLOP/s, tuned or cached), or null. */
  kernels: kernelsReportSchema.nullable(),
});
export type WorldView = z.infer<typeof worldViewSchema>;

/** A worker enrolled but not in the round (waiting for the next commit boundary or rendezvous). */
export const waitingViewSchema = z.strictObject({
  ...workerFields,
  /** Its place on the wait list (0: admitted first). */
  position: count,
});
export type WaitingView = z.infer<typeof waitingViewSchema>;

/** A page of a list: rows [offset, offset + items.length) of `total`, at most `limit` of them. */
function pageSchema<T extends z.ZodType>(item: T) {
  return z.strictObject({
    offset: count,
    limit: z.int().min(0).max(STATUS_PAGE_MAX),
    /** Rows in the whole list. */
    total: count,
    items: z.array(item).max(STATUS_PAGE_MAX),
  });
}

/** Selected candidate types over the members' ring links, counted on the local side of each. */
export const linkCountsSchema = z.strictObject(
  Object.fromEntries(candidateTypeSchema.options.map((type) => [type, count])) as Record<
    z.infer<typeof candidateTypeSchema>,
    typeof count
  >,
);

/** Aggregates over every worker: what a page of 64 rows cannot show about 1,000. */
export const statusCountsSchema = z.strictObject({
  /** Welcomed workers with a socket (members and waiting). */
  workers: count,
  /** Ranks in the current round (0 while gathering). */
  members: count,
  /** Members that sent `ready` for this round. */
  ready: count,
  /** Members not ready yet (syncing the state or connecting the ring). */
  syncing: count,
  /** Enrolled workers not in the round. */
  waiting: count,
  /** Workers silent for more than 1.5 heartbeat periods (the admin page marks them; 3 periods drop them). */
  late: count,
  /** Workers whose last heartbeat reported an ICE error. */
  iceErrors: count,
  links: linkCountsSchema,
  /** Sum of the members' measured throughputs (samples per compute-ms), or null before any was measured. */
  throughput: z.number().min(0).nullable(),
  /** Median and max of the members' reported ring RTTs (ms), or null when none reported one. */
  peerRttMs: z.strictObject({ median: ms, max: ms }).nullable(),
});
export type StatusCounts = z.infer<typeof statusCountsSchema>;

/** The verification of contributions (docs/threat-model.md) as the status shows it. */
export const verificationSummarySchema = z.strictObject({
  /** The job checks contributions (`verify`). */
  enabled: z.boolean(),
  /** The oldest commit being checked now (several may be in flight), or null. */
  step: stepSchema.nullable(),
  /**
   * Its check waits for the state's upload, for the verifier's recomputation, or (`held`) its verdict
   * found a lie and waits for the checks of earlier steps; null when none runs.
   */
  phase: z.enum(['upload', 'recompute', 'held']).nullable(),
});

/**
 * The coordinator's advice when every-step sync waits on the network longer than the tabs compute
 * (coordinator/machine/sync-advice.ts): the numbers it rests on and the local-steps job it suggests.
 */
export const syncAdviceSchema = z.strictObject({
  /** Recent wall time per step that the busiest rank did not spend computing (its allreduce, mostly), ms. */
  syncMsPerStep: ms,
  /** Recent compute time per step of that rank, ms. */
  computeMsPerStep: ms,
  /** The job's `sync` field suggested instead: local steps with an int8 wire. */
  suggested: z.strictObject({
    mode: z.literal('local'),
    innerSteps: z.int().min(1).max(100_000),
    compression: z.literal('int8'),
  }),
  /** One line for people: what is slow, and what to put in the job file instead. */
  message: textSchema(1000),
});
export type SyncAdviceView = z.infer<typeof syncAdviceSchema>;

/** Everything in `/api/status` but the two pages: the admin feed's `status` message. */
export const statusSummarySchema = z.strictObject({
  runId: idSchema,
  /** Job status, or the rendezvous phase while active. */
  state: z.enum(['gathering', 'syncing', 'training', 'paused', 'done', 'failed']),
  /** Rendezvous phase (gathering, syncing, training), also while paused. */
  phase: z.enum(['gathering', 'syncing', 'training']),
  /** Job status. */
  status: z.enum(['active', 'paused', 'done', 'failed']),
  /** Current (or last) round; 0 before the first. */
  round: roundSchema,
  /** Last committed step. */
  step: stepSchema,
  epoch: count,
  /** Sampler cursor in the current epoch. */
  cursor: count,
  processedInEpoch: count,
  datasetSize: count,
  /**
   * The open round's group sizes in rank order when it syncs in groups (core/training/topology.ts), else
   * null (one plain ring). At most `STATUS_TOPOLOGY_GROUPS_MAX` groups.
   */
  topology: z
    .strictObject({ groups: z.array(z.int().min(1).max(4096)).min(2).max(STATUS_TOPOLOGY_GROUPS_MAX) })
    .nullable(),
  /**
   * The job's last step as it stands: committed steps plus the steps left (holes of partial commits
   * included). An estimate: a later partial commit adds steps.
   */
  totalSteps: count,
  restarts: count,
  maxRestarts: count,
  minWorkers: count,
  maxWorkers: count,
  lastCommit: z.strictObject({ step: stepSchema, hash: hashSchema.nullable() }),
  latestCheckpoint: z.strictObject({ step: stepSchema, sha256: hashSchema }).nullable(),
  /** Stored checkpoints, oldest first. */
  checkpoints: z.array(z.strictObject({ step: stepSchema, sha256: hashSchema })).max(STATUS_CHECKPOINTS_MAX),
  /**
   * The job's compute utilization and wire bytes per sample over all ranks: `recent` decays with a
   * half-life of `halfLifeMs`, `total` covers the run since this coordinator started (utilization.ts).
   */
  usage: z.strictObject({ recent: usageViewSchema, total: usageViewSchema, halfLifeMs: ms }),
  counts: statusCountsSchema,
  verification: verificationSummarySchema,
  /** Every-step sync is slower than computing: the advice the admin page shows, or null. */
  syncAdvice: syncAdviceSchema.nullable(),
  /** Coordinator clock when the status was taken (ages are relative to it). */
  at: clock,
});
export type StatusSummary = z.infer<typeof statusSummarySchema>;

/** The body of `GET /api/status`: the summary, one page of the world (by rank), one of the wait list. */
export const statusResponseSchema = z.strictObject({
  ...statusSummarySchema.shape,
  world: pageSchema(worldViewSchema),
  waiting: pageSchema(waitingViewSchema),
});
export type StatusResponse = z.infer<typeof statusResponseSchema>;

/** Which rows of the world and of the wait list a status carries. */
export interface StatusPage {
  offset: number;
  limit: number;
  waitingOffset: number;
  waitingLimit: number;
}

export const DEFAULT_STATUS_PAGE: StatusPage = {
  offset: 0,
  limit: STATUS_PAGE_DEFAULT,
  waitingOffset: 0,
  waitingLimit: STATUS_PAGE_DEFAULT,
};

/**
 * The page `/api/status?offset&limit&waitingOffset&waitingLimit` asks for: absent values take the
 * defaults, limits above `STATUS_PAGE_MAX` are cut to it; anything else (negative, fractional, not a
 * number) is an error naming the parameter.
 */
export function parseStatusPage(params: {
  get(name: string): string | null;
}): { ok: true; page: StatusPage } | { ok: false; error: string } {
  const page = { ...DEFAULT_STATUS_PAGE };
  for (const key of ['offset', 'limit', 'waitingOffset', 'waitingLimit'] as const) {
    const raw = params.get(key);
    if (raw === null) continue;
    if (!/^\d{1,9}$/.test(raw))
      return { ok: false, error: `${key} must be a whole number ≥ 0, not "${raw.slice(0, 20)}"` };
    const value = Number(raw);
    page[key] = key.endsWith('imit') ? Math.min(value, STATUS_PAGE_MAX) : value;
  }
  return { ok: true, page };
}
