/**
 * Volunteers on other hosts and networks, on the network test bed (root; skipped without it locally,
 * a failure under CI): every tab is a Chromium in its own home namespace behind its own NAT router,
 * the coordinator serves HTTPS from the public segment with a certificate of a test CA (trusted by
 * its key, `--ignore-certificate-errors-spki-list`), coturn relays, the access links are 40 ms /
 * 20 Mbit/s each way.
 *
 * 1. Three tabs, one behind a symmetric NAT, train ≥ 50 committed steps; the symmetric tab's links
 *    are TURN relays (getStats), the link between the other two is not. Then one tab crashes, one
 *    closes, one joins from a fourth home: the audit is clean, every step committed once with one
 *    hash, restarts = crashes.
 * 2. Relay-only ICE with coturn's ephemeral credentials trains.
 * 3. A coordinator minting credentials with the wrong secret: the page and /api/status say
 *    "TURN authentication failed" within 10 s.
 *
 * Runtime here: about 2 minutes for the file (80 s, 20–30 s, 10 s), each scene built and torn down.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StatusResponse } from '../../core/protocol/views';
import { netbedUnavailable, type LinkProfile } from '../../tools/netbed/netbed';
import { Scene, type SceneTab } from '../../tools/netbed/scene';
import {
  FASHION_MNIST_DIR,
  skipWithout,
  skipWithoutChromium,
  skipWithoutFashionMnist,
  skipWithoutWebBuild,
  WEB_BUILD_DIR,
} from '../support/browser';
import { makeTempDir } from '../support/fake-dataset';
import { writeDatasetSlice } from '../support/small-dataset';

const skip =
  skipWithout('root, ip, nft, tc, python3 (the network test bed)', netbedUnavailable() === null) ||
  skipWithout(
    'coturn (apt-get install coturn)',
    !!process.env.PATH?.split(':').some((d) => existsSync(`${d}/turnserver`)),
  ) ||
  skipWithoutChromium() ||
  skipWithoutFashionMnist() ||
  skipWithoutWebBuild();

const LINK: LinkProfile = { delayMs: 40, jitterMs: 0, rateMbit: 20, lossPercent: 0 };
const job = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  globalBatch: 32,
  epochs: 1,
  minWorkers: 1,
  maxWorkers: 4,
  commitEvery: 1,
  checkpointEvery: 16,
  heartbeatMs: 1000,
  lastCallMs: 300,
  seed: 11,
};

const workerIdOf = (tab: SceneTab) =>
  tab.page
    .waitForFunction(() => window.tabswarmElastic?.workerId ?? null, undefined, { timeout: 60_000, polling: 100 })
    .then((h) => h.jsonValue() as Promise<string>);

let dataset: string;
beforeAll(async () => {
  if (skip) return;
  dataset = await writeDatasetSlice(FASHION_MNIST_DIR, join(makeTempDir('tabswarm-netbed-'), 'fmnist'), 3200, 200);
});

describe.skipIf(skip)('tabs behind NATs on the test bed', () => {
  let scene: Scene;
  afterAll(async () => {
    await scene?.close();
  });

  it('train through STUN and TURN, the symmetric NAT relayed, and survive crash, close and join', async () => {
    scene = await Scene.start({
      homes: [
        { nat: 'endpoint-independent', link: LINK },
        { nat: 'endpoint-independent', link: LINK },
        { nat: 'symmetric', link: LINK },
        { nat: 'endpoint-independent', link: LINK },
      ],
      // Long enough that the tab left alone after the crash and the close cannot finish the job before
      // the newcomer's Chromium has started: a done job answers a hello with `done` and no worker id, so
      // on a quiet machine (one epoch is 100 steps) the test waited for the joiner's id in vain.
      job: { ...job, epochs: 50 },
      datasetDir: dataset,
      distDir: WEB_BUILD_DIR,
    });
    const tabs = await Promise.all([0, 1, 2].map((home) => scene.openTab(home, { testSubset: '0' })));
    const ids = await Promise.all(tabs.map(workerIdOf));
    const status = await scene.statusUntil(
      (s) => s.step >= 50 && s.world.total === 3 && s.world.items.every((w) => w.peerLinks.length > 0),
      'reached step 50 with 3 ranks reporting their links',
      300_000,
    );
    const links = new Map(status.world.items.map((w) => [w.id, w.peerLinks]));
    const peerToWorker = new Map(status.world.items.map((w) => [w.peerId, w.id]));
    const viaRelay = (l: { local: string; remote: string }) => l.local === 'relay' || l.remote === 'relay';
    // Every link of the symmetric-NAT tab goes through a TURN relay (its own or its neighbour's); the
    // link between the two endpoint-independent homes is direct (STUN's server-reflexive candidates).
    expect(links.get(ids[2])!.length, JSON.stringify([...links])).toBe(2);
    for (const [id, list] of links) {
      for (const link of list) {
        const other = peerToWorker.get(link.peer);
        const touchesSymmetric = id === ids[2] || other === ids[2];
        expect(viaRelay(link), `${id} → ${other}: ${JSON.stringify(link)}`).toBe(touchesSymmetric);
      }
    }

    // Faults: a crash (no goodbye), a close (goodbye), a newcomer from a fourth home.
    const cdp = await tabs[1].page.context().newCDPSession(tabs[1].page);
    const crashed = new Promise<void>((resolve) => tabs[1].page.once('crash', () => resolve()));
    cdp.send('Page.crash').catch(() => undefined);
    await crashed;
    const stepAtCrash = (await scene.api<StatusResponse>('/api/status')).step;
    await tabs[0].page.close({ runBeforeUnload: false });
    const joiner = await scene.openTab(3, { testSubset: '0' });
    const joinerId = await workerIdOf(joiner);
    const after = await scene.statusUntil(
      (s) => s.step >= stepAtCrash + 10 && s.world.items.some((w) => w.id === joinerId) && s.world.total === 2,
      'trained 10 more steps with the newcomer',
      300_000,
    );
    expect(after.restarts).toBe(1);
    const audit = await scene.api<{ ok: boolean; epochs: { duplicateCount: number }[] }>('/api/audit');
    expect(audit.ok, JSON.stringify(audit).slice(0, 2000)).toBe(true);
    expect(audit.epochs.every((e) => e.duplicateCount === 0)).toBe(true);
    const commits = await scene.api<{ commits: { step: number; hash: string }[] }>('/api/commits?from=0&limit=1000');
    expect(commits.commits.map((c) => c.step)).toEqual(Array.from({ length: commits.commits.length }, (_, i) => i + 1));
    expect(commits.commits.every((c) => /^[0-9a-f]{64}$/.test(c.hash))).toBe(true);
  });
});

describe.skipIf(skip)('TURN credentials on the test bed', () => {
  it('relay-only ICE with ephemeral coturn credentials trains', async () => {
    const scene = await Scene.start({
      homes: [
        { nat: 'endpoint-independent', link: LINK },
        { nat: 'endpoint-independent', link: LINK },
      ],
      job,
      datasetDir: dataset,
      distDir: WEB_BUILD_DIR,
      relayOnly: true,
    });
    try {
      await Promise.all([0, 1].map((home) => scene.openTab(home, { testSubset: '0' })));
      const status = await scene.statusUntil(
        (s) => s.step >= 10 && s.world.total === 2 && s.world.items.every((w) => w.peerLinks.length > 0),
        'trained 10 steps relay-only',
        240_000,
      );
      for (const w of status.world.items) for (const l of w.peerLinks) expect(l.local).toBe('relay');
    } finally {
      await scene.close();
    }
  });

  it('wrong credentials: the page and /api/status say "TURN authentication failed" within 10 s', async () => {
    const scene = await Scene.start({
      homes: [{ nat: 'endpoint-independent', link: LINK }],
      job: { ...job, minWorkers: 2 },
      datasetDir: dataset,
      distDir: WEB_BUILD_DIR,
      relayOnly: true,
      coordinatorTurnSecret: 'not-the-secret-coturn-has',
    });
    try {
      const tab = await scene.openTab(0, { testSubset: '0' });
      await workerIdOf(tab);
      const joined = performance.now();
      await tab.page.waitForFunction(
        () => /TURN authentication failed/.test(document.querySelector('#error')?.textContent ?? ''),
        undefined,
        { timeout: 10_000, polling: 100 },
      );
      await scene.statusUntil(
        (s) => [...s.world.items, ...s.waiting.items].some((w) => /TURN authentication failed/.test(w.iceError ?? '')),
        'showed the TURN failure',
        Math.max(1000, 10_000 - (performance.now() - joined)),
      );
      expect(performance.now() - joined).toBeLessThan(10_000);
    } finally {
      await scene.close();
    }
  });
});
