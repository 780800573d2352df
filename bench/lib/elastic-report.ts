/**
 * bench:elastic's output: the allreduce table, one line per recovery event, the recovery table, and
 * the run's JSON line `{"bench":"elastic", …}` (bench/RESULTS.md quotes both).
 */
import type { WireCompression } from '../../web/net/ring-allreduce';
import type { FeedWatcher } from './admin-feed-watcher';
import type { AllreduceResult, FaultKind, RecoveryEvent, RecoveryResult, Row } from './elastic-figures';

export function printAllreduce(
  settings: { highWaterBytes: number; lowWaterBytes: number; compression: WireCompression; repeat: number },
  raw: ReadonlyMap<number, { before: number[]; after: number[] }>,
  rawMedian: ReadonlyMap<number, number>,
  rows: readonly Row[],
): void {
  const { highWaterBytes, lowWaterBytes, compression, repeat } = settings;
  console.log(
    `high water ${highWaterBytes} B, low water ${lowWaterBytes} B, compression ${compression}, ${repeat} runs each (median)`,
  );
  for (const [f, m] of raw) {
    const fmt = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(' ');
    console.log(
      `raw channel tab0→tab1, ${f}-byte messages: ${rawMedian.get(f)!.toFixed(1)} MiB/s (before: ${fmt(m.before)}; after: ${fmt(m.after)})`,
    );
  }
  console.log('\ntabs    size   frame B   time ms   bus MiB/s   bus/raw   raw ring MiB/s   bus/raw ring   runs ms');
  for (const r of rows) {
    console.log(
      `${String(r.tabs).padStart(4)}  ${String(r.mib).padStart(2)} MiB  ${String(r.frameBytes).padStart(8)}  ${r.ms.toFixed(0).padStart(8)}  ${r.busMiBps.toFixed(1).padStart(10)}  ${r.ratioToRaw.toFixed(2).padStart(8)}  ${r.rawRingMiBps.toFixed(1).padStart(15)}  ${r.ratioToRawRing.toFixed(2).padStart(13)}   ${r.runsMs.join(' ')}`,
    );
  }
}

/** One line per event, and notes when it took extra rounds or the restore count disagrees with the losses log. */
export function logFaultEvent(f: FeedWatcher, event: RecoveryEvent, i: number, eventIndex: number): void {
  const { kind, round, nextRound, resumedAt, undoneBySurvivor, restoredSurvivors, rolledBackCommits } = event;
  if (nextRound > round + 1) {
    const closes = f.events.slice(eventIndex).filter((e) => e.event === 'round_closed' && e.data.round < nextRound);
    console.log(
      `  (event ${i + 1} went through ${nextRound - round - 1} more round(s): ${closes.map((e) => `round ${e.data.round} closed: ${e.data.reason}`).join('; ')})`,
    );
  }
  if (restoredSurvivors > 0 !== Math.max(0, ...undoneBySurvivor) > 0) {
    console.log(
      `  (event ${i + 1}: ${restoredSurvivors} survivor(s) restored their backup, yet ${undoneBySurvivor.join('/')} steps undone per the losses log)`,
    );
  }
  console.log(
    `event ${String(i + 1).padStart(2)}: ${kind.padEnd(7)} rank ${event.rank}, round ${round}→${nextRound}, resumed at step ${resumedAt}: ` +
      `${event.recoveryMs} ms (detect ${event.detectMs}, regroup ${event.regroupMs}, sync ${event.syncMs}, first step ${event.firstStepMs}), ` +
      `steps lost ${event.stepsLost} (${undoneBySurvivor.join('/')} undone, ${rolledBackCommits} rolled back)`,
  );
}

export function printRecovery(r: RecoveryResult, worldSize: number, faultKinds: readonly FaultKind[]): void {
  const targets: Record<FaultKind, string> = { goodbye: '< 1000', crash: '< 3000', hang: 'reference' };
  console.log(
    `\nrecovery: fault → first commit of the next round, ms (${worldSize} tabs → ${worldSize - 1}, ${r.job.model}, global batch ${r.job.globalBatch}, ` +
      `heartbeat ${r.job.heartbeatMs} ms (timeout ×3), last call ${r.job.lastCallMs} ms; ${r.dataset})`,
  );
  console.log(
    'fault     n   median      max      min  target    detect  regroup   sync  1st step   steps lost med/max',
  );
  for (const kind of faultKinds) {
    const k = r.recovery[kind]!;
    console.log(
      `${kind.padEnd(7)} ${String(k.n).padStart(3)} ${String(k.median_ms).padStart(8)} ${String(k.max_ms).padStart(8)} ${String(k.min_ms).padStart(8)}  ${targets[kind].padEnd(9)} ` +
        `${String(k.detect_ms).padStart(7)} ${String(k.regroup_ms).padStart(8)} ${String(k.sync_ms).padStart(6)} ${String(k.first_step_ms).padStart(9)}   ${k.steps_lost.median}/${k.steps_lost.max}`,
    );
  }
  console.log(
    `steps lost per failure, all events: median ${r.steps_lost.median}, max ${r.steps_lost.max} (target ≤ 1); one step takes ${r.stepMs} ms (median, ${worldSize} tabs)`,
  );
  console.log("(medians of each phase separately; detect/regroup/sync/1st step by the coordinator's log events)");
}

/** The run's JSON line: the allreduce figures, the recovery summary and events, the load average. */
export function elasticJsonLine(
  allreduce: AllreduceResult | null,
  recovery: RecoveryResult | null,
  worldSize: number,
  load: { start: number[]; end: number[] },
  seconds: number,
): string {
  const stripEvent = (e: RecoveryEvent) => ({
    kind: e.kind,
    ms: e.recoveryMs,
    detect: e.detectMs,
    regroup: e.regroupMs,
    sync: e.syncMs,
    first: e.firstStepMs,
    lost: e.stepsLost,
  });
  // Three decimals are plenty for timings and ratios measured on a shared machine.
  const rounded = (_key: string, v: unknown) =>
    typeof v === 'number' && !Number.isInteger(v) ? Math.round(v * 1000) / 1000 : v;
  const result = {
    bench: 'elastic',
    ...(allreduce ?? {}),
    ...(recovery
      ? {
          recovery: recovery.recovery,
          steps_lost: recovery.steps_lost,
          step_ms: recovery.stepMs,
          recovery_job: { ...recovery.job, world: worldSize, dataset: recovery.dataset },
          recovery_events: recovery.events.map(stripEvent),
        }
      : {}),
    load: { start: load.start, end: load.end, cores: 2 },
    seconds,
  };
  return JSON.stringify(result, rounded);
}
