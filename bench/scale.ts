/**
 * `npm run bench:scale`: how training holds up as the swarm grows, with headless workers (headless/: the
 * tab's code in Node, one process each) because real tabs stop near 11 on this 2-core machine (each a
 * Chromium renderer) and a headless worker costs a fraction of one (docs/headless.md). For each N (default
 * 4, 8, 16, 32, 64) a fresh coordinator runs tiny-mlp on Fashion-MNIST, global batch 512, local sync
 * H = 8, int8 wire, on loopback; each N is measured quiet and with churn (bench/lib/scale-run.ts says how).
 *
 *   npm run bench:scale -- [--n 4,8,16,32,64] [--window 60] [--rate 0.2] [--per-process 8] [--warmup 600] [--out bench] [--events DIR]
 *   npm run bench:scale -- --netbed broadband [--n 4,8,16] [--window 60] [--rate 0.2] [--warmup 600] [--seed 1]   (root)
 *   … [--topology ring|auto|groups] [--churn no|yes|both]
 *
 * `--rate` is failures per worker-minute (0.2: a mean lifetime of 5 minutes), each a crash or a leave plus a
 * join. `--events DIR` keeps each scenario's admin-feed events, commits and faults (scale-events-N-quiet|churn.json).
 * Prints the table and one JSON line `{"bench":"scale", …}`, and writes the plot (scale.svg and
 * scale.png) into `--out`. Each scenario's result is also one JSON line on stderr as it finishes;
 * `--replay FILE[,FILE…]` renders the table, JSON line and plot from such lines instead of running (runs
 * of single N put together, or a run cut short).
 *
 * `--netbed PROFILE` (root) runs each scenario on the network test bed instead: one headless worker per NATed
 * home, every access link shaped to the profile (bench/lib/sync-configs.ts; `broadband` is 20 ms each way,
 * 20 Mbit/s), through `tabswarm swarm --netbed`'s driver (bench/lib/scale-netbed.ts says what it measures
 * and what it leaves out). Its plot is `scale-PROFILE.svg`/`.png`.
 *
 * `--topology ring|auto|groups` runs the job with that topology (`groups`: grouped whenever a round has 4
 * members or more, whatever the RTTs say) and `verify: false` (a verifying job keeps the
 * plain ring: bench/lib/scale-run.ts `JOB`), for issue 23's ring-against-groups comparison; `--churn no`
 * runs the quiet scenarios only.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { arg } from './lib/common';
import { exitUnlessReady } from './lib/common';
import { lostRatio, networkOf, scaleSvg, scaleTable } from './lib/scale-report';
import { runNetbedScaleScenario } from './lib/scale-netbed';
import { runScaleScenario, type ScaleResult, type ScaleTopology } from './lib/scale-run';

const ns = arg('n', '4,8,16,32,64')
  .split(',')
  .map(Number)
  .filter((n) => Number.isInteger(n) && n >= 2);
const windowS = Number(arg('window', '60'));
const rate = Number(arg('rate', '0.2'));
const warmupS = Number(arg('warmup', '600'));
const out = arg('out', 'bench');
const perProcess = Number(arg('per-process', '8'));
const eventsDir = arg('events', '') || undefined;
const netbed = arg('netbed', '');
const topologyArg = arg('topology', '');
if (topologyArg && !['ring', 'auto', 'groups'].includes(topologyArg))
  throw new Error(`--topology ${topologyArg}: expected ring, auto or groups`);
const topology = (topologyArg || undefined) as ScaleTopology | undefined;
const churnArg = arg('churn', 'both');
const churns = ({ no: [false], yes: [true], both: [false, true] } as Record<string, boolean[]>)[churnArg];
if (!churns) throw new Error(`--churn ${churnArg}: expected no, yes or both`);
const seed = Number(arg('seed', '1'));
const log = (line: string) => process.stderr.write(`${line}\n`);

async function renderPng(svg: string, path: string): Promise<void> {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium' });
  try {
    const page = await browser.newPage({ viewport: { width: 720, height: 420 } });
    await page.setContent(svg);
    await page.screenshot({ path });
  } finally {
    await browser.close();
  }
}

const replay = arg('replay', '');
if (netbed && !replay) exitUnlessReady('bench:scale --netbed', { netbed: true });
const results: ScaleResult[] = replay
  ? replay
      .split(',')
      .flatMap((file) => readFileSync(file, 'utf8').split('\n'))
      .filter((line) => line.startsWith('{"n":'))
      .map((line) => JSON.parse(line) as ScaleResult)
  : [];
for (const n of replay ? [] : ns) {
  for (const churn of churns) {
    try {
      const r = netbed
        ? await runNetbedScaleScenario({
            n,
            churn,
            windowS,
            ratePerWorkerMin: rate,
            warmupS,
            profile: netbed,
            seed,
            topology,
            log,
          })
        : await runScaleScenario({
            n,
            perProcess,
            churn,
            windowS,
            ratePerWorkerMin: rate,
            warmupS,
            log,
            eventsDir,
            topology,
          });
      log(JSON.stringify(r));
      results.push(r);
    } catch (error) {
      log(`N=${n}${churn ? ' churn' : ''}: ${(error as Error).message}`);
    }
  }
}
const load = loadavg()[0]!;
/** The windows the results were measured over (a replay may put runs of different windows together). */
const windows =
  [...new Set(results.map((r) => Math.round(r.windowS)))].sort((a, b) => a - b).join('/') || String(windowS);
results.sort((a, b) => networkOf(a).localeCompare(networkOf(b)) || a.n - b.n || Number(a.churn) - Number(b.churn));
const networks = [...new Set(results.map(networkOf))];
const where = networks
  .map((n) =>
    n === 'loopback'
      ? `loopback (${perProcess} workers per process)`
      : `the test bed's ${n} profile (one worker per home)`,
  )
  .join(' and ');
console.log(
  `\nbench:scale — headless workers on ${where}, tiny-mlp, global batch 512, local H = 8, int8; ${windows} s windows; churn ${rate} failures per worker-minute (${networks.some((n) => n !== 'loopback') ? 'test bed: crashes; loopback: crash or leave' : 'crash or leave'}, each with a join); load ${load.toFixed(1)}\n`,
);
console.log(scaleTable(results));
console.log(
  JSON.stringify({
    bench: 'scale',
    worker: 'headless',
    // The test bed runs one worker per home, so one per process (a replay knows it from the rows).
    perProcess: netbed || results.every((r) => r.network) ? 1 : perProcess,
    network: networks.length === 1 ? networks[0] : networks,
    windowS,
    ratePerWorkerMin: rate,
    load,
    results: results.map((r) => ({ ...r, lostRatio: lostRatio(r) })),
  }),
);
for (const network of networks) {
  const svg = scaleSvg(
    results.filter((r) => networkOf(r) === network),
    `bench:scale — samples/s and utilization against N (${network}, ${windows} s windows)`,
  );
  // scale.svg, scale-broadband.svg, scale-broadband-auto.svg …
  const name =
    network === 'loopback' ? 'scale' : `scale-${network.replace(/ \(unverified\)/, '').replace(/\W+/g, '-')}`;
  writeFileSync(join(out, `${name}.svg`), svg);
  await renderPng(svg, join(out, `${name}.png`)).catch((error: Error) => log(`no PNG: ${error.message}`));
}
process.exit(0);
