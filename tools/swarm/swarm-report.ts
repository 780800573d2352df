/**
 * What a swarm run measured and how it is judged: pure bookkeeping (recoveries, throughput), the
 * verdict, the progress line and the final table. No I/O here, so all of it is unit-tested.
 */
import type { AuditReport } from '../../coordinator/admin/audit';
import { holeFreePosition, plannedSteps, type StepPlan } from '../../core/training/groups';
import type { ChaosEvent, ChaosKind } from './chaos-schedule';
import type { TabProblem } from './swarm-tabs';

/** The part of `/api/status` the bookkeeping needs. */
export interface StatusSample {
  round: number;
  step: number;
  state: string;
  worldSize: number;
  waiting: number;
  restarts: number;
}

/**
 * Samples committed once `step` steps are committed (the last step of an epoch may be short), as if no
 * outer step had been committed partially (holes make it a little high): an estimate for throughput.
 */
export function samplesThrough(step: number, plan: StepPlan): number {
  const { epoch, cursor } = holeFreePosition(step, plan);
  return epoch * plan.datasetSize + cursor;
}

/** Epoch (1-based, as people count) and the fraction of it committed after `step` steps. */
export function epochProgressOf(step: number, plan: StepPlan): { epoch: number; fraction: number } {
  if (step >= plannedSteps(plan)) return { epoch: plan.epochs, fraction: 1 };
  const { epoch, cursor } = holeFreePosition(step, plan);
  return { epoch: epoch + 1, fraction: cursor / plan.datasetSize };
}

// ------------------------------------------------------------------------------------ recoveries

export interface Recovery {
  /** The fault's tab and kind. */
  tab: string;
  kind: ChaosKind;
  /** Seconds since the chaos started. */
  atS: number;
  /** The tab was a rank of the running round (else nothing had to recover). */
  member: boolean;
  /** Last committed step when the fault hit. */
  stepBefore: number;
  /**
   * Uncommitted steps computed again because of the fault: those the round's tabs had applied past
   * the last step their round committed (read just before the fault), and at least the one step in
   * progress when the round was training (it is computed again from its start).
   */
  inFlight: number;
  /** The committed step the next round started from (below `stepBefore` only after a rollback to a checkpoint). */
  resumedFrom: number;
  /** inFlight + committed steps rolled back: the work recomputed because of this fault. */
  stepsLost: number;
  /** Fault → first commit of a later round; null while (or if never) recovered. */
  durationMs: number | null;
  recovered: boolean;
}

function inFlightSteps(localMax: number, committed: number, training: boolean): number {
  return Math.max(localMax - committed, training ? 1 : 0, 0);
}

interface OpenRecovery {
  recovery: Recovery;
  atMs: number;
  roundBefore: number;
  /** Highest local step of the round's tabs at the fault. */
  localMax: number;
  /** The round was computing a step when the fault hit. */
  training: boolean;
  /** Highest step committed in the fault's round (a step all ranks reported before the fault still commits). */
  oldRoundStep: number;
}

/**
 * Follows faults to their recovery: a fault on a rank closes the round, so the world has recovered at
 * the first commit in a round after the fault's round (above the step it resumed from).
 * Fed with every status poll; accuracy is the poll interval.
 */
export class RecoveryTracker {
  readonly recoveries: Recovery[] = [];
  private open: OpenRecovery[] = [];

  fault(input: {
    tab: string;
    kind: ChaosKind;
    atMs: number;
    member: boolean;
    status: StatusSample;
    localSteps: number[];
  }): Recovery {
    const stepBefore = input.status.step;
    const localMax = Math.max(stepBefore, ...input.localSteps);
    const training = input.status.state === 'training';
    const inFlight = input.member ? inFlightSteps(localMax, stepBefore, training) : 0;
    const recovery: Recovery = {
      tab: input.tab,
      kind: input.kind,
      atS: Math.round(input.atMs) / 1000,
      member: input.member,
      stepBefore,
      inFlight,
      resumedFrom: stepBefore,
      stepsLost: inFlight,
      durationMs: input.member ? null : 0,
      recovered: !input.member,
    };
    this.recoveries.push(recovery);
    if (input.member)
      this.open.push({
        recovery,
        atMs: input.atMs,
        roundBefore: input.status.round,
        localMax,
        training,
        oldRoundStep: stepBefore,
      });
    return recovery;
  }

