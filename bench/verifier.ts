/**
 * What one spot check costs the coordinator's machine, and how far honest and lying sketches land from
 * the verifier's: `npm run bench:verifier -- [--model mlp] [--batch 128] [--worlds 1,2,4] [--reps 5]`.
 *
 * The real verifier child (coordinator/trust/verifier-client.ts → verifier/, Dawn on this machine's adapter)
 * recomputes step 11 of a job on Fashion-MNIST from a snapshot (the job's initial parameters, random
 * AdamW moments, t = 10) for each world size, the global batch split equally over the ranks as the
 * sampler splits it. Reference, side by side in the same run: the same recomputation by the float64 CPU
 * reference (test/support/reference-model.ts), i.e. a verifier without a GPU. Reported per world: median
 * recompute time of both (the verifier's from the request to the answer, snapshot read and IPC included;
 * `childMs` in the JSON is the child's own recomputation without them), the worst honest
 * ratio of the verifier's sketches against the reference's, and what lying rank-0 sketches (×1000,
 * negated, 5% and 1% multiplicative noise) miss by, next to RECOMPUTE_TOLERANCE. Prints a table and one
 * line `{"bench":"verifier", ...}`.
 */
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadIdxDataset } from '../node/idx';
import { parseJobSpec } from '../core/training/job';
import { parameterLayout, type SequentialSpec } from '../core/training/model-spec';
import { assignStep } from '../core/training/groups';
import { epochOrder } from '../core/training/sampler';
import { gradientSketch, paramsSketch, RECOMPUTE_TOLERANCE, worstRatio } from '../core/state/sketch';
import { encodeSnapshot } from '../core/state/snapshot';
import { resolveDatasetDir } from '../coordinator/config/startup-config';
import { VerifierClient } from '../coordinator/trust/verifier-client';
import { initParams } from '../kernels/model/layers';
import { makeTempDir } from '../test/support/fake-dataset';
import { referenceAdamW, referenceForwardBackward } from '../test/support/reference-model';
import { mulberry32 } from '../test/support/rng';

const { values: flags } = parseArgs({
  options: {
    model: { type: 'string', default: 'mlp' },
    batch: { type: 'string', default: '128' },
    worlds: { type: 'string', default: '1,2,4' },
    reps: { type: 'string', default: '5' },
  },
});
const BATCH = Number(flags.batch);
const WORLDS = flags.worlds.split(',').map(Number);
const REPS = Number(flags.reps);
const HASH = 'abcdef0123456789';
const job = parseJobSpec({ model: flags.model, globalBatch: BATCH, seed: 42 });
const spec = job.model as SequentialSpec;
const opt = job.optimizer as Extract<typeof job.optimizer, { kind: 'adamw' }>;
const layout = parameterLayout(spec);
const n = layout.totalElements;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const datasetDir = resolveDatasetDir(undefined);
const data = await loadIdxDataset(datasetDir);
const pixels = data.train.rows * data.train.cols;
const rand = mulberry32(9);
const params = initParams(spec, layout, job.seed);
const m = Float32Array.from({ length: n }, () => (rand() - 0.5) * 1e-3);
const v = Float32Array.from({ length: n }, () => rand() * 1e-6);
const snapshotPath = join(makeTempDir('tabswarm-bench-verifier-'), 'step-10.snapshot');
const state = { spec, step: 10, epoch: 0, cursor: 10 * BATCH, optimizer: { kind: 'adamw' as const, t: 10 } };
writeFileSync(snapshotPath, new Uint8Array(encodeSnapshot({ ...state, params, moments: [m, v] })));

/** The float64 CPU recomputation of the same step: per-rank gradients and the parameters after AdamW. */
function reference(slices: Uint32Array[]): { own: Float64Array[]; next: Float64Array } {
  const own = slices.map((s) => {
    const x = new Float64Array(s.length * pixels);
    s.forEach((index, b) => {
      for (let i = 0; i < pixels; i++) x[b * pixels + i] = data.train.images[index * pixels + i] / 255;
    });
    const labels = Array.from(s, (i) => data.train.labels[i]);
    return referenceForwardBackward(spec, layout, params, x, labels, s.length).grads;
  });
  const sum = new Float64Array(n);
  for (const g of own) for (let i = 0; i < n; i++) sum[i] += g[i];
  return { own, next: referenceAdamW(params, sum, m, v, { ...opt, gradScale: 1 / BATCH, t: 11 }).params };
}

