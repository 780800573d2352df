/**
 * The hostile test tab's decorators (test/browser/pages/hostile/attacks.ts) on fakes and in-memory
 * rings: each attack does exactly what its mode says, only from `fromStep` on, and the ring attacks
 * reach the other ranks as a real hostile tab's would. The browser test then shows what the
 * coordinator makes of them.
 */
import { describe, expect, it } from 'vitest';
import { BUILTIN_MODELS, parameterLayout } from '../../../../core/training/model-spec';
import { decodeSnapshot, encodeSnapshot, OPTIMIZER_MOMENTS } from '../../../../core/state/snapshot';
import type { HttpPort } from '../../../../web/elastic/checkpoint-transfer';
import type { ControlPort, MeshPort, TrainerPort } from '../../../../web/elastic/ports';
import type { ElasticPorts } from '../../../../web/elastic/start';
import type { OutgoingMessage } from '../../../../web/net/coordinator-client';
import { CollectiveError } from '../../../../web/net/collective-error';
import type { Ring } from '../../../../web/net/link';
import { memoryRing } from '../../../../web/net/memory-link';
import { ringAllreduce } from '../../../../web/net/ring-allreduce';
import {
  type Attack,
  emptyTally,
  forgeHelloRunId,
  hostilePorts,
  parseAttack,
  type PublicCommit,
  type Tally,
} from '../../../browser/pages/hostile/attacks';
import { mulberry32, randomArray } from '../../../support/rng';

function attack(mode: string, extra: Record<string, string> = {}): Attack {
  return parseAttack(new URLSearchParams({ mode, ...extra }));
}

/** Honest fakes for every port; `gradients` is what the trainer returns (copied per call). */
function honestPorts(opts: { gradients?: Float32Array; ring?: Ring; sent?: OutgoingMessage[]; puts?: ArrayBuffer[] }) {
  const trainer = {
    computeGradients: async () => ({ gradients: opts.gradients!.slice().buffer, lossSum: 1, samples: 8 }),
    pseudoGradient: async () => opts.gradients!.slice().buffer,
  } as unknown as TrainerPort;
  const mesh: MeshPort = { peerId: 'tab-x', connectRing: async () => opts.ring! };
  const control: ControlPort = {
    send: (body) => {
      opts.sent!.push(body);
      return true;
    },
  };
  const http: HttpPort = {
    baseUrl: 'http://127.0.0.1:1',
    fetch: async () => new Response(null, { status: 204 }),
    put: async (_url, body) => void opts.puts!.push(body),
  };
  const hello = () => ({
    peerId: 'tab-x',
    adapter: { vendor: '', architecture: '', description: '' },
    haveStep: null,
    haveHash: null,
    pending: null,
  });
  return { trainer, mesh, control, http, hello } satisfies ElasticPorts;
}

function decorate(ports: ElasticPorts, a: Attack, step = 10, committed: PublicCommit | null = null) {
  const tally: Tally = emptyTally();
  return { ports: hostilePorts(ports, { attack: a, tally, step: () => step, committed: () => committed }), tally };
}

describe('parseAttack', () => {
  it('reads the mode and numbers, with defaults; refuses an unknown mode or a non-finite number', () => {
    expect(attack('scale')).toEqual({ mode: 'scale', factor: 1000, std: 1, claim: 1e-6, fromStep: 1, seed: 1 });
    expect(attack('noise', { std: '3', fromStep: '5' })).toMatchObject({ std: 3, fromStep: 5 });
    expect(() => attack('explode')).toThrow(/not one of/);
    expect(() => attack('scale', { factor: 'NaN' })).toThrow(/factor/);
  });
});

