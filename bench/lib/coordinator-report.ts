/**
 * bench:coordinator's output: one result per run (`RunResult`), the table of every run and the summary
 * over runs (median and spread), and the one JSON line `{"bench":"coordinator", ...}`.
 */
import { type MemoryFit, ms, type Spread, spread } from './coordinator-figures';

/** What one run measured (the driver fills it). */
export interface RunResult {
  durationS: number;
  joinAllMs: number;
  messagesInPerS: number;
  messagesOutPerS: number;
  stepReportsPerS: number;
  committedSteps: number;
  stepsPerS: number;
  epochs: number;
  /** report→committed of every commit after the last join (ms). */
  commitLatencyMs: { p50: number; p99: number; max: number; n: number };
  reference: { sqliteCommitTxMs: { p50: number; p99: number }; wsEchoRttMs: { p50: number; p99: number } };
  rounds: number;
  restarts: number;
  joins: number;
  leaves: { goodbyes: number; drops: number };
  messageErrors: Record<string, number>;
  /**
   * Inside the coordinator: its events (one message or tick, handled and its actions executed, store
   * included) and its store transactions slower than each bound (seconds → how many), from its histograms.
   */
  slow: {
    events: Record<string, number>;
    eventCount: number;
    storeTransactions: Record<string, number>;
    /** Events that recorded a commit (the completing report handled, stored, `committed` handed to the sockets). */
    commits: Record<string, number>;
    commitCount: number;
  };
  /** One admin page watching: its feed's snapshot, then bytes and messages per second; `/api/status`'s default page. */
  admin: { snapshotKiB: number; feedKiBPerS: number; feedMessagesPerS: number; statusKiB: number };
  /** The coordinator's RSS against its worker count while the workers joined, and at the end of the run. */
  memory: { fit: MemoryFit | null; endRssMb: number | null };
  /** Load averages (1 min) at the start and end, and the share of the machine other processes took. */
  machine: { loadStart: number; loadEnd: number; othersShare: number | null };
  audit: { ok: boolean; duplicates: number; neverCommitted: number; recordAgrees: boolean; rolledBackRows: number };
  invariantsOk: boolean;
}

/** The options the table and JSON line repeat. */
export interface RunShape {
  workers: number;
  maxWorld: number;
  leaveEveryMs: number;
  globalBatch: number;
  datasetSize: number;
  durationS: number;
  /** The nice value the bench and the coordinator ran at (null: left as they were). */
  nice: number | null;
}

/** Latency figures of one run's samples. */
export function latencyOf(latencies: readonly number[]): RunResult['commitLatencyMs'] {
  return { p50: ms(latencies, 0.5), p99: ms(latencies, 0.99), max: ms(latencies, 1), n: latencies.length };
}

export function floorsOf(storeTimes: readonly number[], echoTimes: readonly number[]): RunResult['reference'] {
  return {
    sqliteCommitTxMs: { p50: ms(storeTimes, 0.5), p99: ms(storeTimes, 0.99) },
    wsEchoRttMs: { p50: ms(echoTimes, 0.5, 3), p99: ms(echoTimes, 0.99, 3) },
  };
}

/** Median and spread over the runs of the figures the goal is about. */
export function summaryOf(runs: readonly RunResult[]) {
  const of = (f: (r: RunResult) => number): Spread => spread(runs.map(f));
  const fits = runs.map((r) => r.memory.fit).filter((f) => f !== null);
  return {
    runs: runs.length,
    commitP50Ms: of((r) => r.commitLatencyMs.p50),
    commitP99Ms: of((r) => r.commitLatencyMs.p99),
    stepsPerS: of((r) => r.stepsPerS),
    sqliteP99Ms: of((r) => r.reference.sqliteCommitTxMs.p99),
    wsEchoP99Ms: of((r) => r.reference.wsEchoRttMs.p99),
    kbPerWorker: fits.length > 0 ? spread(fits.map((f) => f.kbPerWorker)) : null,
    othersShare: of((r) => r.machine.othersShare ?? Number.NaN),
    /** Share of the commits the coordinator itself took over 20 ms to handle. */
    coordinatorCommitsOver20ms: of((r) =>
      Number(((r.slow.commits['0.02'] ?? 0) / Math.max(1, r.slow.commitCount)).toFixed(4)),
    ),
    invariantsOk: runs.every((r) => r.invariantsOk),
  };
}

