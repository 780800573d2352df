/**
 * The admin page in headless Chromium against a real coordinator process, with simulated workers
 * (plain WebSocket clients speaking the protocol; no GPU involved): sign-in, the workers table with the
 * ranks the coordinator gave, kicking a worker removes it while training goes on, the safetensors
 * download equals the checkpointed parameters, the sync line and the compute utilization and bytes per
 * sample the coordinator measured (job and per tab, and their chart), and screenshots at 1280×800 and
 * 390×844 are kept in test-results/ as artifacts. Then, against a coordinator of its own, tabs whose
 * steps wait on the network far longer than they compute: the job card shows the coordinator's advice.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobPublic } from '../../core/training/job';
import { parameterLayout } from '../../core/training/model-spec';
import { assignStep } from '../../core/training/groups';
import { referenceIsCommitPoint, referenceStepPosition, referenceTotalSteps } from '../support/hole-free-layout';
import {
  launchChromium,
  skipWithoutChromium,
  skipWithoutWebBuild,
  watchPage,
  WEB_BUILD_DIR,
  type PageProblems,
} from '../support/browser';
import { REPO_ROOT, spawnCoordinator, TEST_ADMIN_TOKEN, type CoordinatorProcess } from '../support/coordinator-process';
import { simulatedParams, simulatedStateHash, simulatedSnapshot } from '../support/sim-trainer';
import { SimWorker, type ServerMsg } from '../support/sim-worker';

const ARTIFACTS = join(REPO_ROOT, 'test-results');
const JOB = {
  model: 'tiny-mlp',
  globalBatch: 16,
  epochs: 30,
  minWorkers: 2,
  maxWorkers: 4,
  lastCallMs: 150,
  heartbeatMs: 1000,
  checkpointEvery: 10,
  sync: { mode: 'every-step', compression: 'fp16' },
};
/** Bytes each simulated tab says it sent per sample it computed (so every bytes/sample on the page is this). */
const WIRE_BYTES_PER_SAMPLE = 250;
const ADAPTERS = [
  { vendor: 'nvidia', architecture: 'ampere', description: 'NVIDIA GeForce RTX 3060' },
  { vendor: 'intel', architecture: 'gen-12lp', description: 'Intel Iris Xe' },
  { vendor: 'apple', architecture: 'metal-3', description: 'Apple M2' },
];

/** What a tab on the first adapter says about its kernels in its hello (core/protocol `kernelsReportSchema`). */
const KERNELS = {
  source: 'tuned',
  precision: 'f32',
  variants: [{ family: 'matmul', variant: '4x4 wgmem wg16x16 tk16' }],
  gflops: 1234.5,
  tuneMs: 2100,
  features: ['subgroups'],
};

/**
 * A simulated tab: joins with an adapter, follows rounds, reports each step after `stepMs` with a
 * loss that falls with the step (so the charts have a shape), uploads checkpoints when asked.
 */
class SimulatedTab {
  job!: JobPublic;
  rank: number | null = null;
  closed = false;
  private round: { round: number; rank: number; shares: number[] } | null = null;
  private training = false;
  private heartbeat: NodeJS.Timeout | null = null;
  /** What its heartbeats say as `peerRttMs` (undefined: the field is left out, as an older tab does). */
  peerRttMs: number | null | undefined = undefined;
  /** Extra ICE fields its heartbeats carry (`peerLinks`, `iceError`), if any. */
  iceFields: Record<string, unknown> = {};
  /** Share of each step's time it claims as compute (default 0.6 + 0.2 · rank); the rest is its allreduce. */
  computeShare: number | null = null;
  private readonly timers = new Set<NodeJS.Timeout>();

  private constructor(
    readonly worker: SimWorker,
    private readonly httpUrl: string,
    private readonly stepMs: number,
  ) {}

