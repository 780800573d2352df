/**
 * The steps of a round: one loop skeleton for both sync modes, pipelined so an elastic step costs about
 * what a solo step costs. The modes' differences are in sync-modes.ts; this file owns the order of things.
 *
 * Per step s (every-step mode): this rank's gradient sums (`stepWork`: the shared sampler), the ring
 * allreduce, then ONE worker task that applies the sums, hashes the new parameters and, in the same
 * task, starts the gradients of step s+1 on the GPU (`applyAndHash` with `next`); the step report goes
 * out with the hash. At a commit point the tab does NOT wait for `committed` here: it goes on to step
 * s+1's gradients and allreduce, and waits for the commit of s (then saves the backup) only just before
 * applying s+1. So the report's trip to the coordinator, the coordinator's SQLite transaction and
 * the `committed` message overlap with the next step's compute and allreduce. Local mode runs the same
 * skeleton with inner steps and the outer step at its commit points.
 *
 * The steps come from the group plan (`StepPlanner`, plan.ts): group after group from the record the
 * round starts at, until the record passes the job's last epoch. A round that carries a group on
 * (local mode: members were lost inside the outer step) starts where this rank stands in it
 * (`session.resume`, from the state sync), re-sends the reports the coordinator lost with the old
 * round, and takes the outer step with the survivors; each commit's record position is checked
 * against the one this rank planned.
 *
 * An overlapped job (`sync.overlap`, outer-pipeline.ts) reports every group's last step as an inner one
 * and hands the group's end to the outer pipeline: its outer step runs in the background while the
 * loop goes on with the next group, or synchronously as above (the epoch's end, a drain, a carry).
 *
 * Invariants kept (the same as the unpipelined loop):
 * - at most one uncommitted step is at risk: the live state moves past s only after s is committed
 *   and saved as the backup; a prefetch changes no state;
 * - every rank reports the hash of the same bytes (the apply is unchanged; only its timing moved);
 * - a round's abort at any point leaves live ∈ {backup, backup + 1 step}, which `afterSession` handles.
 */
import { isCheckpointCommit, isEvaluationCommit } from '../../core/training/commit-schedule';
import type { RecordPosition } from '../../core/training/groups';
import type { JobPublic } from '../../core/training/job';
import { NO_HASH } from '../../core/protocol/tab-messages';
import { describePosition, samePosition } from '../../core/training/sampler';
import { groupAllreduce, type LostRanks } from '../net/group-allreduce';
import { isCollectiveError } from '../net/collective-error';
import { type RingAllreduceOptions, ringAllreduce, ringAllreduceBusBytes } from '../net/ring-allreduce';
import type { GradientResult } from '../worker/types';
import { abortReason, bounded } from './async-tools';
import { BusyClock } from './busy-clock';
import { CollectiveClock } from './collective-clock';
import type { CheckpointService } from './checkpoint-service';
import type { LoopContext } from './loop-context';
import { OuterPipeline } from './outer-pipeline';
import { StepPlanner, type StateTag, type StepWork } from './plan';
import type { RoundSession } from './round-session';
import { overlapsOuterSteps } from '../../core/training/overlap';
import { stepComputed } from './status';
import type { SyncLinks } from './ports';
import {
  type Applied,
  type Computed,
  type Contribution,
  everyStepMode,
  localStepsMode,
  type StepTools,
  type SyncMode,
} from './sync-modes';

/** A report's optional parts: a verifying job's sketches, local mode's inner-state commitment, left-out ranks. */
type ReportExtras = Pick<Applied, 'sketch' | 'innerHash' | 'innerT'> & { excluded?: number[] };

/** The longest pause between steps a tab may ask for (the volunteer page's GPU-use slider ends here). */
export const MAX_STEP_PAUSE_MS = 2000;

/** A commit point reported and not yet seen committed: its state and the record its commit leaves. */
interface PendingCommit extends StateTag {
  after: RecordPosition;
}

/** An applied step's report figures, kept until its group commits so a carried group can re-send them. */
interface AppliedStep {
  lossSum: number;
  samples: number;
  computeMs: number;
}

export class StepRunner {
  private lastComputeMs = 0;
  /** When the gradients of the next step were asked for (with the previous apply, or at the call). */
  private requestedAt: number | null = null;
  /** The pause taken before the step about to be computed, when no prefetch already counts it. */
  private pausedMs = 0;
  /** What this rank reports as its compute time per step. */
  private readonly busy: BusyClock;
  /** How long an allreduce may take; learns the link across rounds (collective-clock.ts). */
  private readonly collectives = new CollectiveClock();
  /** What the sync modes (sync-modes.ts) may ask of this loop. */
  private readonly tools: StepTools;
  /** The applied steps of the group in flight (kept across rounds: a carried group re-sends them). */
  private readonly applied = new Map<number, AppliedStep>();
  /** The last commit point that is an evaluation point (rank 0 evaluates it: the others wait for it). */
  private evaluated: number | null = null;

