/**
 * An overlapped job's outer steps within one round (local sync mode with `sync.overlap`; docs/local-steps.md
 * "Overlapped outer steps", core/training/overlap.ts). The step loop (step-runner.ts) reports a group's
 * last inner step like any other and hands the group's end to `boundary`:
 *
 * - an **overlapped** group: wait for the previous outer step to finish (in the steady state it did long
 *   ago), then the eager step in the worker, which returns this rank's contribution and moves the live
 *   state to where the next inner phase starts; the loop goes on with the next group's inner steps at
 *   once while, in the background, the contribution is allreduced, the consensus step taken, the
 *   `outer_report` sent, the commit awaited (its record position checked) and the consensus committed in
 *   the worker (the backup, for checkpoints, joiners and restores);
 * - a **synchronous** one (the epoch's end, a drain, the last carried group): wait for the previous outer
 *   step, then the outer step as without overlap (outer-step.ts: pseudo-gradient, allreduce, Nesterov
 *   step, the consensus becomes the live state), `outer_report`, and the loop waits for its commit before
 *   the next apply, as it does for every synchronous commit point.
 *
 * At most one outer step runs in the background. A failure of it is thrown into the step loop at its next
 * step (`check`), so it is reported as the round's failure; the round's abort signal ends it with the round.
 */
import type { JobPublic, LocalSync } from '../../core/training/job';
import { outerWeight } from '../../core/training/outer-weights';
import type { SyncLinks } from './ports';
import { type RingAllreduceOptions, ringAllreduceBusBytes } from '../net/ring-allreduce';
import { abortReason } from './async-tools';
import type { LoopContext } from './loop-context';
import type { StateTag, StepPlanner, StepWork } from './plan';
import type { RoundSession } from './round-session';
import { outerAllreduce, type StepTools } from './sync-modes';

/** A reported commit point whose commit the step loop awaits, and the record its commit leaves. */
export interface PendingOuter extends StateTag {
  after: StepWork['group']['after'];
}

/** What the pipeline needs of the step loop (step-runner.ts). */
export interface OuterPipelineHost {
  ctx: LoopContext;
  session: RoundSession;
  /** The round's ring, and its groups when it syncs in groups (an overlapped outer sum leaves nobody out). */
  links: SyncLinks;
  job: JobPublic;
  planner: StepPlanner;
  tools: StepTools;
  /** The allreduce under the tab's collective clock, not counted as waiting: it overlaps compute. */
  allreduceAlongside(
    links: SyncLinks,
    data: Float32Array,
    opts: Omit<RingAllreduceOptions, 'timeoutMs'>,
    minimumMs: number,
  ): Promise<void>;
  /** Count `fn`'s duration as waiting (busy-clock.ts). */
  waiting<T>(fn: () => Promise<T>): Promise<T>;
  /** Wait for the commit of `pending` and check the record position it left (step-runner.ts `awaitCommit`). */
  awaitCommit(pending: PendingOuter): Promise<StateTag>;
  /** Rank 0's duties after a commit (checkpoint snapshot, evaluation), run once the consensus is the backup. */
  onCommitted(work: StepWork): void;
}

interface InFlight {
  step: number;
  done: Promise<void>;
  failed: boolean;
  error: unknown;
}

export class OuterPipeline {
  private inFlight: InFlight | null = null;
  private readonly sync: LocalSync;

  constructor(private readonly host: OuterPipelineHost) {
    if (host.job.sync.mode !== 'local') throw new Error('overlapped outer steps need local sync mode');
    this.sync = host.job.sync;
  }

  /** The background outer step's failure, thrown into the step loop (called at every step). */
  check(): void {
    if (this.inFlight?.failed) throw this.inFlight.error;
  }

  /** Wait for the outer step in the background (its allreduce, report, commit); counted as waiting. */
  async settle(): Promise<void> {
    const running = this.inFlight;
    if (!running) return;
    await this.host.waiting(() => running.done);
    this.check();
    this.inFlight = null;
  }

  /**
   * The end of `work`'s group (its last inner step applied and reported): the overlapped outer step,
   * started in the background (returns null), or the synchronous one (returns the commit to await).
   */
  async boundary(work: StepWork): Promise<PendingOuter | null> {
    const { session, ctx, planner } = this.host;
    await this.settle();
    if (session.signal.aborted) throw abortReason(session.signal);
    const weight = outerWeight(work.group.own, work.group.total);
    const drained = session.drains.has(work.group.firstStep - 1);
    if (!planner.overlaps(work.group, drained)) return this.synchronous(work, weight);
    const contribution = await ctx.keeper.outerContribution(work.step, weight);
    const running: InFlight = { step: work.step, done: Promise.resolve(), failed: false, error: null };
    running.done = this.background(work, contribution).catch((error: unknown) => {
      running.failed = true;
      running.error = error;
    });
    this.inFlight = running;
    return null;
  }

  /** The allreduce of `data` (in place) for the outer step ending at `step`, and the bytes this rank sent in it. */
  private async reduce(step: number, data: Float32Array, alongside: boolean): Promise<number> {
    const { session, links, tools } = this.host;
    const { opts, minimumMs } = outerAllreduce(tools, session, this.sync, step);
    if (alongside) await this.host.allreduceAlongside(links, data, opts, minimumMs);
    else await tools.allreduce(links, data, opts, minimumMs);
    return ringAllreduceBusBytes(data.length, session.world.length, this.sync.compression);
  }

  /** The overlapped outer step in the background: allreduce, consensus step, report, commit. */
  private async background(work: StepWork, contribution: Float32Array): Promise<void> {
    const { ctx, session } = this.host;
    const wireBytes = await this.reduce(work.step, contribution, true);
    const hash = await ctx.keeper.consensusStep(work.step, contribution);
    this.sendOuter(work.step, hash, wireBytes);
    const tag = await this.host.awaitCommit({ step: work.step, hash, after: work.group.after });
    if (session.signal.aborted) throw abortReason(session.signal);
    await ctx.keeper.commitConsensus(tag);
    this.host.onCommitted(work);
  }

  /** The synchronous outer step (as without overlap), reported; the caller awaits its commit. */
  private async synchronous(work: StepWork, weight: number): Promise<PendingOuter> {
    const { ctx, session } = this.host;
    let wireBytes = 0;
    const hash = await ctx.keeper.outerStep(work.step, weight, async (delta) => {
      if (session.signal.aborted) throw abortReason(session.signal);
      wireBytes = await this.reduce(work.step, delta, false);
    });
    this.sendOuter(work.step, hash, wireBytes);
    ctx.keeper.lastReported = { step: work.step, hash };
    return { step: work.step, hash, after: work.group.after };
  }

  private sendOuter(step: number, hash: string, wireBytes: number): void {
    const { ctx, session } = this.host;
    if (session.signal.aborted) throw abortReason(session.signal);
    const sent = ctx.control.send({
      type: 'outer_report',
      round: session.round,
      rank: session.rank,
      step,
      hash,
      wireBytes: Math.round(wireBytes),
    });
    if (!sent) throw new Error('control socket closed before the outer report');
  }
}