describe("the trainer decorators (this rank's own gradient)", () => {
  const g = randomArray(mulberry32(3), 100_000);

  it('scale ×1000 and negate change every element exactly; before fromStep nothing changes', async () => {
    for (const [mode, k] of [
      ['scale', 1000],
      ['negate', -1],
    ] as const) {
      const { ports, tally } = decorate(honestPorts({ gradients: g }), attack(mode, { fromStep: '5' }), 5);
      const out = new Float32Array((await ports.trainer.computeGradients(new Uint32Array([1]))).gradients!);
      for (let i = 0; i < g.length; i++) if (out[i] !== Math.fround(g[i] * k)) expect.fail(`${mode} [${i}]`);
      expect(tally).toMatchObject({ gradients: 1, firstStep: 5 });
      const early = decorate(honestPorts({ gradients: g }), attack(mode, { fromStep: '5' }), 4);
      expect(new Float32Array((await early.ports.trainer.computeGradients(new Uint32Array([1]))).gradients!)).toEqual(
        g,
      );
      expect(early.tally.gradients).toBe(0);
    }
  });

  it('local sync mode: the pseudo-gradient (its whole contribution) is what is scaled', async () => {
    const { ports, tally } = decorate(honestPorts({ gradients: g }), attack('scale', { fromStep: '5' }), 5);
    const out = new Float32Array(await ports.trainer.pseudoGradient(0.5));
    for (let i = 0; i < g.length; i++) if (out[i] !== Math.fround(g[i] * 1000)) expect.fail(`[${i}]`);
    expect(tally.gradients).toBe(1);
  });

  it('noise adds zero-mean Gaussian noise of std × the RMS', async () => {
    const { ports } = decorate(honestPorts({ gradients: g }), attack('noise', { std: '2' }));
    const out = new Float32Array((await ports.trainer.computeGradients(new Uint32Array([1]))).gradients!);
    let rms = 0;
    for (const x of g) rms += x * x;
    rms = Math.sqrt(rms / g.length);
    let mean = 0;
    let square = 0;
    for (let i = 0; i < g.length; i++) {
      const d = out[i] - g[i];
      mean += d / g.length;
      square += (d * d) / g.length;
    }
    const std = Math.sqrt(square - mean * mean);
    // 100,000 draws: the sample std is within 1 % of 2·RMS, the mean within 5 standard errors of 0.
    expect(Math.abs(std / (2 * rms) - 1)).toBeLessThan(0.01);
    expect(Math.abs(mean)).toBeLessThan((5 * 2 * rms) / Math.sqrt(g.length));
  });
});