  constructor(
    private readonly ctx: LoopContext,
    private readonly checkpoints: CheckpointService,
    /** Samples of steps reported and not yet seen committed (step → samples), shared with the loop. */
    private readonly uncommitted: Map<number, number>,
  ) {
    this.busy = new BusyClock(() => ctx.now());
    this.tools = {
      get keeper() {
        return ctx.keeper;
      },
      gradients: (work, keepOnDevice) => this.gradients(work, keepOnDevice),
      allreduce: (ring, data, opts, minimumMs) =>
        this.busy.waiting(() => this.timedAllreduce(ring, data, opts, minimumMs)),
      minimumMs: (factor) => Math.max(this.ctx.timeouts.collectiveMs, factor * this.lastComputeMs),
      lastEvaluation: () => this.evaluated,
      silenceMs: () => this.collectives.silenceMs(this.ctx.timeouts.hangFloorMs),
    };
  }

  /** A new round: no prefetch, no pause carried over. */
  reset(): void {
    this.requestedAt = null;
    this.pausedMs = 0;
    this.busy.reset();
  }

  /** The steps of a round, from the round's step to the job's last, in the job's sync mode. */
  async run(session: RoundSession, links: SyncLinks, job: JobPublic): Promise<void> {
    const sync = job.sync;
    return sync.mode === 'local'
      ? this.runSteps(session, links, job, localStepsMode(this.tools, session, links, sync, !!job.verify))
      : this.runSteps(session, links, job, everyStepMode(this.tools, session, links, job));
  }

  /**
   * The one loop skeleton of both sync modes. Per step: the mode's contribution (gradients, and in
   * every-step mode their allreduce), the wait for the previous commit point's commit, the plan of the
   * next step and whether its gradients start behind this apply, the mode's apply, then at a commit
   * point the mode's commit-point work, and the status, report and pause.
   */
  private async runSteps<T extends Contribution>(
    session: RoundSession,
    links: SyncLinks,
    job: JobPublic,
    mode: SyncMode<T>,
  ): Promise<void> {
    const { signal } = session;
    this.reset();
    const planner = new StepPlanner(job, session.msg, session.rank);
    const outer = overlapsOuterSteps(job) ? this.pipeline(session, links, job, planner) : null;
    let pending = await this.carryOn(session, job, planner, mode, outer);
    /** The step whose gradients the previous apply left on the device (started behind it). */
    let onDevice: number | null = null;
    /** The work of the step about to run, planned by the previous iteration (for its prefetch). */
    let planned: StepWork | null = null;
    for (let step = session.resume; ; step++) {
      if (signal.aborted) throw abortReason(signal);
      outer?.check();
      const work = planned ?? planner.work(step);
      if (!work) break;
      const contribution = await mode.contribute(work, onDevice === step);
      const { backup, waited } = await this.previousCommit(session, pending);
      planned = planner.work(step + 1);
      const next = mode.prefetch(work, planned);
      const requested = this.requestedAt;
      if (next) this.requestedAt = this.ctx.now();
      const prefetched = onDevice === step ? work.indices : undefined;
      const applied = await mode.apply(work, contribution, next, { backup, prefetched });
      onDevice = next?.keepOnDevice ? step + 1 : null;
      const computeMs = contribution.computed?.computeMs ?? this.prefetchedMs(requested, waited);
      this.applied.set(step, { lossSum: applied.gradient.lossSum, samples: applied.gradient.samples, computeMs });
      if (outer && work.commitPoint) {
        // The commit point's report is an inner one; its outer step comes apart (outer-pipeline.ts).
        this.reportStep(session, work, NO_HASH, applied.gradient, computeMs, 0);
        pending = await this.outerBoundary(session, job, work, outer);
      } else {
        const reported = work.commitPoint && mode.atCommitPoint ? await mode.atCommitPoint(work, applied) : applied;
        pending = this.completeStep(session, job, work, reported, computeMs);
        if (reported.excluded && planned && pending) await this.untilRoundClosed(session, pending);
      }
      if (planned) await this.pauseBetweenSteps(signal, next !== null);
    }
    if (pending) await this.ctx.keeper.saveBackup(await this.awaitCommit(session, pending));
    // Every step of the job is done; `done` follows from the coordinator.
  }

