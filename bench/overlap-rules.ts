/**
 * `nice -n 19 npx tsx bench/overlap-rules.ts` (issue 24): which overlapped outer-step rule learns like
 * DiLoCo? A deterministic CPU reproduction, no browser, no coordinator: M simulated ranks train the
 * repository's `tiny-mlp` (784-32-10, its seeded initialisation) on Fashion-MNIST in float64 with the
 * default job's inner optimizer (AdamW lr 1e-3, β 0.9/0.999, ε 1e-8, weight decay 0.01, moments kept
 * across outer steps per rank) and its outer optimizer (Nesterov lr 0.7, momentum 0.9), global batch 128
 * split across the ranks as the tabs split it, H inner steps per outer step, the epoch's last (shorter)
 * group synchronous as core/training/overlap.ts decides. The outer arithmetic is the repository's own,
 * float32: `pseudoGradient` and `nesterovStep` (core/training/outer-step.ts), the wire as the ring
 * allreduce sums it (`ringSum`, core/wire/ring-sum.ts: int8 blocks by default), and rule (e) drives the
 * real `EagerOuter` class (web/worker/eager-outer.ts) as web/worker/outer-calls.ts and
 * web/elastic/outer-pipeline.ts do; rule (b) drives the former one, kept below verbatim.
 *
 * Rules (the committed state, which checkpoints, joiners and the evaluation see, is what is scored;
 * C, u the consensus and its momentum, w a rank's weight, θ_m where its inner phase started):
 *  a  DiLoCo: every rank starts from C; C ← Nesterov(C, u, Σ w (C − θ_end)).
 *  b  the former eager-outer.ts: each rank's own Nesterov chain θ_m, u_m on g = Δ̄_{k−1} − s_{k−1} + s_k
 *     with s_k = w (θ_m − θ_end); the committed C ← Nesterov(C, u, Δ̄_k), Δ̄_k = Σ s_k.
 *  c  Kale et al.'s eager update read as replicas without a consensus: the θ_m chains of (b), scored as
 *     the ranks' mean θ_m (what they hold).
 *  d  the naive one-step delay: one chain X ← Nesterov(X, u, Δ̄_{k−1}), every rank starts from it.
 *  e  eager-outer.ts now: p = (C_{k−1} + θ_m)/2 − θ_end, s_k = w p, the next inner phase from
 *     Nesterov(C_{k−1}, u_{k−1}, p); C_k ← Nesterov(C_{k−1}, u_{k−1}, Σ s_k).
 *  f–i  the next start anchored at C as in (e), with Kale et al.'s proxy Δ̄_{k−1} − s_{k−1} + s_k (f, g)
 *     or the rank's own progress (h, i), the part measured against C (f, h) or against θ_m (g, i).
 *
 * Output: a table (test accuracy and loss of each rule's committed state on the test images at equal
 * samples: after groups 4 and 8 and at the end of each epoch; and at a fixed wall time, half of DiLoCo's
 * run, in a model where an outer step's sync takes `--sync-ratio` × H inner steps of compute (0.5: the
 * test bed's broadband utilization 0.67), a synchronous one holds the ranks until its commit and an
 * overlapped one only delays the next eager step until the previous commit), then one JSON line starting
 * `{"bench":"overlap-rules"` (with each rule's curve, commit by commit).
 * Options: --ranks 3 --h 32 --epochs 1 --train 60000 --test 10000 --wire int8|fp16|none --seeds 1
 *          --sync-ratio 0.5 --rules a,b,c,d,e,f,g,h,i (and e0: rule (e) by hand, to cross-check the class)
 */
import { resolveDatasetDir } from '../coordinator/config/startup-config';
import { defaultJob, syncSchema } from '../core/training/job';
import { parameterLayout, TINY_MLP_SPEC } from '../core/training/model-spec';
import { nesterovStep, type OuterOptimizer, pseudoGradient } from '../core/training/outer-step';
import { ringSum, type WireCompression } from '../core/wire/ring-sum';
import { initParams } from '../kernels/model/layers';
import { loadIdxDataset } from '../node/idx';
import { mulberry32 } from '../test/support/rng';
import { EagerOuter } from '../web/worker/eager-outer';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
}

