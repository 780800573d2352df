/**
 * bench:net's `diagnose` part (issue 24): why one data channel carries a small fraction of a lossy link.
 * On one scene of two homes with the given access-link profile it measures, over the very path a ring
 * hop takes (home 0 → NAT router 0 → public segment → NAT router 1 → home 1; the bench forwards a TCP
 * and a UDP port on router 1 to home 1 for the reference flows):
 * - the path's loss, with a UDP echo (small packets, far below the rate);
 * - TCP goodput with Reno, CUBIC and BBR (set per socket: TCP_CONGESTION), against
 *   the Mathis bound MSS/RTT·1.22/√p of a Reno-like sender;
 * - the delay line's CPU share (tun-link.py) during the fastest of those flows;
 * - raw WebRTC data channels (test/browser/pages/rtc-probe.ts, no code of ours in the path): one
 *   channel as the collectives use it today, larger messages, a larger send buffer, several channels in
 *   one peer connection, an unordered channel (reliable, and not), and several peer connections.
 * Goodput is the receiver's bytes over a steady window (the first `warmS` seconds of each flow left out).
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Page } from 'playwright-core';
import type { LinkProfile } from '../../tools/netbed/netbed';
import { COORDINATOR_IP } from '../../tools/netbed/netbed';
import type { Scene } from '../../tools/netbed/scene';
import type { NetHarness } from '../../test/browser/pages/net-harness';
import type { ProbeChannelConfig } from '../../test/browser/pages/rtc-probe';
import { nowMs } from './common';

declare const netHarness: NetHarness;

const TCP_PORT = 9000;
const UDP_PORT = 9001;

export interface DiagnoseRow {
  what: string;
  mbit: number;
  ofRate: number;
  note: string;
}

export interface DiagnoseOptions {
  link: LinkProfile;
  seconds: number;
  warmS: number;
  /** Run only the data-channel variants whose description contains one of these (and no TCP flows); [] = all. */
  only: string[];
}

/** Router 1 forwards TCP_PORT and UDP_PORT of its public address to home 1, after the loss rule. */
function forwardToHome1(scene: Scene): string {
  const bed = scene.bed;
  const home = bed.homes[1];
  const wan = `${bed.prefix}w1`;
  const lan = `${bed.prefix}l1`;
  bed.run(
    home.router,
    'nft',
    ['-f', '-'],
    [
      'table ip probe {',
      '  chain pre { type nat hook prerouting priority dstnat; policy accept;',
      `    iifname "${wan}" tcp dport ${TCP_PORT} dnat to ${home.ip}`,
      `    iifname "${wan}" udp dport ${UDP_PORT} dnat to ${home.ip}`,
      '  }',
      '}',
      // Appended: after the loss rule the forward chain starts with, so these flows lose packets too.
      `add rule ip netbed forwarding iifname "${wan}" oifname "${lan}" ip daddr ${home.ip} tcp dport ${TCP_PORT} accept`,
      `add rule ip netbed forwarding iifname "${wan}" oifname "${lan}" ip daddr ${home.ip} udp dport ${UDP_PORT} accept`,
    ].join('\n'),
  );
  return home.wanIp;
}

const UDP_ECHO = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], ${UDP_PORT}))
print('ready', flush=True)
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
`;

const UDP_CLIENT = `
import json, socket, sys, time
host, count = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
got = set()
def drain():
    while True:
        try:
            d = s.recv(2048)
        except BlockingIOError:
            return
        got.add(int.from_bytes(d[:4], 'big'))
for i in range(count):
    s.sendto(i.to_bytes(4, 'big') + bytes(96), (host, ${UDP_PORT}))
    drain()
    time.sleep(0.004)
end = time.time() + 2
while time.time() < end:
    drain()
    time.sleep(0.01)
