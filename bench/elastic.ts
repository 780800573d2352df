/**
 * `npm run bench:elastic` (tsx bench/elastic.ts): allreduce bus bandwidth between headless Chromium
 * tabs over WebRTC, against the raw data-channel throughput between two of the same tabs measured in
 * the same run (before and after the allreduces, to expose drift). Prints a table and one JSON line
 * `{"bench":"elastic", …}`.
 *
 * Bus bandwidth follows NCCL's definition: the bytes each rank must send, 2·(P−1)/P·size, over the
 * time from the common start instant to the last rank's finish — directly comparable with the
 * throughput of one link. Configurations (frame sizes) are interleaved run by run so that the
 * machine's drift (other processes, SwiftShader) hits them alike; medians are reported.
 *
 * Options: --tabs 2,3,4  --mib 1,4,16  --frame 16300,65536  --high 262144  --low 65536
 *          --repeat 3  --compression none|fp16
 */
import type { Browser, Page } from 'playwright-core';
import type { NetHarness } from '../test/browser/pages/net-harness';
import { launchChromium } from '../test/support/browser';
import { startPeerServer } from '../test/support/peer-server';
import { startViteServer } from '../test/support/vite-server';
import { DEFAULT_FRAME_BYTES } from '../web/net/framing';
import { DEFAULT_HIGH_WATER_BYTES } from '../web/net/paced-sender';
import { DEFAULT_LOW_WATER_BYTES } from '../web/net/peer-link';
import { ringAllreduceBusBytes } from '../web/net/ring-allreduce';

declare const netHarness: NetHarness;

const MiB = 1024 * 1024;

function option(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
}
const list = (name: string, fallback: string) => option(name, fallback).split(',').map(Number);

const tabCounts = list('tabs', '2,3,4');
const sizesMiB = list('mib', '1,4,16');
const frameSizes = list('frame', String(DEFAULT_FRAME_BYTES));
const highWaterBytes = Number(option('high', String(DEFAULT_HIGH_WATER_BYTES)));
const lowWaterBytes = Number(option('low', String(DEFAULT_LOW_WATER_BYTES)));
const repeat = Number(option('repeat', '3'));
const compression = option('compression', 'none') as 'none' | 'fp16';

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const now = () => performance.timeOrigin + performance.now();

interface Row {
  tabs: number;
  mib: number;
  frameBytes: number;
  ms: number;
  busMiBps: number;
  ratioToRaw: number;
  /** Raw per-link throughput with every link of the ring busy at once (same run). */
  rawRingMiBps: number;
  ratioToRawRing: number;
  runsMs: number[];
}

