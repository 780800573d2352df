/** The dial attempt bound (web/net/dial-budget.ts): learned from attempts that opened, floored, capped, and never for a retry after silence; and the dial loop that uses it. */
import { describe, expect, it } from 'vitest';
import {
  DIAL_ATTEMPT_MS,
  DIAL_HISTORY,
  DialBudget,
  dialUntil,
  MIN_FIRST_ATTEMPT_MS,
  MIN_SAMPLES,
  NoAnswer,
} from '../../../../web/net/dial-budget';

describe('DialBudget', () => {
  it('waits the full bound until enough attempts opened', () => {
    const b = new DialBudget();
    expect(b.attemptMs(0)).toBe(DIAL_ATTEMPT_MS);
    for (let k = 1; k < MIN_SAMPLES; k++) b.opened(100);
    expect(b.attemptMs(0)).toBe(DIAL_ATTEMPT_MS);
    b.opened(100);
    expect(b.attemptMs(0)).toBe(MIN_FIRST_ATTEMPT_MS);
  });

  it('gives the first attempt twice the slowest recent opening, between the floor and the full bound', () => {
    const b = new DialBudget();
    for (const ms of [160, 1090, 300]) b.opened(ms);
    expect(b.attemptMs(0)).toBe(2180);
    b.opened(2500);
    expect(b.attemptMs(0)).toBe(5000);
    b.opened(4000);
    expect(b.attemptMs(0)).toBe(DIAL_ATTEMPT_MS);
  });

  it('gives every attempt after an unanswered one the full bound', () => {
    const b = new DialBudget();
    for (let k = 0; k < 4; k++) b.opened(200);
    expect(b.attemptMs(0)).toBe(MIN_FIRST_ATTEMPT_MS);
    expect(b.attemptMs(1)).toBe(DIAL_ATTEMPT_MS);
    expect(b.attemptMs(5)).toBe(DIAL_ATTEMPT_MS);
  });

  it('forgets openings older than its window, so a slow spell passes', () => {
    const b = new DialBudget();
    b.opened(2900);
    for (let k = 1; k < DIAL_HISTORY; k++) b.opened(500);
    expect(b.attemptMs(0)).toBe(5800);
    b.opened(500);
    expect(b.attemptMs(0)).toBe(MIN_FIRST_ATTEMPT_MS);
  });

  it('ignores times that are not durations', () => {
    const b = new DialBudget();
    for (const ms of [Number.NaN, -5, Number.POSITIVE_INFINITY]) b.opened(ms);
    expect(b.attemptMs(0)).toBe(DIAL_ATTEMPT_MS);
  });
});

describe('dialUntil', () => {
  /** `dialUntil` with a learned budget, a minute's deadline, never stopped and nothing established, but for `o`. */
  const dial = <T>(o: Partial<Parameters<typeof dialUntil<T>>[0]> & { attempt: (timeoutMs: number) => Promise<T> }) => {
    const budget = new DialBudget();
    for (let k = 0; k < 3; k++) budget.opened(300);
    return dialUntil<T>({
      what: 'a → b',
      deadline: performance.now() + 60_000,
      budget,
      stopped: () => false,
      established: () => undefined,
      ...o,
    });
  };

  it('gives the first attempt the learned bound, and the one after an unanswered attempt the full bound', async () => {
    const bounds: number[] = [];
    let calls = 0;
    const link = await dial({
      attempt: async (timeoutMs) => {
        bounds.push(timeoutMs);
        if (++calls === 1) throw new NoAnswer('no answer');
        return 'link';
      },
    });
    expect(link).toBe('link');
    expect(bounds[0]).toBe(MIN_FIRST_ATTEMPT_MS);
    expect(bounds[1]).toBe(DIAL_ATTEMPT_MS);
  });

  it('keeps the learned bound after a refusal (an unknown peer is not a silent one)', async () => {
    const bounds: number[] = [];
    await dial({
      attempt: async (timeoutMs) => {
        bounds.push(timeoutMs);
        if (bounds.length === 1) throw new Error('b is not on the signaling server');
        return 'link';
      },
    });
    expect(bounds).toEqual([MIN_FIRST_ATTEMPT_MS, MIN_FIRST_ATTEMPT_MS]);
  });

  it('takes a link the other side opened meanwhile, and gives up at the deadline naming the last error', async () => {
    let open: string | undefined;
    const taken = await dial({
      established: () => open,
      attempt: async () => {
        open = 'their link';
        throw new NoAnswer('no answer within 2000 ms');
      },
    });
    expect(taken).toBe('their link');
    await expect(
      dial({
        deadline: performance.now() + 500,
        attempt: async () => {
          throw new NoAnswer('no answer within 2000 ms');
        },
      }),
    ).rejects.toThrow('could not connect a → b: no answer within 2000 ms');
  });

  it('stops when told to, without an attempt', async () => {
    let attempts = 0;
    await expect(
      dial({
        stopped: () => true,
        attempt: async () => {
          attempts++;
          return 'link';
        },
      }),
    ).rejects.toThrow('could not connect a → b: no attempt');
    expect(attempts).toBe(0);
  });
});
