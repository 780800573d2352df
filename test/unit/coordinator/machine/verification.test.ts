/**
 * The checks the machine makes at every commit (coordinator/machine/verification.ts): the job field,
 * the shape and agreement of the sketches each report carries, every hop of the ring, the data disputes,
 * the bans and the rollback. The machine runs in the product's executor (coordinator-harness.ts) with
 * its invariants (exactly-once audit) checked after every event; the sketches are synthetic vectors
 * (verify-kit.ts). Recomputed spot checks: checks.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { parseJobSpec, type JobSpecInput, withVerifyDefault } from '../../../../core/training/job';
import type { StepSketches } from '../../../../core/state/sketch';
import { bucketsPerSegment } from '../../../../core/state/sketch';
import { Harness } from './coordinator-harness';
import { honestOwn, honestParams, sketches, verifiedStep } from './verify-kit';

const JOB: JobSpecInput = {
  model: 'tiny-mlp',
  globalBatch: 12,
  epochs: 3,
  minWorkers: 3,
  maxWorkers: 3,
  lastCallMs: 0,
  heartbeatMs: 60_000,
  checkpointEvery: 4,
  verify: { probability: 0, newcomer: { probability: 0, checks: 0 } },
};

function swarm(job: JobSpecInput = {}, salt = 'salt-of-this-test'): Harness {
  const h = new Harness({ ...JOB, ...job }, 96, 'run-1', undefined, { verifySalt: salt });
  for (const n of ['a', 'b', 'c']) h.join(n);
  h.readyAll();
  return h;
}

describe('the job field', () => {
  it('defaults the rates, takes false for off, and needs a commit per step in every-step mode only', () => {
    const defaults = { probability: 0.05, newcomer: { probability: 0.5, checks: 10 } };
    expect(parseJobSpec({ verify: {} }).verify).toEqual(defaults);
    expect(parseJobSpec({ verify: false }).verify).toBe(false);
    // Every sync mode and wire takes the checks, with the same default rates.
    for (const sync of [
      { mode: 'local', innerSteps: 4, compression: 'int8' },
      { mode: 'every-step', compression: 'int8' },
      { mode: 'every-step', compression: 'fp16' },
    ] as const)
      expect(parseJobSpec({ verify: {}, sync }).verify, JSON.stringify(sync)).toEqual(defaults);
    expect(() => parseJobSpec({ verify: {}, commitEvery: 2 })).toThrow(/verify in every-step sync needs commitEvery 1/);
    expect(() => parseJobSpec({ verify: { probability: 1.5 } })).toThrow();
  });

  it('a job open to anyone verifies unless its file says false; invited tabs are trusted by default', () => {
    const plain = parseJobSpec({});
    expect(withVerifyDefault(plain, 'open').verify).toEqual({
      probability: 0.05,
      newcomer: { probability: 0.5, checks: 10 },
    });
    expect(withVerifyDefault(plain, 'invite').verify).toBeUndefined();
    expect(withVerifyDefault(parseJobSpec({ verify: false }), 'open').verify).toBe(false);
    const own = parseJobSpec({ verify: { probability: 0.2 } });
    expect(withVerifyDefault(own, 'invite').verify).toEqual(own.verify);
  });
});

describe('sketches at every report (core/verification.ts)', () => {
  it('honest sketches commit step after step; the ring identity holds', () => {
    const h = swarm();
    for (let i = 0; i < 5; i++) verifiedStep(h);
    expect(h.state.lastCommit.step).toBe(5);
    expect(h.logs.some((l) => l.event === 'ring_identity_failed')).toBe(false);
  });

  it('a report without its sketch, or with the wrong number of buckets, is refused and changes nothing', () => {
    const h = swarm();
    verifiedStep(h);
    const before = JSON.stringify(h.state.pending);
    const missing = h.report('a');
    expect(missing.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
    const good = sketches(
      [0, 1, 2].map((r) => honestOwn(2, r, 3)),
      honestParams(2),
    )[0];
    const short = h.report('a', { sketch: { ...good, own: good.own.slice(1) } });
    expect(short.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
    expect(JSON.stringify(h.state.pending)).toBe(before);
  });

  it('a rank whose sketch of the reduced sums differs from the others’ is a divergence (nothing commits)', () => {
    const h = swarm();
    verifiedStep(h);
    const all = sketches(
      [0, 1, 2].map((r) => honestOwn(2, r, 3)),
      honestParams(2),
    );
    h.report('a', { sketch: all[0] });
    h.report('b', { sketch: { ...all[1], sum: all[1].sum.map((x) => x * 2) } });
    expect(h.state.lastCommit.step).toBe(1);
    expect(h.logs.some((l) => l.event === 'divergence')).toBe(true);
  });

  it('a job that does not verify refuses sketches (a tab must not send what nobody checks)', () => {
    const h = new Harness({ ...JOB, verify: undefined }, 96);
    for (const n of ['a', 'b', 'c']) h.join(n);
    h.readyAll();
    const all = sketches(
      [0, 1, 2].map((r) => honestOwn(1, r, 3)),
      honestParams(1),
    );
    const actions = h.report('a', { sketch: all[0] });
    expect(actions.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
  });
});

describe('every hop of the ring, at every commit', () => {
  /** All members report the next step; `added` is what each rank really sent on (see `sketches`). */
  function ringStep(h: Harness, added: Parameters<typeof sketches>[2], tamper?: (claims: StepSketches[]) => void) {
    const names = h.members();
    const step = h.state.lastCommit.step + 1;
    const all = sketches(
      names.map((_, r) => honestOwn(step, r, names.length)),
      honestParams(step),
      added,
    );
    tamper?.(all);
    for (const [r, name] of names.entries())
      if (h.state.rendezvous.phase === 'training') h.report(name, { sketch: all[r] });
    // The last report may close the round inside its own send: the harness marks it computed after that.
    for (const w of h.workers.values()) w.live = w.committed.step;
    if (h.state.rendezvous.phase !== 'training' && h.state.status === 'active') h.readyAll();
    return names;
  }

  /** One ring step in which `liar` sends wrong sums and claims it sent the honest ones: its receiver disputes the hop. */
  function hidesWhatItSent(h: Harness, liar: string): void {
    const liarRank = h.members().indexOf(liar);
    const honestSent: number[][] = [];
    ringStep(
      h,
      (r, j, block) => {
        if (r !== liarRank) return block;
        honestSent[j] = block;
        return block.map((x) => x * 3 + 1);
      },
      (claims) => {
        // Its own books balance; its receiver's do not match.
        const per = bucketsPerSegment(claims.length);
        honestSent.forEach((block, j) => {
          block?.forEach((x, k) => {
            claims[liarRank].sent[j * per + k] = x;
            claims[liarRank].sentMass[j * per + k] = Math.abs(x) + 1;
          });
        });
      },
    );
  }

  it('a rank that sends more than it received plus its own, and says so, contradicts itself: banned alone', () => {
    const h = swarm();
    for (let i = 0; i < 3; i++) verifiedStep(h);
    const names = ringStep(h, (r, _j, block) => (r === 1 ? block.map((x) => x * 1000) : block));
    expect(h.state.lastCommit.step).toBe(0); // not committed, and b's earlier contributions rolled back
    const failed = h.logs.find((l) => l.event === 'ring_identity_failed')!;
    expect(failed.data.liars).toEqual([h.worker(names[1]).workerId]);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([h.worker(names[1]).workerId]);
    expect(h.isConnected(names[1])).toBe(false);
    expect(h.isConnected(names[0]) && h.isConnected(names[2])).toBe(true);
    expect(h.state.status).toBe('active');
  });

  it('a rank that hides what it sent disputes one neighbour; the swap in the ring narrows it to the liar', () => {
    const h = swarm();
    verifiedStep(h);
    const liar = h.worker('b').workerId!;
    for (let attempt = 0; attempt < 4 && !h.logs.some((l) => l.event === 'cheater_banned'); attempt++)
      hidesWhatItSent(h, 'b');
    const disputes = h.logs.filter((l) => l.event === 'ring_identity_failed').map((l) => l.data.disputes);
    expect(disputes.length).toBe(2);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([liar]);
    expect(h.isConnected('a') && h.isConnected('c')).toBe(true);
  });

  it('in a ring of 4, the disputing pair are not neighbours in the next round, and the second dispute bans the liar', () => {
    const h = new Harness({ ...JOB, minWorkers: 4, maxWorkers: 4 }, 96, 'run-1', undefined, {
      verifySalt: 'salt-of-this-test',
    });
    for (const n of ['a', 'b', 'c', 'd']) h.join(n);
    h.readyAll();
    verifiedStep(h);
    const liar = h.worker('b').workerId!;
    const rings: string[][] = [];
    for (let attempt = 0; attempt < 4 && !h.logs.some((l) => l.event === 'cheater_banned'); attempt++) {
      rings.push(h.members());
      hidesWhatItSent(h, 'b');
    }
    const failed = h.logs.filter((l) => l.event === 'ring_identity_failed');
    expect(failed.length).toBe(2);
    const [first] = failed[0]!.data.disputes as string[][];
    const pair = first!.map((id) => [...h.workers.entries()].find(([, w]) => w.workerId === id)![0]);
    const next = rings[1]!;
    const [i, j] = pair.map((n) => next.indexOf(n));
    expect((i! + 1) % 4 === j || (j! + 1) % 4 === i).toBe(false);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([liar]);
  });

  it('a neighbour reported for sending NaN: the two are suspects, the next report narrows it to the sender', () => {
    const h = swarm();
    verifiedStep(h);
    const attacker = h.worker('c').workerId!;
    for (let attempt = 0; attempt < 4 && h.isConnected('c'); attempt++) {
      const names = h.members();
      const r = names.indexOf('c');
      const receiver = names[(r + 1) % names.length];
      h.send(receiver, {
        type: 'failure',
        runId: h.runId,
        workerId: h.worker(receiver).workerId!,
        round: h.state.rendezvous.round,
        reason: 'protocol: NaN at [12] after this chunk',
        peer: attacker,
        evidence: 'bad_data',
      });
      if (h.state.rendezvous.phase !== 'training' && h.state.status === 'active') h.readyAll();
    }
    expect(h.logs.filter((l) => l.event === 'data_dispute').length).toBe(2);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([attacker]);
    expect(h.isConnected('a') && h.isConnected('b')).toBe(true);
    expect(h.state.status).toBe('active');
  });
});