  static async join(
    proc: CoordinatorProcess,
    adapter: (typeof ADAPTERS)[number],
    stepMs: number,
  ): Promise<SimulatedTab> {
    const worker = await SimWorker.connect(proc.wsUrl);
    const tab = new SimulatedTab(worker, proc.url, stepMs);
    // The first adapter's tab reports tuned kernels; the others send none, as an older tab.
    const kernels = adapter === ADAPTERS[0] ? KERNELS : undefined;
    const welcome = await worker.join({ adapter, kernels });
    tab.job = welcome.job as JobPublic;
    worker.onMessage = (msg) => tab.onMessage(msg);
    for (const msg of worker.drain()) tab.onMessage(msg);
    tab.heartbeat = setInterval(() => !worker.isClosed && tab.sendHeartbeat(), tab.job.heartbeatMs / 2);
    void worker.closed.then(() => {
      tab.closed = true;
      tab.stop();
    });
    return tab;
  }

  get id(): string {
    return this.worker.workerId!;
  }

  sendHeartbeat(): void {
    if (this.peerRttMs === undefined && Object.keys(this.iceFields).length === 0) this.worker.heartbeat();
    else
      this.worker.send({
        type: 'heartbeat',
        runId: this.worker.runId,
        workerId: this.worker.workerId,
        ...(this.peerRttMs === undefined ? {} : { peerRttMs: this.peerRttMs }),
        ...this.iceFields,
      });
  }

  private onMessage(msg: ServerMsg): void {
    switch (msg.type) {
      case 'round': {
        const me = (msg.world as { workerId: string; rank: number }[]).find((w) => w.workerId === this.id);
        this.training = false;
        if (!me) return;
        this.round = { round: msg.round, rank: me.rank, shares: msg.world.map((w: { share: number }) => w.share) };
        this.rank = me.rank;
        this.worker.ready(msg.round);
        this.nextStep = msg.step;
        break;
      }
      case 'train':
        if (this.round?.round === msg.round) {
          this.training = true;
          this.compute(this.nextStep);
        }
        break;
      case 'committed':
        if (this.training && this.round?.round === msg.round) this.compute(msg.step + 1);
        break;
      case 'round_closed':
      case 'done':
        this.training = false;
        break;
      case 'checkpoint_request':
        void fetch(`${this.httpUrl}${msg.url}`, { method: 'PUT', body: simulatedSnapshot(this.job, msg.step) }).then(
          (r) => r.arrayBuffer(),
        );
        break;
    }
  }

  private nextStep = 1;

  private compute(step: number): void {
    const round = this.round;
    if (!round || step > referenceTotalSteps(this.job)) return;
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (!this.training || this.round !== round || this.worker.isClosed) return;
      const { cursor, count } = referenceStepPosition(step, this.job);
      const samples = assignStep(cursor, count, round.shares)[round.rank].count;
      // A loss curve with a shape: decays with the step, with a little step-dependent wobble.
      const loss = 0.35 + 1.9 * Math.exp(-step / 60) + 0.08 * Math.sin(step * 1.7);
      this.worker.report({
        round: round.round,
        rank: round.rank,
        step,
        hash: simulatedStateHash(this.job, step),
        samples,
        lossSum: samples * loss,
        computeMs: this.stepMs * (this.computeShare ?? 0.6 + 0.2 * round.rank),
        wireBytes: samples * WIRE_BYTES_PER_SAMPLE,
      });
      if (!referenceIsCommitPoint(step, this.job)) this.compute(step + 1);
    }, this.stepMs);
    this.timers.add(timer);
  }

  stop(): void {
    this.training = false;
    if (this.heartbeat) clearInterval(this.heartbeat);
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }

  async close(): Promise<void> {
    this.stop();
    await this.worker.close();
  }
}

/** Worker rows of the table: [rank, worker id] in table order. */
function tableRows(page: Page): Promise<[number, string][]> {
  return page.$$eval('#workers-body tr', (rows) =>
    rows.map(
      (tr) =>
        [Number(tr.querySelector('td.rank')!.textContent), tr.getAttribute('data-worker-id')!] as [number, string],
    ),
  );
}

const skip = skipWithoutChromium() || skipWithoutWebBuild();

