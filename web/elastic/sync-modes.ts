/**
 * What the two sync modes (job `sync.mode`, docs/local-steps.md) do differently inside the one step loop
 * of web/elastic/step-runner.ts. The loop owns the skeleton every step shares (the plan, the wait for
 * the previous commit, the prefetch bookkeeping, the report, the pause); a `SyncMode` answers its
 * questions for one round:
 * - `contribute`: this rank's part of the step before the commit wait (its gradients; in every-step
 *   mode also their ring allreduce);
 * - `prefetch`: whether the next step's gradients start on the GPU behind this step's apply;
 * - `apply`: the worker task that applies the step;
 * - `atCommitPoint`: what a commit point adds (local mode: the outer step and its hash).
 */
import { NO_HASH } from '../../core/protocol/tab-messages';
import type { StepSketches } from '../../core/state/sketch';
import type { JobPublic, LocalSync } from '../../core/training/job';
import { outerWeight } from '../../core/training/outer-weights';
import { type RingAllreduceOptions, ringAllreduceBusBytes } from '../net/ring-allreduce';
import type { GradientResult } from '../worker/types';
import { abortReason } from './async-tools';
import type { HeldStateKeeper, NextStep } from './held-states';
import type { RecordPosition } from '../../core/training/groups';
import type { LostRanks } from '../net/group-allreduce';
import type { GroupWork, StateTag, StepWork } from './plan';
import type { SyncLinks } from './ports';
import type { RoundSession } from './round-session';

/** A step's gradients as this rank computed them, and the time they took. */
export interface Computed {
  gradient: GradientResult;
  computeMs: number;
}

/** A mode's part of a step before the commit wait; `computed` is null when the gradients were prefetched or not needed. */
export interface Contribution {
  computed: Computed | null;
}

/**
 * A step as it is reported: its state hash (`NO_HASH` for an inner step), gradient, wire bytes and
 * sketches; local mode's verifying commit points add the inner state's commitment and t.
 */
export interface Applied {
  hash: string;
  gradient: GradientResult;
  wireBytes: number;
  sketch?: StepSketches;
  /**
   * A local-mode commit point whose outer sum left ranks out (lost inside their group's reduce,
   * web/net/group-allreduce.ts): those ranks, and the record the commit will leave (their slices holes too).
   */
  excluded?: { ranks: number[]; after: RecordPosition };
  innerHash?: string;
  innerT?: number;
}

/** The questions the step loop asks a sync mode at each step of a round. */
export interface SyncMode<T extends Contribution> {
  /** This rank's part of the step before the commit wait; `prefetched`: its gradients are on the device already. */
  contribute(work: StepWork, prefetched: boolean): Promise<T>;
  /** The next step's gradients to start behind this step's apply, or null. */
  prefetch(work: StepWork, planned: StepWork | null): NextStep | null;
  /** The step's apply on the worker (`prefetched`: the indices whose gradients are on the device). */
  apply(
    work: StepWork,
    contribution: T,
    next: NextStep | null,
    opts: { backup: StateTag | undefined; prefetched: Uint32Array | undefined },
  ): Promise<Applied>;
  /**
   * At a commit point, after the apply: what the report says instead (local mode: the outer step).
   * Absent in every-step mode, whose apply hashed the step already.
   */
  atCommitPoint?(work: StepWork, applied: Applied): Promise<Applied>;
}

/** What a mode may ask of the step loop (web/elastic/step-runner.ts). */
export interface StepTools {
  readonly keeper: HeldStateKeeper;
  /** This rank's gradient sums for `work` (zeros when its slice is empty), and the time they took. */
  gradients(work: StepWork, keepOnDevice: boolean): Promise<Computed>;
  /**
   * The allreduce of `data` in place (the ring's, or the grouped one when the round syncs in groups),
   * counted as waiting (not compute time), with a deadline of at least `minimumMs` that the tab's
   * collective clock may lengthen (collective-clock.ts). Resolves with the ranks the sum left out
   * (only with `mayExclude`, in groups).
   */
  allreduce(
    links: SyncLinks,
    data: Float32Array,
    opts: Omit<RingAllreduceOptions, 'timeoutMs'> & { mayExclude?: boolean; lost?: LostRanks },
    minimumMs: number,
  ): Promise<{ excluded: number[] }>;
  /** The least deadline of an allreduce: the fixed one, or `factor` × the last step's compute time if longer. */
  minimumMs(factor: number): number;
  /** The step of the last commit rank 0 evaluates (the others wait for it in a later allreduce), or null. */
  lastEvaluation(): number | null;
  /** How long a ring neighbour may send nothing in an allreduce before it is judged hung, or null (not learned yet). */
  silenceMs(): number | null;
}

/**
 * Extra allreduce time for the steps after an evaluation point: rank 0 evaluates the committed state
 * of step e (`evaluated`) when the commit arrives, usually while computing e+1 and before it applies
 * e+1 and starts the gradients of e+2, so the other ranks wait for it inside the allreduce of e+1 or
 * e+2. Estimated from this rank's own time per training sample (a forward pass costs about a third of
 * forward+backward, and throughput shares make the ranks' slice times alike), doubled: about 6× the
 * expected time.
 */