describe('the ring decorators (frames on the wire)', () => {
  const n = 10_003;
  const size = 4;
  const hostile = 1;
  const xs = Array.from({ length: size }, (_, r) => randomArray(mulberry32(100 + r), n));

  /** Every rank allreduces its input; the hostile rank's ring comes through the decorated mesh. */
  async function allreduce(
    a: Attack,
    step: number,
    compression: 'none' | 'int8' = 'none',
  ): Promise<PromiseSettledResult<void>[] & { data: Float32Array[] }> {
    const { rings } = memoryRing(size);
    const { ports } = decorate(honestPorts({ ring: rings[hostile] }), a);
    const mine = await ports.mesh.connectRing([], hostile, {
      round: 1,
      signal: new AbortController().signal,
      timeoutMs: 1000,
    });
    const data = xs.map((x) => x.slice());
    const results = await Promise.allSettled(
      rings.map((ring, r) =>
        ringAllreduce(r === hostile ? mine : ring, data[r], {
          id: { round: 1, step, seq: 0 },
          timeoutMs: 5000,
          chunkElements: compression === 'int8' ? 1024 : 1000,
          compression,
        }),
      ),
    );
    return Object.assign(results, { data });
  }

  it('corrupt-forward scales exactly the partial sums the hostile rank forwards; every rank ends with the same bytes', async () => {
    const factor = 1000;
    const results = await allreduce(attack('corrupt-forward', { factor: String(factor), fromStep: '3' }), 3);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled']);
    const { data } = results;
    for (let r = 1; r < size; r++) expect(data[r]).toEqual(data[0]); // hash agreement on a poisoned sum
    // Float64 reference: segment s is summed along ranks s, s+1, …, s+size−1; the hostile rank at
    // position k ∈ [1, size−2] of that chain forwards (and so scales) the partial sum of positions 0…k.
    let worst = 0;
    for (let s = 0; s < size; s++) {
      const k = (hostile - s + size) % size;
      for (let i = Math.floor((s * n) / size); i < Math.floor(((s + 1) * n) / size); i++) {
        let expected = 0;
        for (let j = 0; j < size; j++) {
          const x = xs[(s + j) % size][i];
          expected += k >= 1 && k <= size - 2 && j <= k ? factor * x : x;
        }
        worst = Math.max(worst, Math.abs(data[0][i] - expected) / (factor * 4));
      }
    }
    expect(worst).toBeLessThan(1e-6);
    // And it did change something: segment hostile−1 is about factor × larger than the honest sum.
    const honest = await allreduce(attack('corrupt-forward', { fromStep: '4' }), 3);
    expect(honest.data[0]).not.toEqual(data[0]);
    for (let i = 0; i < n; i++) {
      let sum = 0;
      for (const x of xs) sum += x[i];
      if (Math.abs(honest.data[0][i] - sum) > 1e-5)
        expect.fail(`before fromStep [${i}]: ${honest.data[0][i]} vs ${sum}`);
    }
  });

  it('on an int8 wire: corrupt-forward scales the blocks it forwards, nan makes them undecodable', async () => {
    const honest = await allreduce(attack('corrupt-forward', { fromStep: '9' }), 3, 'int8');
    const corrupted = await allreduce(attack('corrupt-forward', { fromStep: '3' }), 3, 'int8');
    expect(corrupted.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled']);
    // Segment hostile − 1 is summed along ranks hostile−1, hostile, …: the hostile rank forwards it (×1000).
    const seg = (hostile - 1 + size) % size;
    const i = Math.floor((seg * n) / size) + 5;
    expect(Math.abs(corrupted.data[0][i])).toBeGreaterThan(100 * Math.abs(honest.data[0][i]));
    const nan = await allreduce(attack('nan'), 1, 'int8');
    expect(nan.every((r) => r.status === 'rejected')).toBe(true);
    expect(((nan[hostile + 1] as PromiseRejectedResult).reason as CollectiveError).peer).toBe(`rank${hostile}`);
  });

  it("nan: the right neighbour refuses the frames where they arrive, naming the hostile rank; nobody's sum completes", async () => {
    const results = await allreduce(attack('nan'), 1);
    expect(results.every((r) => r.status === 'rejected')).toBe(true);
    const reason = (results[hostile + 1] as PromiseRejectedResult).reason as CollectiveError;
    expect(reason).toBeInstanceOf(CollectiveError);
    expect(reason.peer).toBe(`rank${hostile}`);
    expect(reason.message).toMatch(/NaN/);
  });
});

describe('the control, HTTP and hello decorators', () => {
  it('lie-throughput rewrites computeMs in step reports only', () => {
    const sent: OutgoingMessage[] = [];
    const { ports, tally } = decorate(honestPorts({ sent }), attack('lie-throughput', { fromStep: '2' }));
    const report = {
      type: 'step_report',
      round: 1,
      rank: 0,
      hash: 'h',
      lossSum: 1,
      samples: 8,
      computeMs: 40,
      wireBytes: 0,
    } as const;
    ports.control.send({ ...report, step: 1 });
    ports.control.send({ ...report, step: 2 });
    ports.control.send({ type: 'ready', round: 1 } as OutgoingMessage);
    expect(sent.map((m) => (m.type === 'step_report' ? m.computeMs : m.type))).toEqual([40, 1e-6, 'ready']);
    expect(tally.reports).toBe(1);
  });

  it('bad-checkpoint uploads the same snapshot with every parameter at 0.5: another state hash', async () => {
    const spec = BUILTIN_MODELS['tiny-mlp'];
    const size = parameterLayout(spec).totalElements;
    const params = randomArray(mulberry32(9), size);
    const body = encodeSnapshot({
      spec,
      step: 4,
      epoch: 0,
      cursor: 256,
      optimizer: { kind: 'adamw', t: 4 },
      params,
      moments: OPTIMIZER_MOMENTS.adamw.map(() => new Float32Array(size).fill(0.25)),
    });
    const puts: ArrayBuffer[] = [];
    const { ports, tally } = decorate(honestPorts({ puts }), attack('bad-checkpoint'));
    await ports.http.put!('/api/checkpoints/4', body, { timeoutMs: 1000 });
    const honest = decodeSnapshot(body);
    const sent = decodeSnapshot(puts[0]);
    expect(sent.params.every((p) => p === 0.5)).toBe(true);
    expect({ step: sent.step, cursor: sent.cursor, t: sent.optimizer.t }).toEqual({ step: 4, cursor: 256, t: 4 });
    expect(sent.moments[0]).toEqual(honest.moments[0]);
    expect(sent.stateHash).not.toBe(honest.stateHash);
    expect(tally.uploads).toBe(1);
  });

  it('claim-state claims the public last commit in hello, once the job reached fromStep', () => {
    const a = attack('claim-state', { fromStep: '5' });
    const early = decorate(honestPorts({}), a, 1, { runId: 'r1', step: 4, hash: 'abc' });
    expect(early.ports.hello()).toMatchObject({ haveStep: null, haveHash: null });
    const late = decorate(honestPorts({}), a, 1, { runId: 'r1', step: 7, hash: '0123456789abcdef' });
    expect(late.ports.hello()).toMatchObject({ haveStep: 7, haveHash: '0123456789abcdef', peerId: 'tab-x' });
    expect(late.tally).toMatchObject({ hellos: 1, firstStep: 7 });
  });

  it("claim-state's socket patch names the coordinator's run in a hello that names none, and touches nothing else", () => {
    const sent: string[] = [];
    class FakeSocket {
      constructor(readonly url: string) {}
      send(data: unknown) {
        sent.push(data as string);
      }
    }
    let committed: PublicCommit | null = null;
    const tally = emptyTally();
    forgeHelloRunId(FakeSocket.prototype, { committed: () => committed, tally });
    const hello = JSON.stringify({ v: 1, type: 'hello', runId: null, haveStep: 7 });
    new FakeSocket('ws://h/ws').send(hello); // nothing public known yet
    committed = { runId: 'run-9', step: 7, hash: 'abc' };
    new FakeSocket('ws://h/ws').send(hello);
    new FakeSocket('ws://h/ws').send(JSON.stringify({ type: 'hello', runId: 'mine' }));
    new FakeSocket('ws://h/peer/peerjs').send(hello);
    expect(sent.map((m) => JSON.parse(m).runId)).toEqual([null, 'run-9', 'mine', null]);
    expect(tally.forgedRuns).toBe(1);
  });
});
