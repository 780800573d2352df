/**
 * The read-only views of the coordinator's state that leave the process: the body of `GET /api/status`
 * and the worker rows and usage figures the admin feed (admin-feed.ts) builds on.
 *
 * Only the wire types live here, in the pure core, so that the admin page and the feed's format can
 * name them without importing the coordinator's state machine; the machine builds them
 * (coordinator/machine: `statusView`, `usageView`).
 */
import type { KernelsReport, PeerLink } from './tab-messages';

/** What the views show of usage sums (coordinator/machine/utilization.ts): null where nothing was measured yet. */
export interface UsageView {
  /** Time computing / wall time, in [0, 1]. */
  utilization: number | null;
  bytesPerSample: number | null;
}

/** One member of the world as `/api/status` and the admin page show it. */
export interface WorldView {
  id: string;
  peerId: string;
  rank: number;
  share: number;
  ready: boolean;
  lastStep: number;
  throughput: number | null;
  /** WebRTC round-trip time (ms) of its ring links (max over them) from its last heartbeat, or null. */
  peerRttMs: number | null;
  /** Selected ICE candidate types (local/remote) of its ring links, from its last heartbeat ([] unknown). */
  peerLinks: PeerLink[];
  /** Why ICE fails for it (e.g. "TURN authentication failed …"), or null. */
  iceError: string | null;
  adapter: string;
  /** The kernels its hello reported (variants, GFLOP/s, tuned or cached), or null. */
  kernels: KernelsReport | null;
  /** The invite it joined through (id), or null. */
  invite: string | null;
  /** Recent compute utilization in [0, 1] (time computing / wall time, utilization.ts), or null before a report. */
  utilization: number | null;
  /** Recent bytes it sent in collectives per sample it computed (its claim), or null (unknown). */
  bytesPerSample: number | null;
}

/**
 * The coordinator's advice when every-step sync waits on the network longer than the tabs compute
 * (coordinator/machine/sync-advice.ts): the numbers it rests on and the local-steps job it suggests.
 */
export interface SyncAdviceView {
  /** Recent wall time per step that the busiest rank did not spend computing (its allreduce, mostly), ms. */
  syncMsPerStep: number;
  /** Recent compute time per step of that rank, ms. */
  computeMsPerStep: number;
  /** The job's `sync` field suggested instead: local steps with an int8 wire. */
  suggested: { mode: 'local'; innerSteps: number; compression: 'int8' };
  /** One line for people: what is slow, and what to put in the job file instead. */
  message: string;
}

/** The body of `GET /api/status`. */
export interface StatusView {
  runId: string;
  /** Job status, or the rendezvous phase while active. */
  state: 'gathering' | 'syncing' | 'training' | 'paused' | 'done' | 'failed';
  round: number;
  /** Last committed step. */
  step: number;
  epoch: number;
  world: WorldView[];
  waiting: { id: string; position: number; iceError: string | null }[];
  processedInEpoch: number;
  datasetSize: number;
  /**
   * The job's last step as it stands: committed steps plus the steps left (holes of partial commits
   * included). An estimate: a later partial commit adds steps.
   */
  totalSteps: number;
  restarts: number;
  maxRestarts: number;
  minWorkers: number;
  maxWorkers: number;
  lastCommit: { step: number; hash: string | null };
  checkpoints: { step: number; sha256: string }[];
  /**
   * The job's compute utilization and wire bytes per sample over all ranks: `recent` decays with a
   * half-life of `halfLifeMs`, `total` covers the run since this coordinator started (utilization.ts).
   */
  usage: { recent: UsageView; total: UsageView; halfLifeMs: number };
  /** Every-step sync is slower than computing: the advice the admin page shows, or null. */
  syncAdvice: SyncAdviceView | null;
}
