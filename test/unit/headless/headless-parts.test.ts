/**
 * The headless worker's pure parts: the outer-step time split measured on the trainer port (against a
 * scripted clock), the trainer port's idle tracking, names and peer ids, the `--url` parsing, and the file
 * dataset cache (round trip, the `ignoreSearch` delete the download relies on), and the WebRTC globals
 * (errors as events; round-trip times in seconds, as the link stats read them).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { parseWorkerUrl, WorkerFlagError } from '../../../headless/cli';
import { FileDatasetCache } from '../../../headless/dataset-cache';
import { workerNames } from '../../../headless/fleet';
import { idleTracked, peerIdFor } from '../../../headless/headless-worker';
import {
  BrowserLikeWebSocket,
  installNodeGlobals,
  rttInSeconds,
  BrowserLikePeerConnection,
} from '../../../headless/node-globals';
import { type OuterStepTiming, timedTrainer } from '../../../headless/step-timing';
import type { TrainerPort } from '../../../web/elastic/ports';

/** A trainer whose every call takes `costs[name]` ms of the scripted clock. */
function scriptedTrainer(clock: { t: number }, costs: Record<string, number>): TrainerPort {
  const call = (name: string) => async () => {
    clock.t += costs[name] ?? 0;
    return name === 'pseudoGradient' ? new ArrayBuffer(4) : name === 'applyOuter' ? 'hash' : {};
  };
  const names = [
    'buildModel',
    'computeGradients',
    'applyAndHash',
    'saveBackup',
    'restoreBackup',
    'snapshot',
    'restore',
    'pseudoGradient',
    'applyOuter',
    'evaluate',
  ];
  return Object.fromEntries(names.map((n) => [n, call(n)])) as unknown as TrainerPort;
}

describe('timedTrainer: the outer step split into compute, sync and waiting', () => {
  it('counts trainer calls as compute, pseudo-gradient to outer step as sync, the rest as waiting', async () => {
    const clock = { t: 1000 };
    const seen: OuterStepTiming[] = [];
    const port = timedTrainer(
      scriptedTrainer(clock, { applyAndHash: 30, pseudoGradient: 5, applyOuter: 2 }),
      (t) => seen.push(t),
      () => clock.t,
    );
    for (let i = 0; i < 4; i++) {
      await port.applyAndHash(null, 8, null);
      clock.t += 10; // the loop waits (a commit, a step report)
    }
    await port.pseudoGradient(0.5);
    clock.t += 70; // the allreduce over the ring
    await port.applyOuter(new ArrayBuffer(4));
    expect(seen).toEqual([
      { wallMs: 4 * 30 + 4 * 10 + 5 + 70 + 2, computeMs: 127, syncMs: 70, waitingMs: 40, innerSteps: 4 },
    ]);
  });

  it('drops an outer step that a restore cut short and times the next from the restore on', async () => {
    const clock = { t: 0 };
    const seen: OuterStepTiming[] = [];
    const port = timedTrainer(
      scriptedTrainer(clock, { applyAndHash: 10, restoreBackup: 1 }),
      (t) => seen.push(t),
      () => clock.t,
    );
    await port.applyAndHash(null, 8, null);
    clock.t += 500; // a round closes
    await port.restoreBackup();
    await port.applyAndHash(null, 8, null);
    await port.pseudoGradient(1);
    await port.applyOuter(new ArrayBuffer(4));
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ wallMs: 11, computeMs: 11, syncMs: 0, innerSteps: 1 });
  });
});

describe('idleTracked: the thread ends only between trainer calls', () => {
  it('resolves idle at once with nothing in flight, and after the call in flight otherwise', async () => {
    let release!: () => void;
    const slow = { saveBackup: () => new Promise<void>((r) => (release = r)) } as unknown as TrainerPort;
    const tracked = idleTracked(slow);
    await tracked.idle(1000);
    const call = tracked.port.saveBackup();
    let idle = false;
    const waiting = tracked.idle(60_000).then(() => (idle = true));
    await Promise.resolve();
    expect(idle).toBe(false);
    release();
    await call;
    await waiting;
    expect(idle).toBe(true);
  });
});

