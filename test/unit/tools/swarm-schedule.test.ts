/**
 * The chaos schedule is a pure function of its options: same seed, same faults at the same moments on
 * the same tabs; and whatever the seed and rates, it never leaves the swarm without a live tab.
 * The replay below is written here, independently of the module's own `liveCountsAfter`.
 */
import { describe, expect, it } from 'vitest';
import {
  chaosSchedule,
  liveCountsAfter,
  type ChaosEvent,
  type ChaosOptions,
} from '../../../tools/swarm/chaos-schedule';

/** Replays a schedule: live (open, not hung) and hung tabs after each event; throws on an impossible event. */
function replay(schedule: ChaosEvent[], workers: number): { live: number; hung: number }[] {
  const state = new Map<string, 'live' | 'hung' | 'gone'>();
  for (let i = 1; i <= workers; i++) state.set(`t${i}`, 'live');
  const need = (ok: boolean, e: ChaosEvent) => {
    // Plain throws, not expect(): this runs for tens of thousands of events.
    if (!ok) throw new Error(`impossible event ${JSON.stringify(e)} (tab is ${state.get(e.tab) ?? 'unknown'})`);
  };
  let live = workers;
  let hung = 0;
  return schedule.map((e) => {
    const s = state.get(e.tab);
    if (e.kind === 'join') {
      need(s === undefined, e);
      state.set(e.tab, 'live');
      live += 1;
    } else if (e.kind === 'resume') {
      need(s === 'hung', e);
      state.set(e.tab, 'live');
      live += 1;
      hung -= 1;
    } else if (e.kind === 'throttle') {
      need(s === 'live', e);
    } else {
      need(s === 'live', e);
      state.set(e.tab, e.kind === 'hang' ? 'hung' : 'gone');
      live -= 1;
      if (e.kind === 'hang') hung += 1;
    }
    return { live, hung };
  });
}

const busy: ChaosOptions = {
  seed: 1234,
  duration: 120,
  workers: 3,
  closeEvery: 7,
  crashEvery: 11,
  hangEvery: 13,
  joinEvery: 9,
  hangFor: 10,
};