  observe(status: StatusSample, atMs: number): void {
    for (const o of this.open) {
      const r = o.recovery;
      if (status.round <= o.roundBefore) {
        o.oldRoundStep = Math.max(o.oldRoundStep, status.step);
        r.resumedFrom = o.oldRoundStep;
      } else {
        r.resumedFrom = Math.min(r.resumedFrom, status.step);
      }
      // In-flight steps the old round still committed were not lost; committed steps rolled back were.
      r.inFlight = inFlightSteps(o.localMax, o.oldRoundStep, o.training);
      r.stepsLost = r.inFlight + Math.max(0, o.oldRoundStep - r.resumedFrom);
      if (status.round > o.roundBefore && status.step > r.resumedFrom) {
        r.durationMs = Math.max(0, Math.round(atMs - o.atMs));
        r.recovered = true;
      }
    }
    this.open = this.open.filter((o) => !o.recovery.recovered);
  }

  /** Forget a fault that could not be applied. */
  cancel(recovery: Recovery): void {
    this.open = this.open.filter((o) => o.recovery !== recovery);
    const i = this.recoveries.indexOf(recovery);
    if (i >= 0) this.recoveries.splice(i, 1);
  }

  get openCount(): number {
    return this.open.length;
  }

  get recoveredCount(): number {
    return this.recoveries.filter((r) => r.member && r.recovered).length;
  }
}

// ------------------------------------------------------------------------------------ throughput

export interface ThroughputSample {
  /** Seconds since the chaos started (negative during warm-up). */
  t: number;
  step: number;
  worldSize: number;
  /** Committed samples per second since the previous sample. */
  samplesPerSec: number;
}

/** Committed samples per second, one sample per `intervalMs` at most. */
export class ThroughputTimeline {
  readonly samples: ThroughputSample[] = [];
  private last: { atMs: number; samples: number } | null = null;

  constructor(
    private readonly plan: StepPlan,
    private readonly intervalMs = 2000,
  ) {}

  /** Record a poll; returns the latest rate (for the progress line). */
  observe(atMs: number, step: number, worldSize: number): number | null {
    const samples = samplesThrough(step, this.plan);
    if (!this.last) {
      this.last = { atMs, samples };
      return null;
    }
    if (atMs - this.last.atMs < this.intervalMs) return this.samples.at(-1)?.samplesPerSec ?? null;
    const rate = Math.max(0, (samples - this.last.samples) / ((atMs - this.last.atMs) / 1000));
    this.samples.push({ t: Math.round(atMs) / 1000, step, worldSize, samplesPerSec: Math.round(rate * 10) / 10 });
    this.last = { atMs, samples };
    return rate;
  }
}

// ------------------------------------------------------------------------------------ report and verdict

export interface FiredEvent extends ChaosEvent {
  /** When it actually ran (seconds since the chaos started); null when skipped. */
  firedAtS: number | null;
  outcome: 'done' | 'skipped' | 'failed';
  note?: string;
}

export interface AuditSummary {
  ok: boolean;
  duplicates: number;
  /** Indices never committed in finished epochs. */
  missing: number;
  discontinuities: number;
  recordAgrees: boolean;
  lastRowStep: number;
  lastCommitStep: number;
  commitRows: number;
  rolledBackRows: number;
  epochs: { epoch: number; committed: number; duplicates: number; missing: number | null; finished: boolean }[];
}

export function summarizeAudit(audit: AuditReport): AuditSummary {
  return {
    ok: audit.ok,
    duplicates: audit.epochs.reduce((n, e) => n + e.duplicateCount, 0),
    missing: audit.epochs.reduce((n, e) => n + (e.neverCommittedCount ?? 0), 0),
    discontinuities: audit.epochs.reduce((n, e) => n + e.discontinuities, 0),
    recordAgrees: audit.recordAgrees,
    lastRowStep: audit.lastRowStep,
    lastCommitStep: audit.lastCommitStep,
    commitRows: audit.commitRows,
    rolledBackRows: audit.rolledBackRows,
    epochs: audit.epochs.map((e) => ({
      epoch: e.epoch,
      committed: e.committed,
      duplicates: e.duplicateCount,
      missing: e.neverCommittedCount,
      finished: e.finished,
    })),
  };
}