describe('names, peer ids and --url', () => {
  it('names one worker by its name and several by name-1 … name-K', () => {
    expect(workerNames('gpu', 1)).toEqual(['gpu']);
    expect(workerNames('gpu', 3)).toEqual(['gpu-1', 'gpu-2', 'gpu-3']);
  });

  it('makes a peer id the protocol accepts from any name, prefixed by it', () => {
    expect(peerIdFor('gpu-1', '0123456789abcdef0123456789abcdef')).toBe('gpu-1-0123456789abcdef0123');
    expect(peerIdFor('a b/c', 'ffff')).toMatch(/^a-b-c-ffff$/);
  });

  it('takes the origin and the invite from the URL a volunteer opens, and refuses what is not http(s)', () => {
    expect(parseWorkerUrl('https://train.example.org/?invite=abc')).toEqual({
      origin: new URL('https://train.example.org'),
      invite: 'abc',
    });
    expect(parseWorkerUrl('http://127.0.0.1:8080/admin/').invite).toBeNull();
    expect(() => parseWorkerUrl('ftp://x')).toThrow(WorkerFlagError);
    expect(() => parseWorkerUrl('not a url')).toThrow(/--url not a url: not a URL/);
  });
});

describe('FileDatasetCache', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tabswarm-cache-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('gives back what was put under a key, misses other keys, and drops every version of a URL on ignoreSearch', async () => {
    const cache = new FileDatasetCache(join(dir, 'datasets'));
    const url = 'http://h:1/api/dataset/train-images';
    await cache.put(`${url}?sha256=aa`, new Response(new Uint8Array([1, 2, 3])));
    await cache.put(`${url}?sha256=bb`, new Response(new Uint8Array([4])));
    expect(new Uint8Array(await (await cache.match(`${url}?sha256=aa`))!.arrayBuffer())).toEqual(
      new Uint8Array([1, 2, 3]),
    );
    expect(await cache.match(`${url}?sha256=cc`)).toBeUndefined();
    await cache.delete(url, { ignoreSearch: true });
    expect(await cache.match(`${url}?sha256=aa`)).toBeUndefined();
    expect(await cache.match(`${url}?sha256=bb`)).toBeUndefined();
  });
});

describe('BrowserLikeWebSocket: errors are events, as in a browser', () => {
  it('reports a refused connection as a close (1006) with no error handler set, instead of throwing', async () => {
    const { createServer } = await import('node:net');
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as { port: number };
    await new Promise<void>((r) => server.close(() => r()));
    const ws = new BrowserLikeWebSocket(`ws://127.0.0.1:${port}/`);
    const code = await new Promise<number>((resolve) => {
      ws.onclose = (e) => resolve(e.code);
    });
    expect(code).toBe(1006);
  });
});

describe('BrowserLikePeerConnection: the candidate pair’s RTT in seconds, as WebRTC’s stats say it', () => {
  it('converts the polyfill’s milliseconds and leaves out its −1 (unknown)', () => {
    const report = new Map<string, unknown>([
      ['p', { type: 'candidate-pair', currentRoundTripTime: 32, totalRoundTripTime: 32 }],
      ['q', { type: 'candidate-pair', currentRoundTripTime: -1 }],
      ['c', { type: 'local-candidate', currentRoundTripTime: 5 }],
    ]);
    rttInSeconds(report);
    expect(report.get('p')).toEqual({ type: 'candidate-pair', currentRoundTripTime: 0.032, totalRoundTripTime: 0.032 });
    expect(report.get('q')).toEqual({ type: 'candidate-pair' });
    expect(report.get('c')).toEqual({ type: 'local-candidate', currentRoundTripTime: 5 });
  });

  it('reports a listener that throws and goes on, as a browser does, instead of ending the process', async () => {
    const pc = new BrowserLikePeerConnection();
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    // Vitest's own handler would fail the run; this test wants to see whether one is raised at all.
    const vitestHandlers = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    process.on('uncaughtException', onUncaught);
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    try {
      const seen: string[] = [];
      // What PeerJS's negotiator does when the connection it looks up is gone.
      pc.ondatachannel = () => {
        throw new TypeError("Cannot read properties of undefined (reading '_initializeDataChannel')");
      };
      const after = () => seen.push('next listener');
      pc.addEventListener('datachannel', after);
      pc.dispatchEvent(new Event('datachannel'));
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(uncaught).toEqual([]);
      expect(seen).toEqual(['next listener']);
      expect(String(warn.mock.calls[0]?.[0])).toMatch(/datachannel listener threw .*_initializeDataChannel/);
      pc.removeEventListener('datachannel', after);
      pc.ondatachannel = null;
      pc.dispatchEvent(new Event('datachannel'));
      expect(seen).toEqual(['next listener']);
    } finally {
      warn.mockRestore();
      process.off('uncaughtException', onUncaught);
      for (const h of vitestHandlers) process.on('uncaughtException', h as (err: Error) => void);
      pc.close();
    }
  });

  it('is the RTCPeerConnection the globals give PeerJS', () => {
    // A loopback link cannot show the bug here: its SCTP round trip rounds to 0 ms, the same in either unit.
    installNodeGlobals();
    expect(globalThis.RTCPeerConnection).toBe(BrowserLikePeerConnection);
  });
});
