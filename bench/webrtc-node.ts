/**
 * `npm run bench:webrtc-node`: which Node WebRTC package a headless worker (headless/) should use, measured
 * the way 64 workers on one 2-core machine would use it. For each candidate, in one process:
 *
 * - **PeerJS**: does a PeerJS `Peer` (the mesh's signalling, web/net/peer-mesh.ts) open a raw, reliable data
 *   connection on it, against a `peer` server on loopback? A package that fails here cannot run the tab's code.
 * - **connect**: `--pairs` pairs of peer connections (default 32, i.e. 64 endpoints), four connecting at a
 *   time, the descriptions (candidates inside) exchanged in-process: time from `createOffer` to both channels
 *   open (median and max over the pairs).
 * - **memory**: resident memory (RSS) added per endpoint once all are open, after a GC.
 * - **CPU per MB**: every pair sends `--mb` MiB (default 8) in 64 KiB messages at once, paced on
 *   `bufferedAmount` as web/net/paced-sender.ts does; the process's CPU time (user + system, native threads
 *   included) over the MiB delivered, and the aggregate rate.
 *
 * Candidates: node-datachannel (its `polyfill` export: libdatachannel), @roamhq/wrtc (Google's libwebrtc)
 * and werift (pure TypeScript) where installed; a missing one is reported, not skipped silently. The order
 * alternates between `--rounds` so that the shared machine's load falls on each alike. Prints a table and
 * one JSON line `{"bench":"webrtc-node", …}`.
 *
 *   npm run bench:webrtc-node -- [--pairs 32] [--mb 8] [--rounds 2]
 */
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { PeerServer } from 'peer';
import { WebSocket } from 'ws';
import { arg } from './lib/common';
import { median } from './lib/elastic-figures';

type Rtc = {
  RTCPeerConnection: typeof RTCPeerConnection;
  RTCSessionDescription: typeof RTCSessionDescription;
  RTCIceCandidate: typeof RTCIceCandidate;
};

interface Candidate {
  name: string;
  load(): Promise<Rtc>;
  close?(): void;
}

const require = createRequire(import.meta.url);
const CANDIDATES: Candidate[] = [
  {
    name: 'node-datachannel',
    load: async () => (await import('node-datachannel/polyfill')) as unknown as Rtc,
    close: () => {
      try {
        require('node-datachannel').cleanup?.();
      } catch {
        // a cleanup that times out (libdatachannel's own guard) changes no figure
      }
    },
  },
  { name: '@roamhq/wrtc', load: async () => (await import('@roamhq/wrtc' as string)).default as Rtc },
  { name: 'werift', load: async () => (await import('werift' as string)) as Rtc },
];

const MESSAGE_BYTES = 64 * 1024;
const HIGH_WATER = 1024 * 1024;
/** A transfer that takes longer is reported as stalled, with how far it got. */
const TRANSFER_LIMIT_MS = 120_000;
/** Pairs not all open by then are reported as such. */
const CONNECT_LIMIT_MS = 120_000;
/** Pairs connecting at once. */
const CONNECT_AT_ONCE = 4;

interface Row {
  pkg: string;
  installed: boolean;
  peerjs: string;
  connectMedianMs: number | null;
  connectMaxMs: number | null;
  rssPerEndpointMiB: number | null;
  cpuMsPerMiB: number | null;
  mibPerSec: number | null;
  error?: string;
}

/** A row with no figure yet. */
const emptyRow = (pkg: string, installed: boolean): Row => ({
  pkg,
  installed,
  peerjs: '-',
  connectMedianMs: null,
  connectMaxMs: null,
  rssPerEndpointMiB: null,
  cpuMsPerMiB: null,
  mibPerSec: null,
});

/** Rejects with `why()` (read when it fires) after `ms`; does not keep the process alive. */
const rejectAfter = (ms: number, why: () => string): Promise<never> =>
  new Promise<never>((_, reject) => setTimeout(() => reject(new Error(why())), ms).unref());

/** One pair, connected in-process; resolves with both open channels and the time it took. */
async function connectPair(
  rtc: Rtc,
): Promise<{ a: RTCPeerConnection; b: RTCPeerConnection; ca: RTCDataChannel; cb: RTCDataChannel; ms: number }> {
  const t0 = performance.now();
  const a = new rtc.RTCPeerConnection({ iceServers: [] });
  const b = new rtc.RTCPeerConnection({ iceServers: [] });
  const ca = a.createDataChannel('bench', { ordered: true });
  const gotB = new Promise<RTCDataChannel>((resolve) => {
    b.ondatachannel = (e) => resolve(e.channel);
  });
  const openA = new Promise<void>((resolve) => {
    ca.onopen = () => resolve();
  });
  // Candidates travel inside the descriptions (no trickle): each side waits for its gathering to finish,
  // which on loopback with no STUN is at once, so no candidate can arrive before its description.
  await a.setLocalDescription(await a.createOffer());
  await gathered(a);
  await b.setRemoteDescription(a.localDescription!);
  await b.setLocalDescription(await b.createAnswer());
  await gathered(b);
  await a.setRemoteDescription(b.localDescription!);
  const cb = await gotB;
  if (cb.readyState !== 'open') await new Promise<void>((resolve) => (cb.onopen = () => resolve()));
  await openA;
  return { a, b, ca, cb, ms: performance.now() - t0 };
}

