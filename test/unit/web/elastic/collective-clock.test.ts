import { describe, expect, it } from 'vitest';
import {
  floorTransferMs,
  readyAllowanceMs,
  stateBytes,
  stateSyncAllowanceMs,
} from '../../../../core/training/link-floor';
import { MLP_SPEC, parameterLayout } from '../../../../core/training/model-spec';
import { CollectiveClock, HISTORY, MAX_DOUBLINGS, MAX_LIMIT_MS, SLACK } from '../../../../web/elastic/collective-clock';

describe('link floor', () => {
  it('times bytes at 1 Mbit/s and a state as parameters plus two moments', () => {
    expect(floorTransferMs(125_000)).toBe(1000); // 1 Mbit
    expect(floorTransferMs(-5)).toBe(0);
    const elements = parameterLayout(MLP_SPEC).totalElements;
    expect(stateBytes(MLP_SPEC)).toBe(elements * 12);
    // One transfer per member of the relay chain; no chain, nothing.
    expect(stateSyncAllowanceMs(MLP_SPEC, 0)).toBe(0);
    expect(stateSyncAllowanceMs(MLP_SPEC, 2)).toBe(Math.round((2 * elements * 12 * 8) / 1000));
  });

  it("gives a round's ready deadline only the transfer its sync needs", () => {
    const one = Math.round(floorTransferMs(stateBytes(MLP_SPEC)));
    expect(readyAllowanceMs({ kind: 'fresh' }, MLP_SPEC, 8)).toBe(0);
    expect(readyAllowanceMs({ kind: 'held' }, MLP_SPEC, 8)).toBe(0);
    const checkpoint = { kind: 'checkpoint' as const, step: 4, url: '/api/checkpoints/r/4', sha256: 'ab'.repeat(32) };
    expect(readyAllowanceMs(checkpoint, MLP_SPEC, 8)).toBe(one);
    // One holder of three: the other two are one chain of two. Holders 0 and 2 of eight: chains of 1 and 5.
    expect(readyAllowanceMs({ kind: 'peer', rank: 0 }, MLP_SPEC, 3)).toBe(stateSyncAllowanceMs(MLP_SPEC, 2));
    expect(readyAllowanceMs({ kind: 'peers', ranks: [0, 2] }, MLP_SPEC, 8)).toBe(stateSyncAllowanceMs(MLP_SPEC, 5));
  });
});

describe('CollectiveClock', () => {
  it('starts at the larger of the caller minimum and the payload at the floor rate', () => {
    const clock = new CollectiveClock();
    expect(clock.limitMs(20_000, 125_000)).toBe(20_000); // 1 s of transfer: the minimum wins
    expect(clock.limitMs(20_000, 5_000_000)).toBe(40_000); // 40 Mbit at 1 Mbit/s
  });

  it('learns the slowest recent allreduce, with slack, and forgets it after HISTORY successes', () => {
    const clock = new CollectiveClock();
    clock.succeeded(9000);
    expect(clock.limitMs(20_000, 0)).toBe(SLACK * 9000);
    for (let i = 0; i < HISTORY - 1; i++) clock.succeeded(100);
    expect(clock.limitMs(20_000, 0)).toBe(SLACK * 9000);
    clock.succeeded(100);
    expect(clock.limitMs(20_000, 0)).toBe(20_000);
    clock.succeeded(Number.NaN); // ignored
    clock.succeeded(-1);
    expect(clock.limitMs(20_000, 0)).toBe(20_000);
  });

  it('doubles after each timeout up to MAX_DOUBLINGS and MAX_LIMIT_MS, and a success ends the backoff', () => {
    const clock = new CollectiveClock();
    const limits: number[] = [];
    for (let i = 0; i <= MAX_DOUBLINGS + 2; i++) {
      limits.push(clock.limitMs(20_000, 0));
      clock.timedOut();
    }
    expect(limits.slice(0, MAX_DOUBLINGS + 1)).toEqual([20_000, 40_000, 80_000, 160_000, 320_000]);
    expect(Math.max(...limits)).toBe(Math.min(MAX_LIMIT_MS, 20_000 * 2 ** MAX_DOUBLINGS));
    // A link that needed 30 s: after the success the limit is SLACK × 30 s, not the backed-off one.
    clock.succeeded(30_000);
    expect(clock.limitMs(20_000, 0)).toBe(SLACK * 30_000);
    expect(new CollectiveClock().limitMs(10 * MAX_LIMIT_MS, 0)).toBe(MAX_LIMIT_MS);
  });

  it('lets a transfer that takes longer than the first limit through within a few rounds (the livelock it removes)', () => {
    // A link on which every allreduce takes 50 s; the minimum is the old fixed 20 s.
    const clock = new CollectiveClock();
    let failures = 0;
    while (clock.limitMs(20_000, 0) < 50_000) {
      clock.timedOut();
      failures++;
      expect(failures).toBeLessThanOrEqual(MAX_DOUBLINGS);
    }
    clock.succeeded(50_000);
    expect(failures).toBe(2);
    expect(clock.limitMs(20_000, 0)).toBeGreaterThan(50_000); // and it stays above what the link does
  });
});