  /** An overlapped job's outer pipeline for this round (outer-pipeline.ts). */
  private pipeline(session: RoundSession, links: SyncLinks, job: JobPublic, planner: StepPlanner): OuterPipeline {
    return new OuterPipeline({
      ctx: this.ctx,
      session,
      links,
      job,
      planner,
      tools: this.tools,
      allreduceAlongside: async (links, data, opts, minimumMs) => {
        await this.timedAllreduce(links, data, opts, minimumMs);
      },
      waiting: (fn) => this.busy.waiting(fn),
      awaitCommit: (pending) => this.awaitCommit(session, pending),
      onCommitted: (work) => this.dutiesOf(session, job, work),
    });
  }

  /**
   * An overlapped job's group end: the outer pipeline's outer step. A synchronous one is a commit the
   * next apply waits for (with rank 0's duties once it arrives); an overlapped one runs on in the
   * background, and its duties follow its commit there.
   */
  private async outerBoundary(
    session: RoundSession,
    job: JobPublic,
    work: StepWork,
    outer: OuterPipeline,
  ): Promise<PendingCommit | null> {
    const pending = await outer.boundary(work);
    if (isEvaluationCommit(work.group.span, job)) this.evaluated = work.step;
    if (pending) this.onCommitted(session, job, work);
    return pending;
  }

  /**
   * After a commit point whose outer sum left ranks out, the coordinator closes the round at that commit
   * (coordinator/machine/outer-loss.ts: its ranks no longer fit its members): a step taken past it would
   * only be undone. Wait for the commit, keep it as the backup, then for the round's end, which aborts
   * the loop; a round not closed within the coordinator wait fails here.
   */
  private async untilRoundClosed(session: RoundSession, pending: PendingCommit): Promise<never> {
    await this.ctx.keeper.saveBackup(await this.awaitCommit(session, pending));
    const waitMs = this.ctx.timeouts.coordinatorWaitMs;
    await bounded(new Promise<void>(() => {}), {
      signal: session.signal,
      timeoutMs: waitMs,
      what: `the close of round ${session.round} after a commit without ranks its outer sum left out`,
    });
    throw new Error(`round ${session.round} was not closed after a commit without ranks its outer sum left out`);
  }

  /**
   * A round's start: a fresh group forgets the applied steps of an old one. A carried group re-sends
   * the reports the coordinator lost with the old round (applied steps after `reportedThrough`, its
   * commit point excepted unless the job overlaps outer steps), and when only its outer step is left
   * (`resume` past the group), takes it now.
   */
  private async carryOn<T extends Contribution>(
    session: RoundSession,
    job: JobPublic,
    planner: StepPlanner,
    mode: SyncMode<T>,
    outer: OuterPipeline | null,
  ): Promise<PendingCommit | null> {
    const group = planner.groupOf(session.msg.step);
    if (!session.msg.carry || !group || session.resume === session.msg.step) {
      this.applied.clear();
      return null;
    }
    // An overlapped job reports commit points as inner steps: those are re-sent too.
    const end = outer ? session.resume : Math.min(session.resume, group.lastStep);
    for (let step = session.reportedThrough + 1; step < end; step++) {
      const figures = this.applied.get(step);
      if (!figures) throw new Error(`carrying step ${step} on, but this tab kept no report of it`);
      this.report(session, step, NO_HASH, { gradients: null, ...figures }, 0, {});
    }
    if (session.resume <= group.lastStep) return null;
    // Past the first carried group's inner steps: its outer step with the survivors now.
    const work = planner.work(group.lastStep)!;
    if (outer) return this.carriedBoundaries(session, job, planner, work, outer);
    if (!mode.atCommitPoint) return null;
    const figures = this.applied.get(group.lastStep);
    if (!figures) throw new Error(`carrying the outer step of ${group.lastStep} on without its inner step`);
    const gradient = { gradients: null, lossSum: figures.lossSum, samples: figures.samples };
    const taken = await mode.atCommitPoint(work, { hash: NO_HASH, gradient, wireBytes: 0 });
    return this.completeStep(session, job, work, taken, figures.computeMs);
  }

  /**
   * An overlapped job's carried groups this rank is past the inner steps of (`resume` after their last
   * step): their outer steps with the survivors, in order (the first in the background when the second
   * is carried too, the last synchronous). Returns the commit the next apply waits for, if any.
   */
  private async carriedBoundaries(
    session: RoundSession,
    job: JobPublic,
    planner: StepPlanner,
    first: StepWork,
    outer: OuterPipeline,
  ): Promise<PendingCommit | null> {
    let pending = await this.outerBoundary(session, job, first, outer);
    const through = session.msg.carry?.through ?? first.step;
    if (through > first.step && session.resume > through)
      pending = await this.outerBoundary(session, job, planner.work(through)!, outer);
    return pending;
  }