export function evaluationAllowanceMs(
  step: number,
  evaluated: number | null,
  job: JobPublic,
  computeMs: number,
  samples: number,
): number {
  if (evaluated === null || samples < 1 || step - evaluated < 1 || step - evaluated > 2) return 0;
  return 2 * job.evalSamples * (computeMs / samples);
}

/** Every-step mode's contribution: also the allreduced sums (null when kept on the device) and their evidence. */
interface EveryStepContribution extends Contribution {
  evidence: HopRecord | null;
  sums: ArrayBuffer | null;
  wireBytes: number;
}

/**
 * Every-step sync: each step's gradient sums are allreduced before the commit wait, then applied and
 * hashed in one worker task, which starts the next step's gradients behind it. In a world of one there
 * is nothing to reduce: the gradients stay on the device (no 1 MB read-back, no transfer, no
 * write-back), the same arithmetic as a reduce over one rank, unless the job verifies.
 */
export function everyStepMode(
  tools: StepTools,
  session: RoundSession,
  links: SyncLinks,
  job: JobPublic,
): SyncMode<EveryStepContribution> {
  // A job that verifies needs every rank's own sums in hand to sketch them (core/state/sketch.ts).
  const keepOnDevice = session.world.length === 1 && !job.verify;
  const worldSize = session.world.length;
  return {
    contribute: async (work, prefetched) => {
      const computed = prefetched ? null : await tools.gradients(work, keepOnDevice);
      // What this rank puts into the all-reduce (the reduce works in place) and what passes each hop,
      // kept for the step's sketches.
      const evidence = job.verify && computed?.gradient.gradients ? hopRecord(computed.gradient.gradients) : null;
      const sums = computed ? await allreduceSums(tools, session, links, job, work.step, computed, evidence) : null;
      // Read before the apply transfers the buffer to the worker.
      const wireBytes = sums ? ringAllreduceBusBytes(sums.byteLength / 4, worldSize, job.sync.compression) : 0;
      return { computed, evidence, sums, wireBytes };
    },
    // Step s+1's own samples, computed behind this apply (none when its slice is empty).
    prefetch: (_work, planned) =>
      planned && planned.indices.length > 0 ? { indices: planned.indices, keepOnDevice } : null,
    apply: async (work, { computed, evidence, sums, wireBytes }, next, { backup, prefetched }) => {
      const result = await tools.keeper.applyAndHash(work.step, sums, work.count, next, {
        backup,
        prefetched,
        ...(evidence
          ? {
              sketch: {
                own: evidence.own,
                sent: evidence.sent.buffer as ArrayBuffer,
                received: evidence.received.buffer as ArrayBuffer,
                world: worldSize,
                compression: job.sync.compression,
              },
            }
          : {}),
      });
      const gradient = computed?.gradient ?? result.gradient!;
      return { hash: result.hash, gradient, wireBytes, sketch: result.sketch };
    },
  };
}

/** The allreduce of a step's sums (in place); null when they stayed on the device (a world of one). */
async function allreduceSums(
  tools: StepTools,
  session: RoundSession,
  links: SyncLinks,
  job: JobPublic,
  step: number,
  { gradient, computeMs }: Computed,
  evidence: HopRecord | null,
): Promise<ArrayBuffer | null> {
  if (session.signal.aborted) throw abortReason(session.signal);
  if (!gradient.gradients) return null;
  const sums = new Float32Array(gradient.gradients);
  await tools.allreduce(
    links,
    sums,
    {
      ...(evidence ? { record: evidence } : {}),
      id: { round: session.round, step, seq: 0 },
      signal: session.signal,
      compression: job.sync.compression,
    },
    tools.minimumMs(10) + evaluationAllowanceMs(step, tools.lastEvaluation(), job, computeMs, gradient.samples),
  );
  return sums.buffer as ArrayBuffer;
}

/**
 * Local sync mode (docs/local-steps.md): inner steps on this rank's own slices with the gradients
 * kept on the device and no hash (a world of one's path, prefetch included), and at each commit
 * point the outer step: the pseudo-gradient weighted by this rank's samples over the samples of every
 * rank still computing the group (the group plan's: a carried group's lost ranks count for nothing),
 * its allreduce (compressed as the job says; a neighbour silent for `silenceMs` is judged hung), the
 * Nesterov step, and the committed-state hash in the report. The commit wait overlaps the next outer
 * step's first inner step, as in every-step mode.
 */
