/**
 * What the parts of the elastic loop share: the ports, the serial worker queue, the timeouts, the
 * status box and the held states. Built once by `ElasticLoop`; the parts (state sync, step runner,
 * checkpoint service) take it instead of reaching into the loop.
 */
import type { HttpPort } from './checkpoint-transfer';
import type { SerialQueue } from './async-tools';
import type { HeldStateKeeper } from './held-states';
import type { ControlPort, MeshPort, TrainerPort } from './ports';
import type { StatusBox } from './status';

export interface ElasticTimeouts {
  /** Opening the ring's data channels. */
  ringConnectMs: number;
  /** A state broadcast or checkpoint download, whole. */
  syncMs: number;
  /** From `ready` to `train`, and from a commit-point report to `committed` (the coordinator decides; this only bounds a silent one). */
  coordinatorWaitMs: number;
  /** An allreduce, from the call (includes waiting for slower ranks); at least 10× the last compute time. */
  collectiveMs: number;
  /** One call into the training worker. */
  workerCallMs: number;
  /** A checkpoint upload. */
  uploadMs: number;
}

export const DEFAULT_TIMEOUTS: ElasticTimeouts = {
  ringConnectMs: 20_000,
  syncMs: 60_000,
  coordinatorWaitMs: 120_000,
  collectiveMs: 20_000,
  workerCallMs: 120_000,
  uploadMs: 120_000,
};

export type LogLevel = 'info' | 'warn' | 'error';

export interface LoopContext {
  trainer: TrainerPort;
  mesh: MeshPort;
  control: ControlPort;
  http: HttpPort;
  queue: SerialQueue;
  timeouts: ElasticTimeouts;
  box: StatusBox;
  keeper: HeldStateKeeper;
  log(level: LogLevel, text: string): void;
  now(): number;
}