  /**
   * Before a step's apply: wait for the commit of the previous commit point, if one is pending (its tag
   * becomes the apply's backup). The wait is not compute time. `waited`: when it started and how long.
   */
  private async previousCommit(
    session: RoundSession,
    pending: PendingCommit | null,
  ): Promise<{ backup: StateTag | undefined; waited: { since: number; ms: number } }> {
    const since = this.ctx.now();
    const backup = pending ? await this.awaitCommit(session, pending) : undefined;
    const ms = this.ctx.now() - since;
    this.busy.wait(ms);
    if (session.signal.aborted) throw abortReason(session.signal);
    return { backup, waited: { since, ms } };
  }

  /**
   * The time of a step computed behind the previous apply: from that request (or the commit wait's
   * start), less the commit wait.
   */
  private prefetchedMs(requested: number | null, waited: { since: number; ms: number }): number {
    return Math.max(0, this.ctx.now() - (requested ?? waited.since) - waited.ms);
  }

  /** After a step's apply: the status and the report. */
  private reportStep(
    session: RoundSession,
    work: StepWork,
    hash: string,
    gradient: GradientResult,
    computeMs: number,
    wireBytes: number,
    extra?: ReportExtras,
  ): void {
    this.ctx.box.update(stepComputed(this.ctx.box.status, { step: work.step, ...gradient, computeMs }));
    if (session.signal.aborted) throw abortReason(session.signal);
    this.report(session, work.step, hash, gradient, wireBytes, extra);
  }

  /**
   * After a step's apply: the status, the report and, at a commit point, the tag whose commit comes
   * next (and the record it leaves: with holes for ranks an outer sum left out).
   */
  private completeStep(
    session: RoundSession,
    job: JobPublic,
    work: StepWork,
    applied: Applied,
    computeMs: number,
  ): PendingCommit | null {
    const { hash, gradient, wireBytes, excluded } = applied;
    this.reportStep(session, work, hash, gradient, computeMs, wireBytes, { ...applied, excluded: excluded?.ranks });
    if (!work.commitPoint) return null;
    if (isEvaluationCommit(work.group.span, job)) this.evaluated = work.step;
    this.onCommitted(session, job, work);
    return { step: work.step, hash, after: excluded?.after ?? work.group.after };
  }

  /** This rank's gradient sums for `work` (zeros when its slice is empty), and the time they took. */
  private async gradients(work: StepWork, keepOnDevice: boolean): Promise<Computed> {
    const started = this.requestedAt ?? this.ctx.now();
    const extra = this.requestedAt === null ? this.pausedMs : 0;
    this.requestedAt = null;
    this.pausedMs = 0;
    const gradient =
      work.indices.length > 0
        ? await this.ctx.queue.run('computeGradients', () =>
            this.ctx.trainer.computeGradients(work.indices, keepOnDevice),
          )
        : {
            gradients: keepOnDevice ? null : new ArrayBuffer(this.ctx.keeper.modelElements! * 4),
            lossSum: 0,
            samples: 0,
          };
    // A prefetched step's time runs from its request, so it includes a pause taken meanwhile.
    const computeMs = this.ctx.now() - started + extra;
    this.lastComputeMs = computeMs;
    return { gradient, computeMs };
  }

  /**
   * `ringAllreduce`, or `groupAllreduce` when the round syncs in groups, with the limit from this tab's
   * `CollectiveClock` (at least `minimumMs`, more for a large payload, a slow link seen before, or after
   * a timeout), which learns from the outcome. The ring leaves nobody out.
   */
  private async timedAllreduce(
    links: SyncLinks,
    data: Float32Array,
    opts: Omit<RingAllreduceOptions, 'timeoutMs'> & { mayExclude?: boolean; lost?: LostRanks },
    minimumMs: number,
  ): Promise<{ excluded: number[] }> {
    const busBytes = ringAllreduceBusBytes(data.length, links.ring.size, opts.compression);
    const started = this.ctx.now();
    const { mayExclude, lost, ...ringOpts } = opts;
    const timeoutMs = this.collectives.limitMs(minimumMs, busBytes);
    let excluded: number[] = [];
    try {
      if (links.groups)
        ({ excluded } = await groupAllreduce(links.groups, data, { ...ringOpts, mayExclude, lost, timeoutMs }));
      else await ringAllreduce(links.ring, data, { ...ringOpts, timeoutMs });
    } catch (error) {
      if (isCollectiveError(error, 'timeout')) this.collectives.timedOut();
      throw error;
    }
    this.collectives.succeeded(this.ctx.now() - started);
    return { excluded };
  }