const RANKS = Number(arg('ranks', '3'));
const H = Number(arg('h', '32'));
const EPOCHS = Number(arg('epochs', '1'));
const TRAIN = Number(arg('train', '60000'));
const TEST = Number(arg('test', '10000'));
const WIRE = arg('wire', 'int8') as WireCompression;
const SEEDS = Number(arg('seeds', '1'));
const SYNC_RATIO = Number(arg('sync-ratio', '0.5'));
const RULES = arg('rules', 'a,b,c,d,e,f,g,h,i').split(',');
const GLOBAL_BATCH = defaultJob.globalBatch;
const INNER = defaultJob.optimizer;
if (INNER.kind !== 'adamw') throw new Error('the default job’s inner optimizer is AdamW');
const ADAMW = INNER;
/** The outer optimizer a local job gets by default (core/training/job.ts `outerOptimizerSchema`). */
const LOCAL = syncSchema.parse({ mode: 'local', innerSteps: H });
if (LOCAL.mode !== 'local') throw new Error('unexpected sync mode');
const OUTER: OuterOptimizer = { lr: LOCAL.outer.lr, momentum: LOCAL.outer.momentum };

// ---------------------------------------------------------------------------------------------------
// The model: tiny-mlp in float64, weights [in, out] at the repository's layout offsets.

const layout = parameterLayout(TINY_MLP_SPEC);
const at = (name: string) => {
  const e = layout.entries.find((x) => x.name === name);
  if (!e) throw new Error(`no ${name}`);
  return e.offset;
};
const W1 = at('layers.0.weight');
const B1 = at('layers.0.bias');
const W2 = at('layers.1.weight');
const B2 = at('layers.1.bias');
const IN = 784;
const HID = 32;
const OUT = 10;
const P = layout.totalElements;
const LUT = Float64Array.from({ length: 256 }, (_, i) => i / 255);

interface Split {
  images: Uint8Array;
  labels: Uint8Array;
  count: number;
}

/** Forward one sample; fills `h` (post-ReLU) and `p` (softmax); returns −log p[label]. */
function forward(w: Float64Array, x: Uint8Array, off: number, label: number, h: Float64Array, p: Float64Array): number {
  for (let j = 0; j < HID; j++) h[j] = w[B1 + j];
  for (let i = 0; i < IN; i++) {
    const v = x[off + i];
    if (v === 0) continue;
    const xv = LUT[v];
    const row = W1 + i * HID;
    for (let j = 0; j < HID; j++) h[j] += xv * w[row + j];
  }
  for (let j = 0; j < HID; j++) if (h[j] < 0) h[j] = 0;
  let max = -Infinity;
  for (let c = 0; c < OUT; c++) {
    let s = w[B2 + c];
    for (let j = 0; j < HID; j++) s += h[j] * w[W2 + j * OUT + c];
    p[c] = s;
    if (s > max) max = s;
  }
  let z = 0;
  for (let c = 0; c < OUT; c++) {
    p[c] = Math.exp(p[c] - max);
    z += p[c];
  }
  for (let c = 0; c < OUT; c++) p[c] /= z;
  return -Math.log(Math.max(p[label], 1e-300));
}

/** A rank's inner optimizer (AdamW, PyTorch's form as kernels/ops/optimizer.ts) and its moments. */
class Inner {
  m = new Float64Array(P);
  v = new Float64Array(P);
  t = 0;
  private readonly grad = new Float64Array(P);
  private readonly h = new Float64Array(HID);
  private readonly p = new Float64Array(OUT);
  private readonly dh = new Float64Array(HID);

