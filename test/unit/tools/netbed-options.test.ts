import { describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseLinkProfile, NetbedError } from '../../../tools/netbed/netbed';
import { NETBED_DEFAULT_JOB, parseNetbedSwarmOptions } from '../../../tools/netbed/netbed-swarm';
import { homesNeeded, netbedSchedule } from '../../../tools/netbed/netbed-chaos';
import { chaosSchedule } from '../../../tools/swarm/chaos-schedule';

describe('link profiles', () => {
  it('reads "DELAY JITTER RATE LOSS" with or without units', () => {
    expect(parseLinkProfile('40ms 5ms 20mbit 1%')).toEqual({ delayMs: 40, jitterMs: 5, rateMbit: 20, lossPercent: 1 });
    expect(parseLinkProfile(' 0.5 0 1000 0 ')).toEqual({ delayMs: 0.5, jitterMs: 0, rateMbit: 1000, lossPercent: 0 });
  });
  it('refuses the wrong number of values, out-of-range values and jitter above the delay, in one line', () => {
    for (const bad of [
      '40ms 5ms 20mbit',
      '40ms 5ms 20mbit 1% x',
      'fast 0 20 0',
      '40 0 0 0',
      '40 0 20 60%',
      '10ms 20ms 20mbit 0%',
    ]) {
      expect(() => parseLinkProfile(bad)).toThrow(NetbedError);
      try {
        parseLinkProfile(bad);
      } catch (error) {
        expect((error as Error).message).not.toContain('\n');
        expect((error as Error).message).toContain('--link');
      }
    }
  });
});

describe('tabswarm swarm --netbed options', () => {
  it('defaults: 3 tabs, mixed NATs, broadband-like links, the small job', () => {
    const o = parseNetbedSwarmOptions({ netbed: true });
    expect(o).toMatchObject({ workers: 3, nat: 'mixed', durationS: 60, json: false });
    expect(o.link).toEqual({ delayMs: 20, jitterMs: 0, rateMbit: 50, lossPercent: 0 });
    expect(o.job).toBe(NETBED_DEFAULT_JOB);
  });
  it('refuses --url, --throttle (the links are shaped), unknown NAT kinds and bad counts', () => {
    expect(() => parseNetbedSwarmOptions({ netbed: true, url: 'https://x' })).toThrow(/drop --url/);
    expect(() => parseNetbedSwarmOptions({ netbed: true, throttle: '100' })).toThrow(/--throttle does not combine/);
    expect(() => parseNetbedSwarmOptions({ netbed: true, crashEvery: '0.5' })).toThrow(/--crash-every 0\.5/);
    expect(() => parseNetbedSwarmOptions({ netbed: true, headlessWorkers: '65' })).toThrow(/--headless-workers 65/);
    expect(() => parseNetbedSwarmOptions({ netbed: true, nat: 'full-cone' })).toThrow(/--nat full-cone/);
    expect(() => parseNetbedSwarmOptions({ netbed: true, workers: '0' })).toThrow(/--workers 0/);
    expect(() => parseNetbedSwarmOptions({ netbed: true, job: '/no/such/job.json' })).toThrow(/--job \/no\/such/);
  });
  it('takes the chaos flags (no chaos without them) and headless workers beside or instead of tabs', () => {
    expect(parseNetbedSwarmOptions({ netbed: true }).chaos).toBeNull();
    const o = parseNetbedSwarmOptions({
      netbed: true,
      workers: '2',
      headlessWorkers: '4',
      crashEvery: '20',
      joinEvery: '20',
      seed: '11',
    });
    expect(o).toMatchObject({ workers: 2, headlessWorkers: 4 });
    expect(o.chaos).toEqual({ seed: 11, closeEvery: 0, crashEvery: 20, hangEvery: 0, joinEvery: 20, hangFor: 10 });
    expect(parseNetbedSwarmOptions({ netbed: true, headlessWorkers: '3' })).toMatchObject({
      workers: 0,
      headlessWorkers: 3,
    });
  });
  it("plays the plain swarm's schedule and needs one home per member it can open", () => {
    const chaos = { seed: 11, closeEvery: 0, crashEvery: 20, hangEvery: 0, joinEvery: 20, hangFor: 10 };
    const schedule = netbedSchedule(chaos, 6, 60);
    expect(schedule).toEqual(chaosSchedule({ ...chaos, workers: 6, duration: 60, maxTabs: 12 }));
    expect(homesNeeded(6, schedule)).toBe(6 + schedule.filter((e) => e.kind === 'join').length);
  });
  it('validates --job as the coordinator would, and keeps the file as written', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tabswarm-netbed-job-'));
    try {
      const bad = join(dir, 'bad.json');
      writeFileSync(bad, JSON.stringify({ sync: { mode: 'local', innerSteps: 0 } }));
      expect(() => parseNetbedSwarmOptions({ netbed: true, job: bad })).toThrow(
        /--job .*bad\.json: .*sync\.innerSteps/,
      );
      const good = join(dir, 'good.json');
      const local = { model: 'tiny-mlp', sync: { mode: 'local', innerSteps: 8, compression: 'int8' } };
      writeFileSync(good, JSON.stringify(local));
      expect(parseNetbedSwarmOptions({ netbed: true, job: good }).job).toEqual(local);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
