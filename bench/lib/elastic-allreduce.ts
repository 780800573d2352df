/**
 * bench:elastic's allreduce part: allreduce bus bandwidth between headless Chromium tabs over WebRTC
 * (the net harness page, test/browser/pages/net-harness.ts), against the raw data-channel throughput
 * between two of the same tabs (before and after the allreduces) and of a whole ring of them, all in
 * one run. Configurations are interleaved run by run; elastic-figures.ts turns the runs into rows.
 */
import type { Browser, Page } from 'playwright-core';
import type { NetHarness } from '../../test/browser/pages/net-harness';
import { launchChromium } from '../../test/support/browser';
import { allreduceFromCommonStart, rawThroughput } from '../../test/support/net-harness-client';
import { startPeerServer } from '../../test/support/peer-server';
import { startViteServer } from '../../test/support/vite-server';
import { chunkElementsFor } from '../../web/net/ring-allreduce';
import { nowMs } from './common';
import { type AllreduceGrid, type AllreduceResult, allreduceKey, allreduceRows, MiB, median } from './elastic-figures';
import { printAllreduce } from './elastic-report';

declare const netHarness: NetHarness;

export interface AllreduceOptions extends AllreduceGrid {
  /** The paced sender's high and low water marks (bytes). */
  highWaterBytes: number;
  lowWaterBytes: number;
  /** Measured runs per configuration. */
  repeat: number;
}

/** The allreduce part: prints its table, returns the figures for the JSON line. */
export async function benchAllreduce(o: AllreduceOptions): Promise<AllreduceResult> {
  const { tabCounts, sizesMiB, frameSizes, highWaterBytes, lowWaterBytes, compression, repeat } = o;
  const peerServer = await startPeerServer();
  const vite = await startViteServer();
  let browser: Browser | null = null;
  try {
    browser = await launchChromium();
    const tabs = await openHarnessTabs(browser, vite.url, peerServer, Math.max(2, ...tabCounts), lowWaterBytes);
    await Promise.all(
      [0, 1].map((i) => tabs[i].page.evaluate(([a, b]) => netHarness.rawConnect(a, b), [tabs[i].id, tabs[1 - i].id])),
    );
    const raw = new Map<number, { before: number[]; after: number[] }>(
      frameSizes.map((f) => [f, { before: [], after: [] }]),
    );
    await rawOnce(tabs, frameSizes[0], highWaterBytes); // warm-up: a fresh SCTP association starts with a small congestion window
    for (let r = 0; r < repeat; r++)
      for (const f of frameSizes) raw.get(f)!.before.push(await rawOnce(tabs, f, highWaterBytes));
    const rawRing = new Map<string, number[]>();

    let step = 0;
    const times = new Map<string, number[]>();
    for (const tabCount of tabCounts) {
      const members = tabs.slice(0, tabCount);
      await connectRing(members);
      for (let r = 0; r < repeat; r++) {
        for (const f of frameSizes)
          rawRing.set(`${tabCount}/${f}`, [
            ...(rawRing.get(`${tabCount}/${f}`) ?? []),
            await rawRingOnce(tabs, tabCount, f, highWaterBytes),
          ]);
      }
      for (const mib of sizesMiB) {
        // One unmeasured run per ring and size warms the links and the JIT.
        for (let r = -1; r < repeat; r++) {
          for (const frameBytes of frameSizes) {
            const ms = await timeAllreduce(members, (mib * MiB) / 4, r + 2, ++step, frameBytes, o);
            if (r >= 0) {
              const k = allreduceKey(tabCount, mib, frameBytes);
              times.set(k, [...(times.get(k) ?? []), ms]);
            }
          }
        }
      }
    }
    for (let r = 0; r < repeat; r++)
      for (const f of frameSizes) raw.get(f)!.after.push(await rawOnce(tabs, f, highWaterBytes));

    const rawMedian = new Map([...raw].map(([f, m]) => [f, median([...m.before, ...m.after])]));
    const rows = allreduceRows(o, times, rawMedian, rawRing);
    printAllreduce(o, raw, rawMedian, rows);
    for (const t of tabs) await t.page.evaluate(() => netHarness.close()).catch(() => {});
    return { highWaterBytes, lowWaterBytes, compression, rawMiBps: Object.fromEntries(rawMedian), allreduce: rows };
  } finally {
    await browser?.close();
    await vite.close();
    await peerServer.close();
  }
}