  /** One step on the samples `idx` of `train` (mean loss), in place on `w`. */
  step(w: Float64Array, train: Split, idx: number[]): void {
    const g = this.grad;
    g.fill(0);
    const inv = 1 / idx.length;
    for (const s of idx) {
      const off = s * IN;
      const y = train.labels[s];
      forward(w, train.images, off, y, this.h, this.p);
      this.p[y] -= 1;
      for (let c = 0; c < OUT; c++) this.p[c] *= inv;
      for (let c = 0; c < OUT; c++) g[B2 + c] += this.p[c];
      for (let j = 0; j < HID; j++) {
        let d = 0;
        const hj = this.h[j];
        for (let c = 0; c < OUT; c++) {
          g[W2 + j * OUT + c] += hj * this.p[c];
          d += w[W2 + j * OUT + c] * this.p[c];
        }
        this.dh[j] = hj > 0 ? d : 0;
      }
      for (let j = 0; j < HID; j++) g[B1 + j] += this.dh[j];
      for (let i = 0; i < IN; i++) {
        const v = train.images[off + i];
        if (v === 0) continue;
        const xv = LUT[v];
        const row = W1 + i * HID;
        for (let j = 0; j < HID; j++) g[row + j] += xv * this.dh[j];
      }
    }
    this.t++;
    const { lr, beta1, beta2, eps, weightDecay } = ADAMW;
    const bc1 = 1 - beta1 ** this.t;
    const bc2 = Math.sqrt(1 - beta2 ** this.t);
    for (let i = 0; i < P; i++) {
      const gi = g[i];
      this.m[i] = beta1 * this.m[i] + (1 - beta1) * gi;
      this.v[i] = beta2 * this.v[i] + (1 - beta2) * gi * gi;
      w[i] = w[i] * (1 - lr * weightDecay) - ((lr / bc1) * this.m[i]) / (Math.sqrt(this.v[i]) / bc2 + eps);
    }
  }
}

function evaluate(params: Float32Array, test: Split): { accuracy: number; loss: number } {
  const w = Float64Array.from(params);
  const h = new Float64Array(HID);
  const p = new Float64Array(OUT);
  let correct = 0;
  let loss = 0;
  const n = Math.min(TEST, test.count);
  for (let s = 0; s < n; s++) {
    const y = test.labels[s];
    loss += forward(w, test.images, s * IN, y, h, p);
    let best = 0;
    for (let c = 1; c < OUT; c++) if (p[c] > p[best]) best = c;
    if (best === y) correct++;
  }
  return { accuracy: correct / n, loss: loss / n };
}

// ---------------------------------------------------------------------------------------------------
// Rule (b): web/worker/eager-outer.ts as it was before issue 24's fix (commit 4049ed7), verbatim but
// for its name: each rank's own Nesterov chain on g = Δ̄_{k−1} − s_{k−1} + s_k.

/** An outer step computed and not yet committed (the former eager-outer.ts). */
interface Pending {
  params: Float32Array;
  momentum: Float32Array;
  sum: Float32Array;
  sync: boolean;
}

class FormerEagerOuter {
  /** θ_m: where this rank's current inner phase started. */
  private start: Float32Array;
  /** u_m: this rank's own outer momentum. */
  private ownMomentum: Float32Array;
  /** s: what this rank put into the last outer allreduce (w · progress), zeros after a synchronous one. */
  private sent: Float32Array;
  /** The last outer step's progress θ_m − θ_end, unweighted (a carried round weighs it anew), or null. */
  private progress: Float32Array | null = null;
  /** Δ̄ of the last committed overlapped outer step; zeros after a synchronous one or a fresh start. */
  private lastSum: Float32Array;
  /** C: the committed consensus parameters. */
  private consensus: Float32Array;
  /** The next consensus, computed from an allreduced sum and not yet committed. */
  private pending: Pending | null = null;
  /** The live parameters before a synchronous outer step wrote the consensus over them (`revert`). */
  private local: Float32Array | null = null;

  constructor(
    readonly opt: OuterOptimizer,
    committed: Float32Array,
    momentum: Float32Array,
  ) {
    this.start = committed.slice();
    this.consensus = committed.slice();
    this.ownMomentum = momentum.slice();
    this.sent = new Float32Array(committed.length);
    this.lastSum = new Float32Array(committed.length);
  }

  /** A fresh start from the committed state (a round's start, a restore): this rank's own state is the consensus. */
  reset(committed: Float32Array, momentum: Float32Array): void {
    this.check(committed, 'reset');
    this.start = committed.slice();
    this.consensus = committed.slice();
    this.ownMomentum = momentum.slice();
    this.sent = new Float32Array(committed.length);
    this.lastSum = new Float32Array(committed.length);
    this.progress = null;
    this.pending = null;
    this.local = null;
  }

