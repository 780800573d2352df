/**
 * One swarm run: probe the coordinator (fail fast), open the tabs, wait for the first commit (warm-up),
 * play the chaos schedule against the wall clock while polling `/api/status` and the tabs, then read
 * the audit and build the report. The coordinator is a separate process: polling its status is the
 * only way to see it, at 2–5 Hz (faster only while a recovery is being timed).
 */
import type { StatusReport } from '../audit';
import { chaosSchedule, type ChaosEvent } from './chaos-schedule';
import { launchSwarmChromium } from './chromium';
import { CoordinatorUnreachableError, fetchAudit, fetchStatus, probeCoordinator } from './coordinator-api';
import { SwarmError } from './swarm-errors';
import { chaosOptionsOf, type SwarmOptions } from './swarm-options';
import {
  epochProgressOf,
  formatProgress,
  RecoveryTracker,
  samplesThrough,
  summarizeAudit,
  swarmVerdict,
  ThroughputTimeline,
  type AuditSummary,
  type FiredEvent,
  type StatusSample,
  type SwarmReport,
} from './swarm-report';
import { TabPool, type SwarmTab, type TabProblem } from './swarm-tabs';

export interface SwarmIo {
  /** The live progress line, on every status poll (the CLI decides how often to show it). */
  progress?(line: string): void;
  /** Notable moments: events fired, tab problems. */
  log?(line: string): void;
}

const POLL_MS = 500;
const POLL_RECOVERING_MS = 200;
const READ_TABS_MS = 1000;
/** The coordinator silent this long ends the run. */
const COORDINATOR_SILENCE_MS = 15_000;
/** A keep-alive tab gets this long to start training before the fault goes ahead anyway. */
const KEEP_ALIVE_WAIT_MS = 90_000;

