/**
 * The admin page with 200 workers, in headless Chromium against a real coordinator process: 200
 * simulated workers (test/support/sim-trainer.ts, plain protocol clients: no GPU) join a job of at
 * most 160 ranks, so 160 train and 40 wait; their heartbeats report ring links with paths and RTTs.
 * The page must stay usable: the workers table keeps only the rows in view in the DOM (at most a few
 * dozen of 200, also after scrolling to the end), sorts by a column either way, filters by text and by
 * state with the counts the coordinator reports (its paged `/api/status`); the swarm card counts every
 * worker and the sync-group drawing has one dot and one link per rank. A screenshot is kept in
 * test-results/admin-200-workers.png (docs/img/admin-200-workers.png is one of these).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusResponse, WaitingView, WorldView } from '../../core/protocol/views';
import {
  launchChromium,
  skipWithoutChromium,
  skipWithoutWebBuild,
  WEB_BUILD_DIR,
  watchPage,
  type PageProblems,
} from '../support/browser';
import { REPO_ROOT, spawnCoordinator, TEST_ADMIN_TOKEN, type CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from '../support/fake-dataset';
import { SimTrainer } from '../support/sim-trainer';

const ARTIFACTS = join(REPO_ROOT, 'test-results');
const WORKERS = 200;
const MAX_WORLD = 160;
const JOB = {
  model: 'tiny-mlp',
  globalBatch: 256,
  epochs: 10_000,
  minWorkers: 8,
  maxWorkers: MAX_WORLD,
  lastCallMs: 200,
  heartbeatMs: 2000,
  checkpointEvery: 50,
  maxRestarts: 100_000,
};
const ADAPTERS = [
  { vendor: 'nvidia', architecture: 'ampere', description: 'NVIDIA GeForce RTX 3060' },
  { vendor: 'nvidia', architecture: 'lovelace', description: 'NVIDIA GeForce RTX 4070' },
  { vendor: 'apple', architecture: 'metal-3', description: 'Apple M2' },
  { vendor: 'intel', architecture: 'gen-12lp', description: 'Intel Iris Xe' },
  { vendor: 'amd', architecture: 'rdna-3', description: 'AMD Radeon RX 7600' },
  { vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader' },
];
/** Rows the table may hold in the DOM: 16 in view (its max height) and 6 on either side, with slack. */
const MAX_DOM_ROWS = 40;

/** A deterministic path and RTT for the link from worker index `i`: mostly direct, some through TURN. */
function linkOf(i: number): { local: 'host' | 'srflx' | 'relay'; rttMs: number } {
  const h = (i * 2654435761) >>> 0;
  const local = h % 10 < 6 ? 'host' : h % 10 < 9 ? 'srflx' : 'relay';
  const base = local === 'host' ? 4 : local === 'srflx' ? 25 : 70;
  return { local, rttMs: base + ((h >>> 8) % 40) };
}

/** Heartbeat fields of worker `i`: its ring link to the next rank (when in a round), one ICE problem. */
function heartbeatOf(i: number) {
  return (t: SimTrainer): Record<string, unknown> => {
    const world = t.roundWorld;
    const rank = t.rank;
    if (rank === null || world.length < 2)
      return i === 7 ? { iceError: 'TURN authentication failed (401 Unauthorized at turn:203.0.113.2:3478)' } : {};
    const { local, rttMs } = linkOf(i);
    return {
      peerRttMs: rttMs,
      peerLinks: [{ peer: world[(rank + 1) % world.length], local, remote: 'host', rttMs }],
      iceError: null,
    };
  };
}

/** Every worker the coordinator knows, through its paged `/api/status`. */
async function allWorkers(
  proc: CoordinatorProcess,
): Promise<{ status: StatusResponse; rows: (WorldView | WaitingView)[] }> {
  const status = await proc.status('?limit=256&waitingLimit=256');
  expect(status.world.items).toHaveLength(status.world.total);
  expect(status.waiting.items).toHaveLength(status.waiting.total);
  return { status, rows: [...status.world.items, ...status.waiting.items] };
}

/** The table's rows in the DOM, in order: worker id, rank cell, state, adapter, RTT text. */
function domRows(page: Page) {
  return page.$$eval('#workers-body tr[data-worker-id]', (rows) =>
    rows.map((tr) => ({
      id: tr.getAttribute('data-worker-id')!,
      rank: tr.querySelector('td.rank')!.textContent!,
      state: tr.querySelector('td.state')!.textContent!,
      adapter: tr.querySelector('td.adapter-cell')!.textContent!,
      rtt: tr.querySelector('td.rtt')!.textContent!,
    })),
  );
}

async function domRowCount(page: Page): Promise<number> {
  return page.$$eval('#workers-body tr', (rows) => rows.length);
}

/** Lets the page draw (scroll handlers draw on the next animation frame). */
const frames = (page: Page) =>
  page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