describe.skipIf(skip)('admin page', () => {
  let proc: CoordinatorProcess;
  let browser: Browser;
  const tabs: SimulatedTab[] = [];

  beforeAll(async () => {
    if (
      !existsSync(join(WEB_BUILD_DIR, 'web/admin/index.html')) &&
      !existsSync(join(WEB_BUILD_DIR, 'admin/index.html'))
    ) {
      throw new Error(
        `${WEB_BUILD_DIR} has no admin page: run \`npx vite build\` first (npm test does), or set TABSWARM_DIST`,
      );
    }
    mkdirSync(ARTIFACTS, { recursive: true });
    proc = await spawnCoordinator({ job: JOB, extraArgs: ['--dist', WEB_BUILD_DIR] });
    browser = await launchChromium();
  });

  afterAll(async () => {
    for (const tab of tabs) await tab.close();
    await browser?.close();
    await proc?.stop();
  });

  async function openAdmin(
    viewport: { width: number; height: number },
    query = '',
  ): Promise<{ page: Page; problems: PageProblems }> {
    const context = await browser.newContext({ viewport, acceptDownloads: true });
    const page = await context.newPage();
    const problems = watchPage(page);
    await page.goto(`${proc.url}/admin/${query}`);
    return { page, problems };
  }

  it('signs in, lists the workers with their ranks, kicks one while training goes on, downloads the model', async () => {
    const { page, problems } = await openAdmin({ width: 1280, height: 800 });
    // Without a token: the login prompt, and a wrong token is refused.
    await page.waitForSelector('#login-form', { state: 'visible' });
    expect(await page.isHidden('#app')).toBe(true);
    await page.fill('#token-input', 'wrong-token');
    await page.click('#login-form button[type=submit]');
    await page.waitForSelector('#login-error', { state: 'visible' });
    expect(await page.textContent('#login-error')).toMatch(/refused/);
    await page.fill('#token-input', TEST_ADMIN_TOKEN);
    await page.click('#login-form button[type=submit]');
    await page.waitForSelector('#app', { state: 'visible' });
    await page.waitForSelector('#connection[data-state=live]');

    for (const adapter of ADAPTERS) tabs.push(await SimulatedTab.join(proc, adapter, 70));
    // The table shows the three tabs with the ranks the coordinator assigned them.
    await page.waitForFunction(() => document.querySelectorAll('#workers-body tr').length === 3, undefined, {
      timeout: 20_000,
    });
    await expect.poll(() => tabs.every((t) => t.rank !== null), { timeout: 10_000 }).toBe(true);
    // Waiting workers are rows too (their rank cell shows their place in the queue): wait for the ranks.
    await page.waitForFunction(
      () =>
        Array.from(document.querySelectorAll('#workers-body td.rank')).every((td) =>
          /^\d+$/.test(td.textContent ?? ''),
        ),
      undefined,
      { timeout: 10_000 },
    );
    const rows = await tableRows(page);
    expect(rows.map(([rank]) => rank)).toEqual([0, 1, 2]);
    expect(new Map(rows.map(([rank, id]) => [id, rank]))).toEqual(new Map(tabs.map((t) => [t.id, t.rank])));
    const status = await proc.status();
    expect(rows.map(([, id]) => id)).toEqual(status.world.items.map((w: { id: string }) => w.id));
    expect(await page.textContent(`#workers-body tr[data-worker-id="${tabs[1].id}"] .adapter-cell`)).toBe(
      'intel gen-12lp',
    );
    // The kernels a tab reported in its hello; a tab that reported none shows a dash.
    const kernelsCell = (id: string) => page.textContent(`#workers-body tr[data-worker-id="${id}"] .kernels-cell`);
    expect(await kernelsCell(tabs[0].id)).toBe('4x4 wgmem wg16x16 tk16 · 1,235 GFLOP/s · tuned in 2.1 s');
    expect(await kernelsCell(tabs[1].id)).toBe('–');
    expect(status.world.items.find((w: { id: string }) => w.id === tabs[0].id)?.kernels).toEqual(KERNELS);

    // RTT column: a heartbeat's peerRttMs shows in ms; a tab that never sends it (older tab) shows "–".
    tabs[0].peerRttMs = 12.5;
    tabs[2].peerRttMs = 3.25;
    // ICE path: rank 2's links go through a TURN relay (the path shows after the RTT).
    tabs[2].iceFields = { peerLinks: [{ peer: tabs[1].id, local: 'relay', remote: 'srflx' }] };
    tabs[0].sendHeartbeat();
    tabs[2].sendHeartbeat();
    const rttCell = (id: string) => page.textContent(`#workers-body tr[data-worker-id="${id}"] td.rtt`);
    await expect.poll(() => rttCell(tabs[0].id), { timeout: 10_000 }).toBe('12.5 ms');
    await expect.poll(() => rttCell(tabs[2].id), { timeout: 10_000 }).toBe('3.25 ms · relay');
    expect(await rttCell(tabs[1].id)).toBe('–');
    const rttStatus = await proc.status();
    expect(
      new Map(rttStatus.world.items.map((w: { id: string; peerRttMs: number | null }) => [w.id, w.peerRttMs])),
    ).toEqual(
      new Map([
        [tabs[0].id, 12.5],
        [tabs[1].id, null],
        [tabs[2].id, 3.25],
      ]),
    );
    expect(await page.textContent('#workers-table thead th.rtt')).toBe('RTT · path');
    expect((await proc.status()).world.items.find((w: { id: string }) => w.id === tabs[2].id)?.peerLinks).toEqual([
      { peer: tabs[1].id, local: 'relay', remote: 'srflx' },
    ]);
    // An ICE problem a tab reports replaces its RTT cell (within one heartbeat) and is in /api/status.
    tabs[1].iceFields = { iceError: 'TURN authentication failed (401 Unauthorized at turn:203.0.113.2:3478)' };
    tabs[1].sendHeartbeat();
    await expect.poll(() => rttCell(tabs[1].id), { timeout: 10_000 }).toMatch(/^TURN authentication failed/);
    expect((await proc.status()).world.items.find((w: { id: string }) => w.id === tabs[1].id)?.iceError).toMatch(/401/);
    tabs[1].iceFields = { iceError: null };
    tabs[1].sendHeartbeat();
    await expect.poll(() => rttCell(tabs[1].id), { timeout: 10_000 }).toBe('–');

    // The sync line, and the utilization and bytes/sample the coordinator measured, for the job and per tab.
    expect(await page.textContent('#sync-line')).toBe('Sync: every step, fp16');
    await expect.poll(() => page.textContent('#sum-wire'), { timeout: 10_000 }).toBe('250 B');
    const measured = await proc.status();
    expect(measured.usage.recent.utilization).toBeGreaterThan(0);
    expect(measured.usage.recent.utilization).toBeLessThanOrEqual(1);
    // Rank 0 claims 0.6 of the step time, rank 2 all of it (capped at the wall time the coordinator measured).
    const utilizationOf = (rank: number) =>
      measured.world.items.find((w: { rank: number }) => w.rank === rank)!.utilization as number;
    expect(utilizationOf(0)).toBeLessThan(utilizationOf(2));
    expect(utilizationOf(2)).toBeLessThanOrEqual(1);
    expect(await page.textContent('#sum-utilization')).toMatch(/^\d{1,3}%$/);
    for (const tab of tabs) {
      const cell = (name: string) => page.textContent(`#workers-body tr[data-worker-id="${tab.id}"] td.${name}`);
      await expect.poll(() => cell('wire'), { timeout: 10_000 }).toBe('250 B');
      const shown = Number((await cell('utilization'))!.replace('%', '')) / 100;
      expect(shown).toBeGreaterThan(0);
      expect(shown).toBeLessThanOrEqual(1);
    }
    await page.waitForSelector('#usage-empty', { state: 'hidden' });

    // Let it train past a checkpoint, then keep a screenshot of the full page.
    await page.waitForFunction(() => document.querySelectorAll('#checkpoints-body tr').length > 0, undefined, {
      timeout: 30_000,
    });
    await page.waitForFunction(() => document.querySelectorAll('#event-list li[data-category=join]').length >= 3);
    await page.screenshot({ path: join(ARTIFACTS, 'admin-page-1280x800.png'), fullPage: true });
    await page.screenshot({ path: join(ARTIFACTS, 'admin-page-1280x800-viewport.png') });

    // Kick rank 1 (two clicks: arm, confirm): its row goes, it is disconnected, the others train on as ranks 0 and 1.
    const victim = rows.find(([rank]) => rank === 1)![1];
    const victimTab = tabs.find((t) => t.id === victim)!;
    const kick = page.locator(`#workers-body tr[data-worker-id="${victim}"] button.kick`);
    await kick.click();
    await expect.poll(() => kick.textContent()).toBe('Confirm kick');
    await kick.click();
    await page.waitForFunction((id) => !document.querySelector(`#workers-body tr[data-worker-id="${id}"]`), victim, {
      timeout: 15_000,
    });
    await expect.poll(() => victimTab.closed, { timeout: 10_000 }).toBe(true);
    await page.waitForFunction(() => document.querySelectorAll('#workers-body tr').length === 2, undefined, {
      timeout: 15_000,
    });
    const afterKick = await proc.status();
    await expect
      .poll(
        async () => {
          const s = await proc.status();
          return s.step > afterKick.step && s.world.total === 2 && s.state === 'training';
        },
        { timeout: 20_000 },
      )
      .toBe(true);
    expect((await tableRows(page)).map(([rank]) => rank)).toEqual([0, 1]);
    expect((await tableRows(page)).map(([, id]) => id)).not.toContain(victim);
    await page.waitForSelector(`#event-list li[data-event=leave]`);
    expect(await page.textContent('#event-list')).toContain(`${victim} left (kicked)`);

    // The model download is a safetensors file whose tensors equal the checkpointed parameters.
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-model')]);
    const file = join(ARTIFACTS, download.suggestedFilename());
    await download.saveAs(file);
    const bytes = new Uint8Array(readFileSync(file));
    const headerLength = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLength)));
    const step = Number(header.__metadata__['tabswarm.step']);
    expect(download.suggestedFilename()).toBe(`tabswarm-tiny-mlp-step${step}.safetensors`);
    const spec = tabs[0].job.model;
    const layout = parameterLayout(spec);
    const expected = simulatedParams(spec, step);
    let dataBytes = 0;
    for (const entry of layout.entries) {
      const info = header[entry.name];
      expect(info).toMatchObject({ dtype: 'F32', shape: entry.shape });
      const [begin, end] = info.data_offsets as [number, number];
      expect(end - begin).toBe(entry.size * 4);
      dataBytes += end - begin;
      const values = new Float32Array(bytes.slice(8 + headerLength + begin, 8 + headerLength + end).buffer);
      expect(values).toEqual(expected.subarray(entry.offset, entry.offset + entry.size));
    }
    expect(bytes.length).toBe(8 + headerLength + dataBytes);

    // Invites: create one with a tab limit (its link is listed), then revoke it.
    await page.fill('#invite-label', 'lab');
    await page.fill('#invite-max-tabs', '2');
    await page.click('#invite-form button[type=submit]');
    const invite = page.locator('#invites-body tr[data-state=live]');
    await invite.waitFor();
    expect(await invite.locator('.invite-link a').getAttribute('href')).toMatch(/\/\?invite=[A-Za-z0-9_-]{20,}$/);
    expect(await invite.locator('td.num').textContent()).toBe('0 / 2');
    const listed = (await (
      await proc.fetch('/api/admin/invites', { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })
    ).json()) as { invites: { label: string; maxTabs: number }[] };
    expect(listed.invites).toMatchObject([{ label: 'lab', maxTabs: 2 }]);
    await invite.locator('button').click();
    await page.waitForSelector('#invites-body tr[data-state=revoked]');

    await page.screenshot({ path: join(ARTIFACTS, 'admin-page-1280x800-after-kick.png'), fullPage: true });
    // The refused sign-in is a 401 that Chromium logs as a console error; anything else is a problem.
    expect(problems.errors.filter((e) => !/status of 401/.test(e))).toEqual([]);
  });

  it('works on a phone-sized screen, signed in once through ?token=', async () => {
    const { page, problems } = await openAdmin({ width: 390, height: 844 }, `?token=${TEST_ADMIN_TOKEN}`);
    await page.waitForSelector('#app', { state: 'visible' });
    // The token left the address bar (kept in this tab's session storage only).
    expect(new URL(page.url()).searchParams.has('token')).toBe(false);
    await page.waitForFunction(() => document.querySelectorAll('#workers-body tr').length === 2, undefined, {
      timeout: 15_000,
    });
    await page.waitForSelector('#connection[data-state=live]');
    await page.screenshot({ path: join(ARTIFACTS, 'admin-page-390x844.png'), fullPage: true });
    await page.screenshot({ path: join(ARTIFACTS, 'admin-page-390x844-viewport.png') });
    // Nothing wider than the screen (tables scroll inside their card).
    const wide = await page.evaluate(() =>
      Array.from(document.querySelectorAll('body *'))
        .filter((node) => node.getBoundingClientRect().right > window.innerWidth + 0.5 && !node.closest('.table-wrap'))
        .map(
          (node) =>
            `${node.tagName.toLowerCase()}#${node.id}.${node.className} right=${node.getBoundingClientRect().right}`,
        ),
    );
    expect(wide).toEqual([]);
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);

    // Controls: pause and resume, change the worker bounds.
    await page.click('#pause');
    await page.waitForSelector('#job-state[data-state=paused]', { timeout: 10_000 });
    expect((await proc.status()).state).toBe('paused');
    await page.waitForSelector('#resume', { state: 'visible' });
    await page.click('#resume');
    await page.waitForSelector('#job-state[data-state=training]', { timeout: 15_000 });
    await page.fill('#max-workers', '3');
    await page.click('#workers-form button[type=submit]');
    await page.waitForSelector('#control-message:has-text("Workers set to 2–3")');
    expect(await proc.status()).toMatchObject({ minWorkers: 2, maxWorkers: 3 });

    // A reload keeps the session (token from sessionStorage).
    await page.reload();
    await page.waitForSelector('#app', { state: 'visible' });
    await page.waitForSelector('#connection[data-state=live]');
    expect(await page.inputValue('#max-workers')).toBe('3');
    problems.assertNone();
  });
});