  private report(
    session: RoundSession,
    step: number,
    hash: string,
    g: GradientResult,
    wireBytes: number,
    extra?: ReportExtras,
  ): void {
    // A carried group's steps the coordinator has already (recomputed here from the group's start).
    if (step <= session.reportedThrough) return;
    const sent = this.ctx.control.send({
      type: 'step_report',
      round: session.round,
      rank: session.rank,
      step,
      hash,
      lossSum: g.lossSum,
      samples: g.samples,
      // Busy time since the previous report (busy-clock.ts): the coordinator's compute utilization.
      computeMs: Math.min(this.busy.lap(), 1e7),
      wireBytes: Math.round(wireBytes),
      ...(extra?.sketch ? { sketch: extra.sketch } : {}),
      ...(extra?.excluded && extra.excluded.length > 0 ? { excluded: extra.excluded } : {}),
      ...(extra?.innerHash !== undefined ? { innerHash: extra.innerHash, innerT: extra.innerT } : {}),
    });
    if (!sent) throw new Error('control socket closed before the step report');
    // A local-mode inner step is no state anyone could commit: only hashed states count as reported.
    if (hash !== NO_HASH) this.ctx.keeper.lastReported = { step, hash };
    if (g.samples > 0) this.uncommitted.set(step, g.samples);
  }

  /**
   * Wait for the commit of a reported commit point, and check it left the record where this rank
   * planned the next group from. Returns its tag: the next apply saves it as the backup first (one
   * worker call).
   */
  private async awaitCommit(session: RoundSession, pending: PendingCommit): Promise<StateTag> {
    const step = pending.step;
    const at = await bounded(session.committed(step).promise, {
      signal: session.signal,
      timeoutMs: this.ctx.timeouts.coordinatorWaitMs,
      what: `commit of step ${step}`,
    });
    session.forgetCommitsThrough(step);
    for (const applied of this.applied.keys()) if (applied <= step) this.applied.delete(applied);
    if (!samePosition(at, pending.after))
      throw new Error(
        `the commit of step ${step} left the record at ${describePosition(at)}, this tab planned ${describePosition(pending.after)}`,
      );
    return { step, hash: pending.hash };
  }

  /**
   * Rank 0's duties for a committed step (a checkpoint snapshot it will be asked for, a test
   * evaluation) and rank 1's (the same evaluation, so the coordinator can trust a number two ranks
   * agree on), queued on the worker the moment `committed` arrives: the live state is still that step
   * (the next apply waits for this commit, and is queued after these), and a round that fails in the
   * meantime does not lose them.
   */
  private onCommitted(session: RoundSession, job: JobPublic, work: StepWork): void {
    session.committed(work.step).promise.then(
      () => this.dutiesOf(session, job, work),
      () => undefined,
    );
  }

  /** Ranks 0 and 1's duties for the committed `work` group, queued now (the checkpoint service finds its committed state). */
  private dutiesOf(session: RoundSession, job: JobPublic, work: StepWork): void {
    const { step, group } = work;
    if (session.rank > 1) return;
    if (session.rank === 0 && isCheckpointCommit(group.span, job.checkpointEvery))
      this.checkpoints.prepare(step, group.after);
    if (isEvaluationCommit(group.span, job)) this.checkpoints.evaluateCommitted(session.round, step, group.epoch, job);
  }

  /**
   * The GPU-use limit: wait `stepPauseMs` between two steps, cut short when the round ends. Safe in a
   * ring: the other ranks wait for this one inside the next allreduce, whose deadline (≥ 20 s) is far
   * above the 2 s cap. The pause lengthens the time the coordinator measures to this tab's next report,
   * so its throughput shares move work to the other tabs; it is not compute time (busy-clock.ts).
   * In a hidden tab the pause is a main-thread timer, so Chrome may align it to whole seconds; it is
   * scheduled from a worker-reply task (timer nesting level 0), so never to the one-minute alignment.
   */
  private async pauseBetweenSteps(signal: AbortSignal, prefetched: boolean): Promise<void> {
    const ms = this.ctx.box.status.stepPauseMs;
    if (ms <= 0 || signal.aborted) return;
    const started = this.ctx.now();
    await this.busy.waiting(
      () =>
        new Promise<void>((resolve) => {
          const done = () => {
            clearTimeout(timer);
            signal.removeEventListener('abort', done);
            resolve();
          };
          const timer = setTimeout(done, ms);
          signal.addEventListener('abort', done, { once: true });
        }),
    );
    if (!prefetched) this.pausedMs = this.ctx.now() - started;
  }
}