describe('chaosSchedule', () => {
  it('gives the same schedule for the same seed and options', () => {
    expect(chaosSchedule(busy)).toEqual(chaosSchedule({ ...busy }));
    expect(chaosSchedule(busy).length).toBeGreaterThan(20);
  });

  it('gives a different schedule for a different seed', () => {
    const a = chaosSchedule(busy);
    const b = chaosSchedule({ ...busy, seed: 1235 });
    expect(b).not.toEqual(a);
    expect(b.map((e) => e.at)).not.toEqual(a.map((e) => e.at));
  });

  it('orders events by time, inside the run', () => {
    const s = chaosSchedule(busy);
    for (let i = 1; i < s.length; i++) expect(s[i].at).toBeGreaterThanOrEqual(s[i - 1].at);
    for (const e of s) {
      expect(e.at).toBeGreaterThanOrEqual(0);
      expect(e.at).toBeLessThan(busy.duration);
    }
  });

  it('puts the k-th event of a kind within a quarter period of (k+1)·period', () => {
    const opts: ChaosOptions = { seed: 99, duration: 200, workers: 20, closeEvery: 10, maxTabs: 40 };
    const closes = chaosSchedule(opts).filter((e) => e.kind === 'close');
    // 19 windows end inside 200 s ((k+1)·10 − 2.5 < 200 for k ≤ 19; the last may fall past the end).
    expect(closes.length).toBeGreaterThanOrEqual(19);
    expect(closes.length).toBeLessThanOrEqual(20);
    closes.forEach((e, k) => {
      expect(Math.abs(e.at - (k + 1) * 10)).toBeLessThanOrEqual(2.5);
    });
  });

  it('keeps each kind on its own stream: adding hangs does not move the closes', () => {
    const closesOnly = chaosSchedule({ seed: 5, duration: 100, workers: 30, closeEvery: 8, maxTabs: 60 }).filter(
      (e) => e.kind === 'close',
    );
    const withHangs = chaosSchedule({
      seed: 5,
      duration: 100,
      workers: 30,
      closeEvery: 8,
      hangEvery: 6,
      maxTabs: 60,
    }).filter((e) => e.kind === 'close');
    expect(withHangs.map((e) => e.at)).toEqual(closesOnly.map((e) => e.at));
  });

  it('never leaves the swarm without a live tab, for many seeds and aggressive rates', () => {
    for (let seed = 0; seed < 300; seed++) {
      const workers = 1 + (seed % 3);
      const opts: ChaosOptions = {
        seed,
        duration: 90,
        workers,
        closeEvery: 3,
        crashEvery: 4,
        hangEvery: 5,
        joinEvery: seed % 2 ? 20 : 0,
        hangFor: 12,
      };
      const schedule = chaosSchedule(opts);
      const counts = replay(schedule, workers);
      const emptied = counts.findIndex((c) => c.live < 1);
      expect(emptied, `seed ${seed}: no live tab after event ${emptied} of ${JSON.stringify(schedule)}`).toBe(-1);
      // The module's own replay agrees with this one.
      expect(liveCountsAfter(schedule, workers)).toEqual(counts.map((c) => c.live));
    }
  });

  it('opens a keep-alive tab right before a fault on the last live tab, and the fault hits the old tab', () => {
    const schedule = chaosSchedule({ seed: 3, duration: 35, workers: 1, crashEvery: 10 });
    const crashes = schedule.filter((e) => e.kind === 'crash');
    expect(crashes.length).toBe(3);
    for (const crash of crashes) {
      const i = schedule.indexOf(crash);
      const before = schedule[i - 1];
      expect(before).toMatchObject({ kind: 'join', keepAlive: true, at: crash.at });
      expect(crash.tab).not.toBe(before.tab);
    }
    expect(schedule.slice(0, 2)).toEqual([
      { at: crashes[0].at, kind: 'join', tab: 't2', keepAlive: true },
      { at: crashes[0].at, kind: 'crash', tab: 't1' },
    ]);
  });

  it('never opens more tabs (open + hung) than maxTabs', () => {
    for (let seed = 0; seed < 100; seed++) {
      const schedule = chaosSchedule({
        seed,
        duration: 60,
        workers: 2,
        joinEvery: 2,
        hangEvery: 3,
        hangFor: 30,
        maxTabs: 4,
      });
      expect(Math.max(...replay(schedule, 2).map((c) => c.live + c.hung))).toBeLessThanOrEqual(4);
    }
  });

  it('resumes a hung tab hangFor seconds later, or leaves it hung when that is past the end', () => {
    const schedule = chaosSchedule({ seed: 11, duration: 50, workers: 3, hangEvery: 20, hangFor: 8 });
    const hangs = schedule.filter((e) => e.kind === 'hang');
    expect(hangs.length).toBe(2);
    for (const hang of hangs) {
      const resume = schedule.find((e) => e.kind === 'resume' && e.tab === hang.tab && e.at > hang.at);
      if (hang.at + 8 < 50) expect(resume?.at).toBeCloseTo(hang.at + 8, 6);
      else expect(resume).toBeUndefined();
    }
  });

  it('names joined tabs in order after the initial ones', () => {
    const joins = chaosSchedule({ seed: 2, duration: 40, workers: 3, joinEvery: 9, maxTabs: 10 }).filter(
      (e) => e.kind === 'join',
    );
    expect(joins.map((e) => e.tab)).toEqual(['t4', 't5', 't6', 't7'].slice(0, joins.length));
    expect(joins.length).toBe(4);
  });

  it('throttles one of the initial tabs from the start, and only when asked', () => {
    const throttled = chaosSchedule({ seed: 8, duration: 20, workers: 4, throttleKbps: 512 });
    expect(throttled).toHaveLength(1);
    expect(throttled[0]).toMatchObject({ at: 0, kind: 'throttle', kbps: 512 });
    expect(['t1', 't2', 't3', 't4']).toContain(throttled[0].tab);
    expect(chaosSchedule({ seed: 8, duration: 20, workers: 4 })).toEqual([]);
  });

  it('rejects a schedule without tabs or time', () => {
    expect(() => chaosSchedule({ seed: 1, duration: 10, workers: 0 })).toThrow(/workers/);
    expect(() => chaosSchedule({ seed: 1, duration: 0, workers: 1 })).toThrow(/duration/);
  });
});