interface HarnessTab {
  id: string;
  page: Page;
}

/** `count` tabs, each in its own browser context, with the net harness open on the peer server. */
async function openHarnessTabs(
  browser: Browser,
  viteUrl: string,
  peerServer: { host: string; port: number },
  count: number,
  lowWaterBytes: number,
): Promise<HarnessTab[]> {
  const run = Math.floor(Math.random() * 1e9).toString(36);
  const tabs: HarnessTab[] = [];
  for (let i = 0; i < count; i++) {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on('pageerror', (err) => console.error(`tab ${i}: ${err.message}`));
    await page.goto(`${viteUrl}/test/browser/pages/net-harness.html`);
    await page.waitForFunction(() => 'netHarness' in window);
    const id = `bench${i}-${run}`;
    await page.evaluate((o) => netHarness.open(o), {
      id,
      host: peerServer.host,
      port: peerServer.port,
      lowWaterBytes,
    });
    tabs.push({ id, page });
  }
  return tabs;
}

/** Raw data-channel throughput tab0→tab1 (MiB/s) for 16 MiB in `messageBytes` messages. */
function rawOnce(tabs: readonly HarnessTab[], messageBytes: number, highWaterBytes: number): Promise<number> {
  return rawThroughput(tabs[0], tabs[1], 16 * MiB, messageBytes, { leadMs: 200, highWaterBytes });
}

/**
 * Raw throughput per link when every tab of a ring sends to its right neighbour at once (for two
 * tabs: both directions of one link): the same load pattern as the allreduce without the
 * collective, i.e. what the machine's WebRTC stack can carry when all links are busy.
 */
async function rawRingOnce(
  tabs: readonly HarnessTab[],
  tabCount: number,
  messageBytes: number,
  highWaterBytes: number,
): Promise<number> {
  const total = 8 * MiB;
  const members = tabs.slice(0, tabCount);
  const startAt = nowMs() + 300;
  const ends = await Promise.all(
    members.map(async (t, i) => {
      const right = members[(i + 1) % tabCount].id;
      const left = members[(i - 1 + tabCount) % tabCount].id;
      const receiving = t.page.evaluate(([peer, n]) => netHarness.rawReceive(peer as string, n as number), [
        left,
        total,
      ] as const);
      await t.page.evaluate(
        ([peer, n, m, s, h]) => netHarness.rawSend(peer as string, n as number, m as number, s as number, h as number),
        [right, total, messageBytes, startAt, highWaterBytes] as const,
      );
      return (await receiving).endAt;
    }),
  );
  return total / MiB / ((Math.max(...ends) - startAt) / 1000);
}

/** Form the allreduce ring of `members` and raw channels to both neighbours of each. */
async function connectRing(members: readonly HarnessTab[]): Promise<void> {
  const tabCount = members.length;
  await Promise.all(
    members.map((t) =>
      t.page.evaluate(
        (m) => netHarness.ring(m),
        members.map((x) => x.id),
      ),
    ),
  );
  await Promise.all(
    members.map((t, i) =>
      t.page.evaluate((args) => netHarness.rawConnect(args.self, args.peers), {
        self: t.id,
        peers: [members[(i + 1) % tabCount].id, members[(i - 1 + tabCount) % tabCount].id],
      }),
    ),
  );
}

/**
 * One allreduce of `n` floats on every member from a common start instant; milliseconds from that
 * instant to the last rank's finish. Throws if a rank fails or the ranks' results differ.
 */
async function timeAllreduce(
  members: readonly HarnessTab[],
  n: number,
  seed: number,
  step: number,
  frameBytes: number,
  o: AllreduceOptions,
): Promise<number> {
  return allreduceFromCommonStart(
    members.map((t) => t.page),
    {
      n,
      seed,
      id: { round: 1, step, seq: 0 },
      timeoutMs: 300_000,
      chunkElements: chunkElementsFor(frameBytes, o.compression),
      compression: o.compression,
      highWaterBytes: o.highWaterBytes,
    },
  );
}
