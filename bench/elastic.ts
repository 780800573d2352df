/**
 * `npm run bench:elastic` (tsx bench/elastic.ts): two parts, one JSON line `{"bench":"elastic", …}`.
 *
 * 1. Allreduce bus bandwidth between headless Chromium tabs over WebRTC, against the raw data-channel
 *    throughput between two of the same tabs measured in the same run (before and after the
 *    allreduces, to expose drift). Bus bandwidth follows NCCL's definition: the bytes each rank must
 *    send, 2·(P−1)/P·size, over the time from the common start instant to the last rank's finish —
 *    directly comparable with the throughput of one link. Configurations (frame sizes) are
 *    interleaved run by run so that the machine's drift (other processes, SwiftShader) hits them
 *    alike; medians are reported.
 *
 * 2. Recovery: a real coordinator process (small job: tiny-mlp, global batch 64, a 2,048-image
 *    subset, heartbeat 1 s) and `--world` volunteer tabs (the built web app, `?autostart=1`) train;
 *    one tab at a time is taken away, and a fresh tab replaces it before the next event. Three ways
 *    to go, interleaved event by event so load drift hits them alike:
 *      goodbye — `page.close()`: `pagehide` sends a goodbye, the coordinator closes the round at once;
 *      crash   — CDP `Page.crash`: the renderer dies, its sockets drop without a goodbye;
 *      hang    — CDP `Debugger.pause` on the main thread: sockets and data channels stay open, only
 *                the missing heartbeats tell (3 × heartbeatMs): the timeout path, as an in-run
 *                reference for what detection costs without the fast paths.
 *    Recovery time = from the instant the fault is issued (Node's clock, taken right before the CDP
 *    call) to the first step committed in a later round, as the coordinator's admin feed
 *    (`GET /api/admin/feed`, Server-Sent Events pushed as commits happen) stamps it with the server's
 *    clock (same machine, same clock). The feed's log events split it into detect (→ `round_closed`),
 *    regroup (→ `round_open`, includes the job's lastCallMs window), sync (→ `round_train`) and first
 *    step (→ its commit).
 *    Steps lost = steps the survivors had applied past the last commit and had to redo (read from
 *    each survivor's `window.tabswarmElastic.losses`, which logs every applied step, undone ones
 *    included: the old round's entries after the new round's first step), plus any commits the
 *    coordinator rolled back to a checkpoint (feed `rollback` events). The step being computed when
 *    the fault hit is not counted (it was never applied); it is redone too.
 *
 * There is no torchrun or Horovod on this machine, so no external system is measured. For context
 * only: torchrun's restart of the whole worker group takes tens of seconds; Horovod Elastic polls host
 * discovery every second and then rolls back to its last `state.commit()`. The in-run reference is
 * the hang row: the same event noticed by heartbeat timeout only.
 *
 * Options: --tabs 2,3,4  --mib 1,4,16  --frame 16300  --high 262144  --low 65536  --repeat 3
 *          --compression none|fp16|int8                                 (allreduce part)
 *          --events 5  --world 3  --faults goodbye,crash,hang  --heartbeat-ms 1000  --last-call-ms 300
 *          --global-batch 64  --commit-every 1                          (recovery part)
 *          --recovery-only | --allreduce-only
 * The recovery part serves the web app built in $TABSWARM_DIST, else builds it (`vite build`) into a
 * temp dir, so the shared dist/ is never touched. Load average (2 cores) is printed with the figures.
 *
 * This file is the driver (options, the two parts in order, the JSON line); the parts live in
 * bench/lib/: elastic-allreduce.ts and elastic-recovery.ts run them (the latter reads the admin feed
 * through admin-feed-watcher.ts), elastic-figures.ts holds the statistics, elastic-report.ts the output.
 */
import { loadavg } from 'node:os';
import { DEFAULT_FRAME_BYTES } from '../web/net/framing';
import { DEFAULT_HIGH_WATER_BYTES } from '../web/net/paced-sender';
import { DEFAULT_LOW_WATER_BYTES } from '../web/net/peer-link';
import type { WireCompression } from '../web/net/ring-allreduce';
import { arg, nowMs } from './lib/common';
import { benchAllreduce } from './lib/elastic-allreduce';
import { FAULT_KINDS, type FaultKind } from './lib/elastic-figures';
import { benchRecovery } from './lib/elastic-recovery';
import { elasticJsonLine, printRecovery } from './lib/elastic-report';

const flag = (name: string) => process.argv.includes(`--${name}`);
const list = (name: string, fallback: string) => arg(name, fallback).split(',').map(Number);

const tabCounts = list('tabs', '2,3,4');
const sizesMiB = list('mib', '1,4,16');
const frameSizes = list('frame', String(DEFAULT_FRAME_BYTES));
const highWaterBytes = Number(arg('high', String(DEFAULT_HIGH_WATER_BYTES)));
const lowWaterBytes = Number(arg('low', String(DEFAULT_LOW_WATER_BYTES)));
const repeat = Number(arg('repeat', '3'));
const compression = arg('compression', 'none') as WireCompression;
if (!['none', 'fp16', 'int8'].includes(compression))
  throw new Error(`--compression none|fp16|int8, not ${compression}`);

const eventsPerKind = Number(arg('events', '5'));
const worldSize = Number(arg('world', '3'));
const faultKinds = arg('faults', FAULT_KINDS.join(',')).split(',') as FaultKind[];
const heartbeatMs = Number(arg('heartbeat-ms', '1000'));
const lastCallMs = Number(arg('last-call-ms', '300'));
const globalBatch = Number(arg('global-batch', '64'));
const commitEvery = Number(arg('commit-every', '1'));
const runAllreducePart = !flag('recovery-only');
const runRecoveryPart = !flag('allreduce-only');

const load = () => loadavg().map((x) => Math.round(x * 100) / 100);

async function main(): Promise<void> {
  const loadAtStart = load();
  const started = nowMs();
  console.log(`load average ${loadAtStart.join(' ')} at start (2 cores)`);
  const allreduce = runAllreducePart
    ? await benchAllreduce({ tabCounts, sizesMiB, frameSizes, highWaterBytes, lowWaterBytes, compression, repeat })
    : null;
  const recovery = runRecoveryPart
    ? await benchRecovery({ eventsPerKind, faultKinds, worldSize, heartbeatMs, lastCallMs, globalBatch, commitEvery })
    : null;
  if (recovery) printRecovery(recovery, worldSize, faultKinds);
  const loadAtEnd = load();
  const seconds = Math.round((nowMs() - started) / 1000);
  console.log(
    `\nload average ${loadAtStart.join(' ')} at start, ${loadAtEnd.join(' ')} at end (2 cores); run took ${seconds} s`,
  );
  console.log(elasticJsonLine(allreduce, recovery, worldSize, { start: loadAtStart, end: loadAtEnd }, seconds));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