  /**
   * The end of an overlapped outer step's inner phase, with the live parameters `live`: this rank's
   * contribution w·(θ_m − live) (returned, for the allreduce), and the eager step. Returns the
   * parameters the next inner phase starts from. The previous overlapped outer step must be committed.
   */
  eager(live: Float32Array, weight: number): { params: Float32Array; contribution: Float32Array } {
    if (this.pending) throw new Error('eagerOuter: the previous outer step is not committed');
    const contribution = this.weigh(live, weight);
    const g = new Float32Array(contribution.length);
    for (let i = 0; i < g.length; i++) g[i] = this.lastSum[i] - this.sent[i] + contribution[i];
    const next = nesterovStep(this.start, this.ownMomentum, g, this.opt);
    this.start = next.params;
    this.ownMomentum = next.momentum;
    this.sent = contribution;
    return { params: this.start.slice(), contribution: contribution.slice() };
  }

  /**
   * The last outer step's contribution weighed anew (a carried round: the survivors' weights), which
   * then replaces the stale term of the next eager step.
   */
  reweigh(weight: number): Float32Array {
    if (!this.progress) throw new Error('outerContribution: no outer step to weigh');
    const out = new Float32Array(this.progress.length);
    for (let i = 0; i < out.length; i++) out[i] = this.progress[i] * weight;
    this.sent = out;
    return out.slice();
  }

  /** A synchronous outer step's contribution w·(θ_m − live); `live` is kept for `revert`. */
  syncContribution(live: Float32Array, weight: number): Float32Array {
    this.local = live.slice();
    return this.weigh(live, weight);
  }

  /**
   * The Nesterov step of the consensus with the allreduced `sum` from the committed momentum `momentum`:
   * the next committed state, kept as pending until `commit` (or `commitSync` for a synchronous one).
   */
  consensusStep(sum: Float32Array, momentum: Float32Array, sync: boolean): Pending {
    const next = nesterovStep(this.consensus, momentum, sum, this.opt);
    this.pending = { params: next.params, momentum: next.momentum, sum: sum.slice(), sync };
    return this.pending;
  }

  /** The pending consensus, once committed (an overlapped outer step): the state to keep as committed. */
  commit(): { params: Float32Array; momentum: Float32Array } {
    const p = this.pending;
    if (!p) throw new Error('commitConsensus: no outer step to commit');
    this.consensus = p.params;
    this.lastSum = p.sum;
    this.pending = null;
    if (p.sync) this.backToConsensus(p);
    return { params: p.params.slice(), momentum: p.momentum.slice() };
  }

  /** Whether a synchronous outer step waits for its commit (the backup saved after it commits it). */
  get syncPending(): boolean {
    return this.pending?.sync === true;
  }

  /** Drop a pending outer step (it never committed); returns the live parameters a synchronous one replaced, if any. */
  revert(): Float32Array | null {
    this.pending = null;
    const local = this.local;
    this.local = null;
    return local;
  }

  /** The committed consensus parameters. */
  get committed(): Float32Array {
    return this.consensus;
  }

  /** After a synchronous outer step: this rank's own state is the consensus, no stale terms. */
  private backToConsensus(p: Pending): void {
    this.start = p.params.slice();
    this.ownMomentum = p.momentum.slice();
    this.sent = new Float32Array(p.params.length);
    this.lastSum = new Float32Array(p.params.length);
    this.progress = null;
    this.local = null;
  }

  /** w·(θ_m − live): the pseudo-gradient (outer-step.ts), so the same rounding; remembers the progress. */
  private weigh(live: Float32Array, weight: number): Float32Array {
    this.check(live, 'contribution');
    if (!(weight >= 0 && weight <= 1)) throw new RangeError(`outer contribution: weight ${weight} outside [0, 1]`);
    this.progress = pseudoGradient(this.start, live, 1);
    return pseudoGradient(this.start, live, weight);
  }

  private check(values: Float32Array, what: string): void {
    if (values.length !== this.start.length)
      throw new RangeError(`${what}: ${values.length} floats, the model has ${this.start.length}`);
  }
}

// ---------------------------------------------------------------------------------------------------
// The rules. Each gives where rank r's next inner phase starts and takes the group's end; each commit
// (a new committed state holding the samples through some group) is recorded by the driver.

interface Rule {
  readonly name: string;
  /** The parameters rank r's next inner phase starts from. */
  start(r: number): Float32Array;
  /**
   * The end of a group: the ranks' live parameters, their weights, whether the outer step is
   * synchronous. Returns the committed states this made, oldest first.
   */
  boundary(live: Float32Array[], weights: number[], sync: boolean): Float32Array[];
}

