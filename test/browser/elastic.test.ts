/**
 * Elastic training across real headless Chromium tabs (WebGPU on SwiftShader, WebRTC through the
 * coordinator's PeerServer) against a real coordinator process: churn (a tab closed, a tab joining, a
 * renderer crashed) keeps every invariant, does not change the optimisation trajectory, and killing
 * every tab resumes from the durable checkpoint.
 *
 * Small on purpose (docs/chromium.md: SwiftShader is slow): `tiny-mlp`, global batch 64, the first 3,072
 * Fashion-MNIST training images (48 steps per epoch), 1,000 test images. The coordinator serves the
 * Vite build in `TABSWARM_DIST` (default `dist/`, which `npm test` builds first).
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { writeDatasetSlice } from '../support/small-dataset';
import {
  FASHION_MNIST_DIR,
  launchChromium,
  skipWithoutChromium,
  skipWithoutFashionMnist,
  skipWithoutWebBuild,
} from '../support/browser';
import { expectAdmittedFromPeers, expectCleanAudit } from '../support/clean-audit';
import { commitRows } from '../support/commit-log';
import type { CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir } from '../support/fake-dataset';
import type { StatusResponse } from '../../core/protocol/views';
import { coordinatorStatusUntil, type Swarm, type SwarmTab } from '../support/swarm';
import { SwarmRuns } from '../support/swarm-runs';

const TRAIN_IMAGES = 3072;
const TEST_IMAGES = 1000;
const GLOBAL_BATCH = 64;
const STEPS = TRAIN_IMAGES / GLOBAL_BATCH; // 48

const job = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  globalBatch: GLOBAL_BATCH,
  epochs: 1,
  minWorkers: 1,
  maxWorkers: 4,
  commitEvery: 1,
  checkpointEvery: 8,
  heartbeatMs: 1000,
  lastCallMs: 300,
  seed: 7,
};

const skip = skipWithoutChromium() || skipWithoutFashionMnist() || skipWithoutWebBuild();

/** The first `train`/`test` images of Fashion-MNIST as raw IDX files, so each tab downloads ~2.5 MB, not 55. */
async function writeSmallDataset(): Promise<string> {
  return writeDatasetSlice(
    FASHION_MNIST_DIR,
    join(makeTempDir('tabswarm-elastic-'), 'fashion-mnist'),
    TRAIN_IMAGES,
    TEST_IMAGES,
  );
}

/**
 * The coordinator's status once `check` holds (polled every 200 ms, for at most 2 minutes). On timeout
 * the error also says what each tab of `swarm` saw.
 */
async function statusUntil(
  coordinator: CoordinatorProcess,
  check: (s: StatusResponse) => boolean,
  what: string,
  swarm?: Swarm,
): Promise<StatusResponse> {
  const explain = swarm ? () => swarm.report() : undefined;
  return (await coordinatorStatusUntil(coordinator, check, what, { timeoutMs: 120_000, pollMs: 200, explain })).status;
}