function sample(s: StatusReport): StatusSample {
  return {
    round: s.round,
    step: s.step,
    state: s.state,
    worldSize: s.world.length,
    waiting: s.waiting.length,
    restarts: s.restarts,
  };
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted || ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

export async function runSwarm(options: SwarmOptions, io: SwarmIo = {}, interrupt?: AbortSignal): Promise<SwarmReport> {
  const t0 = performance.now();
  const clock = () => performance.now() - t0;
  const log = (line: string) => io.log?.(`[${(clock() / 1000).toFixed(1)}s] ${line}`);
  const { baseUrl } = options;

  const { runId, job } = await probeCoordinator(baseUrl);
  const initial = await fetchStatus(baseUrl).catch((error: Error) => {
    throw new CoordinatorUnreachableError(`${baseUrl}/api/status failed: ${error.message}`);
  });
  if (initial.state === 'done' || initial.state === 'failed') {
    throw new SwarmError(
      `the coordinator's job (run ${runId}) is already ${initial.state} at step ${initial.step}: nothing to train; ` +
        'restart the coordinator with a fresh --data-dir',
    );
  }
  const schedule = chaosSchedule(chaosOptionsOf(options));
  const plan = job;
  const totalSteps = job.totalSteps;

  // Stops the run early: Ctrl-C, the job finishing, or the coordinator going silent.
  const stopRun = new AbortController();
  const onInterrupt = () => {
    log('interrupted: finishing with the report');
    stopRun.abort();
  };
  interrupt?.addEventListener('abort', onInterrupt, { once: true });
  if (interrupt?.aborted) stopRun.abort();
  const stopMonitor = new AbortController();

  const browser = await launchSwarmChromium();
  const pool = new TabPool(browser, options.tabUrl, {
    clock,
    onProblem: (p: TabProblem) => {
      if (p.kind !== 'console' || problemsLogged++ < 20)
        log(`${p.tab} ${p.kind}: ${p.text.split('\n')[0].slice(0, 200)}`);
    },
  });
  let problemsLogged = 0;

  let latest: StatusReport = initial;
  let lastAnswerMs = clock();
  let coordinatorLost: string | null = null;
  let chaosStartMs: number | null = null;
  let atChaosStart = initial.step;
  const tracker = new RecoveryTracker();
  const timeline = new ThroughputTimeline(plan);
  const fired: FiredEvent[] = [];
  const joins: SwarmReport['joins'] = [];
  const joinOpenedAt = new Map<string, number>();
  const opening = new Map<string, Promise<SwarmTab>>();
  let keepAliveCount = 0;
  let rate: number | null = null;

  const openTab = (name: string) => {
    joinOpenedAt.set(name, clock());
    const promise = pool.open(name);
    opening.set(name, promise);
    return promise;
  };

  const progressLine = (): string => {
    const step = latest.step;
    const { epoch, fraction } = epochProgressOf(step, plan);
    return formatProgress({
      elapsedS: (clock() - (chaosStartMs ?? 0)) / 1000,
      durationS: options.duration,
      warmingUp: chaosStartMs === null,
      step,
      totalSteps,
      epoch,
      epochs: job.epochs,
      epochFraction: fraction,
      worldSize: latest.world.length,
      waiting: latest.waiting.length,
      samplesPerSec: rate,
      tabs: pool.tabs.filter((t) => t.live || t.fate === 'hung').length,
      hung: pool.tabs.filter((t) => t.fate === 'hung').length,
      eventsFired: fired.filter((e) => e.outcome === 'done').length,
      eventsPlanned: schedule.length,
      recoveries: tracker.recoveredCount,
      recoveriesOpen: tracker.openCount,
      phase: latest.state,
    });
  };

  /** A join (or resumed tab) is admitted once a fresh reading shows it training as a rank of the world. */
  const noteAdmissions = () => {
    const members = new Set(latest.world.map((w) => w.id));
    for (const entry of joins) {
      if (entry.admittedAfterMs !== null) continue;
      const openedAt = joinOpenedAt.get(entry.tab);
      const tab = pool.byName(entry.tab);
      if (openedAt === undefined || !tab?.reading || tab.readAtMs < openedAt) continue;
      // Only the latest entry of a tab (a resumed tab has one per resume) can still be admitted.
      if (joins.findIndex((j, i) => j.tab === entry.tab && i > joins.indexOf(entry)) >= 0) continue;
      if (tab.reading.phase === 'training' && tab.reading.workerId && members.has(tab.reading.workerId)) {
        entry.admittedAfterMs = Math.round(tab.readAtMs - openedAt);
      }
    }
  };

  const monitor = (async () => {
    let lastRead = -Infinity;
    while (!stopMonitor.signal.aborted) {
      try {
        latest = await fetchStatus(baseUrl, 3000);
        lastAnswerMs = clock();
        const now = clock() - (chaosStartMs ?? clock());
        tracker.observe(sample(latest), now);
        if (chaosStartMs !== null) rate = timeline.observe(clock(), latest.step, latest.world.length) ?? rate;
        if (latest.state === 'done' || latest.state === 'failed') stopRun.abort();
      } catch (error) {
        if (clock() - lastAnswerMs > COORDINATOR_SILENCE_MS && !coordinatorLost) {
          coordinatorLost = `the coordinator stopped answering ${baseUrl}/api/status (${(error as Error).message})`;
          log(coordinatorLost);
          stopRun.abort();
        }
      }
      if (clock() - lastRead >= READ_TABS_MS) {
        lastRead = clock();
        await pool.readAll();
        noteAdmissions();
      }
      io.progress?.(progressLine());
      await pause(tracker.openCount > 0 ? POLL_RECOVERING_MS : POLL_MS, stopMonitor.signal);
    }
  })();

  let warmupS = 0;
  let endMs = 0;
  let final: StatusReport = latest;
  let audit: AuditSummary | { error: string } = { error: 'not read' };
  try {
    log(`opening ${options.workers} tab(s) at ${options.tabUrl} (run ${runId}, step ${initial.step}/${totalSteps})`);
    await Promise.all(Array.from({ length: options.workers }, (_, i) => openTab(`t${i + 1}`)));

    // Warm-up: the schedule's clock starts at the first commit, so faults hit a training world.
    const warmupDeadline = clock() + options.warmup * 1000;
    while (!stopRun.signal.aborted && latest.step <= initial.step && latest.state !== 'done') {
      const broken = pool.tabs.filter(
        (t) => t.fate === 'failed' || t.reading?.state === 'error' || t.reading?.state === 'unsupported',
      );
      if (broken.length === pool.tabs.length) {
        const why = broken.map(
          (t) => `${t.name}: ${t.reading?.error ?? pool.problems.find((p) => p.tab === t.name)?.text ?? t.fate}`,
        );
        throw new SwarmError(`every tab failed before training: ${why.join('; ')}`);
      }
      if (clock() > warmupDeadline) {
        const states = pool.tabs.map(
          (t) => `${t.name} ${t.reading?.state ?? t.fate}${t.reading?.error ? ` (${t.reading.error})` : ''}`,
        );
        throw new SwarmError(
          `no progress: no step committed within the ${options.warmup} s warm-up (coordinator ${latest.state}, tabs: ${states.join(', ')})`,
        );
      }
      await pause(POLL_MS, stopRun.signal);
    }
    chaosStartMs = clock();
    timeline.observe(chaosStartMs, latest.step, latest.world.length);
    warmupS = chaosStartMs / 1000;
    atChaosStart = latest.step;
    log(
      `training (step ${latest.step}): chaos starts, ${schedule.length} event(s) over ${options.duration} s, seed ${options.seed}`,
    );

    const chaosClock = () => (clock() - chaosStartMs!) / 1000;
    for (const event of schedule) {
      await pause(chaosStartMs + event.at * 1000 - clock(), stopRun.signal);
      if (stopRun.signal.aborted) break;
      fired.push(await fire(event));
    }
    await pause(chaosStartMs + options.duration * 1000 - clock(), stopRun.signal);
    endMs = clock();

    async function fire(event: ChaosEvent): Promise<FiredEvent> {
      const result = (outcome: FiredEvent['outcome'], note?: string): FiredEvent => {
        const out: FiredEvent = {
          ...event,
          firedAtS: outcome === 'skipped' ? null : Math.round(chaosClock() * 1000) / 1000,
          outcome,
        };
        if (note) out.note = note;
        log(`${event.kind} ${event.tab}: ${outcome}${note ? ` (${note})` : ''}`);
        return out;
      };
      try {
        if (event.kind === 'join') {
          joins.push({ tab: event.tab, atS: Math.round(chaosClock() * 1000) / 1000, admittedAfterMs: null });
          void openTab(event.tab);
          return result('done');
        }
        const tab = pool.byName(event.tab) ?? (await opening.get(event.tab));
        if (!tab) return result('skipped', 'no such tab');
        if (event.kind === 'resume') {
          if (tab.fate !== 'hung') return result('skipped', `tab is ${tab.fate}`);
          await pool.resume(tab);
          joinOpenedAt.set(tab.name, clock());
          joins.push({ tab: tab.name, atS: Math.round(chaosClock() * 1000) / 1000, admittedAfterMs: null });
          return result('done');
        }
        await opening.get(event.tab);
        if (!tab.live) return result('skipped', `tab is ${tab.fate}`);
        if (event.kind === 'throttle') {
          await pool.throttle(tab, event.kbps ?? 0);
          return result('done', `${event.kbps} kbit/s`);
        }
        // A fault. Tabs still loading count only once loaded (a keep-alive join was just opened).
        await Promise.all(opening.values());
        if (!tab.live) return result('skipped', `tab is ${tab.fate}`);
        const notes: string[] = [];
        // The schedule keeps a live tab, but tabs can also die on their own: check again.
        if (pool.liveTabs.every((t) => t === tab)) {
          const name = `x${++keepAliveCount}`;
          joins.push({ tab: name, atS: Math.round(chaosClock() * 1000) / 1000, admittedAfterMs: null });
          await openTab(name);
          notes.push(`opened ${name} first to keep a tab`);
        }
        // Never take the world's last rank while another tab is on its way in: let it be admitted first.
        const targetId = () => tab.reading?.workerId ?? null;
        const lastRank = () => latest.world.length === 1 && latest.world[0].id === targetId() && tab.live;
        if (lastRank()) {
          const waitStarted = clock();
          while (lastRank() && clock() - waitStarted < KEEP_ALIVE_WAIT_MS && !stopRun.signal.aborted)
            await pause(POLL_MS, stopRun.signal);
          if (!lastRank())
            notes.push(`waited ${((clock() - waitStarted) / 1000).toFixed(1)} s for another tab to be admitted`);
          else notes.push('fired on the last rank: no other tab was admitted in time');
        }
        await pool.readAll();
        const status = await fetchStatus(baseUrl, 3000).catch(() => latest);
        const members = new Set(status.world.map((w) => w.id));
        const memberTabs = pool.liveTabs.filter((t) => t.reading?.workerId && members.has(t.reading.workerId));
        const member = !!tab.reading?.workerId && members.has(tab.reading.workerId);
        const localSteps = memberTabs.map((t) => t.reading!.localStep);
        // Registered before the fault is applied: the monitor may see the recovery before the call returns.
        const recovery = tracker.fault({
          tab: tab.name,
          kind: event.kind,
          atMs: clock() - chaosStartMs!,
          member,
          status: sample(status),
          localSteps,
        });
        try {
          if (event.kind === 'close') await pool.close(tab);
          else if (event.kind === 'crash') await pool.crash(tab);
          else await pool.hang(tab);
        } catch (error) {
          tracker.cancel(recovery);
          throw error;
        }
        const rank = status.world.find((w) => w.id === tab.reading?.workerId)?.rank;
        return result('done', [...notes, member ? `rank ${rank} of ${status.world.length}` : 'not a rank'].join('; '));
      } catch (error) {
        return result('failed', (error as Error).message.split('\n')[0]);
      }
    }

    // The end: one last look at everything before the tabs go (closing them changes the run).
    for (const event of schedule.slice(fired.length))
      fired.push({ ...event, firedAtS: null, outcome: 'skipped', note: 'after the end of the run' });
    try {
      final = await fetchStatus(baseUrl, 5000);
      tracker.observe(sample(final), clock() - chaosStartMs);
      audit = summarizeAudit(await fetchAudit(baseUrl));
    } catch (error) {
      audit = { error: coordinatorLost ?? (error as Error).message };
    }
    await pool.readAll();
    noteAdmissions();
  } finally {
    interrupt?.removeEventListener('abort', onInterrupt);
    stopMonitor.abort();
    await monitor;
    await pool.closeAll().catch(() => undefined);
    await browser.close().catch(() => undefined);
  }

  const elapsedS = (endMs - chaosStartMs) / 1000;
  const steps: SwarmReport['steps'] = {
    atStart: initial.step,
    atChaosStart,
    atEnd: final.step,
    committedDuringChaos: final.step - atChaosStart,
    total: totalSteps,
    jobState: final.state,
  };
  const verdict = swarmVerdict({ audit, steps });
  if (coordinatorLost) verdict.failures.unshift(coordinatorLost);
  const chaosSamples = samplesThrough(Math.max(final.step, atChaosStart), plan) - samplesThrough(atChaosStart, plan);
  const problems = pool.problems;
  return {
    ok: verdict.failures.length === 0,
    failures: verdict.failures,
    url: baseUrl,
    seed: options.seed,
    workers: options.workers,
    durationS: options.duration,
    elapsedS: Math.round(elapsedS * 1000) / 1000,
    warmupS: Math.round(warmupS * 1000) / 1000,
    job: {
      runId,
      model: job.model.name,
      globalBatch: job.globalBatch,
      datasetSize: job.datasetSize,
      epochs: job.epochs,
      totalSteps,
    },
    schedule,
    events: fired,
    steps,
    throughput: timeline.samples.map((x) => ({ ...x, t: Math.round((x.t - warmupS) * 1000) / 1000 })),
    meanSamplesPerSec: elapsedS > 0 ? Math.round((chaosSamples / elapsedS) * 10) / 10 : null,
    recoveries: tracker.recoveries,
    joins,
    restarts: { atStart: initial.restarts, atEnd: final.restarts },
    audit,
    tabs: pool.tabs.map((t) => ({
      name: t.name,
      openedAtS: Math.round(t.openedAtMs) / 1000,
      fate: t.fate,
      state: t.reading?.state ?? null,
      committedStep: t.reading?.committedStep ?? 0,
      error: t.reading?.error ?? null,
    })),
    problems: {
      errors: problems.filter((p) => p.kind !== 'crash'),
      crashes: problems.filter((p) => p.kind === 'crash'),
      unexpectedCrashes: problems.filter((p) => p.kind === 'crash' && !p.expected).length,
      dropped: pool.droppedProblems,
    },
  };
}
