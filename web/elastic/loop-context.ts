/**
 * What the parts of the elastic loop share: the ports, the serial worker queue, the timeouts, the
 * status box and the held states. Built once by `ElasticLoop`; the parts (state sync, step runner,
 * checkpoint service) take it instead of reaching into the loop.
 */
import type { RecordPosition } from '../../core/training/groups';
import { HANG_FLOOR_MS } from '../../core/training/hang';
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
  /**
   * A ring neighbour that sends nothing in an outer step's allreduce is judged hung after twice the
   * learned allreduce time, and never before this (core/training/hang.ts `HANG_FLOOR_MS`).
   */
  hangFloorMs: number;
}

export const DEFAULT_TIMEOUTS: ElasticTimeouts = {
  ringConnectMs: 20_000,
  syncMs: 60_000,
  coordinatorWaitMs: 120_000,
  collectiveMs: 20_000,
  workerCallMs: 120_000,
  uploadMs: 120_000,
  hangFloorMs: HANG_FLOOR_MS,
};

export type LogLevel = 'info' | 'warn' | 'error';

/** The record position after each of the last few committed steps (bounded). */
export class CommittedPositions {
  private readonly byStep = new Map<number, RecordPosition>();

  constructor(private readonly keep = 16) {}

  set(step: number, at: RecordPosition): void {
    this.byStep.delete(step);
    this.byStep.set(step, {
      epoch: at.epoch,
      cursor: at.cursor,
      holes: at.holes.map(([s, e]): [number, number] => [s, e]),
    });
    for (const old of this.byStep.keys()) {
      if (this.byStep.size <= this.keep) break;
      this.byStep.delete(old);
    }
  }

  /** The position after `step`, or null when it is not one of the recent commits. */
  get(step: number): RecordPosition | null {
    return this.byStep.get(step) ?? null;
  }

  clear(): void {
    this.byStep.clear();
  }
}

export interface LoopContext {
  trainer: TrainerPort;
  mesh: MeshPort;
  control: ControlPort;
  http: HttpPort;
  queue: SerialQueue;
  timeouts: ElasticTimeouts;
  box: StatusBox;
  keeper: HeldStateKeeper;
  /**
   * Where the record stood after recent committed steps, as `round` and `committed` said (a snapshot
   * of a committed state carries it; a step number alone no longer tells: partial commits move it).
   */
  positions: CommittedPositions;
  log(level: LogLevel, text: string): void;
  now(): number;
}
