/**
 * One bench:scale scenario on the network test bed (`bench:scale --netbed broadband`): the same job as on
 * loopback (scale-run.ts `JOB`), but every headless worker in a NATed home of its own (endpoint-independent
 * NAT, so every pair links directly through the NATs' mappings), each home's access link shaped to the
 * profile (bench/lib/sync-configs.ts `SYNC_PROFILES`), an HTTPS coordinator and coturn in the public
 * segment. It runs through `tabswarm swarm --netbed`'s own driver (tools/netbed/netbed-swarm.ts), so what is
 * measured is what that command does.
 *
 * Churn is the loopback scenario's count, played by the swarm's seeded schedule: F = max(1, round(N · rate ·
 * window / 60)) crashes as on loopback, so a crash every P = window / (F + 1) seconds and a join every P,
 * each at its period ± a quarter (so F or F + 1 of each in the window). Crashes only, where the loopback run
 * alternates crash and leave: the schedule places each kind on its own period, and crashes and leaves at
 * 2·P each would give a 60 s window at N = 16 two faults instead of three. A crash is the costlier of the
 * two (no goodbye). Unlike the loopback run a join is a new worker in a new home, and the victim is chosen
 * by the seed, not as the first rank.
 *
 * What it measures: commits, committed samples and samples/s in the window, compute utilization (the
 * coordinator's whole-run figure), the outer-step split (the workers' `--timings` lines received in the
 * window, as on loopback), join → first commit (from the driver's poll of the world and the window's
 * commits), restarts and the audit, and work lost per failure as on loopback: the driver reads the world
 * from the coordinator's status just before each crash (`faultCosts`), and the window's event log tells
 * whether the outer step in flight was carried or redone (scale-run.ts `settleFault`). A fault whose status
 * read failed is counted but not measured (its column prints `-`). One process per worker (a home holds
 * one), so no RSS per worker.
 */
import type { FiredNetbedEvent } from '../../tools/netbed/netbed-chaos';
import { type NetbedSwarmOptions, runNetbedSwarm } from '../../tools/netbed/netbed-swarm';
import { resolveDatasetDir } from '../../coordinator/config/startup-config';
import {
  type FaultLog,
  type FaultRecord,
  inFlight,
  JOB,
  outerStep,
  type ScaleResult,
  type ScaleTopology,
  settleFault,
  type Swarm,
} from './scale-run';
import { SYNC_PROFILES } from './sync-configs';

export interface NetbedScaleScenario {
  n: number;
  churn: boolean;
  windowS: number;
  ratePerWorkerMin: number;
  warmupS: number;
  /** A key of `SYNC_PROFILES`. */
  profile: string;
  seed: number;
  /** `--topology`, or undefined for the default job. Required, so that a caller that drops it does not compile. */
  topology: ScaleTopology | undefined;
  log(line: string): void;
}

/** The swarm driver's options for a scenario (pure: the unit test checks the churn rate it asks for). */
export function netbedScaleOptions(
  s: NetbedScaleScenario,
  datasetDir: string,
  onHeadlessLine?: (line: string) => void,
): NetbedSwarmOptions {
  const link = SYNC_PROFILES[s.profile];
  if (!link) throw new Error(`unknown profile "${s.profile}" (${Object.keys(SYNC_PROFILES).join(', ')})`);
  const failures = Math.max(1, Math.round((s.n * s.ratePerWorkerMin * s.windowS) / 60));
  const period = s.windowS / (failures + 1);
  return {
    workers: 0,
    headlessWorkers: s.n,
    chaos: s.churn
      ? { seed: s.seed, crashEvery: period, closeEvery: 0, hangEvery: 0, joinEvery: period, hangFor: 10 }
      : null,
    nat: 'endpoint-independent',
    link,
    durationS: s.windowS,
    warmupS: s.warmupS,
    job: JOB(s.n, s.topology),
    datasetDir,
    json: false,
    warmFullWorld: true,
    headless: { args: ['--timings'], onLine: onHeadlessLine },
    faultCosts: true,
  };
}

/**
 * A fired fault as the table counts it, with what it cost when the world before it was read (`faultCosts`):
 * the steps in flight and the victim's share of them, then carried or redone from the window's log.
 */
export function faultOf(e: FiredNetbedEvent, log: FaultLog | undefined): FaultRecord | null {
  if (e.outcome !== 'done' || (e.kind !== 'crash' && e.kind !== 'close')) return null;
  const kind = e.kind === 'crash' ? 'crash' : 'leave';
  if (!e.before || e.atMs === undefined || !log)
    return { kind, atS: e.at, lostSteps: 0, droppedShareSteps: 0, unmeasured: true };
  const { lost, dropped } = inFlight(e.before.step, e.before.members, e.tab);
  const fault: FaultRecord = {
    kind,
    atS: e.at,
    atMs: e.atMs,
    inFlightSteps: lost,
    lostSteps: lost,
    droppedShareSteps: dropped,
  };
  settleFault(fault, log);
  return fault;
}

export async function runNetbedScaleScenario(s: NetbedScaleScenario): Promise<ScaleResult> {
  const timings: { at: number; timing: Swarm['timings'][number] }[] = [];
  const opts = netbedScaleOptions(s, resolveDatasetDir(undefined, process.env), (line) => {
    if (!line.startsWith('{"timing"')) return;
    try {
      timings.push({ at: Date.now(), timing: (JSON.parse(line) as { timing: Swarm['timings'][number] }).timing });
    } catch {
      // a partial line: skip it
    }
  });
  const t0 = performance.now();
  const report = await runNetbedSwarm(opts, s.log, new AbortController().signal);
  const windowEnd = report.windowStartMs + report.windowS * 1000;
  const inWindow = timings.filter((t) => t.at >= report.windowStartMs && t.at <= windowEnd).map((t) => t.timing);
  s.log(`N=${s.n}${s.churn ? ' churn' : ''} (${s.profile}): ${report.steps} steps, ${report.commits} commits`);
  for (const line of report.closures) s.log(`  ${line}`);
  return {
    n: s.n,
    churn: s.churn,
    network: s.profile,
    ...(s.topology ? { topology: s.topology } : {}),
    windowS: Math.round(report.windowS * 10) / 10,
    commits: report.commits,
    committedSteps: report.steps,
    committedSamples: report.committedSamples,
    samplesPerSec: report.committedSamples / report.windowS,
    utilization: report.utilization,
    groups: report.groups,
    outerStep: outerStep(inWindow),
    faults: report.events.map((e) => faultOf(e, report.faultLog)).filter((f): f is FaultRecord => f !== null),
    joinToContributionS: report.joinToFirstCommitS,
    restarts: report.restarts,
    auditOk: report.auditOk,
    rssMiBPerWorker: null,
    // The whole run, with the test bed's setup: the driver does not report the warm-up alone.
    warmupS: (performance.now() - t0) / 1000 - report.windowS,
  };
}