/** Resolves when `pc` has gathered its candidates (or after 2 s: what it has by then is used). */
function gathered(pc: RTCPeerConnection): Promise<void> {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 2000);
    pc.onicegatheringstatechange = () => {
      if (pc.iceGatheringState === 'complete') {
        clearTimeout(timer);
        resolve();
      }
    };
  });
}

/** `pairs` pairs, `CONNECT_AT_ONCE` connecting at a time (a worker dials its two ring neighbours, not 63 peers). */
async function connectPairs(rtc: Rtc, pairs: number): Promise<Awaited<ReturnType<typeof connectPair>>[]> {
  const made: Awaited<ReturnType<typeof connectPair>>[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(CONNECT_AT_ONCE, pairs) }, async () => {
      while (next < pairs) {
        next++;
        made.push(await connectPair(rtc));
      }
    }),
  );
  return made;
}

/** Send `bytes` from `from` to `to`, paced on bufferedAmount; resolves when all arrived. */
function transfer(
  from: RTCDataChannel,
  to: RTCDataChannel,
  bytes: number,
  progress: { received: number },
): Promise<void> {
  from.binaryType = 'arraybuffer';
  to.binaryType = 'arraybuffer';
  from.bufferedAmountLowThreshold = HIGH_WATER / 4;
  const message = new Uint8Array(MESSAGE_BYTES);
  return new Promise<void>((resolve) => {
    let received = 0;
    to.onmessage = (e) => {
      received += (e.data as ArrayBuffer).byteLength;
      progress.received += (e.data as ArrayBuffer).byteLength;
      if (received >= bytes) resolve();
    };
    let sent = 0;
    const pump = () => {
      while (sent < bytes && from.bufferedAmount < HIGH_WATER) {
        from.send(message);
        sent += MESSAGE_BYTES;
      }
    };
    from.onbufferedamountlow = pump;
    pump();
  });
}

/** Does PeerJS open a raw reliable connection over this package, and echo a buffer? */
async function peerjsWorks(rtc: Rtc, port: number): Promise<string> {
  Object.assign(globalThis, rtc, { WebSocket });
  const { Peer } = await import('peerjs');
  const open = (id: string) =>
    new Promise<InstanceType<typeof Peer>>((resolve, reject) => {
      const p = new Peer(id, { host: '127.0.0.1', port, path: '/peer', secure: false, config: { iceServers: [] } });
      p.once('open', () => resolve(p));
      p.once('error', reject);
    });
  const suffix = Math.random().toString(36).slice(2, 8);
  const [x, y] = await Promise.all([open(`x${suffix}`), open(`y${suffix}`)]);
  try {
    return await new Promise<string>((resolve) => {
      const timer = setTimeout(() => resolve('no: no echo within 10 s'), 10_000);
      y.on('connection', (c) => c.on('data', (d) => c.send(d)));
      const c = x.connect(`y${suffix}`, { reliable: true, serialization: 'raw', label: 'tabswarm' });
      c.on('open', () => c.send(new Uint8Array([1, 2, 3]).buffer));
      c.on('data', (d) => {
        clearTimeout(timer);
        resolve((d as ArrayBuffer).byteLength === 3 ? 'yes' : `no: echo of ${String(d)}`);
      });
      const fail = (e: { type?: string; message?: string }) => {
        clearTimeout(timer);
        resolve(`no: ${e.type ?? ''} ${e.message ?? ''}`.trim());
      };
      c.on('error', fail);
      x.on('error', fail);
    });
  } finally {
    x.destroy();
    y.destroy();
  }
}

