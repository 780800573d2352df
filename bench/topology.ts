/**
 * `npm run bench:topology` (tsx bench/topology.ts): the grouped allreduce (web/net/group-allreduce.ts)
 * against the plain ring, sync latency and bus bandwidth against the world size, with the exponent of a
 * power law fitted to each. One table per part, and one JSON line `{"bench":"topology", …}`. Joins at
 * scale are measured by `npm run bench:joins` (bench/joins.ts).
 *
 * Parts (`--parts memory`; the only part built so far):
 * - `memory`: N ranks in one process on in-memory links shaped like the test bed's access links (each
 *   rank's own uplink and downlink at the profile's rate, shared by its links; a message crosses two
 *   access links' delay), in virtual time (bench/lib/virtual-clock.ts): the link model's time for each
 *   algorithm, the CPU of N ranks in one thread left out. Profiles: `loopback`, `broadband` (20 ms and
 *   50 Mbit/s per access link, as bench:net), `poor` (80 ms, 10 Mbit/s, no loss), `rate` (broadband's
 *   rate, LAN delay: run it with a large `--n` to see the bandwidth term alone).
 * Not built yet: the same comparison with real WebRTC links (tabs or headless workers).
 *
 * Goals (issue 23): latency exponent ≤ 0.5; at N = 64 on broadband the grouped sync ≤ 1/4 of the ring's;
 * bandwidth within 1.5× of the ring's.
 *
 * Options: --parts memory  --profiles broadband,loopback  --worlds 8,16,32,64,128  --n 25450 (floats;
 *          tiny-mlp's parameters)  --repeat 1 (virtual time is deterministic)
 */
import { arg } from './lib/common';
import { summarize, type SyncPoint } from './lib/topology-figures';
import { memoryPoints } from './lib/topology-memory';

const parts = arg('parts', 'memory').split(',');
const profiles = arg('profiles', 'broadband,loopback').split(',');
const worlds = arg('worlds', '8,16,32,64,128').split(',').map(Number);
const n = Number(arg('n', '25450'));
const repeat = Number(arg('repeat', '1'));

function table(points: SyncPoint[]): string {
  const rows = ['| profile | N | topology | groups | sync ms | bus MB/s |', '| --- | --- | --- | --- | --- | --- |'];
  for (const p of points)
    rows.push(
      `| ${p.profile} | ${p.world} | ${p.topology} | ${p.groups.join('+')} | ${p.ms.toFixed(0)} | ${p.busMBps.toFixed(2)} |`,
    );
  return rows.join('\n');
}

async function main(): Promise<void> {
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const result: Record<string, unknown> = { bench: 'topology', n, at: new Date().toISOString() };
  if (parts.includes('memory')) {
    const points = await memoryPoints({ profiles, worlds, n, repeat, log });
    const { exponents, ratios } = summarize(points);
    process.stdout.write(`\n### memory links, virtual time, ${n} floats\n\n${table(points)}\n\n`);
    for (const e of exponents)
      process.stdout.write(`${e.profile} ${e.topology}: time ∝ N^${e.exponent.toFixed(2)} (r² ${e.r2.toFixed(2)})\n`);
    for (const r of ratios)
      process.stdout.write(`${r.profile} N=${r.world}: groups / ring = ${r.groupsOverRing.toFixed(3)}\n`);
    result.memory = { points, exponents, ratios };
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});