export interface SwarmReport {
  ok: boolean;
  /** Why the run failed (empty when ok). */
  failures: string[];
  url: string;
  seed: number;
  workers: number;
  /** Headless workers opened at the start (besides `workers` tabs). */
  headlessWorkers: number;
  /** Planned seconds of chaos, and what actually elapsed (shorter when the job finished). */
  durationS: number;
  elapsedS: number;
  warmupS: number;
  job: {
    runId: string;
    model: string;
    globalBatch: number;
    datasetSize: number;
    epochs: number;
    totalSteps: number;
    /** How the ranks sync (`syncLabel`), e.g. "local, H = 16, int8, outer Nesterov lr 0.7 m 0.9"; absent in older reports. */
    sync?: string;
  };
  schedule: ChaosEvent[];
  events: FiredEvent[];
  steps: {
    atStart: number;
    atChaosStart: number;
    atEnd: number;
    committedDuringChaos: number;
    total: number;
    jobState: string;
  };
  throughput: ThroughputSample[];
  /** Committed samples per second over the chaos window. */
  meanSamplesPerSec: number | null;
  /**
   * The coordinator's run totals at the end (`/api/status` `usage.total`, coordinator/machine/utilization.ts):
   * compute utilization and bytes sent per sample, as the tabs claimed them; absent from older coordinators.
   */
  usage?: { utilization: number | null; bytesPerSample: number | null };
  recoveries: Recovery[];
  joins: { tab: string; atS: number; admittedAfterMs: number | null }[];
  restarts: { atStart: number; atEnd: number };
  audit: AuditSummary | { error: string };
  tabs: {
    name: string;
    /** A Chromium tab or a headless worker. */
    kind: 'tab' | 'headless';
    openedAtS: number;
    fate: string;
    state: string | null;
    committedStep: number;
    error: string | null;
  }[];
  problems: { errors: TabProblem[]; crashes: TabProblem[]; unexpectedCrashes: number; dropped: number };
}

export interface VerdictInput {
  audit: AuditSummary | { error: string };
  steps: SwarmReport['steps'];
}

/**
 * Fails on what a release gate must not let through: an audit that finds a duplicate or a missing
 * index (or any other broken invariant), an audit that could not be read, a failed job, and no
 * progress (no commit during the chaos window unless the job is done, or none at all).
 */
export function swarmVerdict(input: VerdictInput): { ok: boolean; failures: string[] } {
  const failures: string[] = [];
  const { audit, steps } = input;
  if ('error' in audit) failures.push(`the audit could not be read: ${audit.error}`);
  else {
    for (const e of audit.epochs) {
      if (e.duplicates > 0)
        failures.push(`audit: ${e.duplicates} dataset indices committed more than once in epoch ${e.epoch}`);
      if ((e.missing ?? 0) > 0)
        failures.push(`audit: ${e.missing} dataset indices never committed in finished epoch ${e.epoch}`);
    }
    if (audit.discontinuities > 0)
      failures.push(`audit: ${audit.discontinuities} commit ranges do not follow on from the previous one`);
    if (!audit.recordAgrees) failures.push('audit: the sampler record disagrees with the commit rows');
    if (audit.lastRowStep !== audit.lastCommitStep)
      failures.push(
        `audit: last commit row is step ${audit.lastRowStep} but the durable state says ${audit.lastCommitStep}`,
      );
    if (!audit.ok && failures.length === 0) failures.push('audit: not ok');
  }
  if (steps.jobState === 'failed') failures.push('the job failed (more restarts than maxRestarts)');
  const done = steps.jobState === 'done';
  if (steps.atEnd <= steps.atStart && !done)
    failures.push(`no progress: no step committed during the run (still at step ${steps.atEnd})`);
  else if (steps.committedDuringChaos <= 0 && !done)
    failures.push(`no progress under chaos: stuck at step ${steps.atEnd} for the whole chaos window`);
  return { ok: failures.length === 0, failures };
}