const sum = (parts: Float32Array[]) => ringSum(parts, WIRE);

function step(params: Float32Array, momentum: Float32Array, g: Float32Array) {
  return nesterovStep(params, momentum, g, OUTER);
}

/** (a) DiLoCo. */
class Diloco implements Rule {
  readonly name = 'a DiLoCo (no overlap)';
  private u: Float32Array;
  constructor(private c: Float32Array) {
    this.u = new Float32Array(c.length);
  }
  start(): Float32Array {
    return this.c;
  }
  boundary(live: Float32Array[], w: number[]): Float32Array[] {
    const next = step(this.c, this.u, sum(live.map((l, r) => pseudoGradient(this.c, l, w[r]))));
    this.c = next.params;
    this.u = next.momentum;
    return [this.c];
  }
}

/**
 * (b) and (c): the real EagerOuter per rank, driven as web/worker/outer-calls.ts and
 * web/elastic/outer-pipeline.ts drive it. `scored` picks the committed consensus (b) or the ranks'
 * mean θ_m (c).
 */
/** What the step loop uses of an EagerOuter (the real one and the former one alike). */
type EagerLike = Pick<EagerOuter, 'eager' | 'syncContribution' | 'consensusStep' | 'commit' | 'committed'>;

class Eager implements Rule {
  private readonly eager: EagerLike[];
  private readonly momentum: Float32Array[];
  private readonly starts: Float32Array[];
  private pending: Float32Array | null = null;
  constructor(
    readonly name: string,
    start: Float32Array,
    private readonly scored: 'consensus' | 'replicas',
    former: boolean,
  ) {
    const make = () =>
      former
        ? new FormerEagerOuter(OUTER, start, new Float32Array(start.length))
        : new EagerOuter(OUTER, start, new Float32Array(start.length));
    this.eager = Array.from({ length: RANKS }, make);
    this.momentum = Array.from({ length: RANKS }, () => new Float32Array(start.length));
    this.starts = Array.from({ length: RANKS }, () => start.slice());
  }
  start(r: number): Float32Array {
    return this.starts[r];
  }
  /** The background outer step k−1: consensus step with the allreduced sum, commit (every rank alike). */
  private settle(): boolean {
    const sumK = this.pending;
    if (!sumK) return false;
    this.pending = null;
    const committed = this.eager.map((e, r) => {
      e.consensusStep(sumK, this.momentum[r], false);
      const c = e.commit();
      this.momentum[r] = c.momentum;
      return c.params;
    });
    for (const c of committed.slice(1)) if (!equal(c, committed[0])) throw new Error('ranks disagree');
    return true;
  }
  private scoredState(): Float32Array {
    if (this.scored === 'consensus') return this.eager[0].committed.slice();
    return mean(this.starts);
  }
  boundary(live: Float32Array[], w: number[], sync: boolean): Float32Array[] {
    const settled = this.settle();
    if (!sync) {
      const parts = this.eager.map((e, r) => {
        const { params, contribution } = e.eager(live[r], w[r]);
        this.starts[r] = params;
        return contribution;
      });
      this.pending = sum(parts);
      // (c) scores what the ranks hold once they took this eager step (the commit's samples, and their own next part).
      return settled ? [this.scoredState()] : [];
    }
    const out = settled ? [this.scoredState()] : [];
    const total = sum(this.eager.map((e, r) => e.syncContribution(live[r], w[r])));
    this.eager.forEach((e, r) => {
      const next = e.consensusStep(total, this.momentum[r], true);
      this.momentum[r] = next.momentum.slice();
      e.commit();
      this.starts[r] = next.params;
    });
    out.push(this.scoredState());
    return out;
  }
}

/** (d) The naive one-step delay: a single chain stepped with the previous outer step's sum. */
class Delayed implements Rule {
  readonly name = 'd naive one-step delay';
  private u: Float32Array;
  private from: Float32Array;
  private last: Float32Array | null = null;
  constructor(private x: Float32Array) {
    this.u = new Float32Array(x.length);
    this.from = x;
  }
  start(): Float32Array {
    return this.x;
  }
  boundary(live: Float32Array[], w: number[], sync: boolean): Float32Array[] {
    const out: Float32Array[] = [];
    const delta = sum(live.map((l, r) => pseudoGradient(this.from, l, w[r])));
    if (this.last) {
      const next = step(this.x, this.u, this.last);
      this.x = next.params;
      this.u = next.momentum;
      out.push(this.x);
    }
    this.last = null;
    if (sync) {
      const next = step(this.x, this.u, delta);
      this.x = next.params;
      this.u = next.momentum;
      out.push(this.x);
    } else this.last = delta;
    this.from = this.x;
    return out;
  }
}