describe.skipIf(skip)('elastic training across browser tabs', () => {
  let browser: Browser;
  let datasetDir: string;
  const runs = new SwarmRuns(() => browser, { query: { testSubset: String(TEST_IMAGES) } });
  /** The uninterrupted single-tab run: per-step losses and the final accuracy. */
  let reference: { losses: Map<number, number>; accuracy: number } | null = null;

  const start = (overrides: Record<string, unknown> = {}) => runs.start({ job: { ...job, ...overrides }, datasetDir });

  const atStep = (tab: SwarmTab, swarm: Swarm, step: number) =>
    swarm.waitFor(tab, (s, n) => s.committedStep >= n, step, 120_000);

  beforeAll(async () => {
    datasetDir = await writeSmallDataset();
    browser = await launchChromium();
  });

  afterEach(() => runs.closeAll());

  afterAll(async () => {
    await browser?.close();
  });

  it('one uninterrupted tab trains the epoch (the reference)', async () => {
    const { coordinator, swarm } = await start();
    const tab = await swarm.open('solo');
    const done = await swarm.waitFor(tab, (s) => s.phase === 'done' && s.accuracy !== null, null, 300_000);
    const rows = await commitRows(coordinator);
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    await expectCleanAudit(coordinator, { committed: TRAIN_IMAGES });
    reference = { losses: new Map(rows.map((r) => [r.step, r.loss])), accuracy: done.accuracy! };
    console.log(
      `reference: loss ${rows[0].loss.toFixed(4)} → ${rows.at(-1)!.loss.toFixed(4)}, test accuracy ${(done.accuracy! * 100).toFixed(2)} %`,
    );
    expect(rows.at(-1)!.loss).toBeLessThan(rows[0].loss);
    expect(swarm.problems()).toEqual([]);
  });

  it('survives a closed tab, a newcomer and a crashed renderer, on the same trajectory', async () => {
    expect(reference, 'the reference run must pass first').not.toBeNull();
    const { coordinator, swarm } = await start();
    const [a, b, c] = await swarm.openMany(3);

    // Three tabs train.
    const three = await statusUntil(
      coordinator,
      (s) => s.world.total === 3 && s.phase === 'training' && s.step >= 4,
      'three tabs training',
    );
    await expectCleanAudit(coordinator);
    expect(three.restarts).toBe(0);

    // One tab is closed mid-epoch (pagehide → goodbye): the other two carry on.
    await swarm.close(a);
    const closedAt = (await coordinator.status()).step;
    const two = await statusUntil(
      coordinator,
      (s) => s.world.total === 2 && s.step >= closedAt + 3,
      'two tabs training on',
    );
    expect(two.restarts, 'a goodbye is not a restart').toBe(0);
    await expectCleanAudit(coordinator);

    // A new tab opens and is admitted at a step boundary, with the state from a peer.
    const d = await swarm.open('newcomer');
    const admitted = await swarm.waitFor(d, (s) => s.phase === 'training' && s.worldSize === 3, null, 120_000);
    await expectAdmittedFromPeers(coordinator, admitted.workerId!);
    await atStep(d, swarm, admitted.committedStep + 2);
    expect((await coordinator.status()).restarts, 'a join is not a restart').toBe(0);
    await expectCleanAudit(coordinator);

    // A renderer crashes: the survivors restore and recover.
    await swarm.crash(b);
    const crashedAt = (await coordinator.status()).step;
    const recovered = await statusUntil(
      coordinator,
      (s) => s.world.total === 2 && s.phase === 'training' && s.step >= crashedAt + 2,
      'survivors training after the crash',
    );
    expect(recovered.restarts, 'the crash is the one restart').toBe(1);
    await expectCleanAudit(coordinator);

    // To the end of the epoch.
    const [finalC, finalD] = await Promise.all(
      [c, d].map((t) => swarm.waitFor(t, (s) => s.phase === 'done' && s.accuracy !== null, null, 300_000)),
    );
    const status = await coordinator.status();
    expect(status.state).toBe('done');
    expect(status.restarts).toBe(1);
    await expectCleanAudit(coordinator, { committed: TRAIN_IMAGES });

    // Elastic invariance: the same losses step by step as the uninterrupted run, and the same accuracy.
    const rows = await commitRows(coordinator);
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    expect(new Set(rows.map((r) => r.world)).size, 'the world size changed during the run').toBeGreaterThan(1);
    let worst = 0;
    for (const row of rows) {
      const ref = reference!.losses.get(row.step)!;
      const relative = Math.abs(row.loss - ref) / Math.abs(ref);
      worst = Math.max(worst, relative);
      expect(relative, `loss of step ${row.step}: ${row.loss} vs ${ref} alone`).toBeLessThan(1e-3);
    }
    expect(finalC.accuracy).toBe(finalD.accuracy); // bit-identical parameters on every rank
    const points = Math.abs(finalC.accuracy! - reference!.accuracy) * 100;
    console.log(
      `churned run: worst relative loss difference ${worst.toExponential(2)}, accuracy ${(finalC.accuracy! * 100).toFixed(2)} % (${points.toFixed(2)} points from the reference)`,
    );
    expect(points).toBeLessThanOrEqual(0.5);
    expect(swarm.problems()).toEqual([]);
  });

  it('local steps (H = 16, int8 wire): a closed, a joining and a crashed tab; each loss costs only its share; outer commits only, hash-agreed, audit clean', async () => {
    const H = 16;
    const { coordinator, swarm } = await start({
      sync: { mode: 'local', innerSteps: H, compression: 'int8' },
      commitEvery: H,
      // Long enough that the churn below always meets a training world (inner steps are fast).
      epochs: 4,
    });
    const [a, b, c] = await swarm.openMany(3);
    await statusUntil(coordinator, (s) => s.world.total === 3 && s.step >= H, 'three tabs past the first outer step');
    // Inside the second outer step (inner steps reported, nothing committed yet): a tab is closed. The
    // other two finish that outer step without it; its slices become holes the next outer step serves.
    await swarm.waitFor(c, (st, h) => st.localStep >= h + 4, H, 120_000);
    const closedAt = (await coordinator.status()).step;
    await swarm.close(a);
    await statusUntil(coordinator, (s) => s.world.total === 2 && s.step >= 2 * H, 'two tabs commit an outer step');
    expect((await coordinator.status()).restarts, 'a goodbye is not a restart').toBe(0);
    // A newcomer is admitted at an outer boundary with the committed state (and outer momentum) from a peer.
    const d = await swarm.open('newcomer');
    const admitted = await swarm.waitFor(d, (st) => st.phase === 'training' && st.worldSize === 3, null, 120_000);
    await expectAdmittedFromPeers(coordinator, admitted.workerId!);
    await swarm.waitFor(d, (st, n) => st.committedStep >= n, admitted.committedStep + H, 120_000);
    // A renderer crashes inside an outer step: the survivors finish it without b (b's slices of it
    // become holes, served by the next outer step), so only b's share of the outer step is lost.
    await swarm.waitFor(b, (st, h) => st.localStep % h >= 4, H, 120_000);
    const crashedAt = (await coordinator.status()).step;
    await swarm.crash(b);
    await statusUntil(
      coordinator,
      (s) => s.restarts === 1 && s.world.total === 2 && s.phase === 'training',
      'survivors',
    );
    await expectCleanAudit(coordinator);
    const [finalC, finalD] = await Promise.all(
      [c, d].map((t) => swarm.waitFor(t, (st) => st.phase === 'done' && st.accuracy !== null, null, 300_000)),
    );
    const status = await coordinator.status();
    expect(status.state).toBe('done');
    expect(status.restarts).toBe(1);
    await expectCleanAudit(coordinator, { committed: TRAIN_IMAGES });
    // Commits only at outer steps, each one hash-agreed by every rank (the coordinator commits nothing
    // else), and the survivors hold the same bytes. Before the crash every 16th step of each epoch of 48;
    // the outer step the crash fell into was committed without b's slices, the next one served them
    // first, and the job took the extra step(s) those slices needed.
    const rows = await commitRows(coordinator);
    const partial = rows.filter((r) => r.skipped.length > 0);
    // Each loss falls into the outer step in flight when the status was read, or (a loaded machine: the
    // close or crash lands after that outer step committed) the next one; either way one partial commit.
    // (After a partial commit the outer steps are no longer multiples of H: the commit rows say where they start.)
    const inFlightAt = (step: number) => {
      const i = rows.findIndex((r) => r.firstStep > step);
      return rows.slice(i, i + 2).map((r) => r.firstStep);
    };
    // Each loss closed its round once. A carried loss made one partial commit; a loss the survivors did
    // not carry must have fallen before they reported any step of the group (on a loaded machine the
    // close or crash can land just after a commit): redoing it cost nothing (round-close.ts `redoneSteps`).
    const lossCloses = (await coordinator.events()).filter(
      (e) => e.event === 'round_closed' && (e.data.carry !== undefined || e.data.redoneSteps !== undefined),
    );
    expect(lossCloses, 'one round close for the goodbye and one for the crash').toHaveLength(2);
    let carried = 0;
    for (const [i, close] of lossCloses.entries()) {
      if (close.data.carry === undefined) {
        expect(close.data.redoneSteps, 'a loss redone, not carried, fell before its group began').toBe(0);
        continue;
      }
      expect(partial.length).toBeGreaterThan(carried);
      expect(inFlightAt([closedAt, crashedAt][i])).toContain(partial[carried].firstStep);
      carried++;
    }
    expect(partial, 'a partial outer commit for each carried loss').toHaveLength(carried);
    // Both losses landing on a group's first instants is not what happens; at least one is carried.
    expect(carried).toBeGreaterThanOrEqual(1);
    const before = rows.filter((r) => r.step < partial[0].firstStep);
    expect(before.map((r) => r.step)).toEqual(Array.from({ length: before.length }, (_, i) => (i + 1) * H));
    expect(before.length, 'whole outer steps before the goodbye').toBeGreaterThanOrEqual(closedAt / H);
    for (const row of partial) {
      const skipped = row.skipped.reduce((n, [s, e]) => n + e - s, 0);
      expect(row.count + skipped, 'a partial commit took a whole outer step').toBe(H * GLOBAL_BATCH);
      const next = rows[rows.indexOf(row) + 1];
      for (const [s, e] of row.skipped)
        expect(
          next.ranges.some(([x, z]) => x <= s && e <= z),
          'the next outer step serves the holes',
        ).toBe(true);
    }
    expect(rows.at(-1)!.step).toBeGreaterThan(4 * STEPS);
    expect(finalC.accuracy).toBe(finalD.accuracy);
    expect(rows.at(-1)!.loss).toBeLessThan(rows[0].loss);
    console.log(
      `local steps H=${H} int8: loss ${rows[0].loss.toFixed(4)} → ${rows.at(-1)!.loss.toFixed(4)}, accuracy ${(finalC.accuracy! * 100).toFixed(2)} % (every-step reference, 1 epoch: ${reference ? (reference.accuracy * 100).toFixed(2) : '?'} %)`,
    );
    expect(swarm.problems()).toEqual([]);
  });

  it('overlapped outer steps (H = 16, int8 wire): three tabs, a crash and a join; each outer step hash-agreed, audit clean', async () => {
    const H = 16;
    const { coordinator, swarm } = await start({
      sync: { mode: 'local', innerSteps: H, compression: 'int8', overlap: true },
      commitEvery: H,
      // Long enough that the churn below always meets a training world (inner steps are fast).
      epochs: 4,
    });
    const [a, b, c] = await swarm.openMany(3);
    await statusUntil(coordinator, (s) => s.world.total === 3 && s.step >= H, 'three tabs past the first outer step');
    // A renderer crashes inside an outer step (its allreduce overlaps the next group's inner steps): the
    // survivors carry the groups in flight on without it; only its slices of them are lost.
    await swarm.waitFor(b, (st, h) => st.localStep % h >= 4, H, 120_000);
    await swarm.crash(b);
    await statusUntil(
      coordinator,
      (s) => s.restarts === 1 && s.world.total === 2 && s.phase === 'training',
      'survivors',
    );
    await expectCleanAudit(coordinator);
    // A newcomer is admitted after a drained (synchronous) outer step, with the committed state from a peer.
    const d = await swarm.open('newcomer');
    const admitted = await swarm.waitFor(d, (st) => st.phase === 'training' && st.worldSize === 3, null, 120_000);
    await expectAdmittedFromPeers(coordinator, admitted.workerId!);
    await swarm.waitFor(d, (st, n) => st.committedStep >= n, admitted.committedStep + H, 120_000);
    expect((await coordinator.status()).restarts, 'a join is not a restart').toBe(1);
    await expectCleanAudit(coordinator);
    const finals = await Promise.all(
      [a, c, d].map((t) => swarm.waitFor(t, (st) => st.phase === 'done' && st.accuracy !== null, null, 300_000)),
    );
    const status = await coordinator.status();
    expect(status.state).toBe('done');
    expect(status.restarts).toBe(1);
    await expectCleanAudit(coordinator, { committed: TRAIN_IMAGES });
    // Each commit's hash was agreed by every rank's outer report (the coordinator commits nothing else);
    // the crash cost partial commits, served later; the tabs end on the same bytes.
    const rows = await commitRows(coordinator);
    expect(rows.some((r) => r.skipped.length > 0)).toBe(true);
    expect(new Set(finals.map((f) => f.accuracy)).size, 'bit-identical final states').toBe(1);
    expect(rows.at(-1)!.loss).toBeLessThan(rows[0].loss);
    console.log(
      `overlapped H=${H} int8: loss ${rows[0].loss.toFixed(4)} → ${rows.at(-1)!.loss.toFixed(4)}, accuracy ${(finals[0].accuracy! * 100).toFixed(2)} %, ${rows.length} commits`,
    );
    expect(swarm.problems()).toEqual([]);
  });

  it('reconnects to a restarted coordinator, which takes the state from the tabs', async () => {
    const { coordinator, swarm } = await start({ checkpointEvery: 1000 });
    const tabs = await swarm.openMany(2);
    await statusUntil(
      coordinator,
      (s) => s.world.total === 2 && s.phase === 'training' && s.step >= 6,
      'two tabs training',
    );
    const syncsBefore = await Promise.all(tabs.map(async (t) => (await swarm.status(t))!.syncs));
    await coordinator.kill9();
    await Promise.all(tabs.map((t) => swarm.waitFor(t, (s) => s.phase === 'connecting', null, 30_000)));
    // Same data dir and port: the tabs' pages keep their origin.
    const restarted = await coordinator.restart({ port: coordinator.port });
    runs.adopt(restarted);
    // The rows the killed process committed (read before the tabs, still reconnecting, can add more).
    const committedBefore = (await commitRows(restarted)).length;
    const resumed = await statusUntil(
      restarted,
      (s) => s.world.total === 2 && s.step >= committedBefore + 3,
      'training after the restart',
      swarm,
    );
    // No checkpoint exists: the state came from the tabs (peer broadcast), so nothing was rolled back.
    expect(resumed.latestCheckpoint).toBeNull();
    const audit = await restarted.audit();
    expect(audit.rolledBackRows).toBe(0);
    // Each tab synced again after the restart (one may still be joining the round the other began alone).
    for (const [i, t] of tabs.entries()) {
      const synced = await swarm.waitFor(t, (s, before) => s.syncs > before, syncsBefore[i], 60_000);
      expect(['send', 'receive', 'local']).toContain(synced.lastSync);
    }
    await expectCleanAudit(restarted);
    // Chromium logs every refused reconnect attempt while the coordinator is down, and the reset of
    // sockets (control and PeerJS signaling) that were open when it was killed.
    expect(
      swarm.problems(/WebSocket connection to '.*' failed: .*(ERR_CONNECTION_REFUSED|ERR_CONNECTION_RESET)/),
    ).toEqual([]);
  });

  it('resumes from the last durable checkpoint after every tab is gone', async () => {
    const { coordinator, swarm } = await start({ checkpointEvery: 4 });
    const tabs = await swarm.openMany(2);
    await statusUntil(
      coordinator,
      (s) => s.latestCheckpoint !== null && s.latestCheckpoint.step >= 8 && s.step >= 10,
      'a checkpoint and steps after it',
    );
    // Every tab is killed at once.
    await Promise.all(tabs.map((t) => swarm.crash(t)));
    const gone = await statusUntil(coordinator, (s) => s.world.total === 0 && s.waiting.total === 0, 'no tab left');
    expect(gone.latestCheckpoint, 'the checkpoint survives the tabs').not.toBeNull();
    const checkpointStep = gone.latestCheckpoint!.step;
    expect(checkpointStep).toBeGreaterThanOrEqual(8);

    const revived = await swarm.open('revived');
    const training = await swarm.waitFor(revived, (s) => s.phase === 'training', null, 120_000);
    expect(training.lastSync).toBe('checkpoint');
    expect(training.localStep).toBeGreaterThanOrEqual(checkpointStep);
    const resumed = await statusUntil(coordinator, (s) => s.step >= checkpointStep + 2, 'steps after the checkpoint');
    // The record went back to the checkpoint and continues from there: no step after it is counted twice.
    const rows = await commitRows(coordinator);
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: rows.length }, (_, i) => i + 1));
    expect(resumed.step).toBeGreaterThan(checkpointStep);
    await expectCleanAudit(coordinator);
    await swarm.waitFor(revived, (s) => s.phase === 'done', null, 300_000);
    await expectCleanAudit(coordinator, { committed: TRAIN_IMAGES });
    expect(swarm.problems()).toEqual([]);
  });
});
