/** The dial attempt bound (web/net/dial-budget.ts): learned from attempts that opened, floored, capped, and never for a retry. */
import { describe, expect, it } from 'vitest';
import {
  DIAL_ATTEMPT_MS,
  DIAL_HISTORY,
  DialBudget,
  MIN_FIRST_ATTEMPT_MS,
  MIN_SAMPLES,
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