async function main(): Promise<void> {
  const peerServer = await startPeerServer();
  const vite = await startViteServer();
  let browser: Browser | null = null;
  try {
    browser = await launchChromium();
    const run = Math.floor(Math.random() * 1e9).toString(36);
    const tabs: { id: string; page: Page }[] = [];
    for (let i = 0; i < Math.max(2, ...tabCounts); i++) {
      const context = await browser.newContext();
      const page = await context.newPage();
      page.on('pageerror', (err) => console.error(`tab ${i}: ${err.message}`));
      await page.goto(`${vite.url}/test/browser/pages/net-harness.html`);
      await page.waitForFunction(() => 'netHarness' in window);
      const id = `bench${i}-${run}`;
      await page.evaluate((o) => netHarness.open(o), { id, host: peerServer.host, port: peerServer.port, lowWaterBytes });
      tabs.push({ id, page });
    }

    await Promise.all([0, 1].map((i) => tabs[i].page.evaluate(([a, b]) => netHarness.rawConnect(a, b), [tabs[i].id, tabs[1 - i].id])));
    const rawOnce = async (messageBytes: number): Promise<number> => {
      const total = 16 * MiB;
      const startAt = now() + 200;
      const receiving = tabs[1].page.evaluate(([peer, t]) => netHarness.rawReceive(peer as string, t as number), [tabs[0].id, total] as const);
      await tabs[0].page.evaluate(
        ([peer, t, m, s, h]) => netHarness.rawSend(peer as string, t as number, m as number, s as number, h as number),
        [tabs[1].id, total, messageBytes, startAt, highWaterBytes] as const,
      );
      const { endAt } = await receiving;
      return total / MiB / ((endAt - startAt) / 1000);
    };
    const raw = new Map<number, { before: number[]; after: number[] }>(frameSizes.map((f) => [f, { before: [], after: [] }]));
    await rawOnce(frameSizes[0]); // warm-up: a fresh SCTP association starts with a small congestion window
    for (let r = 0; r < repeat; r++) for (const f of frameSizes) raw.get(f)!.before.push(await rawOnce(f));

    /**
     * Raw throughput per link when every tab of a ring sends to its right neighbour at once (for two
     * tabs: both directions of one link): the same load pattern as the allreduce without the
     * collective, i.e. what the machine's WebRTC stack can carry when all links are busy.
     */
    const rawRingOnce = async (tabCount: number, messageBytes: number): Promise<number> => {
      const total = 8 * MiB;
      const members = tabs.slice(0, tabCount);
      const startAt = now() + 300;
      const ends = await Promise.all(
        members.map(async (t, i) => {
          const right = members[(i + 1) % tabCount].id;
          const left = members[(i - 1 + tabCount) % tabCount].id;
          const receiving = t.page.evaluate(([peer, n]) => netHarness.rawReceive(peer as string, n as number), [left, total] as const);
          await t.page.evaluate(
            ([peer, n, m, s, h]) => netHarness.rawSend(peer as string, n as number, m as number, s as number, h as number),
            [right, total, messageBytes, startAt, highWaterBytes] as const,
          );
          return (await receiving).endAt;
        }),
      );
      return total / MiB / ((Math.max(...ends) - startAt) / 1000);
    };
    const rawRing = new Map<string, number[]>();

    let step = 0;
    const times = new Map<string, number[]>();
    const key = (tabCount: number, mib: number, f: number) => `${tabCount}/${mib}/${f}`;
    for (const tabCount of tabCounts) {
      const members = tabs.slice(0, tabCount);
      await Promise.all(members.map((t) => t.page.evaluate((m) => netHarness.ring(m), members.map((x) => x.id))));
      await Promise.all(
        members.map((t, i) =>
          t.page.evaluate((args) => netHarness.rawConnect(args.self, args.peers), {
            self: t.id,
            peers: [members[(i + 1) % tabCount].id, members[(i - 1 + tabCount) % tabCount].id],
          }),
        ),
      );
      for (let r = 0; r < repeat; r++) {
        for (const f of frameSizes) rawRing.set(`${tabCount}/${f}`, [...(rawRing.get(`${tabCount}/${f}`) ?? []), await rawRingOnce(tabCount, f)]);
      }
      for (const mib of sizesMiB) {
        const n = (mib * MiB) / 4;
        // One unmeasured run per ring and size warms the links and the JIT.
        for (let r = -1; r < repeat; r++) {
          for (const frameBytes of frameSizes) {
            const startAt = now() + 300;
            const params = {
              n,
              seed: r + 2,
              id: { round: 1, step: ++step, seq: 0 },
              timeoutMs: 300_000,
              chunkElements: Math.floor((frameBytes - 32) / (compression === 'fp16' ? 2 : 4)),
              compression,
              highWaterBytes,
              startAt,
            };
            const outcomes = await Promise.all(members.map((t) => t.page.evaluate((p) => netHarness.allreduce(p), params)));
            const hashes = new Set<string>();
            let end = 0;
            for (const o of outcomes) {
              if (!o.ok) throw new Error(`allreduce failed: ${o.error.kind} ${o.error.message}`);
              hashes.add(o.hash);
              end = Math.max(end, o.endAt);
            }
            if (hashes.size !== 1) throw new Error(`ranks disagree on the result: ${[...hashes].join(' ')}`);
            if (r >= 0) {
              const k = key(tabCount, mib, frameBytes);
              times.set(k, [...(times.get(k) ?? []), end - startAt]);
            }
          }
        }
      }
    }
    for (let r = 0; r < repeat; r++) for (const f of frameSizes) raw.get(f)!.after.push(await rawOnce(f));

    const rawMedian = new Map([...raw].map(([f, m]) => [f, median([...m.before, ...m.after])]));
    const rows: Row[] = [];
    for (const tabCount of tabCounts) {
      for (const mib of sizesMiB) {
        for (const frameBytes of frameSizes) {
          const runs = times.get(key(tabCount, mib, frameBytes))!;
          const ms = median(runs);
          const busMiBps = ringAllreduceBusBytes((mib * MiB) / 4, tabCount, compression) / MiB / (ms / 1000);
          const ringRaw = median(rawRing.get(`${tabCount}/${frameBytes}`)!);
          rows.push({
            tabs: tabCount,
            mib,
            frameBytes,
            ms,
            busMiBps,
            ratioToRaw: busMiBps / rawMedian.get(frameBytes)!,
            rawRingMiBps: ringRaw,
            ratioToRawRing: busMiBps / ringRaw,
            runsMs: runs.map(Math.round),
          });
        }
      }
    }

    console.log(`high water ${highWaterBytes} B, low water ${lowWaterBytes} B, compression ${compression}, ${repeat} runs each (median)`);
    for (const [f, m] of raw) {
      const fmt = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(' ');
      console.log(`raw channel tab0→tab1, ${f}-byte messages: ${rawMedian.get(f)!.toFixed(1)} MiB/s (before: ${fmt(m.before)}; after: ${fmt(m.after)})`);
    }
    console.log('\ntabs    size   frame B   time ms   bus MiB/s   bus/raw   raw ring MiB/s   bus/raw ring   runs ms');
    for (const r of rows) {
      console.log(
        `${String(r.tabs).padStart(4)}  ${String(r.mib).padStart(2)} MiB  ${String(r.frameBytes).padStart(8)}  ${r.ms.toFixed(0).padStart(8)}  ${r.busMiBps.toFixed(1).padStart(10)}  ${r.ratioToRaw.toFixed(2).padStart(8)}  ${r.rawRingMiBps.toFixed(1).padStart(15)}  ${r.ratioToRawRing.toFixed(2).padStart(13)}   ${r.runsMs.join(' ')}`,
      );
    }
    console.log(
      JSON.stringify({
        bench: 'elastic',
        part: 'allreduce',
        highWaterBytes,
        lowWaterBytes,
        compression,
        rawMiBps: Object.fromEntries(rawMedian),
        allreduce: rows,
      }),
    );
    for (const t of tabs) await t.page.evaluate(() => netHarness.close()).catch(() => {});
  } finally {
    await browser?.close();
    await vite.close();
    await peerServer.close();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
