/**
 * `npm run bench:sync` (root; tsx bench/sync.ts): every-step against local-step (DiLoCo) sync, with and
 * without a compressed wire, across NATed homes on slow access links (the test bed, coordinator/netbed;
 * nothing shapes the machine's own loopback). One JSON line `{"bench":"sync","runs":[…]}`.
 *
 * Per (link profile × configuration): a fresh scene (HTTPS coordinator + coturn in the public segment,
 * three Chromiums each in its own home behind its own NAT and access link), the job below, then a
 * fixed wall-clock window of training once all three tabs train (`--window`, 60 s by default):
 * - samples/s: the samples of the commits inside the window over the time between the first and the
 *   last of them (the coordinator's `committedAt`), so a local-mode window is not cut mid outer step;
 * - bytes per sample: the `wireBytes` the tabs put in their step reports (read off each page's control
 *   WebSocket frames) for the steps of those commits, summed over tabs, over the samples; beside it the
 *   bytes the tabs' RTCPeerConnections really sent (`transport.bytesSent`, so DTLS/SCTP framing and
 *   retransmissions included) over the same wall window, per committed sample;
 * - utilization: each tab's reported `computeMs` for those steps over the same time, and the mean;
 * - accuracy: at the window's end rank 0 uploads the last committed state (admin `checkpoint`, the
 *   links unshaped again); this process decodes it and evaluates it on the first `--test` test images
 *   (all 10,000 by default) in float64 on the CPU (bench/lib/evaluate-snapshot.ts).
 *
 * The set-up (dataset download, WebRTC, two commit points) runs on the profile's delay at 1 Gbit/s
 * without loss; the profile's rate and loss go on (tc/nft in the homes and routers) one commit point
 * before the window and come off after it, so the runs spend their time measuring, not downloading.
 *
 * Goals: (issue 13) on the poor profile, local H = 32 int8 at ≥ 10× the samples/s of every-step fp32,
 * with compute utilization ≥ 0.8; (issue 24) overlapped local H = 32 int8 (`overlap32:int8`, its outer
 * steps overlapped with the next inner steps) at utilization ≥ 0.9 on broadband and ≥ 0.85 on the poor
 * profile, its accuracy at the window's end (a fixed wall time) within 1 point of local H = 32 int8's.
 *
 * Options: --replay a.err,b.err (print the table and JSON of runs recorded on stderr, see replayRuns)
 *          --profiles broadband,poor
 *          --configs every-step:none,every-step:fp16,local8:fp16,local32:int8,overlap32:int8
 *          --window 60 (s)  --train 60000 (training images served)  --test 10000
 *          --events (print the coordinator's event log of each run at its end)
 * This file runs the scenes; the figures are bench/lib/sync-figures.ts, the table, JSON line and
 * replay bench/lib/sync-report.ts.
 */
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import type { StatusResponse, StatusSummary } from '../core/protocol/views';
import { COORDINATOR_IP, type LinkProfile } from '../tools/netbed/netbed';
import { COORDINATOR_PORT, Scene } from '../tools/netbed/scene';
import { launchSwarmChromium } from '../tools/swarm/chromium';
import { FASHION_MNIST_DIR, WEB_BUILD_DIR } from '../test/support/browser';
import { commitsFrom } from '../tools/swarm/coordinator-api';
import { makeTempDir } from '../test/support/fake-dataset';
import { writeDatasetSlice } from '../test/support/small-dataset';
import { arg, exitUnlessReady } from './lib/common';
import { snapshotAccuracy } from './lib/evaluate-snapshot';
import { configName, parseConfig, SYNC_PROFILES as PROFILES, type SyncConfig, syncField } from './lib/sync-configs';
import { formulaBytesPerSample, GLOBAL_BATCH, type Report, TABS, windowFigures } from './lib/sync-figures';
import { printReport, replayRuns, type Run } from './lib/sync-report';
import { shapeAccessLinks } from './lib/shape-links';