/**
 * (e), (f), (g): the consensus-anchored eager update. Each rank's next inner phase starts from the last
 * committed state stepped with a proxy of the sum in flight; the consensus is DiLoCo's outer step.
 */
class Anchored implements Rule {
  private c: Float32Array;
  private u: Float32Array;
  /** Δ̄ of the last overlapped outer step (zeros after a synchronous one). */
  private lastSum: Float32Array;
  private readonly sent: Float32Array[];
  private readonly starts: Float32Array[];
  private pending: Float32Array | null = null;
  constructor(
    readonly name: string,
    start: Float32Array,
    /** β: the part is measured against β·C + (1 − β)·(the rank's own start). */
    private readonly beta: number,
    private readonly proxy: 'mix' | 'own',
  ) {
    this.c = start;
    this.u = new Float32Array(start.length);
    this.lastSum = new Float32Array(start.length);
    this.sent = Array.from({ length: RANKS }, () => new Float32Array(start.length));
    this.starts = Array.from({ length: RANKS }, () => start);
  }
  start(r: number): Float32Array {
    return this.starts[r];
  }
  private reference(r: number): Float32Array {
    if (this.beta === 1) return this.c;
    const s = this.starts[r];
    if (this.beta === 0) return s;
    return Float32Array.from(this.c, (c, i) => this.beta * c + (1 - this.beta) * s[i]);
  }
  private settle(): boolean {
    if (!this.pending) return false;
    const next = step(this.c, this.u, this.pending);
    this.c = next.params;
    this.u = next.momentum;
    this.lastSum = this.pending;
    this.pending = null;
    return true;
  }
  boundary(live: Float32Array[], w: number[], sync: boolean): Float32Array[] {
    const out: Float32Array[] = [];
    if (this.settle()) out.push(this.c);
    const parts = live.map((l, r) => pseudoGradient(this.reference(r), l, w[r]));
    if (sync) {
      const next = step(this.c, this.u, sum(parts));
      this.c = next.params;
      this.u = next.momentum;
      this.lastSum = new Float32Array(this.c.length);
      for (let r = 0; r < RANKS; r++) {
        this.sent[r] = new Float32Array(this.c.length);
        this.starts[r] = this.c;
      }
      out.push(this.c);
      return out;
    }
    parts.forEach((s, r) => {
      let g: Float32Array;
      if (this.proxy === 'mix') {
        g = new Float32Array(s.length);
        for (let i = 0; i < g.length; i++) g[i] = this.lastSum[i] - this.sent[r][i] + s[i];
      } else g = pseudoGradient(this.reference(r), live[r], 1);
      this.starts[r] = step(this.c, this.u, g).params;
      this.sent[r] = s;
    });
    this.pending = sum(parts);
    return out;
  }
}