async function measure(c: Candidate, pairs: number, mib: number, port: number): Promise<Row> {
  const row = emptyRow(c.name, false);
  let rtc: Rtc;
  try {
    rtc = await c.load();
  } catch (err) {
    return { ...row, error: `not installed (${(err as Error).message.split('\n')[0]})` };
  }
  row.installed = true;
  row.peerjs = await peerjsWorks(rtc, port).catch((err) => `no: ${(err as Error).message}`);
  global.gc?.();
  const rss0 = process.memoryUsage().rss;
  let made: Awaited<ReturnType<typeof connectPair>>[] = [];
  try {
    const connects = connectPairs(rtc, pairs);
    const late = rejectAfter(
      CONNECT_LIMIT_MS,
      () => `connect: not every pair open within ${CONNECT_LIMIT_MS / 1000} s`,
    );
    made = await Promise.race([connects, late]);
    global.gc?.();
    const rss1 = process.memoryUsage().rss;
    row.connectMedianMs = median(made.map((m) => m.ms));
    row.connectMaxMs = Math.max(...made.map((m) => m.ms));
    row.rssPerEndpointMiB = (rss1 - rss0) / (2 * pairs) / 2 ** 20;
    // The connect figures go out now: a package that stalls in the transfer still reports them.
    process.stdout.write(`${JSON.stringify({ ...row, error: 'transfer did not finish' })}\n`);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const progress = { received: 0 };
    const stalled = rejectAfter(
      TRANSFER_LIMIT_MS,
      () =>
        `transfer stalled: ${(progress.received / 2 ** 20).toFixed(0)} of ${mib * pairs} MiB in ${TRANSFER_LIMIT_MS / 1000} s`,
    );
    await Promise.race([Promise.all(made.map((m) => transfer(m.ca, m.cb, mib * 2 ** 20, progress))), stalled]);
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const total = mib * pairs;
    row.cpuMsPerMiB = (cpu.user + cpu.system) / 1000 / total;
    row.mibPerSec = total / seconds;
  } catch (err) {
    row.error = (err as Error).message;
  } finally {
    for (const m of made) {
      m.a.close();
      m.b.close();
    }
  }
  return row;
}

function fmt(x: number | null, digits = 1): string {
  return x === null ? '-' : x.toFixed(digits);
}

/** One candidate in this process (`--one NAME`): two native WebRTC stacks in one process can crash it. */
async function child(name: string, pairs: number, mib: number): Promise<void> {
  const port = 9000 + Math.floor(Math.random() * 900);
  const server = PeerServer({ port, host: '127.0.0.1', path: '/peer' });
  await new Promise((r) => setTimeout(r, 200));
  const c = CANDIDATES.find((x) => x.name === name)!;
  const row = await measure(c, pairs, mib, port);
  process.stdout.write(`${JSON.stringify(row)}\n`);
  c.close?.();
  server.emit('close');
  process.exit(0);
}

function runChild(c: Candidate, pairs: number, mib: number): Row {
  const out = spawnSync(
    process.execPath,
    [
      ...process.execArgv,
      '--expose-gc',
      process.argv[1]!,
      '--one',
      c.name,
      '--pairs',
      String(pairs),
      '--mb',
      String(mib),
    ],
    {
      encoding: 'utf8',
      timeout: 300_000,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const line = out.stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as Row;
  } catch {
    return { ...emptyRow(c.name, true), error: `the process ended with ${out.status ?? out.signal} before a result` };
  }
}

async function main(): Promise<void> {
  const pairs = Number(arg('pairs', '32'));
  const mib = Number(arg('mb', '8'));
  const rounds = Number(arg('rounds', '2'));
  const one = arg('one', '');
  if (one) return child(one, pairs, mib);
  const rows: Row[] = [];
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? CANDIDATES : [...CANDIDATES].reverse();
    for (const c of order) {
      const row = runChild(c, pairs, mib);
      process.stderr.write(`round ${round + 1}: ${JSON.stringify(row)}\n`);
      rows.push(row);
    }
  }
  console.log(
    `\nNode WebRTC packages: ${pairs} pairs (${2 * pairs} endpoints) in one process, ${mib} MiB per pair; load ${loadavg()[0]!.toFixed(2)}`,
  );
  console.log(
    '| package | PeerJS raw connection | connect median / max (ms) | RSS per endpoint (MiB) | CPU ms per MiB | aggregate MiB/s |',
  );
  console.log('|---|---|---|---|---|---|');
  for (const r of rows)
    console.log(
      `| ${r.pkg} | ${r.installed ? r.peerjs : r.error} | ${fmt(r.connectMedianMs, 0)} / ${fmt(r.connectMaxMs, 0)} | ${fmt(r.rssPerEndpointMiB, 2)} | ${fmt(r.cpuMsPerMiB, 2)} | ${fmt(r.mibPerSec, 0)} |${r.installed && r.error ? ` error: ${r.error}` : ''}`,
    );
  console.log(JSON.stringify({ bench: 'webrtc-node', pairs, mib, rounds, load: loadavg()[0], rows }));
}

await main();
