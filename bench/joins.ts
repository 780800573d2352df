/**
 * `npm run bench:joins`: what many joiners arriving together cost, against one joiner, with headless
 * workers on loopback (the tab's code in Node, docs/headless.md). A fresh coordinator runs bench:scale's
 * job (tiny-mlp on Fashion-MNIST, global batch 512, local sync H = 8, int8 wire) with `--holders`
 * workers in processes of `--per-process`; once all of them commit together:
 *
 * 1. one joiner arrives (a new worker in a running process: the process start is not counted);
 * 2. once it contributed and two more outer steps committed, `--joiners` arrive at once, spread over the processes;
 * 3. once they all contributed, one more joiner arrives alone, into the world the crowd made (the same N
 *    as the crowd's, so the crowd's figure can be told apart from the bigger world's).
 *
 * For each joiner: seconds from its arrival to the first commit whose round it is a member of (it
 * computed its slices and its outer step was summed and hash-agreed), and for each admitting round the
 * state sync: `round_open` to `round_train` (every member holds the committed state and is ready), with
 * how it came (`stateFrom`: a relay from every holder, core/training/state-route.ts). The goal (issue
 * 23): each of the crowd within 2× one joiner's time.
 *
 *   npm run bench:joins -- [--holders 16] [--joiners 32] [--per-process 4] [--out-json FILE]
 *   npm run bench:joins -- --part memory [--profiles broadband,poor] [--bytes 2822400,12000000]
 *
 * `--part memory` runs the state sync alone on shaped memory links in virtual time instead, the algorithm
 * before these joins against the relay from every holder (bench/lib/joins-memory.ts): what loopback
 * cannot show, because there the workers' start-up and new connections, not the transfer, fill a join.
 *
 * Prints a table and one JSON line `{"bench":"joins", …}`.
 */
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { relayChainOf } from '../core/training/link-floor';
import { spawnCoordinator } from '../test/support/coordinator-process';
import { FeedWatcher } from './lib/admin-feed-watcher';
import { arg } from './lib/common';
import { median } from './lib/elastic-figures';
import { joinSyncPoints } from './lib/joins-memory';
import { type JoinPoint, joinVerdict } from './lib/topology-figures';
import { JOB, type Joiner, joinTimes, pollMembership, Swarm, sleep } from './lib/scale-run';

const holders = Number(arg('holders', '16'));
const crowd = Number(arg('joiners', '32'));
const perProcess = Number(arg('per-process', '4'));
const outJson = arg('out-json', '');
const log = (line: string) => process.stderr.write(`${line}\n`);

interface Phase {
  name: string;
  /** World size the joiners were admitted into. */
  world: number;
  joinToContributionS: number[];
  /** round_open → round_train of each round that admitted one of them (s), and its state source. */
  syncs: { round: number; syncS: number; stateFrom: string; relayChain: number | null }[];
}

if (arg('part', 'workers') === 'memory') {
  // The link-model part (bench/lib/joins-memory.ts): the state sync alone, old algorithm against new.
  const points = await joinSyncPoints({
    profiles: arg('profiles', 'broadband,poor').split(','),
    bytes: arg('bytes', '2822400,12000000').split(',').map(Number),
    holders,
    joiners: [1, crowd],
    log,
  });
  console.log('| profile | state MB | joiners | algorithm | sync ms (virtual) | vs one joiner |');
  console.log('|---|---|---|---|---|---|');
  for (const p of points) {
    const one = points.find(
      (q) => q.profile === p.profile && q.bytes === p.bytes && q.algorithm === p.algorithm && q.joiners === 1,
    )!;
    console.log(
      `| ${p.profile} | ${(p.bytes / 1e6).toFixed(1)} | ${p.joiners} | ${p.algorithm} | ${p.ms.toFixed(0)} | ${(p.ms / one.ms).toFixed(2)}× |`,
    );
  }
  console.log(JSON.stringify({ bench: 'joins', part: 'memory', holders, joiners: crowd, points }));
  process.exit(0);
}

const caps = ['--max-sockets-per-address', '1000', '--joins-per-minute', '1000', '--address-restart-quota', '1000'];
const job = { ...JOB(holders), maxWorkers: holders + crowd + 4 };
const proc = await spawnCoordinator({ job, datasetDir: null, startTimeoutMs: 60_000, extraArgs: caps });
const swarm = new Swarm(proc.url, log);
const feed = await FeedWatcher.open(proc.url, proc.adminToken!);
const phases: Phase[] = [];

