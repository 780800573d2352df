/**
 * `tabswarm swarm` flags: every bad value is refused with a message naming the flag; defaults and the
 * URL handling (the tabs' query is kept, `autostart=1` added; the API base has no query).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  chaosOptionsOf,
  jobProblem,
  parseSwarmOptions,
  type RawSwarmOptions,
  SwarmOptionsError,
  withCoordinatorUrl,
} from '../../../tools/swarm/swarm-options';
import { probeCoordinator } from '../../../tools/swarm/coordinator-api';
import { swarmMain } from '../../../tools/swarm/swarm-command';

describe('parseSwarmOptions', () => {
  it('fills defaults and keeps the given seed', () => {
    const o = parseSwarmOptions({ url: 'http://127.0.0.1:8080', seed: '42' });
    expect(o).toMatchObject({
      baseUrl: 'http://127.0.0.1:8080',
      tabUrl: 'http://127.0.0.1:8080/?autostart=1',
      workers: 2,
      duration: 60,
      seed: 42,
      seedDrawn: false,
      closeEvery: 0,
      crashEvery: 0,
      hangEvery: 0,
      joinEvery: 0,
      hangFor: 10,
      throttleKbps: 0,
      maxTabs: 4,
      json: false,
    });
  });

  it('draws a seed when none is given, and says so', () => {
    const o = parseSwarmOptions({ url: 'http://h:1' }, () => 123456);
    expect(o).toMatchObject({ seed: 123456, seedDrawn: true });
  });

  it('passes the URL query to the tabs and keeps it out of the API base', () => {
    const o = parseSwarmOptions({ url: 'http://127.0.0.1:9000/run/?testSubset=0&autostart=0' });
    expect(o.baseUrl).toBe('http://127.0.0.1:9000/run');
    expect(o.tabUrl).toBe('http://127.0.0.1:9000/run/?testSubset=0&autostart=1');
  });

  it('parses numbers given as strings', () => {
    const o = parseSwarmOptions({
      url: 'https://x.example',
      workers: '3',
      duration: '45.5',
      closeEvery: '10',
      crashEvery: '12',
      hangEvery: '30',
      joinEvery: '7',
      throttle: '256',
      maxTabs: '5',
      json: true,
    });
    expect(o).toMatchObject({
      workers: 3,
      duration: 45.5,
      closeEvery: 10,
      crashEvery: 12,
      hangEvery: 30,
      joinEvery: 7,
      throttleKbps: 256,
      maxTabs: 5,
      json: true,
    });
  });

  const refused: [string, Record<string, string | undefined>, RegExp][] = [
    ['no URL', {}, /--url or --job is required/],
    ['a URL that is not one', { url: 'localhost 8080' }, /--url localhost 8080: not a URL/],
    ['a non-http URL', { url: 'ws://127.0.0.1:8080' }, /--url .*http:\/\/ or https:\/\//],
    ['zero workers', { workers: '0' }, /--workers 0: expected an integer in 1\.\.64/],
    ['fractional workers', { workers: '2.5' }, /--workers 2\.5/],
    ['too many workers', { workers: '65' }, /--workers 65/],
    ['a negative duration', { duration: '-1' }, /--duration -1: expected a positive number of seconds/],
    ['a zero duration', { duration: '0' }, /--duration 0/],
    ['a seed that is not a 32-bit integer', { seed: '4294967296' }, /--seed 4294967296/],
    ['a text period', { closeEvery: 'often' }, /--close-every often/],
    ['a negative period', { crashEvery: '-5' }, /--crash-every -5: expected seconds >= 0/],
    ['a period below a second (ms for s?)', { hangEvery: '0.5' }, /--hang-every 0\.5: periods are in seconds/],
    ['a negative throttle', { throttle: '-1' }, /--throttle -1/],
    ['max-tabs below workers', { workers: '4', maxTabs: '3' }, /--max-tabs 3: expected an integer in 4\.\./],
  ];
  for (const [name, raw, message] of refused) {
    it(`refuses ${name}`, () => {
      const call = () =>
        parseSwarmOptions({ url: 'http://127.0.0.1:8080', ...raw, ...(name === 'no URL' ? { url: undefined } : {}) });
      expect(call).toThrow(SwarmOptionsError);
      expect(call).toThrow(message);
    });
  }
});

describe('parseSwarmOptions: --job (the swarm starts its own coordinator) or --url', () => {
  it('takes --job instead of --url: no URL until its coordinator listens, then the one it got', () => {
    const o = parseSwarmOptions({ job: 'jobs/local.json', dataset: '/data/mnist', workers: '3', seed: '1' });
    expect(o).toMatchObject({
      ownCoordinator: { jobFile: 'jobs/local.json', dataset: '/data/mnist', dist: undefined },
      baseUrl: '',
      tabUrl: '',
      workers: 3,
    });
    expect(withCoordinatorUrl(o, 'http://127.0.0.1:40123')).toMatchObject({
      baseUrl: 'http://127.0.0.1:40123',
      tabUrl: 'http://127.0.0.1:40123/?autostart=1',
      ownCoordinator: { jobFile: 'jobs/local.json' },
      workers: 3,
    });
    expect(parseSwarmOptions({ url: 'http://127.0.0.1:8080' }).ownCoordinator).toBeNull();
  });

  it('refuses --job with --url (a running coordinator keeps its job), an empty --job, --dataset with --url', () => {
    expect(() => parseSwarmOptions({ job: 'a.json', url: 'http://127.0.0.1:8080' })).toThrow(
      /--job a\.json and --url http:\/\/127\.0\.0\.1:8080: the coordinator at --url already runs its own job/,
    );
    expect(() => parseSwarmOptions({ job: ' ' })).toThrow(/--job needs a file name/);
    expect(() => parseSwarmOptions({ url: 'http://127.0.0.1:8080', dataset: '/d' })).toThrow(
      /--dataset \/d: only for the coordinator the swarm starts itself/,
    );
    expect(() => parseSwarmOptions({ url: 'http://127.0.0.1:8080', dist: 'build' })).toThrow(
      /--dist build: only for the coordinator the swarm starts itself \(--job FILE\)$/,
    );
    for (const raw of [{ job: 'a.json', url: 'http://h:1' }, { job: '' }, { url: 'http://h:1', dataset: 'x' }])
      expect(() => parseSwarmOptions(raw)).toThrow(SwarmOptionsError);
  });

  it('refuses a job whose first round needs more tabs than the swarm opens', () => {
    const o = parseSwarmOptions({ job: 'a.json', workers: '2', seed: '1' });
    expect(jobProblem(o, { minWorkers: 2 })).toBeNull();
    expect(jobProblem(o, { minWorkers: 3 })).toBe(
      "the job's minWorkers is 3 but the swarm opens --workers 2: no round would start; raise --workers or lower minWorkers",
    );
  });
});

describe('fail fast before any browser starts', () => {
  let notCoordinator: Server;
  let notCoordinatorUrl: string;
  let deadUrl: string;

  beforeAll(async () => {
    notCoordinator = createServer((_req, res) =>
      res.writeHead(404, { 'content-type': 'text/plain' }).end('nothing here'),
    );
    await new Promise<void>((resolve) => notCoordinator.listen(0, '127.0.0.1', resolve));
    notCoordinatorUrl = `http://127.0.0.1:${(notCoordinator.address() as AddressInfo).port}`;
    // A port that was free a moment ago: nothing listens there.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    deadUrl = `http://127.0.0.1:${(probe.address() as AddressInfo).port}`;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
  });
  afterAll(() => new Promise<void>((resolve) => notCoordinator.close(() => resolve())));

  it('names a dead URL and the fix', async () => {
    await expect(probeCoordinator(deadUrl)).rejects.toThrow(
      new RegExp(`no coordinator at ${deadUrl} \\(connection refused\\): start one`),
    );
  });

  it('gives up on a server that never answers', async () => {
    const silent = createServer(() => undefined); // accepts, never responds
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    try {
      await expect(probeCoordinator(url, 300)).rejects.toThrow(`no coordinator at ${url} (no answer within 0.3 s)`);
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('tells a server that is not a coordinator apart', async () => {
    await expect(probeCoordinator(notCoordinatorUrl)).rejects.toThrow(
      /HTTP 404 and no JSON: not a tabswarm coordinator/,
    );
  });

  it('swarmMain prints one line and returns 1 for bad flags and for a dead URL', async () => {
    const written: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation(((chunk: string, cb?: () => void) => {
      written.push(String(chunk));
      if (typeof cb === 'function') cb();
      return true;
    }) as typeof process.stderr.write);
    try {
      expect(await swarmMain({ url: deadUrl, workers: '0' })).toBe(1);
      expect(written.join('')).toBe(
        'tabswarm swarm: --workers 0: expected an integer in 1..64 (or 0 with --headless-workers)\n',
      );
      written.length = 0;
      const started = performance.now();
      expect(await swarmMain({ url: deadUrl, seed: '1' })).toBe(1);
      expect(performance.now() - started).toBeLessThan(5000);
      expect(written.join('')).toMatch(
        /^tabswarm swarm: no coordinator at http:\/\/127\.0\.0\.1:\d+ \(connection refused\)[^\n]*\n$/,
      );
    } finally {
      spy.mockRestore();
    }
  });
});

describe('parseSwarmOptions: --headless-workers (headless workers beside the tabs)', () => {
  it('mixes tabs and headless workers: both count for the schedule, the job check and the default join cap', () => {
    const o = parseSwarmOptions({ url: 'http://127.0.0.1:8080', workers: '6', headlessWorkers: '10', seed: '1' });
    expect(o).toMatchObject({ workers: 6, headlessWorkers: 10, maxTabs: 32 });
    expect(chaosOptionsOf(o).workers).toBe(16);
    expect(jobProblem(o, { minWorkers: 16 })).toBeNull();
    expect(jobProblem(o, { minWorkers: 17 })).toMatch(/--workers 6 \+ --headless-workers 10: no round would start/);
  });

  it('runs headless workers alone (no tab, no Chromium) when --workers is left out', () => {
    const o = parseSwarmOptions({ url: 'http://127.0.0.1:8080', headlessWorkers: '64' });
    expect(o).toMatchObject({ workers: 0, headlessWorkers: 64 });
    expect(chaosOptionsOf(o).workers).toBe(64);
  });

  it('keeps today’s default of two tabs and no headless worker', () => {
    expect(parseSwarmOptions({ url: 'http://127.0.0.1:8080' })).toMatchObject({ workers: 2, headlessWorkers: 0 });
  });

  const refused: [string, RawSwarmOptions, RegExp][] = [
    ['a negative count', { headlessWorkers: '-1' }, /--headless-workers -1: expected an integer in 0\.\.128/],
    ['too many', { headlessWorkers: '129' }, /--headless-workers 129/],
    ['a fraction', { headlessWorkers: '1.5' }, /--headless-workers 1\.5/],
    [
      'no tab and no headless worker',
      { workers: '0' },
      /--workers 0: expected an integer in 1\.\.64 \(or 0 with --headless-workers\)/,
    ],
    [
      'max-tabs below both together',
      { workers: '2', headlessWorkers: '3', maxTabs: '4' },
      /--max-tabs 4: expected an integer in 5\.\./,
    ],
  ];
  for (const [name, raw, message] of refused) {
    it(`refuses ${name}`, () => {
      expect(() => parseSwarmOptions({ url: 'http://127.0.0.1:8080', ...raw })).toThrow(message);
    });
  }
});