describe.skipIf(skip)('admin page: every-step sync slower than the compute', () => {
  let proc: CoordinatorProcess;
  let browser: Browser;
  const tabs: SimulatedTab[] = [];

  beforeAll(async () => {
    proc = await spawnCoordinator({ job: JOB, extraArgs: ['--dist', WEB_BUILD_DIR] });
    browser = await launchChromium();
  });

  afterAll(async () => {
    for (const tab of tabs) await tab.close();
    await browser?.close();
    await proc?.stop();
  });

  it('shows the advice to use local steps on the job card, as /api/status has it', async () => {
    for (const adapter of ADAPTERS.slice(0, 2)) {
      const tab = await SimulatedTab.join(proc, adapter, 60);
      tab.computeShare = 0.1; // a tenth of each step computing, the rest waiting on the allreduce
      tabs.push(tab);
    }
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    const problems = watchPage(page);
    await page.goto(`${proc.url}/admin/?token=${TEST_ADMIN_TOKEN}`);
    await page.waitForSelector('#sync-advice', { state: 'visible', timeout: 30_000 });
    const text = (await page.textContent('#sync-advice'))!;
    expect(text).toMatch(/^Every step waits \d+ ms on the network for \d+ ms of compute/);
    // The figures follow every report; the page shows the status the feed carried a moment ago.
    const status = await proc.status();
    expect(status.syncAdvice!.message).toMatch(
      /^Every step waits .* "sync": \{"mode":"local","innerSteps":\d+,"compression":"int8"\}/,
    );
    expect(text).toContain('"compression":"int8"');
    expect(status.syncAdvice!.syncMsPerStep).toBeGreaterThan(status.syncAdvice!.computeMsPerStep);
    await page.screenshot({ path: join(ARTIFACTS, 'admin-page-sync-advice.png') });
    problems.assertNone();
  });
});