describe('an int8 wire: every hop within the slack of its encodes', () => {
  /** Honest int8 sketches: each sent block is off its exact sum by a rounding within the slack it reports. */
  function int8Sketches(own: number[][], params: number[], liar = -1): StepSketches[] {
    const all = sketches(own, params, (r, _j, block) =>
      block.map((x, k) => x + (r === liar ? 0.05 : 0.004) * Math.abs(x) * (k % 2 ? 1 : -1)),
    );
    const slack = (v: number[]) => v.map((x) => 0.005 * Math.abs(x) + 1e-9);
    const sumSlack = slack(all[0].sum);
    return all.map((k) => ({
      ...k,
      sum: k.sum.map((x, b) => x + 0.5 * sumSlack[b]),
      sentSlack: slack(k.sent),
      receivedSlack: slack(k.received),
      sumSlack,
    }));
  }

  function int8Step(h: Harness, liar = -1): void {
    const names = h.members();
    const step = h.state.lastCommit.step + 1;
    const all = int8Sketches(
      names.map((_, r) => honestOwn(step, r, names.length)),
      honestParams(step),
      liar,
    );
    for (const [r, name] of names.entries())
      if (h.state.rendezvous.phase === 'training') h.report(name, { sketch: all[r] });
  }

  it('commits hops within their slack, bans a rank that adds more than its slack covers, refuses a report without slack', () => {
    const h = swarm({ sync: { mode: 'every-step', compression: 'int8' } });
    for (let i = 0; i < 3; i++) int8Step(h);
    expect(h.state.lastCommit.step).toBe(3);
    const bare = sketches(
      [0, 1, 2].map((r) => honestOwn(4, r, 3)),
      honestParams(4),
    )[0];
    const refused = h.report(h.members()[0], { sketch: bare });
    expect(refused.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
    const liar = h.members()[1];
    int8Step(h, 1);
    expect(h.logs.find((l) => l.event === 'cheater_banned')?.data.workers).toEqual([h.worker(liar).workerId]);
    expect(h.state.lastCommit.step).toBe(0);
  });
});

describe('local mode: what a commit point reports', () => {
  it('an outer step needs its moments and t, its inner commitment and the gradient-layout state; inner steps carry none', () => {
    const h = swarm({ sync: { mode: 'local', innerSteps: 2, compression: 'none' } });
    const names = h.members();
    for (const name of names) h.report(name); // inner step 1: no sketch needed
    expect(h.state.pending[1]).toBeDefined();
    const buckets = 3 * bucketsPerSegment(3);
    const base = sketches(
      [0, 1, 2].map((r) => honestOwn(2, r, 3)),
      honestParams(2, buckets),
    );
    const outer = honestParams(3, buckets);
    const moments = [honestParams(4, buckets), honestParams(5, buckets)];
    const innerHash = 'c'.repeat(64);
    const missing = h.report(names[0], { sketch: base[0] });
    expect(missing.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
    const noT = h.report(names[0], { sketch: { ...base[0], outer, moments }, innerHash });
    expect(noT.some((a) => a.kind === 'send' && a.msg.type === 'error' && a.msg.code === 'bad_sketch')).toBe(true);
    for (const [r, name] of names.entries())
      h.report(name, { sketch: { ...base[r], outer, moments }, innerHash, innerT: 7 });
    expect(h.state.lastCommit.step).toBe(2);
    expect(h.state.momentClaims).toMatchObject({ step: 2, world: 3 });
    const claim = { moments, t: 7 };
    expect(Object.values(h.state.momentClaims!.byWorker)).toEqual([claim, claim, claim]);
  });

  it('a checkpoint asked for keeps the claims of its commit: its upload may arrive after the next commit', () => {
    const h = swarm({ sync: { mode: 'local', innerSteps: 2, compression: 'none' }, checkpointEvery: 2 });
    const names = h.members();
    const buckets = 3 * bucketsPerSegment(3);
    /** One outer step (steps point − 1 and point), every rank claiming moments `seed` and t `point`. */
    const outerStep = (point: number, seed: number) => {
      for (const name of names) h.report(name);
      const base = sketches(
        [0, 1, 2].map((r) => honestOwn(point, r, 3)),
        honestParams(point, buckets),
      );
      const moments = [honestParams(seed, buckets), honestParams(seed + 1, buckets)];
      for (const [r, name] of names.entries())
        h.report(name, {
          sketch: { ...base[r], outer: honestParams(point + 1, buckets), moments },
          innerHash: 'c'.repeat(64),
          innerT: point,
        });
      return { moments, t: point };
    };
    const first = outerStep(2, 10);
    outerStep(4, 20);
    expect(h.state.lastCommit.step).toBe(4);
    expect(h.state.momentClaims?.step).toBe(4);
    const request = h.state.checkpointRequests.find((r) => r.step === 2);
    expect(request?.claims?.world).toBe(3);
    expect(Object.values(request!.claims!.byWorker)).toEqual([first, first, first]);
  });
});