function jobFor(config: SyncConfig): Record<string, unknown> {
  return {
    model: 'mlp',
    globalBatch: GLOBAL_BATCH,
    epochs: 1000, // never reached: the window ends the run
    minWorkers: TABS,
    maxWorkers: TABS,
    sync: syncField(config),
    // No periodic checkpoints inside the window (epoch ends still take one, as in any run).
    checkpointEvery: 10_000_000,
    heartbeatMs: 2000,
    lastCallMs: 500,
    seed: 13,
    evalSamples: 0, // the tabs never evaluate; this process does (see the header)
    // Trusted tabs of our own: the bench measures sync, not checks (bench:verify measures those), and an
    // overlapped job may not verify. Without this the CLI would verify the open job by default (issue 21).
    verify: false,
  };
}

interface Tab {
  page: Page;
  reports: Report[];
}

/** Runs in the page before its scripts: keeps every RTCPeerConnection, so their transports' bytes can be read. */
function trackPeerConnections(): void {
  const Native = window.RTCPeerConnection;
  const all: RTCPeerConnection[] = [];
  (window as unknown as { __benchPcs: RTCPeerConnection[] }).__benchPcs = all;
  window.RTCPeerConnection = class extends Native {
    constructor(config?: RTCConfiguration) {
      super(config);
      all.push(this);
    }
  } as typeof RTCPeerConnection;
}

/** Bytes sent by all of the page's peer connections' transports so far. */
async function rtcBytesSent(page: Page): Promise<number> {
  return page.evaluate(async () => {
    const pcs = (window as unknown as { __benchPcs?: RTCPeerConnection[] }).__benchPcs ?? [];
    let sum = 0;
    for (const pc of pcs) {
      if (pc.connectionState === 'closed') continue;
      (await pc.getStats()).forEach((s: { type: string; bytesSent?: number }) => {
        if (s.type === 'transport') sum += s.bytesSent ?? 0;
      });
    }
    return sum;
  });
}

/** Scene.openTab plus the bench's probes: the page's step reports and its peer connections. */
async function openTab(scene: Scene, home: number): Promise<Tab> {
  const ns = scene.bed.homes[home].ns;
  const browser = await launchSwarmChromium({
    wrap: (executable) => scene.bed.wrapper(ns, executable),
    args: [`--ignore-certificate-errors-spki-list=${scene.certs.spkiHashes.join(',')}`],
  });
  const page = await (await browser.newContext()).newPage();
  scene.tabs.push({ home, browser, page }); // closed with the scene
  await page.addInitScript(trackPeerConnections);
  const tab: Tab = { page, reports: [] };
  page.on('websocket', (ws) =>
    ws.on('framesent', ({ payload }) => {
      if (typeof payload !== 'string' || !/"(step|outer)_report"/.test(payload)) return;
      const m = JSON.parse(payload) as Partial<Report> & { type: string };
      if (m.type !== 'step_report' && m.type !== 'outer_report') return;
      tab.reports.push({
        step: m.step ?? -1,
        samples: m.samples ?? 0,
        computeMs: m.computeMs ?? 0,
        wireBytes: m.wireBytes ?? 0,
        at: Date.now(),
        ...(m.type === 'outer_report' ? { outer: true } : {}),
      });
    }),
  );
  await page.goto(`${scene.url}/?${new URLSearchParams({ autostart: '1', mode: 'elastic', testSubset: '0' })}`);
  return tab;
}