function equal(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

function mean(xs: Float32Array[]): Float32Array {
  const out = new Float32Array(xs[0].length);
  for (let i = 0; i < out.length; i++) {
    let s = 0;
    for (const x of xs) s += x[i];
    out[i] = s / xs.length;
  }
  return out;
}

function makeRule(key: string, start: Float32Array): Rule {
  switch (key) {
    case 'a':
      return new Diloco(start);
    case 'b':
      return new Eager('b former eager-outer.ts (own chains; C)', start, 'consensus', true);
    case 'c':
      return new Eager('c Kale et al. replicas (mean θ_m)', start, 'replicas', true);
    case 'd':
      return new Delayed(start);
    case 'e':
      return new Eager('e eager-outer.ts now (C + own, midpoint)', start, 'consensus', false);
    case 'e0':
      return new Anchored('e0 as (e), by hand', start, 0.5, 'own');
    case 'f':
      return new Anchored('f C + Kale proxy, part vs C', start, 1, 'mix');
    case 'g':
      return new Anchored('g C + Kale proxy, part vs own start', start, 0, 'mix');
    case 'h':
      return new Anchored('h C + own progress, part vs C', start, 1, 'own');
    case 'i':
      return new Anchored('i C + own progress, part vs own start', start, 0, 'own');
    default:
      if (key.startsWith('anc:')) {
        const [, proxy, beta] = key.split(':');
        return new Anchored(`anchored ${proxy} β=${beta}`, start, Number(beta), proxy as 'mix' | 'own');
      }
      throw new Error(`unknown rule ${key}`);
  }
}

// ---------------------------------------------------------------------------------------------------
// The driver: the epochs' groups, the ranks' slices, the commits, the wall-time model.

interface Commit {
  groups: number;
  samples: number;
  /** In units of one inner step's compute. */
  time: number;
  accuracy: number;
  loss: number;
}

interface Group {
  steps: number[][];
  samples: number;
  sync: boolean;
}

/** The epochs' groups: steps of GLOBAL_BATCH positions of a seeded order, H per group, the epoch's last group synchronous. */
function plan(seed: number): Group[] {
  const rand = mulberry32(seed * 7919 + 1);
  const groups: Group[] = [];
  for (let e = 0; e < EPOCHS; e++) {
    const order = Array.from({ length: TRAIN }, (_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    const steps: number[][] = [];
    for (let s = 0; s < TRAIN; s += GLOBAL_BATCH) steps.push(order.slice(s, Math.min(TRAIN, s + GLOBAL_BATCH)));
    for (let g = 0; g < steps.length; g += H) {
      const chunk = steps.slice(g, g + H);
      groups.push({ steps: chunk, samples: chunk.reduce((a, s) => a + s.length, 0), sync: g + H >= steps.length });
    }
  }
  return groups;
}

/** Rank r's slice of a step's positions: contiguous equal shares, as `assignStep` with equal shares. */
function slice(stepIdx: number[], r: number): number[] {
  const n = stepIdx.length;
  return stepIdx.slice(Math.floor((r * n) / RANKS), Math.floor(((r + 1) * n) / RANKS));
}

function run(key: string, seed: number, train: Split, test: Split): { name: string; commits: Commit[] } {
  const start = initParams(TINY_MLP_SPEC, layout, seed);
  const rule = makeRule(key, start);
  const overlapped = key !== 'a';
  const inner = Array.from({ length: RANKS }, () => new Inner());
  const groups = plan(seed);
  const commits: Commit[] = [];
  let committedGroups = 0;
  const samplesSoFar: number[] = [0];
  // Wall-time model, in units of one inner step's compute; the outer sync takes SYNC_RATIO × H steps.
  const syncTime = SYNC_RATIO * H;
  let clock = 0;
  const commitTimes: number[] = [];
  let lastCommitAt = 0;
  for (const [gi, group] of groups.entries()) {
    const live: Float32Array[] = [];
    const weights: number[] = [];
    for (let r = 0; r < RANKS; r++) {
      const w = Float64Array.from(rule.start(r));
      let n = 0;
      for (const s of group.steps) {
        const mine = slice(s, r);
        if (mine.length === 0) continue;
        inner[r].step(w, train, mine);
        n += mine.length;
      }
      live.push(Float32Array.from(w));
      weights.push(n / group.samples);
    }
    const computed = clock + group.steps.length;
    samplesSoFar.push(samplesSoFar[gi] + group.samples);
    // Either way the outer step waits for the previous one's commit (settle), then its sync runs.
    const syncFrom = Math.max(computed, lastCommitAt);
    commitTimes[gi] = syncFrom + syncTime;
    lastCommitAt = commitTimes[gi];
    // A synchronous outer step holds the next inner phase until its commit; an overlapped one does not.
    clock = !overlapped || group.sync ? commitTimes[gi] : syncFrom;
    for (const state of rule.boundary(live, weights, group.sync)) {
      committedGroups++;
      const { accuracy, loss } = evaluate(state, test);
      commits.push({
        groups: committedGroups,
        samples: samplesSoFar[committedGroups],
        time: commitTimes[committedGroups - 1],
        accuracy,
        loss,
      });
    }
  }
  if (committedGroups !== groups.length)
    throw new Error(`${rule.name}: ${committedGroups} of ${groups.length} committed`);
  return { name: rule.name, commits };
}

function after(commits: Commit[], groups: number): Commit {
  return commits[Math.min(groups, commits.length) - 1];
}

function atTime(commits: Commit[], t: number): Commit | null {
  let best: Commit | null = null;
  for (const c of commits) if (c.time <= t + 1e-9) best = c;
  return best;
}

async function main(): Promise<void> {
  const dir = resolveDatasetDir(undefined, process.env);
  const data = await loadIdxDataset(dir);
  const train: Split = data.train;
  const test: Split = data.test;
  if (TRAIN > train.count) throw new Error(`--train ${TRAIN}: the set has ${train.count}`);
  const started = Date.now();
  const results = RULES.map((key) => ({ key, seeds: [] as { name: string; commits: Commit[] }[] }));
  for (let seed = 1; seed <= SEEDS; seed++) {
    for (const r of results) {
      const t0 = Date.now();
      r.seeds.push(run(r.key, seed, train, test));
      process.stderr.write(`seed ${seed} ${r.key}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
    }
  }
  const groupsTotal = results[0].seeds[0].commits.length;
  const perEpoch = groupsTotal / EPOCHS;
  const points = [4, 8, ...Array.from({ length: EPOCHS }, (_, e) => Math.round((e + 1) * perEpoch))].filter(
    (g, i, a) => g <= groupsTotal && a.indexOf(g) === i,
  );
  const dilocoEnd = results.find((r) => r.key === 'a')?.seeds[0].commits.at(-1)?.time ?? 0;
  const wall = 0.5 * dilocoEnd;
  const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const rows = results.map(({ key, seeds }) => {
    const cells = points.map((g) => ({
      groups: g,
      samples: after(seeds[0].commits, g).samples,
      accuracy: avg(seeds.map((s) => after(s.commits, g).accuracy)),
      loss: avg(seeds.map((s) => after(s.commits, g).loss)),
    }));
    const walls = seeds.map((s) => atTime(s.commits, wall));
    return {
      rule: key,
      name: seeds[0].name,
      cells,
      wall: {
        groups: walls[0]?.groups ?? 0,
        accuracy: walls.every((w) => w) ? avg(walls.map((w) => (w as Commit).accuracy)) : null,
      },
      curve: seeds[0].commits.map((c) => ({ g: c.groups, acc: +c.accuracy.toFixed(4), loss: +c.loss.toFixed(4) })),
    };
  });
  const ref = rows.find((r) => r.rule === 'a');
  const pct = (x: number) => (100 * x).toFixed(2);
  console.log(
    `overlap rules: ${RANKS} ranks, H = ${H}, ${WIRE} wire, tiny-mlp, ${TRAIN} training images × ${EPOCHS} epoch(s), ` +
      `${Math.min(TEST, test.count)} test images, ${SEEDS} seed(s) (mean), outer Nesterov lr ${OUTER.lr} μ ${OUTER.momentum}`,
  );
  const head = [
    'rule'.padEnd(42),
    ...points.map((g) => `acc/loss @${g} groups (${after(results[0].seeds[0].commits, g).samples})`.padEnd(34)),
    'Δ end'.padStart(7),
    `acc @wall ${wall.toFixed(0)} steps (groups)`,
  ];
  console.log(head.join(' '));
  for (const row of rows) {
    const end = row.cells.at(-1);
    const refEnd = ref?.cells.at(-1);
    const delta = end && refEnd ? (100 * (end.accuracy - refEnd.accuracy)).toFixed(2) : '–';
    console.log(
      [
        row.name.padEnd(42),
        ...row.cells.map((c) => `${pct(c.accuracy)} % / ${c.loss.toFixed(4)}`.padEnd(34)),
        delta.padStart(7),
        row.wall.accuracy === null ? '–' : `${pct(row.wall.accuracy)} % (${row.wall.groups})`,
      ].join(' '),
    );
  }
  console.log(
    JSON.stringify({
      bench: 'overlap-rules',
      ranks: RANKS,
      innerSteps: H,
      wire: WIRE,
      model: 'tiny-mlp',
      train: TRAIN,
      test: Math.min(TEST, test.count),
      epochs: EPOCHS,
      seeds: SEEDS,
      outer: OUTER,
      syncRatio: SYNC_RATIO,
      wallSteps: wall,
      seconds: Math.round((Date.now() - started) / 1000),
      rows,
    }),
  );
}

await main();
