/**
 * One swarm run: probe the coordinator (fail fast), open the tabs, wait for the first commit (warm-up),
 * play the chaos schedule against the wall clock while polling `/api/status` and the tabs, then read
 * the audit and build the report. The coordinator is a separate process: polling its status is the
 * only way to see it, at 2–5 Hz (faster only while a recovery is being timed).
 */
import type { Browser } from 'playwright-core';
import type { StatusResponse } from '../../core/protocol/views';
import { syncLabel } from '../../core/protocol/admin-feed';
import type { JobPublic } from '../../core/training/job';
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
import { HeadlessPool } from './headless-pool';
import { MixedPool, type SwarmMember } from './swarm-pool';
import { TabPool, type TabProblem } from './swarm-tabs';

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

function sample(s: StatusResponse): StatusSample {
  return {
    round: s.round,
    step: s.step,
    state: s.state,
    worldSize: s.world.total,
    waiting: s.waiting.total,
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
  const { runId, job } = await probeCoordinator(options.baseUrl);
  const initial = await fetchStatus(options.baseUrl).catch((error: Error) => {
    throw new CoordinatorUnreachableError(`${options.baseUrl}/api/status failed: ${error.message}`);
  });
  if (initial.state === 'done' || initial.state === 'failed') {
    throw new SwarmError(
      `the coordinator's job (run ${runId}) is already ${initial.state} at step ${initial.step}: nothing to train; ` +
        'restart the coordinator with a fresh --data-dir',
    );
  }
  // Chromium only when the swarm opens tabs (a headless-only swarm needs none).
  const browser = options.workers > 0 ? await launchSwarmChromium() : null;
  const run = new SwarmRun(options, io, clock, { runId, job, initial, browser });
  // Stops the run early: Ctrl-C, the job finishing, or the coordinator going silent.
  const onInterrupt = () => {
    run.log('interrupted: finishing with the report');
    run.stopRun.abort();
  };
  interrupt?.addEventListener('abort', onInterrupt, { once: true });
  if (interrupt?.aborted) run.stopRun.abort();
  const monitor = run.monitor();
  try {
    await run.play();
  } finally {
    interrupt?.removeEventListener('abort', onInterrupt);
    run.stopMonitor.abort();
    await monitor;
    await run.pool.closeAll().catch(() => undefined);
    await browser?.close().catch(() => undefined);
  }
  return run.report();
}

interface RunStart {
  runId: string;
  job: JobPublic;
  initial: StatusResponse;
  browser: Browser | null;
}

/**
 * The state of one run, shared by the status monitor (a loop polling the coordinator and the tabs) and
 * the schedule player (warm-up, then one fault or join at a time). Both run concurrently until the end.
 */
class SwarmRun {
  readonly stopRun = new AbortController();
  readonly stopMonitor = new AbortController();
  readonly pool: MixedPool;
  private readonly schedule: ChaosEvent[];
  private readonly tracker = new RecoveryTracker();
  private readonly timeline: ThroughputTimeline;
  private readonly fired: FiredEvent[] = [];
  private readonly joins: SwarmReport['joins'] = [];
  private readonly joinOpenedAt = new Map<string, number>();
  private readonly opening = new Map<string, Promise<SwarmMember>>();
  private latest: StatusResponse;
  private final: StatusResponse;
  private lastAnswerMs: number;
  private coordinatorLost: string | null = null;
  private chaosStartMs: number | null = null;
  private atChaosStart: number;
  private keepAliveCount = 0;
  private rate: number | null = null;
  private problemsLogged = 0;
  private warmupS = 0;
  private endMs = 0;
  private audit: AuditSummary | { error: string } = { error: 'not read' };

  constructor(
    private readonly options: SwarmOptions,
    private readonly io: SwarmIo,
    private readonly clock: () => number,
    private readonly start: RunStart,
  ) {
    this.schedule = chaosSchedule(chaosOptionsOf(options));
    this.timeline = new ThroughputTimeline(start.job);
    this.latest = this.final = start.initial;
    this.atChaosStart = start.initial.step;
    this.lastAnswerMs = clock();
    const onProblem = (p: TabProblem) => {
      if (p.kind !== 'console' || this.problemsLogged++ < 20)
        this.log(`${p.tab} ${p.kind}: ${p.text.split('\n')[0].slice(0, 200)}`);
    };
    const tabs = start.browser ? new TabPool(start.browser, options.tabUrl, { clock, onProblem }) : null;
    const headless = new HeadlessPool({ url: options.baseUrl, clock, onProblem });
    this.pool = new MixedPool(tabs, headless, { tabs: options.workers, headless: options.headlessWorkers });
  }

  log(line: string): void {
    this.io.log?.(`[${(this.clock() / 1000).toFixed(1)}s] ${line}`);
  }

  private openTab(name: string): Promise<SwarmMember> {
    this.joinOpenedAt.set(name, this.clock());
    const promise = this.pool.open(name);
    this.opening.set(name, promise);
    return promise;
  }

  private chaosClock(): number {
    return (this.clock() - this.chaosStartMs!) / 1000;
  }

  private noteJoin(tab: string): void {
    this.joins.push({ tab, atS: Math.round(this.chaosClock() * 1000) / 1000, admittedAfterMs: null });
  }

  private progressLine(): string {
    const { latest, pool, fired, tracker, options } = this;
    const { epoch, fraction } = epochProgressOf(latest.step, this.start.job);
    return formatProgress({
      elapsedS: (this.clock() - (this.chaosStartMs ?? 0)) / 1000,
      durationS: options.duration,
      warmingUp: this.chaosStartMs === null,
      step: latest.step,
      totalSteps: this.start.job.totalSteps,
      epoch,
      epochs: this.start.job.epochs,
      epochFraction: fraction,
      worldSize: latest.world.total,
      waiting: latest.waiting.total,
      samplesPerSec: this.rate,
      tabs: pool.tabs.filter((t) => t.live || t.fate === 'hung').length,
      hung: pool.tabs.filter((t) => t.fate === 'hung').length,
      eventsFired: fired.filter((e) => e.outcome === 'done').length,
      eventsPlanned: this.schedule.length,
      recoveries: tracker.recoveredCount,
      recoveriesOpen: tracker.openCount,
      phase: latest.state,
    });
  }

  /** A join (or resumed tab) is admitted once a fresh reading shows it training as a rank of the world. */
  private noteAdmissions(): void {
    const members = new Set(this.latest.world.items.map((w) => w.id));
    for (const entry of this.joins) {
      if (entry.admittedAfterMs !== null) continue;
      const openedAt = this.joinOpenedAt.get(entry.tab);
      const tab = this.pool.byName(entry.tab);
      if (openedAt === undefined || !tab?.reading || tab.readAtMs < openedAt) continue;
      // Only the latest entry of a tab (a resumed tab has one per resume) can still be admitted.
      if (this.joins.findIndex((j, i) => j.tab === entry.tab && i > this.joins.indexOf(entry)) >= 0) continue;
      if (tab.reading.phase === 'training' && tab.reading.workerId && members.has(tab.reading.workerId)) {
        entry.admittedAfterMs = Math.round(tab.readAtMs - openedAt);
      }
    }
  }

  /** Polls the coordinator (2–5 Hz) and the tabs (1 Hz) until `stopMonitor` aborts. */
  async monitor(): Promise<void> {
    const { clock } = this;
    let lastRead = -Infinity;
    while (!this.stopMonitor.signal.aborted) {
      await this.pollStatus();
      if (clock() - lastRead >= READ_TABS_MS) {
        lastRead = clock();
        await this.pool.readAll(this.latest);
        this.noteAdmissions();
      }
      this.io.progress?.(this.progressLine());
      await pause(this.tracker.openCount > 0 ? POLL_RECOVERING_MS : POLL_MS, this.stopMonitor.signal);
    }
  }

  private async pollStatus(): Promise<void> {
    const { clock, options } = this;
    try {
      this.latest = await fetchStatus(options.baseUrl, 3000);
      this.lastAnswerMs = clock();
      this.tracker.observe(sample(this.latest), clock() - (this.chaosStartMs ?? clock()));
      if (this.chaosStartMs !== null)
        this.rate = this.timeline.observe(clock(), this.latest.step, this.latest.world.total) ?? this.rate;
      if (this.latest.state === 'done' || this.latest.state === 'failed') this.stopRun.abort();
    } catch (error) {
      if (clock() - this.lastAnswerMs > COORDINATOR_SILENCE_MS && !this.coordinatorLost) {
        this.coordinatorLost = `the coordinator stopped answering ${options.baseUrl}/api/status (${(error as Error).message})`;
        this.log(this.coordinatorLost);
        this.stopRun.abort();
      }
    }
  }

  /** Opens the tabs, warms up, plays the schedule, then takes the final status and audit. */
  async play(): Promise<void> {
    const { options, clock, start } = this;
    this.log(
      `opening ${options.workers} tab(s) and ${options.headlessWorkers} headless worker(s) at ${options.tabUrl} (run ${start.runId}, step ${start.initial.step}/${start.job.totalSteps})`,
    );
    const initial = options.workers + options.headlessWorkers;
    await Promise.all(Array.from({ length: initial }, (_, i) => this.openTab(`t${i + 1}`)));
    await this.warmUp();
    const chaosStartMs = clock();
    this.chaosStartMs = chaosStartMs;
    this.timeline.observe(chaosStartMs, this.latest.step, this.latest.world.total);
    this.warmupS = chaosStartMs / 1000;
    this.atChaosStart = this.latest.step;
    this.log(
      `training (step ${this.latest.step}): chaos starts, ${this.schedule.length} event(s) over ${options.duration} s, seed ${options.seed}`,
    );
    for (const event of this.schedule) {
      await pause(chaosStartMs + event.at * 1000 - clock(), this.stopRun.signal);
      if (this.stopRun.signal.aborted) break;
      this.fired.push(await this.fire(event));
    }
    await pause(chaosStartMs + options.duration * 1000 - clock(), this.stopRun.signal);
    this.endMs = clock();
    await this.finish();
  }

  /** Warm-up: the schedule's clock starts at the first commit, so faults hit a training world. */
  private async warmUp(): Promise<void> {
    const { options, pool, start } = this;
    const warmupDeadline = this.clock() + options.warmup * 1000;
    while (!this.stopRun.signal.aborted && this.latest.step <= start.initial.step && this.latest.state !== 'done') {
      const broken = pool.tabs.filter(
        (t) => t.fate === 'failed' || t.reading?.state === 'error' || t.reading?.state === 'unsupported',
      );
      if (broken.length === pool.tabs.length) {
        const why = broken.map(
          (t) => `${t.name}: ${t.reading?.error ?? pool.problems.find((p) => p.tab === t.name)?.text ?? t.fate}`,
        );
        throw new SwarmError(`every tab failed before training: ${why.join('; ')}`);
      }
      if (this.clock() > warmupDeadline) {
        const states = pool.tabs.map(
          (t) => `${t.name} ${t.reading?.state ?? t.fate}${t.reading?.error ? ` (${t.reading.error})` : ''}`,
        );
        throw new SwarmError(
          `no progress: no step committed within the ${options.warmup} s warm-up (coordinator ${this.latest.state}, tabs: ${states.join(', ')})`,
        );
      }
      await pause(POLL_MS, this.stopRun.signal);
    }
  }

  /** The end: one last look at everything before the tabs go (closing them changes the run). */
  private async finish(): Promise<void> {
    for (const event of this.schedule.slice(this.fired.length))
      this.fired.push({ ...event, firedAtS: null, outcome: 'skipped', note: 'after the end of the run' });
    try {
      this.final = await fetchStatus(this.options.baseUrl, 5000);
      this.tracker.observe(sample(this.final), this.clock() - this.chaosStartMs!);
      this.audit = summarizeAudit(await fetchAudit(this.options.baseUrl));
    } catch (error) {
      this.audit = { error: this.coordinatorLost ?? (error as Error).message };
    }
    await this.pool.readAll(this.final);
    this.noteAdmissions();
  }

  private result(event: ChaosEvent, outcome: FiredEvent['outcome'], note?: string): FiredEvent {
    const out: FiredEvent = {
      ...event,
      firedAtS: outcome === 'skipped' ? null : Math.round(this.chaosClock() * 1000) / 1000,
      outcome,
    };
    if (note) out.note = note;
    this.log(`${event.kind} ${event.tab}: ${outcome}${note ? ` (${note})` : ''}`);
    return out;
  }

  private async fire(event: ChaosEvent): Promise<FiredEvent> {
    try {
      if (event.kind === 'join') {
        this.noteJoin(event.tab);
        void this.openTab(event.tab);
        return this.result(event, 'done');
      }
      const tab = this.pool.byName(event.tab) ?? (await this.opening.get(event.tab));
      if (!tab) return this.result(event, 'skipped', 'no such tab');
      if (event.kind === 'resume') {
        if (tab.fate !== 'hung') return this.result(event, 'skipped', `tab is ${tab.fate}`);
        await this.pool.resume(tab);
        this.joinOpenedAt.set(tab.name, this.clock());
        this.noteJoin(tab.name);
        return this.result(event, 'done');
      }
      await this.opening.get(event.tab);
      if (!tab.live) return this.result(event, 'skipped', `tab is ${tab.fate}`);
      if (event.kind === 'throttle') {
        await this.pool.throttle(tab, event.kbps ?? 0);
        return this.result(event, 'done', `${event.kbps} kbit/s`);
      }
      // A fault. Tabs still loading count only once loaded (a keep-alive join was just opened).
      await Promise.all(this.opening.values());
      if (!tab.live) return this.result(event, 'skipped', `tab is ${tab.fate}`);
      return this.result(event, 'done', await this.fault(event, tab));
    } catch (error) {
      return this.result(event, 'failed', (error as Error).message.split('\n')[0]);
    }
  }

  /** Keeps a tab alive, registers the expected recovery, then applies the fault; returns the note. */
  private async fault(event: ChaosEvent, tab: SwarmMember): Promise<string> {
    const notes = await this.keepAWorld(tab);
    const status = await fetchStatus(this.options.baseUrl, 3000).catch(() => this.latest);
    await this.pool.readAll(status);
    const members = new Set(status.world.items.map((w) => w.id));
    const memberTabs = this.pool.liveTabs.filter((t) => t.reading?.workerId && members.has(t.reading.workerId));
    const member = !!tab.reading?.workerId && members.has(tab.reading.workerId);
    // Registered before the fault is applied: the monitor may see the recovery before the call returns.
    const recovery = this.tracker.fault({
      tab: tab.name,
      kind: event.kind,
      atMs: this.clock() - this.chaosStartMs!,
      member,
      status: sample(status),
      localSteps: memberTabs.map((t) => t.reading!.localStep),
    });
    try {
      if (event.kind === 'close') await this.pool.close(tab);
      else if (event.kind === 'crash') await this.pool.crash(tab);
      else await this.pool.hang(tab);
    } catch (error) {
      this.tracker.cancel(recovery);
      throw error;
    }
    const rank = status.world.items.find((w) => w.id === tab.reading?.workerId)?.rank;
    return [...notes, member ? `rank ${rank} of ${status.world.total}` : 'not a rank'].join('; ');
  }

  /**
   * The schedule keeps a live tab, but tabs can also die on their own: open one more if `tab` is the
   * last, and never take the world's last rank while another tab is on its way in.
   */
  private async keepAWorld(tab: SwarmMember): Promise<string[]> {
    const notes: string[] = [];
    if (this.pool.liveTabs.every((t) => t === tab)) {
      const name = `x${++this.keepAliveCount}`;
      this.noteJoin(name);
      await this.openTab(name);
      notes.push(`opened ${name} first to keep a tab`);
    }
    const targetId = () => tab.reading?.workerId ?? null;
    const lastRank = () => this.latest.world.total === 1 && this.latest.world.items[0].id === targetId() && tab.live;
    if (lastRank()) {
      const waitStarted = this.clock();
      while (lastRank() && this.clock() - waitStarted < KEEP_ALIVE_WAIT_MS && !this.stopRun.signal.aborted)
        await pause(POLL_MS, this.stopRun.signal);
      if (!lastRank())
        notes.push(`waited ${((this.clock() - waitStarted) / 1000).toFixed(1)} s for another tab to be admitted`);
      else notes.push('fired on the last rank: no other tab was admitted in time');
    }
    return notes;
  }

  report(): SwarmReport {
    const { options, start, final, atChaosStart, pool } = this;
    const { job, initial } = start;
    const elapsedS = (this.endMs - (this.chaosStartMs ?? 0)) / 1000;
    const steps: SwarmReport['steps'] = {
      atStart: initial.step,
      atChaosStart,
      atEnd: final.step,
      committedDuringChaos: final.step - atChaosStart,
      total: job.totalSteps,
      jobState: final.state,
    };
    const verdict = swarmVerdict({ audit: this.audit, steps });
    if (this.coordinatorLost) verdict.failures.unshift(this.coordinatorLost);
    const chaosSamples = samplesThrough(Math.max(final.step, atChaosStart), job) - samplesThrough(atChaosStart, job);
    const problems = pool.problems;
    return {
      ok: verdict.failures.length === 0,
      failures: verdict.failures,
      url: options.baseUrl,
      seed: options.seed,
      workers: options.workers,
      headlessWorkers: options.headlessWorkers,
      durationS: options.duration,
      elapsedS: Math.round(elapsedS * 1000) / 1000,
      warmupS: Math.round(this.warmupS * 1000) / 1000,
      job: {
        runId: start.runId,
        model: job.model.name,
        globalBatch: job.globalBatch,
        datasetSize: job.datasetSize,
        epochs: job.epochs,
        totalSteps: job.totalSteps,
        // A coordinator from before the sync field syncs every step in fp32.
        sync: syncLabel(job.sync ?? { mode: 'every-step', compression: 'none' }),
      },
      schedule: this.schedule,
      events: this.fired,
      steps,
      throughput: this.timeline.samples.map((x) => ({ ...x, t: Math.round((x.t - this.warmupS) * 1000) / 1000 })),
      meanSamplesPerSec: elapsedS > 0 ? Math.round((chaosSamples / elapsedS) * 10) / 10 : null,
      ...(final.usage ? { usage: final.usage.total } : {}),
      recoveries: this.tracker.recoveries,
      joins: this.joins,
      restarts: { atStart: initial.restarts, atEnd: final.restarts },
      audit: this.audit,
      tabs: pool.tabs.map((t) => ({
        name: t.name,
        kind: t.kind,
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
}