/** GET a coordinator path through the scene's Unix-socket relay; the raw body. */
function download(scene: Scene, path: string): Promise<Buffer> {
  // The relay Scene.start opened (netbed.unixProxy names it by host and port).
  const socketPath = join(scene.bed.dir, `proxy-${COORDINATOR_IP}-${COORDINATOR_PORT}.sock`);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath,
        host: COORDINATOR_IP,
        path,
        ca: readFileSync(scene.certs.caCert),
        timeout: 30_000,
        headers: { authorization: `Bearer ${scene.adminToken}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => chunks.push(d));
        res.on('end', () =>
          res.statusCode === 200
            ? resolve(Buffer.concat(chunks))
            : reject(new Error(`${path}: ${res.statusCode} ${Buffer.concat(chunks).toString().slice(0, 200)}`)),
        );
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`${path}: no answer in 30 s`)));
    req.end();
  });
}

/** Sleep for the window, printing progress every 10 s. */
async function trainWindow(scene: Scene, tabs: Tab[], label: string, windowMs: number): Promise<void> {
  const end = performance.now() + windowMs;
  while (performance.now() < end) {
    await new Promise((r) => setTimeout(r, Math.min(10_000, end - performance.now())));
    const s = await scene.api<StatusResponse>('/api/status');
    const reported = tabs.map((t) => t.reports.at(-1)?.step ?? '–').join('/');
    process.stderr.write(
      `  ${label}: committed step ${s.step}, world ${s.world.total}, tabs reported ${reported}, ${Math.round((end - performance.now()) / 1000)} s left\n`,
    );
  }
}

async function scenario(
  profile: string,
  config: SyncConfig,
  o: { windowMs: number; dataset: string; test: number },
): Promise<Run> {
  const label = `${profile} ${configName(config)}`;
  const link = PROFILES[profile];
  // Set-up (dataset download, WebRTC, warm-up) on the profile's delay at 1 Gbit/s without loss; the
  // profile's rate and loss go on before the measured window (see shapeAccessLinks).
  const setup: LinkProfile = { ...link, rateMbit: 1000, lossPercent: 0 };
  const scene = await Scene.start({
    homes: Array.from({ length: TABS }, () => ({ nat: 'endpoint-independent' as const, link: setup })),
    job: jobFor(config),
    datasetDir: o.dataset,
    distDir: WEB_BUILD_DIR,
  });
  try {
    const tabs = await Promise.all(Array.from({ length: TABS }, (_, i) => openTab(scene, i)));
    // Warm: all three train and one commit point of the full world is behind them.
    const H = config.innerSteps;
    const warm = await scene.statusUntil(
      (s) => s.world.total === TABS && s.state === 'training' && s.step >= 2 * H,
      'trained two commit points with all tabs',
      600_000,
      250,
    );
    shapeAccessLinks(scene, link);
    // One commit point on the shaped links before the window, if one comes within 2 minutes (every-step
    // fp32 on the poor profile may commit nothing at all: then the window measures that).
    const shaped = await scene
      .statusUntil(
        (s) => s.world.total === TABS && s.step >= warm.step + H,
        'a commit point on shaped links',
        120_000,
        250,
      )
      .catch(() => scene.api<StatusResponse>('/api/status'));
    process.stderr.write(
      `  ${label}: all ${TABS} tabs train (step ${warm.step}), shaped links from step ${warm.step}; window from step ${shaped.step}, ${o.windowMs / 1000} s\n`,
    );
    const rtc0 = await Promise.all(tabs.map((t) => rtcBytesSent(t.page)));
    const t0 = Date.now();
    await trainWindow(scene, tabs, label, o.windowMs);
    const t1 = Date.now();
    const rtc1 = await Promise.all(tabs.map((t) => rtcBytesSent(t.page)));
    const end = await scene.api<StatusResponse>('/api/status');
    // Diagnosis: the coordinator's event log since the links were shaped (rounds, failures, time-outs).
    if (process.argv.includes('--events'))
      for (const line of await scene.eventLines(80)) process.stderr.write(`  ${line}\n`);
    // The checkpoint is the last commit when the request is accepted: ask before the links go fast again.
    const accepted = await requestCheckpoint(scene, () => shapeAccessLinks(scene, setup));
    const commits = (await commitsFrom((path) => scene.api(path), shaped.step + 1)).filter((c) => c.committedAt <= t1);
    if (commits.some((c) => c.worldSize !== TABS)) throw new Error(`${label}: a commit lacks a tab`);
    const figures = windowFigures(
      commits,
      tabs.map((t) => t.reports),
      shaped.step,
      t0,
      t1,
      config.overlap === true,
    );
    const rtcBytes = rtc1.reduce((a, b) => a + b, 0) - rtc0.reduce((a, b) => a + b, 0);
    const accuracy = await evaluateCommitted(scene, label, accepted, o);
    return {
      profile,
      ...config,
      ...figures,
      rtcBytesPerSample: figures.windowSamples > 0 ? rtcBytes / figures.windowSamples : null,
      formulaBytesPerSample: formulaBytesPerSample(config),
      accuracy: accuracy.accuracy,
      accuracyStep: accuracy.step,
      testImages: accuracy.testImages,
      windowSeconds: (t1 - t0) / 1000,
      restarts: end.restarts - shaped.restarts,
    };
  } finally {
    await scene.close();
  }
}

/**
 * Rank 0 uploads the last commit of the window (admin `checkpoint`, on the unshaped links: the
 * measurement is over), evaluated here on the CPU.
 */
async function evaluateCommitted(
  scene: Scene,
  label: string,
  step: number,
  o: { dataset: string; test: number },
): Promise<{ step: number; accuracy: number; testImages: number }> {
  const saved = await scene.statusUntil(
    (s) => s.latestCheckpoint !== null && s.latestCheckpoint.step >= step,
    `uploaded a checkpoint at or after step ${step}`,
    180_000,
    500,
  );
  await scene.api('/api/admin/pause', {});
  const bytes = await download(scene, `/api/checkpoints/${saved.latestCheckpoint!.step}`);
  const result = await snapshotAccuracy(bytes, FASHION_MNIST_DIR, o.test);
  process.stderr.write(
    `  ${label}: step ${result.step}: ${(result.accuracy * 100).toFixed(2)} % on ${result.testImages} test images\n`,
  );
  return result;
}

/**
 * Admin `checkpoint` (rank 0 uploads the last commit); `unshape` runs right after the first attempt, and
 * a refusal (no round member holds the last commit: a round is re-forming) is retried every 2 s for at
 * most 3 minutes. Returns the committed step when it was accepted.
 */
async function requestCheckpoint(scene: Scene, unshape: () => void): Promise<number> {
  const end = performance.now() + 180_000;
  for (let first = true; ; first = false) {
    const answer = await scene
      .api<{ status: StatusSummary }>('/api/admin/checkpoint', {})
      .catch((error: Error) => (/ 409 /.test(error.message) ? null : Promise.reject(error)));
    if (first) unshape();
    if (answer) return answer.status.step;
    if (performance.now() > end) throw new Error('no checkpoint request accepted in 3 minutes');
    await new Promise((r) => setTimeout(r, 2000));
  }
}

async function main(): Promise<void> {
  // A replay only reads files: it needs neither the test bed nor the web app.
  const replay = arg('replay', '');
  if (replay) {
    printReport(replayRuns(replay.split(',')), { replayedFrom: replay }, PROFILES);
    process.exit(0);
  }
  exitUnlessReady('bench:sync', { netbed: true });
  const profiles = arg('profiles', 'broadband,poor').split(',');
  for (const p of profiles) if (!PROFILES[p]) throw new Error(`unknown profile "${p}" (broadband, poor)`);
  const configs = arg('configs', 'every-step:none,every-step:fp16,local8:fp16,local32:int8,overlap32:int8')
    .split(',')
    .map(parseConfig);
  const windowMs = Number(arg('window', '60')) * 1000;
  const train = Number(arg('train', '60000'));
  const test = Number(arg('test', '10000'));
  // The tabs download only the training images they are served (a slice); the test set stays here.
  const dataset = await writeDatasetSlice(FASHION_MNIST_DIR, join(makeTempDir('tabswarm-bench-sync-'), 'fm'), train, 1);
  const runs: Run[] = [];
  for (const profile of profiles) {
    for (const config of configs) {
      process.stderr.write(`bench:sync: ${profile} ${configName(config)}…\n`);
      runs.push(await scenario(profile, config, { windowMs, dataset, test }));
      process.stderr.write(`  run: ${JSON.stringify(runs.at(-1))}\n`); // kept if a later run fails
    }
  }
  printReport(runs, { trainImages: train }, PROFILES);
  process.exit(0);
}

await main();