const skip = skipWithoutChromium() || skipWithoutWebBuild();

describe.skipIf(skip)('admin page with 200 workers', () => {
  let proc: CoordinatorProcess;
  let browser: Browser;
  let page: Page;
  let problems: PageProblems;
  const trainers: SimTrainer[] = [];

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    const dataset = writeFakeIdxDataset(join(makeTempDir('tabswarm-admin200-'), 'fake-mnist'), {
      trainCount: 20_000,
      testCount: 100,
    });
    proc = await spawnCoordinator({
      job: JOB,
      datasetDir: dataset,
      extraArgs: [
        '--dist',
        WEB_BUILD_DIR,
        // 200 workers from one address: lift the per-address defences (docs/threat-model.md).
        '--max-sockets-per-address',
        '1000',
        '--joins-per-minute',
        '100000',
      ],
    });
    for (let i = 0; i < WORKERS; i += 20) {
      const batch = Array.from({ length: Math.min(20, WORKERS - i) }, (_, k) =>
        SimTrainer.join(proc.wsUrl, {
          httpUrl: proc.url,
          computeMs: 60,
          // Claims of compute time and wire bytes, and a falling loss, so every column and chart has a value.
          claimedComputeMs: 40 + ((i + k) % 5) * 4,
          wireBytesPerSample: 2 * 25_450 * 4,
          lossAt: (step) => 0.4 + 1.9 * Math.exp(-step / 80) + 0.05 * Math.sin(step),
          keepReceived: false,
          adapter: ADAPTERS[(i + k) % ADAPTERS.length],
          heartbeatFields: heartbeatOf(i + k),
        }),
      );
      trainers.push(...(await Promise.all(batch)));
    }
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
    page = await context.newPage();
    problems = watchPage(page);
    await page.goto(`${proc.url}/admin/?token=${TEST_ADMIN_TOKEN}`);
    await page.waitForSelector('#connection[data-state=live]', { timeout: 30_000 });
  }, 180_000);

  afterAll(async () => {
    for (const t of trainers) await t.worker.terminate();
    await browser?.close();
    await proc?.stop();
  });

  it('counts all 200 in the swarm card and keeps only the rows in view in the DOM, also at the end', async () => {
    // Every worker joined, 160 in a training round, and every member has reported its ring link.
    await expect
      .poll(
        async () => {
          const s = await proc.status();
          return (
            s.counts.workers === WORKERS &&
            s.counts.members === MAX_WORLD &&
            s.state === 'training' &&
            s.counts.links.host + s.counts.links.srflx + s.counts.links.relay === MAX_WORLD
          );
        },
        { timeout: 90_000, interval: 500 },
      )
      .toBe(true);
    await expect.poll(() => page.textContent('#swarm-workers'), { timeout: 15_000 }).toBe(String(WORKERS));
    await expect
      .poll(() => page.textContent('#workers-count'), { timeout: 15_000 })
      .toMatch(/^200 · 160 in round \d+ · 40 waiting$/);
    const rows = await domRows(page);
    expect(rows.length).toBeGreaterThanOrEqual(10);
    expect(await domRowCount(page)).toBeLessThanOrEqual(MAX_DOM_ROWS);
    // Default order: the members by rank.
    expect(rows.slice(0, 10).map((r) => r.rank)).toEqual(Array.from({ length: 10 }, (_, i) => String(i)));
    expect(await page.$eval('#workers-sizer', (n) => (n as HTMLElement).style.height)).toBe(`${WORKERS * 34}px`);
    // Every column fits the card at 1280 px: the last one's kick button is inside the scroller's box.
    // and the header's columns stand over the rows' columns.
    const box = await page.evaluate(() => {
      const kick = document.querySelector('#workers-body button.kick')!.getBoundingClientRect();
      const wrap = document.querySelector('.workers-wrap')!.getBoundingClientRect();
      const heads = Array.from(document.querySelectorAll('#workers-table th'), (th) => th.getBoundingClientRect().left);
      const cells = Array.from(
        document.querySelectorAll('#workers-body tr:first-child td'),
        (td) => td.getBoundingClientRect().left,
      );
      return { kick: [kick.left, kick.right, kick.width], wrap: [wrap.left, wrap.right], heads, cells };
    });
    expect(box.kick[2], JSON.stringify(box)).toBeGreaterThan(20);
    expect(box.kick[1], JSON.stringify(box)).toBeLessThanOrEqual(box.wrap[1]);
    expect(box.heads).toHaveLength(box.cells.length);
    for (const [i, left] of box.heads.entries()) expect(Math.abs(left - box.cells[i]), `column ${i}`).toBeLessThan(1);

    // Scroll to the end: the last of the wait list is drawn, and still only a window of rows exists.
    await page.$eval('#workers-scroll', (n) => {
      n.scrollTop = n.scrollHeight;
    });
    await frames(page);
    const end = await domRows(page);
    expect(end.at(-1)!.rank).toBe('w40');
    expect(end.every((r) => r.state === 'waiting' || /^\d+$/.test(r.rank))).toBe(true);
    expect(await domRowCount(page)).toBeLessThanOrEqual(MAX_DOM_ROWS);
    await page.$eval('#workers-scroll', (n) => {
      n.scrollTop = 0;
    });
    await frames(page);
  });

  it('sorts by worker id either way and by RTT, with workers that report none last', async () => {
    const { rows: all } = await allWorkers(proc);
    const ids = all.map((w) => w.id).sort();
    await page.click('#workers-table th.worker-id');
    await frames(page);
    const ascending = await domRows(page);
    expect(ascending.map((r) => r.id)).toEqual(ids.slice(0, ascending.length));
    expect(await page.getAttribute('#workers-table th.worker-id', 'aria-sort')).toBe('ascending');
    await page.click('#workers-table th.worker-id');
    await frames(page);
    const descending = await domRows(page);
    expect(descending.map((r) => r.id)).toEqual([...ids].reverse().slice(0, descending.length));

    await page.click('#workers-table th.rtt');
    await frames(page);
    const byRtt = (await domRows(page)).map((r) => Number.parseFloat(r.rtt));
    expect(byRtt.every((x) => Number.isFinite(x))).toBe(true);
    expect(byRtt).toEqual([...byRtt].sort((a, b) => a - b));
    const fastest = Math.min(...Array.from({ length: WORKERS }, (_, i) => linkOf(i).rttMs));
    expect(byRtt[0]).toBe(fastest);
    await page.$eval('#workers-scroll', (n) => {
      n.scrollTop = n.scrollHeight;
    });
    await frames(page);
    // The 40 waiting workers report no ring RTT: they sort after every member.
    expect((await domRows(page)).at(-1)!.state).toBe('waiting');
    // Third click: back to rank order.
    await page.click('#workers-table th.rtt');
    await page.click('#workers-table th.rtt');
    await page.$eval('#workers-scroll', (n) => {
      n.scrollTop = 0;
    });
    await frames(page);
    expect((await domRows(page))[0].rank).toBe('0');
  });

  it('filters by text and by state, with the counts the coordinator reports', async () => {
    const { status, rows: all } = await allWorkers(proc);
    const apple = all.filter((w) => w.adapter === 'apple metal-3').length;
    expect(apple).toBeGreaterThan(20);
    await page.fill('#workers-filter', 'apple');
    await frames(page);
    const filtered = await domRows(page);
    expect(filtered.length).toBeGreaterThan(0);
    expect(filtered.every((r) => r.adapter === 'apple metal-3')).toBe(true);
    expect(await page.textContent('#workers-shown')).toBe(`${apple} shown`);
    expect(await page.$eval('#workers-sizer', (n) => (n as HTMLElement).style.height)).toBe(`${apple * 34}px`);

    await page.fill('#workers-filter', '');
    await page.selectOption('#workers-state', 'waiting');
    await frames(page);
    const waiting = await domRows(page);
    expect(waiting.every((r) => r.state === 'waiting')).toBe(true);
    expect(await page.textContent('#workers-shown')).toBe(`${status.counts.waiting} shown`);
    await page.selectOption('#workers-state', 'ice');
    await frames(page);
    const ice = await domRows(page);
    expect(ice.map((r) => r.rtt)).toEqual(all.filter((w) => w.iceError !== null).map((w) => w.iceError));
    await page.selectOption('#workers-state', 'all');
  });

  it('draws the ring of 160 with each link coloured by its path, and keeps a screenshot', async () => {
    await expect
      .poll(() => page.$$eval('svg.ring circle.member', (c) => c.length), { timeout: 10_000 })
      .toBe(MAX_WORLD);
    expect(await page.$$eval('svg.ring line.link', (l) => l.length)).toBe(MAX_WORLD);
    const { status } = await allWorkers(proc);
    const drawn = await page.$$eval('svg.ring line.link', (lines) => lines.map((l) => l.getAttribute('class')));
    for (const path of ['host', 'srflx', 'relay'] as const)
      expect(drawn.filter((c) => c === `link ${path}`).length, path).toBe(status.counts.links[path]);
    // The summary, the swarm, the sync groups and the workers table in one tall viewport (a full-page
    // capture repeats the sticky top bar), then the whole page.
    await page.setViewportSize({ width: 1280, height: 2150 });
    await page.evaluate(() => window.scrollTo(0, 0));
    await frames(page);
    await page.screenshot({ path: join(ARTIFACTS, 'admin-200-workers.png') });
    await page.screenshot({ path: join(ARTIFACTS, 'admin-200-workers-full.png'), fullPage: true });
    expect(problems.errors).toEqual([]);
  });
});