// ------------------------------------------------------------------------------------ text

const pad = (s: string, n: number) => (s.length >= n ? s : s + ' '.repeat(n - s.length));
const clock = (seconds: number) => {
  const s = Math.max(0, Math.floor(seconds));
  return `${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
};

export interface ProgressFields {
  elapsedS: number;
  durationS: number;
  warmingUp: boolean;
  step: number;
  totalSteps: number;
  epoch: number;
  epochs: number;
  epochFraction: number;
  worldSize: number;
  waiting: number;
  samplesPerSec: number | null;
  tabs: number;
  hung: number;
  eventsFired: number;
  eventsPlanned: number;
  recoveries: number;
  recoveriesOpen: number;
  phase: string;
}

export function formatProgress(p: ProgressFields): string {
  const time = p.warmingUp ? `warm-up ${clock(p.elapsedS)}` : `${clock(p.elapsedS)}/${clock(p.durationS)}`;
  return [
    `swarm ${time}`,
    `step ${p.step}/${p.totalSteps}`,
    `epoch ${p.epoch}/${p.epochs} ${Math.floor(p.epochFraction * 100)}%`,
    `world ${p.worldSize}${p.waiting ? ` (+${p.waiting} waiting)` : ''} ${p.phase}`,
    `${p.samplesPerSec === null ? '-' : Math.round(p.samplesPerSec)} samples/s`,
    `tabs ${p.tabs}${p.hung ? ` (${p.hung} hung)` : ''}`,
    `events ${p.eventsFired}/${p.eventsPlanned}`,
    `recoveries ${p.recoveries}${p.recoveriesOpen ? ` (${p.recoveriesOpen} open)` : ''}`,
  ].join(' · ');
}

function median(xs: number[]): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** The human-readable report: a summary, the events with their recoveries, the verdict. */
export function formatReportTable(r: SwarmReport): string {
  const lines: string[] = [...summaryLines(r), '', ...eventLines(r), ...recoveryLines(r), '', ...auditLines(r)];
  lines.push(...problemLines(r));
  lines.push(r.ok ? 'verdict: PASS' : `verdict: FAIL — ${r.failures.join('; ')}`);
  return lines.join('\n');
}

/** "6 tabs + 10 headless at the start, 9 tabs and 14 headless in all" (tabs only: "3 tabs"). */
function memberCounts(r: SwarmReport): string {
  const headless = r.headlessWorkers ?? 0;
  if (headless === 0 && r.tabs.every((t) => (t.kind ?? 'tab') === 'tab')) return `${r.workers} tabs`;
  const all = (kind: string) => r.tabs.filter((t) => (t.kind ?? 'tab') === kind).length;
  return `${r.workers} tabs + ${headless} headless at the start, ${all('tab')} tabs and ${all('headless')} headless in all`;
}

function summaryLines(r: SwarmReport): string[] {
  return [
    `tabswarm swarm ${r.url} — seed ${r.seed}, ${memberCounts(r)}, ${r.elapsedS.toFixed(1)} s of chaos after ${r.warmupS.toFixed(1)} s warm-up`,
    `job ${r.job.model}: global batch ${r.job.globalBatch}, ${r.job.datasetSize} images × ${r.job.epochs} epoch(s) = ${r.job.totalSteps} steps${r.job.sync ? `, sync ${r.job.sync}` : ''} (run ${r.job.runId})`,
    `steps: ${r.steps.atStart} at start → ${r.steps.atChaosStart} when chaos began → ${r.steps.atEnd} at the end (${r.steps.committedDuringChaos} under chaos; job ${r.steps.jobState})`,
    `throughput: ${r.meanSamplesPerSec === null ? '-' : r.meanSamplesPerSec.toFixed(1)} committed samples/s over the chaos window; restarts ${r.restarts.atStart} → ${r.restarts.atEnd}`,
    ...(r.usage ? [usageLine(r.usage)] : []),
  ];
}

function usageLine(u: NonNullable<SwarmReport['usage']>): string {
  const utilization = u.utilization === null ? '-' : `${(u.utilization * 100).toFixed(1)}%`;
  const bytes = u.bytesPerSample === null ? '-' : `${Math.round(u.bytesPerSample)} B`;
  return `usage (whole run): compute utilization ${utilization}, ${bytes} sent per sample (the tabs' claims)`;
}

const EVENT_COLUMNS = ['at s', 'event', 'tab', 'outcome', 'recovery ms', 'steps lost', 'note'];
const EVENT_WIDTHS = [8, 9, 5, 9, 12, 11, 0];

function eventRow(cells: string[]): string {
  return cells
    .map((c, i) => pad(c, EVENT_WIDTHS[i]))
    .join(' ')
    .trimEnd();
}

/** The event table (header, one row per event) and its footnotes. */
function eventLines(r: SwarmReport): string[] {
  const lines = [eventRow(EVENT_COLUMNS)];
  const recoveriesByKey = new Map(r.recoveries.map((x) => [`${x.tab}:${x.kind}`, x]));
  for (const e of r.events) {
    const rec = e.outcome === 'done' ? recoveriesByKey.get(`${e.tab}:${e.kind}`) : undefined;
    const join = e.kind === 'join' ? r.joins.find((j) => j.tab === e.tab) : undefined;
    const recovery = rec
      ? !rec.member
        ? '-'
        : rec.recovered
          ? String(rec.durationMs)
          : 'not yet'
      : join
        ? join.admittedAfterMs === null
          ? 'not admitted'
          : `admitted ${join.admittedAfterMs}`
        : '';
    lines.push(
      eventRow([
        e.firedAtS === null ? `(${e.at.toFixed(1)})` : e.firedAtS.toFixed(1),
        e.kind + (e.keepAlive ? '*' : ''),
        e.tab,
        e.outcome,
        recovery,
        rec?.member ? String(rec.stepsLost) : '',
        e.note ?? (e.kbps ? `${e.kbps} kbit/s` : ''),
      ]),
    );
  }
  if (r.events.length === 0)
    lines.push('(no events: pass --close-every, --crash-every, --hang-every, --join-every or --throttle)');
  if (r.events.some((e) => e.keepAlive))
    lines.push('* opened so that the next fault does not leave the job without tabs');
  return lines;
}

/** One line on how members recovered (none when no member was hit). */
function recoveryLines(r: SwarmReport): string[] {
  const members = r.recoveries.filter((x) => x.member);
  const durations = members.filter((x) => x.recovered).map((x) => x.durationMs!);
  if (members.length === 0) return [];
  const lost = members.map((x) => x.stepsLost);
  return [
    `recoveries: ${durations.length}/${members.length} recovered, median ${median(durations) ?? '-'} ms, max ${durations.length ? Math.max(...durations) : '-'} ms; ` +
      `steps lost median ${median(lost)}, max ${Math.max(...lost)}`,
  ];
}

function auditLines(r: SwarmReport): string[] {
  if ('error' in r.audit) return [`audit: could not be read (${r.audit.error})`];
  const a = r.audit;
  return [
    `audit: ${a.ok ? 'ok' : 'NOT OK'} — ${a.commitRows} commits (${a.rolledBackRows} rolled back), ${a.duplicates} duplicate indices, ${a.missing} missing, ` +
      `${a.discontinuities} discontinuities, record ${a.recordAgrees ? 'agrees' : 'DISAGREES'}`,
  ];
}

/** Tab errors and crashes: a count, then the first few. */
function problemLines(r: SwarmReport): string[] {
  const errors = r.problems.errors;
  const lines = [
    `tab problems: ${errors.length + r.problems.dropped} console/page errors, ${r.problems.crashes.length} crashes (${r.problems.unexpectedCrashes} not ordered by the swarm)`,
  ];
  for (const p of [...errors.slice(0, 8), ...r.problems.crashes.filter((c) => !c.expected).slice(0, 4)]) {
    lines.push(`  ${p.tab} @${(p.atMs / 1000).toFixed(1)}s ${p.kind}: ${p.text.split('\n')[0].slice(0, 160)}`);
  }
  if (errors.length > 8) lines.push(`  … ${errors.length - 8} more in the --json report`);
  return lines;
}
