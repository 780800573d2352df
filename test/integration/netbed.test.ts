/**
 * The network test bed itself (root only; skipped without root locally, a failure under CI): an
 * access link adds its configured delay, the endpoint-independent NAT keeps one public port for two
 * destinations while the symmetric NAT uses a new one per destination, homes cannot reach each other's
 * private addresses, and closing removes every namespace. About 5 s.
 */
import { execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COORDINATOR_IP, Netbed, netbedUnavailable, TURN_IP } from '../../tools/netbed/netbed';
import { skipWithout } from '../support/browser';

const skip = skipWithout('root, ip, nft, tc, python3 (the network test bed)', netbedUnavailable() === null);

/** A UDP server in the public segment that answers each datagram with "<address>:<port> it came from". */
const ECHO = `const d=require('dgram').createSocket('udp4');d.on('message',(m,r)=>d.send(r.address+':'+r.port,r.port,r.address));d.bind(7000,process.argv[1],()=>console.log('ready'))`;
/** From one local port: `count` round trips to each of the given hosts; prints JSON [{host, rtts, seenAs}]. */
const PROBE = `const d=require('dgram').createSocket('udp4');const hosts=process.argv.slice(1);const out=[];let h=0,t=0,cur;
d.bind(5555,()=>{const go=()=>{if(h>=hosts.length){console.log(JSON.stringify(out));process.exit(0)}cur??={host:hosts[h],rtts:[],seenAs:''};t=performance.now();d.send('x',7000,hosts[h])};
d.on('message',(m)=>{cur.rtts.push(performance.now()-t);cur.seenAs=String(m);if(cur.rtts.length>=4){out.push(cur);cur=undefined;h++}go()});go();setTimeout(()=>{console.log(JSON.stringify(out));process.exit(1)},8000)})`;

/** How many of the machine's network namespaces carry `prefix` (a bed's names all start with its prefix). */
const namespacesOf = (prefix: string) => execFileSync('ip', ['netns', 'list']).toString().split(prefix).length - 1;

/** What the upper RTT bounds allow beyond 2 × (delay + jitter): scheduling delays of a loaded machine. */
const LOADED_MACHINE_MS = 100;

describe.skipIf(skip)('network test bed', () => {
  let bed: Netbed;
  beforeAll(async () => {
    bed = await Netbed.create([
      { nat: 'endpoint-independent', link: { delayMs: 30, jitterMs: 0, rateMbit: 20, lossPercent: 0 } },
      { nat: 'symmetric', link: { delayMs: 10, jitterMs: 5, rateMbit: 20, lossPercent: 0 } },
    ]);
    for (const ip of [COORDINATOR_IP, TURN_IP]) {
      const echo = bed.spawn(bed.publicNs, process.execPath, ['-e', ECHO, ip]);
      await new Promise<void>((resolve) => createInterface({ input: echo.stdout! }).once('line', () => resolve()));
    }
  });
  afterAll(async () => {
    await bed?.close();
  });

  const probe = (home: number) =>
    JSON.parse(bed.run(bed.homes[home].ns, process.execPath, ['-e', PROBE, COORDINATOR_IP, TURN_IP])) as {
      host: string;
      rtts: number[];
      seenAs: string;
    }[];

  it('delays each direction of an access link by its profile (RTT ≥ 2 × (delay − jitter); the upper bound leaves room for a loaded machine)', () => {
    const [a] = probe(0);
    expect(a.rtts).toHaveLength(4); // the first round trip (ARP, NAT set-up) is left out below
    for (const rtt of a.rtts.slice(1)) {
      expect(rtt).toBeGreaterThanOrEqual(60); // 2 × 30
      expect(rtt).toBeLessThan(2 * 30 + LOADED_MACHINE_MS); // 160
    }
    const [b] = probe(1);
    expect(b.rtts).toHaveLength(4);
    for (const rtt of b.rtts.slice(1)) {
      expect(rtt).toBeGreaterThanOrEqual(10); // 2 × (10 - 5)
      expect(rtt).toBeLessThan(2 * (10 + 5) + LOADED_MACHINE_MS); // 130
    }
  });

  it('endpoint-independent NAT: one public port for both destinations; symmetric: a new one per destination', () => {
    const eim = probe(0);
    expect(eim, JSON.stringify(eim)).toHaveLength(2);
    expect(eim.map((r) => r.seenAs.split(':')[0])).toEqual([bed.homes[0].wanIp, bed.homes[0].wanIp]);
    expect(eim[0].seenAs).toBe(eim[1].seenAs);
    const sym = probe(1);
    expect(sym.map((r) => r.seenAs.split(':')[0])).toEqual([bed.homes[1].wanIp, bed.homes[1].wanIp]);
    expect(sym[0].seenAs).not.toBe(sym[1].seenAs);
  });

  it('a home cannot reach another home, and no namespace has a default route', () => {
    const tryConnect = `require('net').connect(80,process.argv[1]).on('error',e=>{console.log(e.code);process.exit(0)}).on('connect',()=>{console.log('connected');process.exit(0)})`;
    expect(bed.run(bed.homes[0].ns, process.execPath, ['-e', tryConnect, bed.homes[1].ip]).trim()).toBe('ENETUNREACH');
    for (const ns of [bed.publicNs, ...bed.homes.flatMap((h) => [h.ns, h.router])])
      expect(bed.run(ns, 'ip', ['route', 'show', 'default']).trim()).toBe('');
  });

  it('close removes every namespace it made', async () => {
    const prefix = bed.prefix;
    await bed.close();
    expect(namespacesOf(prefix)).toBe(0);
  });
});

describe.skipIf(skip)('network test bed interrupted', () => {
  // Ctrl-C signals the whole process group, so a bench under tsx or npm gets SIGINT twice (from the
  // terminal and forwarded by its parent). The teardown used to leave a namespace behind in 3 of 4 such
  // interrupts: the second signal killed the process in the middle of it. Without the fix in
  // tools/netbed/netbed.ts (`hookExit`) both cases below failed in 3 runs of 3; with it they passed 3 of 3.
  it.each(['SIGINT', 'SIGTERM'] as const)(
    'a process signalled twice with %s removes every namespace it made',
    async (signal) => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', join(import.meta.dirname, '../support/netbed-child.ts')],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
        child.once('exit', (code, sig) => resolve(sig ?? code)),
      );
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`the child exited (${code}) before its bed was ready`)));
      });
      const prefix = line.split(' ')[1];
      const before = namespacesOf(prefix);
      expect(before).toBeGreaterThan(0);
      // The second signal lands while the teardown runs, as a forwarded one does: once the first of the
      // bed's namespaces is gone (each `ip netns list` is a process of a few ms; bounded to 2,000 looks).
      child.kill(signal);
      for (let i = 0; i < 2000 && namespacesOf(prefix) === before; i++);
      child.kill(signal);
      expect(await exited).toBe(signal);
      expect(namespacesOf(prefix)).toBe(0);
    },
    30_000,
  );
});
