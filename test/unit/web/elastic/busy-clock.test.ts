/** What a tab reports as its compute time: wall time between reports less its named waits, never overlapping. */
import { describe, expect, it } from 'vitest';
import { BusyClock } from '../../../../web/elastic/busy-clock';

describe('BusyClock', () => {
  it('laps wall time less the waits, and starts each interval where the last ended', async () => {
    let t = 1000;
    const clock = new BusyClock(() => t);
    t += 30; // computing
    await clock.waiting(async () => {
      t += 50; // an allreduce
    });
    clock.wait(5); // a commit wait measured elsewhere
    t += 5;
    t += 15; // applying
    expect(clock.lap()).toBe(45);
    t += 10;
    expect(clock.lap()).toBe(10);
    clock.reset();
    t += 7;
    expect(clock.lap()).toBe(7);
  });

  it('counts a wait that throws, and never reports less than zero', async () => {
    let t = 0;
    const clock = new BusyClock(() => t);
    await expect(
      clock.waiting(async () => {
        t += 20;
        throw new Error('aborted');
      }),
    ).rejects.toThrow('aborted');
    expect(clock.lap()).toBe(0);
    clock.wait(100);
    t += 10;
    expect(clock.lap()).toBe(0);
  });
});