/** Joiners named in `names` arrive now; resolves with the phase once all contributed (or the deadline passed). */
async function arrive(name: string, beside: string[], timeoutS: number): Promise<Phase> {
  const joins: Joiner[] = [];
  const poller = pollMembership(proc, joins);
  const since = Date.now();
  for (const process of beside) joins.push({ name: swarm.join(process), at: Date.now(), memberRound: null });
  const contributed = () => joinTimes(joins, feed, Date.now()).length === joins.length;
  await feed
    .until(contributed, `${name}: all ${joins.length} contributed`, timeoutS * 1000)
    .catch((err: Error) => log(err.message));
  await poller.stop();
  const times = joinTimes(joins, feed, Date.now());
  const rounds = new Set(joins.map((j) => j.memberRound).filter((r): r is number => r !== null));
  const syncs = [...rounds].map((round) => {
    const open = feed.events.find((e) => e.event === 'round_open' && e.data?.round === round && e.at >= since);
    const train = feed.events.find((e) => e.event === 'round_train' && e.data?.round === round && e.at >= since);
    const from = open?.data?.stateFrom;
    return {
      round,
      syncS: open && train ? (train.at - open.at) / 1000 : Number.NaN,
      stateFrom: from ? `${from.kind}${from.kind === 'peers' ? ` ×${from.ranks.length}` : ''}` : '?',
      relayChain: from && Array.isArray(open?.data?.world) ? relayChainOf(from, open.data.world.length) : null,
    };
  });
  const world = Math.max(...feed.commits.slice(-1).map((c) => c.worldSize));
  return { name, world, joinToContributionS: times, syncs };
}

try {
  for (let left = holders; left > 0; left -= perProcess) swarm.startGroup(Math.min(perProcess, left));
  const t0 = performance.now();
  await feed.until(() => feed.commits.some((c) => c.worldSize >= holders), `a commit by all ${holders}`, 600_000);
  log(`all ${holders} committing after ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  const processes = swarm.processes.map((p) => p.name);
  const twoMore = async () => {
    const at = feed.commits.length;
    await feed.until(() => feed.commits.length >= at + 2, 'two more commits', 120_000);
  };
  phases.push(await arrive('one joiner', [processes[0]], 180));
  await twoMore();
  phases.push(
    await arrive(
      `${crowd} joiners at once`,
      Array.from({ length: crowd }, (_, i) => processes[i % processes.length]),
      600,
    ),
  );
  await twoMore();
  phases.push(await arrive('one joiner after them', [processes[1 % processes.length]], 180));
  const audit = await proc.audit();
  const single = median(phases[0].joinToContributionS);
  const singleAfter = median(phases[2].joinToContributionS);
  const crowdTimes = phases[1].joinToContributionS;
  const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');
  console.log(
    '| phase | world | joiners contributed | join → contribution s (median / max) | state sync s (round_open → round_train) | state from | deepest relay chain |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const p of phases)
    console.log(
      `| ${p.name} | ${p.world} | ${p.joinToContributionS.length} | ${f(median(p.joinToContributionS))} / ${f(Math.max(...p.joinToContributionS))} | ${p.syncs.map((s) => f(s.syncS, 2)).join(', ')} | ${p.syncs.map((s) => s.stateFrom).join(', ')} | ${p.syncs.map((s) => s.relayChain ?? '-').join(', ')} |`,
    );
  const maxRatio = Math.max(...crowdTimes) / single;
  const point = (p: Phase, joiners: number): JoinPoint => ({
    profile: 'loopback',
    source: p.syncs.map((x) => x.stateFrom).join(','),
    joiners,
    medianMs: 1000 * median(p.joinToContributionS),
    maxMs: 1000 * Math.max(...p.joinToContributionS),
  });
  const goalMet = crowdTimes.length === crowd && joinVerdict(point(phases[0], 1), point(phases[1], crowd)) === true;
  console.log(
    `\n${crowd} at once: slowest ${f(Math.max(...crowdTimes))} s = ${f(maxRatio, 2)}× one joiner's ${f(single)} s (goal ≤ 2×: ${goalMet ? 'met' : 'MISSED'}); against one joiner into the same world (${f(singleAfter)} s): ${f(Math.max(...crowdTimes) / singleAfter, 2)}×. Audit ${audit.ok ? 'clean' : 'FAILED'}.`,
  );
  const line = {
    bench: 'joins',
    worker: 'headless',
    network: 'loopback',
    holders,
    joiners: crowd,
    perProcess,
    load: loadavg()[0],
    phases,
    maxRatio,
    goalMet,
    auditOk: audit.ok,
  };
  console.log(JSON.stringify(line));
  if (outJson) writeFileSync(outJson, `${JSON.stringify(line)}\n`);
} finally {
  feed.close();
  await swarm.stopAll();
  await proc.stop();
  await sleep(0);
}
