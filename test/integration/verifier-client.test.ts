/**
 * The verifier as the coordinator runs it: coordinator/trust/verifier-client.ts forks the real child process
 * (verifier/entry.js → main.ts) on the real Fashion-MNIST, and asks it to recompute step 1 of a fresh
 * `tiny-mlp` job from a snapshot of the job's initial state (initParams with the job's seed, zero moments,
 * t = 0 — what the child's own model starts from), over the slices the sampler gives two ranks.
 *
 * - the answer matches an independent float64 reference (test/support/reference-model.ts);
 * - a bad snapshot path is a clear error for that request, and the same child answers the next one;
 * - a child killed (SIGKILL) while recomputing fails the pending and the queued request clearly, later
 *   requests are refused until `restart()`, and the restarted child answers; a request over its timeout
 *   fails the same way; `close()` leaves no process behind;
 * - a child that finds no WebGPU adapter fails at start with the reason; a language model on a text
 *   dataset's bytes (handed over by the coordinator, as its tabs get them) starts and answers.
 *
 * About 10–25 s on 2 cores (four child starts: tsx, the dataset, the device, one timed step each).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadIdxDataset } from '../../node/idx';
import { parseJobSpec } from '../../core/training/job';
import { parameterLayout, TINY_MLP_SPEC } from '../../core/training/model-spec';
import { gradientSketch, paramsSketch, RECOMPUTE_TOLERANCE, worstRatio } from '../../core/state/sketch';
import { encodeSnapshot } from '../../core/state/snapshot';
import { checkedSlices } from '../../coordinator/machine/checks';
import { VerifierClient, type VerifyRequest } from '../../coordinator/trust/verifier-client';
import { initParams } from '../../kernels/model/layers';
import { FASHION_MNIST_DIR, skipWithoutFashionMnist } from '../support/browser';
import { makeTempDir } from '../support/fake-dataset';
import { generatedText } from '../support/generated-text';
import { skipWithoutNodeGpu } from '../support/node-gpu';
import { referenceAdamW, referenceForwardBackward } from '../support/reference-model';

const JOB = { model: 'tiny-mlp', globalBatch: 32, seed: 7 };
const STEP_HASH = '0123456789abcdef';
const IMAGES = { kind: 'images', dir: FASHION_MNIST_DIR } as const;

describe.skipIf(skipWithoutFashionMnist() || (await skipWithoutNodeGpu()))('verifier client and process', () => {
  const dir = makeTempDir('tabswarm-verifier-');
  const snapshotPath = join(dir, 'step-0.snapshot');
  const layout = parameterLayout(TINY_MLP_SPEC);
  const params = initParams(TINY_MLP_SPEC, layout, JOB.seed);
  const n = layout.totalElements;
  let client: VerifierClient;
  let request: VerifyRequest;

  beforeAll(async () => {
    const snapshot = encodeSnapshot({
      spec: TINY_MLP_SPEC,
      step: 0,
      epoch: 0,
      cursor: 0,
      optimizer: { kind: 'adamw', t: 0 },
      params,
      moments: [new Float32Array(n), new Float32Array(n)],
    });
    writeFileSync(snapshotPath, new Uint8Array(snapshot));
    const world = [1, 3].map((share, rank) => ({ workerId: `w${rank}`, rank, share, addr: '', invite: null }));
    const steps = checkedSlices(
      { job: parseJobSpec(JOB), datasetSize: 60_000 },
      { world, step: 1, firstStep: 1, at: { epoch: 0, cursor: 0, holes: [] } },
    );
    const asked = steps.map(({ slices, count }) => ({ slices, count }));
    request = { snapshotPath, stepHash: STEP_HASH, world: 2, mode: 'every-step', steps: asked, fresh: true };
    client = await VerifierClient.start({ job: JOB, dataset: IMAGES });
  });
  afterAll(async () => {
    await client?.close();
  });

  it('answers with the sketches of a float64 recomputation', async () => {
    const got = await client.recompute(request);
    const data = await loadIdxDataset(FASHION_MNIST_DIR);
    const own = request.steps[0].slices.map((slice) => {
      const x = new Float64Array(slice.length * 784);
      slice.forEach((index, b) => {
        for (let i = 0; i < 784; i++) x[b * 784 + i] = data.train.images[index * 784 + i] / 255;
      });
      const labels = Array.from(slice, (index) => data.train.labels[index]);
      return referenceForwardBackward(TINY_MLP_SPEC, layout, params, x, labels, slice.length).grads;
    });
    const sum = own[0].map((v, i) => v + own[1][i]);
    const optimizer = parseJobSpec(JOB).optimizer as {
      lr: number;
      beta1: number;
      beta2: number;
      eps: number;
      weightDecay: number;
    };
    const zeros = new Float64Array(n);
    const next = referenceAdamW(params, sum, zeros, zeros, { ...optimizer, gradScale: 1 / JOB.globalBatch, t: 1 });
    const ratios = own.map((g, r) => {
      const ref = gradientSketch(Float32Array.from(g), STEP_HASH, 2);
      return worstRatio(got.own[r].values, ref.values, ref.mass);
    });
    const refParams = paramsSketch(Float32Array.from(next.params), STEP_HASH);
    const paramsRatio = worstRatio(got.params.values, refParams.values, refParams.mass);
    console.log(
      `verifier-client: ${client.adapter}, measured step ${client.stepMs.toFixed(0)} ms, timeout ${client.timeoutMs} ms, ` +
        `recompute ${got.ms.toFixed(0)} ms; worst honest ratio own ${Math.max(...ratios).toExponential(2)}, params ${paramsRatio.toExponential(2)}`,
    );
    for (const r of ratios) expect(r).toBeLessThanOrEqual(RECOMPUTE_TOLERANCE / 10);
    expect(paramsRatio).toBeLessThanOrEqual(RECOMPUTE_TOLERANCE / 10);
    expect(got.paramsHash).toMatch(/^[0-9a-f]{64}$/);
    // The upload was the fresh state of the job's seed: the child says so.
    expect(got.startOk).toBe(true);
  });

  it('a bad snapshot path fails that request clearly; the same child answers the next', async () => {
    const pid = client.pid;
    const missing = join(dir, 'no-such.snapshot');
    await expect(client.recompute({ ...request, snapshotPath: missing })).rejects.toThrow(
      `cannot read snapshot ${missing}: ENOENT`,
    );
    const corrupt = join(dir, 'corrupt.snapshot');
    writeFileSync(corrupt, 'not a tabswarm snapshot, but long enough to have a prefix');
    await expect(client.recompute({ ...request, snapshotPath: corrupt })).rejects.toThrow(/snapshot: bad magic/);
    expect((await client.recompute(request)).own).toHaveLength(2);
    expect(client.pid).toBe(pid);
  });

  it('a killed child fails the pending request clearly; restart() serves again', async () => {
    const pid = client.pid!;
    const pending = client.recompute(request);
    const queued = client.recompute(request);
    process.kill(pid, 'SIGKILL');
    await expect(pending).rejects.toThrow(/verifier process exited \(code null, signal SIGKILL\).*request \d+ failed/);
    await expect(queued).rejects.toThrow(/restart the verifier/);
    await expect(client.recompute(request)).rejects.toThrow(/restart the verifier/);
    await client.restart();
    expect(client.pid).not.toBe(pid);
    expect((await client.recompute(request)).own).toHaveLength(2);
  });

  it('a request over its timeout fails, and the child is killed (its work can no longer be trusted to end)', async () => {
    const pid = client.pid!;
    client.timeoutMs = 1;
    await expect(client.recompute(request)).rejects.toThrow(/did not answer request \d+ within 1 ms/);
    expect(client.pid).toBeUndefined();
    await client.restart();
    expect(client.pid).not.toBe(pid);
    expect(client.timeoutMs).toBeGreaterThanOrEqual(10_000);
  });

  it('close() kills the child: its process is gone once close resolves', async () => {
    const pid = client.pid!;
    await client.close();
    expect(() => process.kill(pid, 0)).toThrow(/ESRCH/);
    await expect(client.recompute(request)).rejects.toThrow(/the verifier was closed/);
  });

  it('a child without a WebGPU adapter fails at start with the reason', async () => {
    const saved = process.env.VK_ICD_FILENAMES;
    process.env.VK_ICD_FILENAMES = join(dir, 'no-such-icd.json');
    try {
      await expect(VerifierClient.start({ job: JOB, dataset: IMAGES })).rejects.toThrow(
        /verifier: the verifier found no WebGPU adapter/,
      );
    } finally {
      process.env.VK_ICD_FILENAMES = saved;
    }
  });

  it('a language model on a text dataset starts on the bytes it is handed, and recomputes a local-mode outer step', async () => {
    const spec = { type: 'transformer', name: 'lm-test', vocab: 256, context: 16, dModel: 16, heads: 2, layers: 1 };
    const job = parseJobSpec({
      model: spec,
      dataset: { kind: 'text', path: dir },
      globalBatch: 8,
      sync: { mode: 'local', innerSteps: 2, compression: 'int8' },
      verify: {},
    });
    const text = await VerifierClient.start({ job, dataset: { kind: 'text', bytes: generatedText(3, 2000) } });
    try {
      const lm = parameterLayout(job.model).totalElements;
      const state = encodeSnapshot({
        spec: job.model,
        step: 0,
        epoch: 0,
        cursor: 0,
        optimizer: { kind: 'adamw', t: 0 },
        params: initParams(job.model, parameterLayout(job.model), job.seed),
        moments: [new Float32Array(lm), new Float32Array(lm)],
        outer: new Float32Array(lm),
      });
      const path = join(dir, 'lm-0.snapshot');
      writeFileSync(path, new Uint8Array(state));
      const world = [{ workerId: 'w0', rank: 0, share: 1, addr: '', invite: null }];
      const steps = checkedSlices(
        { job, datasetSize: 2000 - 16 },
        { world, step: 2, firstStep: 1, at: { epoch: 0, cursor: 0, holes: [] } },
      );
      const zeros = new Array(32).fill(0);
      const got = await text.recompute({
        snapshotPath: path,
        stepHash: STEP_HASH,
        world: 1,
        mode: 'local',
        rank: 0,
        steps: steps.map((x) => ({ slices: [x.slices[0]], count: x.count })),
        fresh: true,
        sum: { values: zeros, mass: zeros },
      });
      expect(got.startOk).toBe(true);
      expect(got.own).toHaveLength(1);
      expect(got.own[0].mass.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
      expect(got.moments).toHaveLength(2);
    } finally {
      await text.close();
    }
  });
});
