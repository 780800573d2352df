/**
 * bench:elastic's figures: what each part measures (allreduce rows, recovery events) and the statistics
 * over them (medians, bus bandwidth and its ratios to the raw references, per-fault summaries, steps a
 * survivor undid). Pure: the scenarios (elastic-allreduce.ts, elastic-recovery.ts) collect the
 * measurements, elastic-report.ts prints them.
 */
import { ringAllreduceBusBytes, type WireCompression } from '../../web/net/ring-allreduce';

export const MiB = 1024 * 1024;

/** Upper median (the middle element, or the upper of the two middle ones). */
export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export const FAULT_KINDS = ['goodbye', 'crash', 'hang'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Row {
  tabs: number;
  mib: number;
  frameBytes: number;
  ms: number;
  busMiBps: number;
  ratioToRaw: number;
  /** Raw per-link throughput with every link of the ring busy at once (same run). */
  rawRingMiBps: number;
  ratioToRawRing: number;
  runsMs: number[];
}

export interface AllreduceResult {
  highWaterBytes: number;
  lowWaterBytes: number;
  compression: WireCompression;
  rawMiBps: Record<number, number>;
  allreduce: Row[];
}

/** The configurations of the allreduce part (one row per tab count × size × frame size). */
export interface AllreduceGrid {
  tabCounts: number[];
  sizesMiB: number[];
  frameSizes: number[];
  compression: WireCompression;
}

export const allreduceKey = (tabCount: number, mib: number, f: number) => `${tabCount}/${mib}/${f}`;

/** One row per configuration: median time, bus bandwidth and its ratios to the raw references. */
export function allreduceRows(
  grid: AllreduceGrid,
  times: ReadonlyMap<string, number[]>,
  rawMedian: ReadonlyMap<number, number>,
  rawRing: ReadonlyMap<string, number[]>,
): Row[] {
  const rows: Row[] = [];
  for (const tabCount of grid.tabCounts) {
    for (const mib of grid.sizesMiB) {
      for (const frameBytes of grid.frameSizes) {
        const runs = times.get(allreduceKey(tabCount, mib, frameBytes))!;
        const ms = median(runs);
        const busMiBps = ringAllreduceBusBytes((mib * MiB) / 4, tabCount, grid.compression) / MiB / (ms / 1000);
        const ringRaw = median(rawRing.get(`${tabCount}/${frameBytes}`)!);
        rows.push({
          tabs: tabCount,
          mib,
          frameBytes,
          ms,
          busMiBps,
          ratioToRaw: busMiBps / rawMedian.get(frameBytes)!,
          rawRingMiBps: ringRaw,
          ratioToRawRing: busMiBps / ringRaw,
          runsMs: runs.map(Math.round),
        });
      }
    }
  }
  return rows;
}

export interface RecoveryEvent {
  kind: FaultKind;
  /** Rank of the tab taken away. */
  rank: number;
  /** Round the fault hit, and the round whose first commit ended the recovery. */
  round: number;
  nextRound: number;
  /** The new round started at this step (last commit + 1). */
  resumedAt: number;
  recoveryMs: number;
  /** Fault → round_closed → round_open → round_train → first commit, ms each. */
  detectMs: number;
  regroupMs: number;
  syncMs: number;
  firstStepMs: number;
  stepsLost: number;
  /** Per survivor: applied steps undone. */
  undoneBySurvivor: number[];
  rolledBackCommits: number;
  /** Survivors that put their backup back (`restores` grew): a cross-check of `undoneBySurvivor`. */
  restoredSurvivors: number;
}

export interface FaultSummary {
  n: number;
  median_ms: number;
  max_ms: number;
  min_ms: number;
  detect_ms: number;
  regroup_ms: number;
  sync_ms: number;
  first_step_ms: number;
  steps_lost: { median: number; max: number };
}

export interface RecoveryResult {
  job: Record<string, unknown>;
  dataset: string;
  events: RecoveryEvent[];
  recovery: Partial<Record<FaultKind, FaultSummary>>;
  steps_lost: { median: number; max: number };
  /** Median time between two commits of one round with the full world: one step, for scale. */
  stepMs: number;
  seconds: number;
}

/** Steps a survivor applied in the old round at or after `resumedAt`, i.e. undone: its losses log holds them before the new round's `resumedAt`. */
export function undoneSteps(losses: readonly { step: number }[], resumedAt: number): number {
  let newRoundStart = -1;
  for (let i = losses.length - 1; i >= 0; i--) {
    if (losses[i].step === resumedAt) {
      newRoundStart = i;
      break;
    }
  }
  if (newRoundStart <= 0) return 0;
  return Math.max(0, losses[newRoundStart - 1].step - resumedAt + 1);
}

export function summarizeFaults(xs: RecoveryEvent[]): FaultSummary {
  return {
    n: xs.length,
    median_ms: median(xs.map((e) => e.recoveryMs)),
    max_ms: Math.max(...xs.map((e) => e.recoveryMs)),
    min_ms: Math.min(...xs.map((e) => e.recoveryMs)),
    detect_ms: median(xs.map((e) => e.detectMs)),
    regroup_ms: median(xs.map((e) => e.regroupMs)),
    sync_ms: median(xs.map((e) => e.syncMs)),
    first_step_ms: median(xs.map((e) => e.firstStepMs)),
    steps_lost: { median: median(xs.map((e) => e.stepsLost)), max: Math.max(...xs.map((e) => e.stepsLost)) },
  };
}