function runRows(r: RunResult, shape: RunShape): [string, string][] {
  const a = r.audit;
  const fit = r.memory.fit;
  return [
    ['duration', `${r.durationS} s after the joins (${r.joinAllMs} ms to join ${shape.workers})`],
    ['messages in / out', `${r.messagesInPerS} /s  /  ${r.messagesOutPerS} /s`],
    ['step reports', `${r.stepReportsPerS} /s`],
    ['committed steps', `${r.committedSteps} (${r.stepsPerS} /s, ${r.epochs} epochs of ${shape.datasetSize})`],
    [
      'report→committed p50 / p99 / max',
      `${r.commitLatencyMs.p50} / ${r.commitLatencyMs.p99} / ${r.commitLatencyMs.max} ms (n=${r.commitLatencyMs.n})`,
    ],
    ['  ref: SQLite commit tx (FULL)', `${r.reference.sqliteCommitTxMs.p50} / ${r.reference.sqliteCommitTxMs.p99} ms`],
    ['  ref: bare ws echo RTT', `${r.reference.wsEchoRttMs.p50} / ${r.reference.wsEchoRttMs.p99} ms`],
    [
      'coordinator RSS',
      fit
        ? `${fit.interceptMb} MB + ${fit.kbPerWorker} kB per worker (r² ${fit.r2}; ${fit.points.map((p) => `${p.workers}: ${p.rssMb}`).join(', ')} MB), ${r.memory.endRssMb?.toFixed(1)} MB at the end`
        : 'not measured (no /proc)',
    ],
    [
      'coordinator events > 5/10/25/50 ms',
      `${['0.005', '0.01', '0.025', '0.05'].map((b) => r.slow.events[b] ?? '?').join(' / ')} of ${r.slow.eventCount}; store transactions > 10/25/50 ms: ${['0.01', '0.025', '0.05'].map((b) => r.slow.storeTransactions[b] ?? '?').join(' / ')}`,
    ],
    [
      '  of which commits > 5/10/20 ms',
      `${['0.005', '0.01', '0.02'].map((b) => r.slow.commits[b] ?? '?').join(' / ')} of ${r.slow.commitCount} (handled in the coordinator: report in → stored → committed out)`,
    ],
    [
      'admin page',
      `feed: snapshot ${r.admin.snapshotKiB} KiB, then ${r.admin.feedKiBPerS} KiB/s in ${r.admin.feedMessagesPerS} messages/s; /api/status ${r.admin.statusKiB} KiB`,
    ],
    ['rounds / restarts', `${r.rounds} / ${r.restarts}`],
    ['joins / goodbyes / drops', `${r.joins} / ${r.leaves.goodbyes} / ${r.leaves.drops}`],
    ['message errors', JSON.stringify(r.messageErrors)],
    [
      'machine',
      `load ${r.machine.loadStart.toFixed(2)} → ${r.machine.loadEnd.toFixed(2)}, other processes took ${r.machine.othersShare === null ? '?' : `${(r.machine.othersShare * 100).toFixed(0)} %`} of the CPU`,
    ],
    [
      'audit',
      `${r.invariantsOk ? 'OK' : 'FAILED'}: duplicates ${a.duplicates}, never committed ${a.neverCommitted}, record agrees ${a.recordAgrees}, rolled-back rows ${a.rolledBackRows}`,
    ],
  ];
}

const fmt = (s: Spread, unit: string) => `${s.median} ${unit} (${s.min} – ${s.max})`;

/** Every run's table, then the summary over runs; then the JSON line. */
export function printReport(runs: readonly RunResult[], shape: RunShape): void {
  console.log(
    `\ncoordinator load test: ${shape.workers} workers (world ≤ ${shape.maxWorld}), a leave every ${shape.leaveEveryMs} ms, ${shape.durationS} s per run${shape.nice === null ? '' : `, nice ${shape.nice}`}`,
  );
  runs.forEach((r, i) => {
    const rows = runRows(r, shape);
    const width = Math.max(...rows.map(([k]) => k.length));
    console.log(`run ${i + 1} of ${runs.length}`);
    for (const [k, v] of rows) console.log(`  ${k.padEnd(width)}  ${v}`);
  });
  const s = summaryOf(runs);
  console.log(`over ${s.runs} run(s): median (min – max)`);
  console.log(`  report→committed p50  ${fmt(s.commitP50Ms, 'ms')}`);
  console.log(`  report→committed p99  ${fmt(s.commitP99Ms, 'ms')}   goal < 20 ms`);
  console.log(`  ref: SQLite tx p99    ${fmt(s.sqliteP99Ms, 'ms')}`);
  console.log(`  ref: ws echo p99      ${fmt(s.wsEchoP99Ms, 'ms')}`);
  console.log(`  steps                 ${fmt(s.stepsPerS, '/s')}`);
  if (s.kbPerWorker) console.log(`  memory per worker     ${fmt(s.kbPerWorker, 'kB')}`);
  console.log(`  others' CPU share     ${fmt(s.othersShare, '')}`);
  console.log(`  commits the coordinator handled in > 20 ms  ${fmt(s.coordinatorCommitsOver20ms, '')}`);
  console.log(JSON.stringify({ bench: 'coordinator', ...shape, summary: s, runs }));
}
