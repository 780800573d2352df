/**
 * bench:scale on the test bed (bench/lib/scale-netbed.ts): the churn it asks the swarm driver for is the
 * loopback run's rate, and the table compares each churn row with the quiet row of its own network.
 */
import { describe, expect, it } from 'vitest';
import { faultOf, netbedScaleOptions } from '../../../bench/lib/scale-netbed';
import { networkOf, scaleTable } from '../../../bench/lib/scale-report';
import { JOB, type ScaleResult } from '../../../bench/lib/scale-run';
import { type FiredNetbedEvent, netbedSchedule } from '../../../tools/netbed/netbed-chaos';
import { joinTimes } from '../../../tools/netbed/netbed-swarm';

const scenario = {
  n: 16,
  churn: true,
  windowS: 60,
  ratePerWorkerMin: 0.2,
  warmupS: 600,
  profile: 'broadband',
  seed: 1,
  topology: undefined,
  log: () => {},
};

describe('bench:scale --netbed', () => {
  it("asks for the loopback run's crash count and as many joins, every worker in its own home on the profile", () => {
    for (const n of [4, 8, 16, 32, 64]) {
      const o = netbedScaleOptions({ ...scenario, n }, '/data');
      expect(o.headlessWorkers).toBe(n);
      expect(o.workers).toBe(0);
      expect(o.warmFullWorld).toBe(true);
      expect(o.headless?.args).toEqual(['--timings']);
      expect(o.link).toEqual({ delayMs: 20, jitterMs: 0, rateMbit: 20, lossPercent: 0 });
      const schedule = netbedSchedule(o.chaos!, n, o.durationS);
      // scale-run.ts: at least one, else N · rate per minute over the window.
      const expected = Math.max(1, Math.round((n * 0.2 * 60) / 60));
      const crashes = schedule.filter((e) => e.kind === 'crash').length;
      const joins = schedule.filter((e) => e.kind === 'join').length;
      // Periodic times ± a quarter period: the last may fall inside the window or after it.
      expect(crashes === expected || crashes === expected + 1).toBe(true);
      expect(joins === expected || joins === expected + 1).toBe(true);
    }
    expect(netbedScaleOptions({ ...scenario, churn: false }, '/data').chaos).toBeNull();
    expect(() => netbedScaleOptions({ ...scenario, profile: 'lan' }, '/data')).toThrow(/unknown profile "lan"/);
  });

  it("tells what a crash cost from the world read just before it: the victim's share when carried, every rank's steps in flight when redone", () => {
    // Four members at the last commit (step 16), each 5 steps into the outer step, shares 0.4/0.3/0.2/0.1.
    const before = {
      step: 16,
      members: [
        { peerId: 't1-aa', lastStep: 21, share: 0.4 },
        { peerId: 't2-bb', lastStep: 21, share: 0.3 },
        { peerId: 't10-cc', lastStep: 21, share: 0.2 },
        { peerId: 't3-dd', lastStep: 21, share: 0.1 },
      ],
    };
    const crash: FiredNetbedEvent = { at: 20, kind: 'crash', tab: 't1', outcome: 'done', before, atMs: 1000 };
    const open = (at: number, carried: boolean) => ({ at, event: 'round_open', data: { carried } });
    const carried = faultOf(crash, { events: [open(1500, true)], commits: [{ at: 2000 }] })!;
    expect(carried).toMatchObject({ kind: 'crash', outcome: 'carried', atMs: 1000 });
    expect(carried.inFlightSteps).toBeCloseTo(5, 9);
    // t1's own share only: 5 × 0.4 (t10's share is not t1's, though its name starts alike).
    expect(carried.droppedShareSteps).toBeCloseTo(2, 9);
    expect(carried.lostSteps).toBeCloseTo(2, 9);
    // Carried, then given up before the next commit: the outer step was redone, and all of it was lost.
    const givenUp = faultOf(crash, {
      events: [open(1500, true), { at: 1600, event: 'carry_given_up', data: {} }],
      commits: [{ at: 2000 }],
    })!;
    expect(givenUp.outcome).toBe('redone');
    expect(givenUp.lostSteps).toBeCloseTo(5, 9);
    // Events before the fault do not count: the next round after it opened plain.
    const redone = faultOf(crash, { events: [open(900, true), open(1500, false)], commits: [{ at: 2000 }] })!;
    expect(redone.outcome).toBe('redone');
    // Without the world before it, a fault is counted and not measured.
    expect(faultOf({ ...crash, before: undefined }, { events: [], commits: [] })).toMatchObject({ unmeasured: true });
    expect(faultOf({ ...crash, kind: 'join' }, undefined)).toBeNull();
  });

  it("compares a churn row with its own network's quiet row, and prints no cost for faults it did not measure", () => {
    const row = (network: string | undefined, churn: boolean, samples: number): ScaleResult => ({
      n: 16,
      churn,
      ...(network ? { network } : {}),
      windowS: 60,
      commits: 10,
      committedSteps: 80,
      committedSamples: samples,
      samplesPerSec: samples / 60,
      utilization: 0.5,
      outerStep: null,
      faults: churn ? [{ kind: 'crash', atS: 20, lostSteps: 0, droppedShareSteps: 0, unmeasured: true }] : [],
      joinToContributionS: [],
      restarts: 0,
      auditOk: true,
      rssMiBPerWorker: null,
      warmupS: 30,
    });
    const table = scaleTable([row(undefined, false, 1000), row('broadband', false, 400), row('broadband', true, 300)]);
    const churnRow = table.split('\n').find((l) => l.includes('| broadband | yes |'))!;
    expect(churnRow).toContain('| 75 % |');
    // One fault, none carried or measured: no lost steps.
    expect(churnRow).toMatch(/\| 1 \| - \|/);
  });
});

