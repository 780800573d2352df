/**
 * The training worker's calls of local sync mode's outer step (docs/local-steps.md), kept apart from
 * training-worker.ts, which spreads them into its Comlink API: the synchronous outer step (pseudo-gradient,
 * Nesterov step, undo) and, for a job with `sync.overlap`, the overlapped one (eager-outer.ts): a fresh
 * start from the committed state, the eager step that ends an inner phase, a contribution weighed anew,
 * the consensus step of an allreduced sum and its commit. Buffers leave transferred.
 *
 * Which form a synchronous step takes follows from the job: an overlapped job's worker has an
 * `EagerOuter` (made by its first `resetOuter`, before any step), which measures the pseudo-gradient
 * against the midpoint of its consensus and θ_m and whose consensus the Nesterov step moves; without one,
 * θ_committed is the backup's parameters.
 */
import * as Comlink from 'comlink';
import { stateHash } from '../../core/state/hash';
import type { Model } from '../../kernels/model/model';
import type { TrainingState } from '../../kernels/model/training-state';
import { EagerOuter } from './eager-outer';
import type { ElasticSteps } from './elastic-steps';
import type { OuterState } from './outer-step';

/** What the outer calls use of the worker's built model. */
export interface OuterHost {
  model: Model;
  state: TrainingState;
  steps: ElasticSteps;
  outer: OuterState;
  /** An overlapped job's own outer state (`resetOuter` makes it); null otherwise. */
  eager: EagerOuter | null;
}

function transferred(values: Float32Array): ArrayBuffer {
  const buffer = values.buffer as ArrayBuffer;
  return Comlink.transfer(buffer, [buffer]);
}

function requireEager(h: OuterHost): EagerOuter {
  if (!h.eager) throw new Error('no overlapped outer state: call resetOuter first');
  return h.eager;
}

/** The backup saved (a commit): parameters, moments and momentum, and a synchronous outer step of an overlapped job committed. */
export function saveBackupOf(h: Pick<OuterHost, 'state' | 'eager'> & { outer: OuterState | null }): void {
  h.state.saveBackup();
  h.outer?.saveBackup();
  if (h.eager?.syncPending) h.eager.commit();
}

/**
 * At an outer step: this rank's part of the pseudo-gradient, (θ_committed − θ_live) · `weight`, with
 * θ_committed read from the backup (the outer step's starting state); in an overlapped job
 * ((C + θ_m)/2 − θ_live) · `weight`, C the committed consensus, θ_m where its inner phase started.
 */
async function pseudoGradient(h: OuterHost, weight: number): Promise<ArrayBuffer> {
  if (h.eager) return transferred(h.eager.syncContribution(await h.model.readParams(), weight));
  const [committed, local] = await Promise.all([h.state.readBackupParams(), h.model.readParams()]);
  return transferred(h.outer.pseudoGradient(committed, local, weight));
}

/**
 * The outer (Nesterov) step with the allreduced pseudo-gradient `sum`; the new committed parameters
 * become the live ones (the inner optimizer's moments stay this rank's own). Resolves to the
 * committed-state hash every rank must report.
 */
function applyOuter(h: OuterHost, sum: ArrayBuffer): string {
  let params: Float32Array;
  if (h.eager) {
    const next = h.eager.consensusStep(new Float32Array(sum), h.outer.momentum, true);
    h.outer.momentum = next.momentum.slice();
    params = next.params;
  } else params = h.outer.step(new Float32Array(sum));
  h.state.writeParams(params);
  h.steps.stateChanged();
  return stateHash(params, h.outer.momentum);
}

/**
 * Undo the last outer step (it never committed: the world lost members before the commit): this
 * rank's own parameters the outer step started from become the live ones again, the outer momentum
 * the committed one (outer-step.ts `revert`).
 */
function revertOuter(h: OuterHost): void {
  if (h.eager) {
    const local = h.eager.revert();
    if (!local) throw new Error('revertOuter: no outer step to undo');
    h.outer.restoreBackup();
    h.state.writeParams(local);
  } else h.state.writeParams(h.outer.revert());
  h.steps.stateChanged();
}

/** An overlapped job's fresh start: the live state is the committed one, and this rank's next inner phase starts there. */
async function resetOuter(h: OuterHost): Promise<void> {
  const live = await h.model.readParams();
  if (h.eager) h.eager.reset(live, h.outer.momentum);
  else h.eager = new EagerOuter(h.outer.opt, live, h.outer.momentum);
}

/**
 * The end of an overlapped outer step's inner phase: the eager step (its result becomes the live
 * parameters) and this rank's contribution to the outer step's allreduce, `weight` · ((C + θ_m)/2 − θ_live).
 */
async function eagerOuter(h: OuterHost, weight: number): Promise<ArrayBuffer> {
  const { params, contribution } = requireEager(h).eager(await h.model.readParams(), weight);
  h.state.writeParams(params);
  h.steps.stateChanged();
  return transferred(contribution);
}

/** The consensus step of an overlapped outer step with the allreduced `sum`: the hash of the committed state it leads to. */
function consensusStep(h: OuterHost, sum: ArrayBuffer): string {
  const next = requireEager(h).consensusStep(new Float32Array(sum), h.outer.momentum, false);
  return stateHash(next.params, next.momentum);
}

/**
 * The overlapped outer step is committed: its consensus and momentum become the committed state, and
 * the backup (parameters: the consensus; moments: the live ones, this rank's own) that checkpoints,
 * joiners and a restore read.
 */
function commitConsensus(h: OuterHost): void {
  const { params, momentum } = requireEager(h).commit();
  h.state.saveBackup();
  h.state.writeBackupParams(params);
  h.outer.momentum = momentum;
  h.outer.saveBackup();
}

/** The outer-step calls over the model `host()` returns (it throws when there is none, or no outer step). */
export function outerCalls(host: () => OuterHost) {
  return {
    pseudoGradient: (weight: number) => pseudoGradient(host(), weight),
    applyOuter: (sum: ArrayBuffer) => applyOuter(host(), sum),
    revertOuter: () => revertOuter(host()),
    resetOuter: () => resetOuter(host()),
    eagerOuter: (weight: number) => eagerOuter(host(), weight),
    /** The last overlapped outer step's contribution weighed anew (`weight`: a carried round's survivors). */
    outerContribution: (weight: number) => transferred(requireEager(host()).reweigh(weight)),
    consensusStep: (sum: ArrayBuffer) => consensusStep(host(), sum),
    commitConsensus: () => commitConsensus(host()),
  };
}