const gauss = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
const LIES: Record<string, (x: number) => number> = {
  x1000: (x) => 1000 * x,
  negated: (x) => -x,
  noise5: (x) => x * (1 + 0.05 * gauss()),
  noise1: (x) => x * (1 + 0.01 * gauss()),
};

const loadAtStart = loadavg();
const started = performance.now();
const client = await VerifierClient.start({
  job: { model: flags.model, globalBatch: BATCH, seed: 42 },
  dataset: { kind: 'images', dir: datasetDir },
});
const startMs = performance.now() - started;
const order = epochOrder(job.seed, 0, data.train.count);
const rows = [];
try {
  for (const world of WORLDS) {
    const shares = Array<number>(world).fill(1);
    // The 11th step of an epoch without holes: positions [10·BATCH, 11·BATCH), split by share.
    const slices = assignStep(10 * BATCH, BATCH, shares).map((s) => order.slice(s.start, s.start + s.count));
    const request = {
      snapshotPath,
      stepHash: HASH,
      world,
      mode: 'every-step' as const,
      steps: [{ slices, count: BATCH }],
      fresh: false,
    };
    const times: number[] = [];
    const childTimes: number[] = [];
    let got = await client.recompute(request);
    for (let i = 0; i < REPS; i++) {
      const t0 = performance.now();
      got = await client.recompute(request);
      times.push(performance.now() - t0);
      childTimes.push(got.ms);
    }
    const t0 = performance.now();
    const ref = reference(slices);
    const referenceMs = performance.now() - t0;
    const honestOwn = Math.max(
      ...ref.own.map((g, r) => {
        const s = gradientSketch(Float32Array.from(g), HASH, world);
        return worstRatio(got.own[r].values, s.values, s.mass);
      }),
    );
    const p = paramsSketch(Float32Array.from(ref.next), HASH);
    const honestParams = worstRatio(got.params.values, p.values, p.mass);
    const lies = Object.fromEntries(
      Object.entries(LIES).map(([name, f]) => {
        const s = gradientSketch(Float32Array.from(ref.own[0], f), HASH, world);
        return [name, worstRatio(s.values, got.own[0].values, got.own[0].mass)];
      }),
    );
    rows.push({
      world,
      verifierMs: median(times),
      childMs: median(childTimes),
      referenceMs,
      honestOwn,
      honestParams,
      lies,
    });
  }
} finally {
  await client.close();
}

const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(' ');
console.log(
  `load average ${load(loadAtStart)} at start, ${load(loadavg())} at end (the machine is shared: compare within a run)`,
);
const e = (x: number) => x.toExponential(1).padStart(9);
console.log(
  `verifier: ${flags.model}, ${BATCH} samples per step, Fashion-MNIST; adapter ${client.adapter}; ` +
    `start ${(startMs / 1000).toFixed(1)} s, timed step ${client.stepMs.toFixed(0)} ms; tolerance ${RECOMPUTE_TOLERANCE}`,
);
console.log('world  verifier ms  cpu f64 ms  ratio  honest own  honest params    x1000  negated  noise5%  noise1%');
for (const r of rows) {
  console.log(
    `${String(r.world).padStart(5)}  ${r.verifierMs.toFixed(0).padStart(11)}  ${r.referenceMs.toFixed(0).padStart(10)}  ` +
      `${(r.referenceMs / r.verifierMs).toFixed(1).padStart(5)}  ${e(r.honestOwn).padStart(10)}  ${e(r.honestParams).padStart(13)}  ` +
      `${e(r.lies.x1000)}${e(r.lies.negated)}${e(r.lies.noise5)}${e(r.lies.noise1)}`,
  );
}
console.log(
  JSON.stringify({
    bench: 'verifier',
    date: new Date().toISOString(),
    model: flags.model,
    batch: BATCH,
    adapter: client.adapter,
    startMs: Math.round(startMs),
    stepMs: Math.round(client.stepMs),
    tolerance: RECOMPUTE_TOLERANCE,
    loadavg: [loadAtStart, loadavg()],
    rows,
  }),
);