describe('bench:scale --topology', () => {
  it('runs both sides unverified (a verifying job keeps the plain ring), and labels the rows apart', () => {
    expect(JOB(16)).not.toHaveProperty('topology');
    expect(JOB(16)).not.toHaveProperty('verify');
    expect(JOB(16, 'auto')).toMatchObject({ topology: 'auto', verify: false });
    expect(JOB(16, 'ring')).toMatchObject({ topology: 'ring', verify: false });
    expect(netbedScaleOptions({ ...scenario, topology: 'auto' }, '/data').job).toMatchObject({ topology: 'auto' });
    const base = { n: 16, churn: false, windowS: 60 } as ScaleResult;
    expect(networkOf({ ...base, network: 'broadband', topology: 'auto' })).toBe('broadband, auto (unverified)');
    expect(networkOf(base)).toBe('loopback');
  });
});

describe('netbed swarm: join → first commit', () => {
  it('counts from the join to the first commit of a round the joiner was in, and skips joiners that made none', () => {
    const start = 1_000_000;
    const fired: FiredNetbedEvent[] = [
      { at: 10, kind: 'join', tab: 't5', outcome: 'done' },
      { at: 20, kind: 'crash', tab: 't2', outcome: 'done' },
      { at: 30, kind: 'join', tab: 't6', outcome: 'done' },
      { at: 40, kind: 'join', tab: 't7', outcome: 'failed' },
    ];
    // t5 showed in round 3; t6 never did (still downloading when the window ended); t7's join failed.
    const rounds = new Map([
      ['t5', 3],
      ['t7', 4],
    ]);
    const commits = [
      { round: 2, committedAt: start + 9_000 },
      { round: 2, committedAt: start + 16_000 }, // after the join, but a round without t5
      { round: 3, committedAt: start + 25_500 },
      { round: 4, committedAt: start + 50_000 },
    ];
    expect(joinTimes(fired, (name) => rounds.get(name) ?? null, commits, start)).toEqual([15.5]);
  });
});