export function localStepsMode(
  tools: StepTools,
  session: RoundSession,
  links: SyncLinks,
  sync: LocalSync,
  verify: boolean,
): SyncMode<Contribution> {
  const { keeper } = tools;
  return {
    contribute: async (work, prefetched) => ({
      computed: work.indices.length > 0 && !prefetched ? await tools.gradients(work, true) : null,
    }),
    // The outer step rewrites the parameters: the next step's gradients cannot be started behind it.
    prefetch: (work, planned) =>
      !work.commitPoint && planned && planned.indices.length > 0
        ? { indices: planned.indices, keepOnDevice: true }
        : null,
    apply: async (work, { computed }, next, { backup, prefetched }) => {
      let gradient: GradientResult = { gradients: null, lossSum: 0, samples: 0 };
      if (work.indices.length > 0) {
        const result = await keeper.applyAndHash(work.step, null, work.indices.length, next, {
          backup,
          prefetched,
          hash: false,
        });
        gradient = computed?.gradient ?? result.gradient!;
      } else {
        await keeper.skipInner(work.step, backup);
      }
      return { hash: NO_HASH, gradient, wireBytes: 0 };
    },
    atCommitPoint: async (work, applied) => {
      const weight = outerWeight(work.group.own, work.group.total);
      const outer = await outerCommitPoint(tools, session, links, sync, verify, work, weight);
      return { ...applied, ...outer };
    },
  };
}

/**
 * Local mode's commit point: the outer step (this rank's pseudo-gradient, its allreduce, the Nesterov
 * step) and, when the job verifies, the report's sketches and inner-state commitment (`outerReport`).
 */
async function outerCommitPoint(
  tools: StepTools,
  session: RoundSession,
  links: SyncLinks,
  sync: LocalSync,
  verify: boolean,
  work: StepWork,
  weight: number,
): Promise<Omit<Applied, 'gradient'>> {
  const { signal } = session;
  let wireBytes = 0;
  let excluded: number[] = [];
  let evidence: (HopRecord & { sum: Float32Array }) | null = null;
  const hash = await tools.keeper.outerStep(work.step, weight, async (delta) => {
    if (signal.aborted) throw abortReason(signal);
    wireBytes = ringAllreduceBusBytes(delta.length, session.world.length, sync.compression);
    // A verifying job sketches this rank's own pseudo-gradient, each hop and the sum (the reduce works in place).
    const record = verify ? hopRecord(delta.slice().buffer) : null;
    const { opts, minimumMs } = outerAllreduce(tools, session, sync, work.step);
    ({ excluded } = await tools.allreduce(
      links,
      delta,
      // Grouped rounds may go on without a lost member (a verifying job keeps the plain ring: never),
      // leaving out at once those the coordinator reports lost.
      { ...opts, ...(record ? { record } : {}), ...(verify ? {} : { mayExclude: true, lost: session.lost }) },
      minimumMs,
    ));
    reweight(delta, work.group, excluded);
    evidence = record && { ...record, sum: delta };
  });
  const left = excluded.length > 0 ? { excluded: { ranks: excluded, after: work.group.afterWithout(excluded) } } : {};
  const e = evidence as (HopRecord & { sum: Float32Array }) | null;
  if (!e) return { hash, wireBytes, ...left };
  const report = await tools.keeper.outerReport({
    own: e.own,
    sent: e.sent.buffer as ArrayBuffer,
    received: e.received.buffer as ArrayBuffer,
    sum: e.sum.slice().buffer as ArrayBuffer,
    world: session.world.length,
    compression: sync.compression,
  });
  return { hash, wireBytes, ...left, ...report };
}

/**
 * The options and least deadline of the allreduce of an outer step ending at `step`, whether it runs at
 * a commit point (above) or in the overlapped pipeline (outer-pipeline.ts); a neighbour silent for the
 * learned `silenceMs` is judged hung.
 */
export function outerAllreduce(
  tools: StepTools,
  session: RoundSession,
  sync: LocalSync,
  step: number,
): { opts: Omit<RingAllreduceOptions, 'timeoutMs'>; minimumMs: number } {
  const silenceMs = tools.silenceMs();
  return {
    opts: {
      id: { round: session.round, step, seq: 0 },
      signal: session.signal,
      compression: sync.compression,
      ...(silenceMs !== null ? { silenceMs } : {}),
    },
    // The slowest rank may still have most of its inner steps to take when this one arrives.
    minimumMs: tools.minimumMs(10 + sync.innerSteps),
  };
}

/** A verifying step's evidence: a copy of this rank's own sums and (zeroed) records of each hop. */
interface HopRecord {
  own: ArrayBuffer;
  sent: Float32Array;
  received: Float32Array;
}

function hopRecord(gradients: ArrayBuffer): HopRecord {
  const n = gradients.byteLength / 4;
  return { own: gradients.slice(0), sent: new Float32Array(n), received: new Float32Array(n) };
}

/**
 * An outer sum that left `excluded` ranks out holds Σ Δ_r·n_r/n over the others: scale it by
 * n/(n − the left-out samples) so the survivors' weights sum to one again (docs/local-steps.md). Every
 * survivor scales the same bytes by the same number, so they stay bit-identical.
 */
export function reweight(delta: Float32Array, group: GroupWork, excluded: readonly number[]): void {
  if (excluded.length === 0) return;
  const lost = excluded.reduce((sum, r) => sum + (group.rankSamples[r] ?? 0), 0);
  const kept = group.total - lost;
  if (!(kept > 0)) throw new Error(`the outer sum left out every sample of the group (${excluded.join(', ')})`);
  const scale = group.total / kept;
  for (let i = 0; i < delta.length; i++) delta[i] *= scale;
}