print(json.dumps({'sent': count, 'echoed': len(got)}))
`;

/** Round-trip loss of `count` small UDP echoes from home 0 to `host`; the per-direction loss it implies. */
async function udpLoss(scene: Scene, echoNs: string, bindIp: string, host: string, count: number): Promise<number> {
  const echo = scene.bed.spawn(echoNs, 'python3', ['-c', UDP_ECHO, bindIp]);
  await createInterface({ input: echo.stdout! })[Symbol.asyncIterator]().next();
  const out = scene.bed.run(scene.bed.homes[0].ns, 'python3', ['-c', UDP_CLIENT, host, String(count)]);
  echo.kill();
  const { sent, echoed } = JSON.parse(out) as { sent: number; echoed: number };
  return 1 - Math.sqrt(echoed / sent);
}

/** Counts the bytes of the window [warm, total) ms after the first byte, then prints and drops the connection. */
const TCP_SINK = `
let first = 0, counted = 0;
const host = process.argv[1], warm = Number(process.argv[2]), total = Number(process.argv[3]);
require('net').createServer((c) => c.on('data', (d) => {
  const t = performance.now();
  if (!first) first = t;
  if (t - first >= warm) counted += d.length;
  if (t - first >= total) {
    console.log(JSON.stringify({ counted, ms: t - first - warm }));
    process.exit(0);
  }
}).on('error', () => {})).listen(${TCP_PORT}, host, () => console.log('ready'));
`;

/** Python, for its per-socket TCP_CONGESTION (root may pick any built-in algorithm, whatever the namespace allows). */
const TCP_SOURCE = `
import socket, sys, time
host, ms, cc = sys.argv[1], float(sys.argv[2]), sys.argv[3]
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
s.settimeout(5)
s.connect((host, ${TCP_PORT}))
b = bytes(65536)
end = time.monotonic() + ms / 1000 + 10
try:
    while time.monotonic() < end:
        s.send(b)
except OSError:
    pass  # the sink closed after its window
`;

/** CPU seconds a process has used (utime + stime). */
function cpuSeconds(pid: number | undefined): number {
  if (!pid) return Number.NaN;
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** TCP goodput home 0 → home 1 (through router 1's forwarded port) with congestion control `cc`. */
async function tcpGoodput(scene: Scene, target: string, cc: string, o: DiagnoseOptions): Promise<number> {
  const bed = scene.bed;
  const window = [String(o.warmS * 1000), String(o.seconds * 1000)];
  const sink = bed.spawn(bed.homes[1].ns, process.execPath, ['-e', TCP_SINK, bed.homes[1].ip, ...window]);
  const lines = createInterface({ input: sink.stdout! })[Symbol.asyncIterator]();
  await lines.next();
  bed.run(bed.homes[0].ns, 'python3', ['-c', TCP_SOURCE, target, String(o.seconds * 1000), cc]);
  const { counted, ms } = JSON.parse(String((await lines.next()).value)) as { counted: number; ms: number };
  return (counted * 8) / (ms / 1000) / 1e6;
}

/** One raw WebRTC flow page 0 → page 1 with fresh connections; goodput over the steady window, Mbit/s. */
async function rtcGoodput(
  scene: Scene,
  pages: [Page, Page],
  config: ProbeChannelConfig,
  send: { messageBytes: number; highWater: number; lowWater: number },
  o: DiagnoseOptions,
): Promise<{ mbit: number; rttMs: number | null }> {
  const [a, b] = pages;
  const offers = await a.evaluate((c) => netHarness.probe.offer(c), { ...config, rtcConfig: scene.iceConfig('pa') });
  const answers = await b.evaluate(([c, offered]) => netHarness.probe.answer(c, offered), [
    { ...config, rtcConfig: scene.iceConfig('pb') },
    offers,
  ] as const);
  await Promise.all([
    a.evaluate((an) => netHarness.probe.connect(an), answers),
    b.evaluate(() => netHarness.probe.whenOpen()),
  ]);
  const startAt = nowMs() + 300;
  const ms = o.seconds * 1000;
  await a.evaluate((p) => netHarness.probe.send(p), { ...send, ms, startAt });
  await new Promise((r) => setTimeout(r, 500));
  const buckets = await b.evaluate(() => netHarness.probe.received());
  const stats = await a.evaluate(() => netHarness.probe.stats());
  await Promise.all(pages.map((p) => p.evaluate(() => netHarness.probe.close())));
  const from = startAt + o.warmS * 1000;
  const to = startAt + ms;
  const bytes = buckets.filter(([t]) => t >= from && t < to).reduce((sum, [, n]) => sum + n, 0);
  return {
    mbit: (bytes * 8) / ((to - from) / 1000) / 1e6,
    rttMs: stats.rttMs,
  };
}

const round2 = (x: number) => Math.round(x * 100) / 100;

/** The diagnosis rows for one scene of two homes on `o.link` (page 0 in home 0, page 1 in home 1, both the harness). */
export async function diagnose(scene: Scene, pages: [Page, Page], o: DiagnoseOptions): Promise<DiagnoseRow[]> {
  const rate = o.link.rateMbit;
  const rows: DiagnoseRow[] = [];
  const add = (what: string, mbit: number, note = '') => {
    rows.push({ what, mbit: round2(mbit), ofRate: round2(mbit / rate), note });
    process.stderr.write(`  diagnose: ${what}: ${mbit.toFixed(2)} Mbit/s ${note}\n`);
  };
  const target = forwardToHome1(scene);
  const oneLink = await udpLoss(scene, scene.bed.publicNs, COORDINATOR_IP, COORDINATOR_IP, 2500);
  const path = await udpLoss(scene, scene.bed.homes[1].ns, scene.bed.homes[1].ip, target, 2500);
  const rttS = (4 * o.link.delayMs) / 1000;
  const mathis = (mss: number) => ((mss * 8) / rttS) * (1.22 / Math.sqrt(path)) * 1e-6;
  add('UDP loss, one access link (per direction)', 0, `${(oneLink * 100).toFixed(2)} %`);
  add('UDP loss, ring-hop path home 0 → home 1 (per direction)', 0, `${(path * 100).toFixed(2)} %`);
  if (path > 0) {
    add('Mathis bound, MSS 1448 (TCP)', mathis(1448), `RTT ${rttS * 1000} ms, p ${(path * 100).toFixed(2)} %`);
    add('Mathis bound, 1160 B (SCTP DATA in a 1191 B packet)', mathis(1160));
  }
  for (const cc of o.only.length > 0 ? [] : ['reno', 'cubic', 'bbr']) {
    const cpu0 = cpuSeconds(scene.bed.delayLinePid);
    const t0 = performance.now();
    const mbit = await tcpGoodput(scene, target, cc, o);
    const share = (cpuSeconds(scene.bed.delayLinePid) - cpu0) / ((performance.now() - t0) / 1000);
    add(`TCP ${cc}, home 0 → home 1`, mbit, `delay line CPU ${(share * 100).toFixed(0)} % of a core`);
  }
  const today = { messageBytes: 16_300, highWater: 256 * 1024, lowWater: 64 * 1024 };
  const variants: Array<[string, ProbeChannelConfig, typeof today]> = [
    ['data channel: 1 pc × 1 channel, 16,300 B messages, high water 256 KiB (today)', { pcs: 1, channels: 1 }, today],
    ['data channel: 1 × 1, 65,536 B messages', { pcs: 1, channels: 1 }, { ...today, messageBytes: 65_536 }],
    [
      'data channel: 1 × 1, high water 2 MiB / low 512 KiB',
      { pcs: 1, channels: 1 },
      { ...today, highWater: 2 * 1024 * 1024, lowWater: 512 * 1024 },
    ],
    ['data channel: 1 pc × 4 channels', { pcs: 1, channels: 4 }, today],
    ['data channel: 1 × 1 unordered, reliable', { pcs: 1, channels: 1, ordered: false }, today],
    [
      'data channel: 1 × 1 unordered, maxRetransmits 0',
      { pcs: 1, channels: 1, ordered: false, maxRetransmits: 0 },
      today,
    ],
    ['data channel: 4 pcs × 1 channel', { pcs: 4, channels: 1 }, today],
    ['data channel: 8 pcs × 1 channel', { pcs: 8, channels: 1 }, today],
    ['data channel: 16 pcs × 1 channel', { pcs: 16, channels: 1 }, today],
  ];
  for (const [what, config, send] of variants) {
    if (o.only.length > 0 && !o.only.some((part) => what.includes(part))) continue;
    const r = await rtcGoodput(scene, pages, config, send, o);
    add(what, r.mbit, `RTT ${r.rttMs?.toFixed(0) ?? '–'} ms (getStats)`);
  }
  return rows;
}

export function printDiagnoseRows(label: string, rows: readonly DiagnoseRow[]): void {
  process.stdout.write(`\ndiagnosis, ${label}\nwhat${' '.repeat(76)}Mbit/s  of rate  note\n`);
  for (const r of rows)
    process.stdout.write(
      `${r.what.padEnd(80)}${r.mbit.toFixed(2).padStart(6)}  ${r.ofRate.toFixed(2).padStart(7)}  ${r.note}\n`,
    );
}
