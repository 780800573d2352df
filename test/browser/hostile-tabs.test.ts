/**
 * One hostile tab among three honest ones, against a real coordinator process: each `it` runs one
 * attack mode of test/browser/pages/hostile/ (the normal elastic tab with one port decorated; served
 * by a Vite dev server, never by the coordinator) next to three tabs of the built volunteer page.
 *
 * What is asserted is what holds today (docs/threat-model.md):
 * - lying about throughput, uploading a poisoned checkpoint, claiming a state it does not hold and
 *   sending NaN do not fail the job, honest tabs keep committing, nothing stored is wrong, and the
 *   attacker is refused or banned where the coordinator does so;
 * - poisoning the gradient (scale, negate, noise, corrupted forwarded sums) is NOT detected yet: those
 *   `it`s show the attack took effect (the committed losses leave the clean trajectory, which elastic
 *   training keeps to 1e-3 whatever the world), as a baseline for the detection to come; one run has
 *   two colluding tabs (two hostile, two honest).
 *
 * The clean trajectory is the throughput-lie run's (its hostile tab computes honest gradients), so that
 * `it` runs first. Small on purpose: tiny-mlp, 2,048 Fashion-MNIST images, batch 64, 12 steps per run.
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { StatusReport } from '../../coordinator/audit';
import { decodeSnapshot } from '../../coordinator/core/snapshot';
import {
  FASHION_MNIST_DIR,
  launchChromium,
  skipWithoutChromium,
  skipWithoutFashionMnist,
  skipWithoutWebBuild,
  WEB_BUILD_DIR,
} from '../support/browser';
import { expectCleanAudit } from '../support/clean-audit';
import { type CommitRow, commitRows } from '../support/commit-log';
import { CoordinatorProcess } from '../support/coordinator-process';
import { makeTempDir } from '../support/fake-dataset';
import { type HostileQuery, type HostileTab, HostileTabServer } from '../support/hostile-tab';
import { writeDatasetSlice } from '../support/small-dataset';
import { coordinatorStatusUntil, Swarm } from '../support/swarm';

const TRAIN_IMAGES = 2048;
const TEST_IMAGES = 100;
/** Every run stops once this step is committed (the clean trajectory covers steps 1 … STOP). */
const STOP = 12;
/** The gradient attacks start here: steps before it are honest and must match the clean run. */
const FROM_STEP = 5;
/** Elastic training's trajectory tolerance (test/browser/elastic.test.ts): any world, same losses. */
const SAME_TRAJECTORY = 1e-3;

const job = {
  model: 'tiny-mlp',
  optimizer: { kind: 'adamw', lr: 0.003, weightDecay: 0 },
  globalBatch: 64,
  epochs: 1,
  minWorkers: 3,
  maxWorkers: 4,
  commitEvery: 1,
  checkpointEvery: 1000,
  heartbeatMs: 1000,
  lastCallMs: 2000,
  maxRestarts: 100,
  seed: 7,
};

/** A worker or an address is cooled off at its 2nd charged restart. */
const TRUST = ['--worker-restart-quota', '1', '--address-restart-quota', '1', '--cool-off-ms', '60000'];

const skip = skipWithoutChromium() || skipWithoutFashionMnist() || skipWithoutWebBuild();
const echo = !!process.env.TABSWARM_ECHO_BROWSER;

describe.skipIf(skip)('a hostile tab among three honest ones', () => {
  let browser: Browser;
  let datasetDir: string;
  let hostile: HostileTabServer;
  const coordinators: CoordinatorProcess[] = [];
  const swarms: Swarm[] = [];
  /** Committed loss per step of the run without gradient poisoning (the throughput-lie run). */
  let clean: Map<number, number> | null = null;
  const started = performance.now();

  beforeAll(async () => {
    datasetDir = await writeDatasetSlice(
      FASHION_MNIST_DIR,
      join(makeTempDir('tabswarm-hostile-'), 'fashion-mnist'),
      TRAIN_IMAGES,
      TEST_IMAGES,
    );
    [browser, hostile] = await Promise.all([launchChromium(), HostileTabServer.start()]);
  });

  afterEach(async () => {
    await hostile?.closeTabs();
    for (const s of swarms.splice(0)) await s.closeAll();
    for (const c of coordinators.splice(0)) await c.stop();
  });

  afterAll(async () => {
    await hostile?.close();
    await browser?.close();
    console.log(`hostile-tabs: whole file ${((performance.now() - started) / 1000).toFixed(1)} s`);
  });

  async function coordinator(overrides: Record<string, unknown> = {}): Promise<CoordinatorProcess> {
    const c = await CoordinatorProcess.spawn({
      job: { ...job, ...overrides },
      datasetDir,
      extraArgs: ['--dist', WEB_BUILD_DIR, '--allow-origin', hostile.origin, ...TRUST],
    });
    coordinators.push(c);
    hostile.pointAt(c);
    return c;
  }

  function honestSwarm(c: CoordinatorProcess): Swarm {
    const swarm = new Swarm(browser, c.url, { query: { testSubset: '0' }, echo });
    swarms.push(swarm);
    return swarm;
  }

  /**
   * `hostiles` hostile tabs (default 1) and 4 − `hostiles` honest tabs train until the coordinator
   * committed step `STOP`. With `hostileFirst` the hostile tab is welcomed before the honest ones open
   * (rank 0 of the first round); otherwise all four open at once.
   */
  async function attackRun(
    query: HostileQuery,
    opts: { job?: Record<string, unknown>; hostileFirst?: boolean; hostiles?: number } = {},
  ): Promise<{ c: CoordinatorProcess; swarm: Swarm; tabs: HostileTab[]; rows: CommitRow[] }> {
    const t0 = performance.now();
    const c = await coordinator(opts.job);
    const swarm = honestSwarm(c);
    const hostiles = opts.hostiles ?? 1;
    const openHostiles = () =>
      Promise.all(
        Array.from({ length: hostiles }, async () => {
          const tab = await hostile.open(browser, query, { echo });
          await tab.waitFor((v) => v.elastic !== null && v.elastic.workerId !== null, null, 60_000);
          return tab;
        }),
      );
    let tabs: HostileTab[];
    if (opts.hostileFirst) {
      tabs = await openHostiles();
      await swarm.openMany(4 - hostiles);
    } else {
      [tabs] = await Promise.all([openHostiles(), swarm.openMany(4 - hostiles)]);
    }
    await statusUntil(c, (s) => s.step >= STOP, `step ${STOP} committed`);
    const rows = await commitRows(c);
    console.log(`${query.mode} ×${hostiles}: ${((performance.now() - t0) / 1000).toFixed(1)} s to step ${STOP}`);
    return { c, swarm, tabs, rows };
  }

  /** What holds after every attack: the job is alive, honest tabs commit on, the audit is clean. */
  async function expectJobUnharmed(c: CoordinatorProcess, swarm: Swarm): Promise<void> {
    const status = await c.status();
    expect(status.state).not.toBe('failed');
    // Honest tabs are training now: two more commits within 10 s.
    await statusUntil(c, (s, step) => s.step >= step + 2, 'two more commits', status.step, 10_000);
    await expectCleanAudit(c);
    expect(swarm.problems()).toEqual([]);
  }

  /** Largest relative difference of the committed losses from the clean run's, over `steps`. */
  function departure(rows: CommitRow[], steps: (step: number) => boolean): number {
    let worst = 0;
    for (const row of rows.filter((r) => steps(r.step) && r.step <= STOP)) {
      const ref = clean!.get(row.step)!;
      worst = Math.max(worst, Number.isFinite(row.loss) ? Math.abs(row.loss - ref) / Math.abs(ref) : Infinity);
    }
    return worst;
  }

  /** The gradient attacks: the honest prefix is on the clean trajectory, the attacked steps are not. */
  async function expectPoisoned(
    query: HostileQuery,
    tally: (t: HostileTab) => Promise<number>,
    hostiles = 1,
  ): Promise<void> {
    expect(clean, 'the throughput-lie run (the clean trajectory) must pass first').not.toBeNull();
    const { c, swarm, tabs, rows } = await attackRun({ ...query, fromStep: FROM_STEP }, { hostiles });
    for (const tab of tabs) expect(await tally(tab)).toBeGreaterThan(0);
    const before = departure(rows, (s) => s < FROM_STEP);
    const after = departure(rows, (s) => s > FROM_STEP + 1);
    console.log(
      `${query.mode} ×${hostiles}: loss departs from the clean run by ${before.toExponential(2)} before step ${FROM_STEP}, up to ${after.toExponential(2)} after`,
    );
    expect(before).toBeLessThan(SAME_TRAJECTORY);
    expect(after).toBeGreaterThan(10 * SAME_TRAJECTORY);
    // Poisoned steps committed with hash agreement of all four ranks: every rank holds the same wrong bytes.
    expect(rows.some((r) => r.step > FROM_STEP && r.world === 4)).toBe(true);
    await expectJobUnharmed(c, swarm);
  }

  it('lies about throughput (computeMs 1e-6): its share stays measured, not claimed', async () => {
    const { c, swarm, tabs, rows } = await attackRun({ mode: 'lie-throughput', fromStep: 1 });
    const [tab] = tabs;
    expect((await tab.view()).hostile.tally.reports).toBeGreaterThan(0);
    // Shares are re-measured when a round forms: one honest tab leaves (a goodbye), three remain.
    await swarm.close(swarm.tabs[0]);
    const three = await statusUntil(
      c,
      (s, step) => s.world.length === 3 && s.step >= step + 2,
      'three tabs committing',
      (await c.status()).step,
    );
    const { workerId } = (await tab.view()).elastic!;
    const share = three.world.find((w) => w.id === workerId)!.share;
    console.log(`lie-throughput: the liar's share among 3 is ${share.toFixed(3)} (believed: the cap, 0.667)`);
    expect(share).toBeLessThan(0.6);
    await expectJobUnharmed(c, swarm);
    clean = new Map(rows.map((r) => [r.step, r.loss]));
    expect(rows.slice(0, STOP).map((r) => r.step)).toEqual(Array.from({ length: STOP }, (_, i) => i + 1));
  });

  it('scales its own gradient ×1000: the committed losses leave the clean trajectory (not detected yet)', async () => {
    // DETECTION: lead adds assertions after the verifier lands
    await expectPoisoned({ mode: 'scale', factor: 1000 }, async (t) => (await t.view()).hostile.tally.gradients);
  });

  it('negates its own gradient: the committed losses leave the clean trajectory (not detected yet)', async () => {
    // DETECTION: lead adds assertions after the verifier lands
    await expectPoisoned({ mode: 'negate' }, async (t) => (await t.view()).hostile.tally.gradients);
  });

  it('adds Gaussian noise (std 3× its RMS) to its gradient: the losses leave the clean trajectory (not detected yet)', async () => {
    // DETECTION: lead adds assertions after the verifier lands
    await expectPoisoned({ mode: 'noise', std: 3 }, async (t) => (await t.view()).hostile.tally.gradients);
  });

  it('scales the partial sums it forwards in the reduce-scatter ×1000: the losses leave the clean trajectory (not detected yet)', async () => {
    // DETECTION: lead adds assertions after the verifier lands
    await expectPoisoned({ mode: 'corrupt-forward', factor: 1000 }, async (t) => (await t.view()).hostile.tally.frames);
  });

  it('two colluding tabs scale their gradients ×1000: the losses leave the clean trajectory (not detected yet)', async () => {
    // DETECTION: lead adds assertions after the verifier lands (two liars: a spot check must not
    // rely on a second opinion from a colluder)
    await expectPoisoned({ mode: 'scale', factor: 1000 }, async (t) => (await t.view()).hostile.tally.gradients, 2);
  });

  it('sends NaN in its reduce-scatter frames: refused where they arrive, nothing NaN committed, job not failed; the honest reporters are charged (hole)', async () => {
    const c = await coordinator();
    const swarm = honestSwarm(c);
    const [tab] = await Promise.all([
      hostile.open(browser, { mode: 'nan', fromStep: FROM_STEP }, { echo }),
      swarm.openMany(3),
    ]);
    const attacker = (await tab.waitFor((v) => v.elastic?.workerId != null, null, 60_000)).elastic!.workerId!;
    // HOLE (today; for the lead): every NaN round is closed by an honest neighbour's failure report
    // naming the attacker, but the attacker neither drops nor fails again within the goodbye grace
    // (1 s), so the accusation counts as uncorroborated and the restart is charged to the honest
    // REPORTER. The attacker is re-admitted at the next boundary and does it again, until the honest
    // address is cooled off (here at its 2nd charge) and training stops. Flip these assertions when
    // accusations are judged by evidence.
    const events = await eventsUntil(
      c,
      (es) => es.some((e) => e.event === 'cooled_off' && e.data.who === 'a:127.0.0.1'),
      'the honest address cooled off',
      90_000,
    );
    const charged = events
      .filter((e) => e.event === 'restart_confirmed' && e.data.corroborated === false)
      .map((e) => e.data.charged);
    expect(charged.length).toBeGreaterThanOrEqual(2);
    for (const culprit of charged) expect(culprit).toMatchObject({ addr: '127.0.0.1' });
    // What holds: the NaN was refused where it arrived, and every report named the attacker.
    expect((await tab.view()).hostile.tally.frames).toBeGreaterThan(0);
    const reports = events.filter((e) => e.event === 'failure_report');
    expect(reports.length).toBeGreaterThanOrEqual(2);
    for (const report of reports) expect(report.data.peer).toBe(attacker);
    // Nothing NaN was committed, the record is whole, and the job is not failed (the charges past the
    // quota were absorbed, not counted as restarts).
    const rows = await commitRows(c);
    expect(rows.length).toBeGreaterThanOrEqual(FROM_STEP - 1);
    expect(rows.every((r) => Number.isFinite(r.loss))).toBe(true);
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: rows.length }, (_, i) => i + 1));
    expect((await c.status()).state).not.toBe('failed');
    await expectCleanAudit(c);
  });

  it('uploads a checkpoint with every weight at 0.5: refused (hash mismatch), nothing stored', async () => {
    // Rank 0 is the rank asked for checkpoints.
    const {
      c,
      swarm,
      tabs: [tab],
    } = await attackRun({ mode: 'bad-checkpoint', fromStep: 1 }, { job: { checkpointEvery: 2 }, hostileFirst: true });
    const view = await tab.view();
    expect(view.hostile.tally.uploads).toBeGreaterThan(0);
    expect(view.elastic!.checkpointsUploaded).toBe(0);
    const uploads = CoordinatorProcess.metricValue(
      await c.metrics(),
      'tabswarm_checkpoint_uploads_total{result="hash_mismatch"}',
    );
    expect(uploads).toBeGreaterThan(0);
    // Whatever is stored came from an honest rank: never the 0.5 weights.
    const res = await c.fetch('/api/checkpoints/latest');
    if (res.status !== 404) {
      expect(res.status).toBe(200);
      const snapshot = decodeSnapshot(new Uint8Array(await res.arrayBuffer()));
      expect(snapshot.params.every((p) => p === 0.5)).toBe(false);
    }
    await expectJobUnharmed(c, swarm);
  });

  it('claims in its hello the committed state copied from /api/status: not believed, the stored checkpoint is used', async () => {
    const c = await coordinator({ minWorkers: 1, checkpointEvery: 4 });
    const swarm = honestSwarm(c);
    await swarm.openMany(3);
    await statusUntil(c, (s) => s.step >= 6 && s.latestCheckpoint !== null, 'step 6 and a checkpoint');
    // Every honest tab leaves: nobody holds the last commit any more, only the stored checkpoint does.
    await Promise.all(swarm.live.map((t) => swarm.close(t)));
    const gone = await statusUntil(c, (s) => s.world.length === 0 && s.waiting.length === 0, 'no tab left');
    // The liar joins alone, naming this run and claiming the last commit, as a tab coming back would.
    const tab = await hostile.open(browser, { mode: 'claim-state', fromStep: 1 }, { echo });
    const joined = await tab.waitFor(
      (v) => v.hostile.tally.hellos > 0 && v.hostile.tally.forgedRuns > 0 && v.elastic?.phase === 'training',
      null,
      90_000,
    );
    // Believed, it would have been the round's state source for a state it does not hold.
    expect(joined.elastic!.lastSync).toBe('checkpoint');
    expect(joined.elastic!.localStep).toBeLessThanOrEqual(gone.step);
    const join = (await adminEvents(c)).find((e) => e.event === 'join' && e.data.workerId === joined.elastic!.workerId);
    expect(join?.data).toMatchObject({ vouched: false, holdsCommitted: false });
    // Honest tabs come back and train with it from the checkpoint's state.
    await swarm.openMany(2);
    await statusUntil(
      c,
      (s, step) => s.world.length === 3 && s.step >= step + 2,
      'three tabs past the claim',
      gone.step,
    );
    const rows = await commitRows(c);
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: rows.length }, (_, i) => i + 1));
    await expectJobUnharmed(c, swarm);
  });
});

interface EventRow {
  event: string;
  data: Record<string, unknown>;
}

/** The run's event log (oldest first) once `check` holds on it (polled every 300 ms). */
async function eventsUntil(
  c: CoordinatorProcess,
  check: (events: EventRow[]) => boolean,
  what: string,
  timeoutMs: number,
): Promise<EventRow[]> {
  const until = performance.now() + timeoutMs;
  let events: EventRow[] = [];
  while (performance.now() < until) {
    events = await adminEvents(c);
    if (check(events)) return events;
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`the event log never showed ${what}; last events: ${events.map((e) => e.event).join(', ')}`);
}

async function adminEvents(c: CoordinatorProcess): Promise<EventRow[]> {
  const res = await c.fetch('/api/admin/events?limit=1000', { headers: { authorization: `Bearer ${c.adminToken}` } });
  return ((await res.json()) as { events: EventRow[] }).events;
}

/** The coordinator's status once `check(status, arg)` holds (polled every 200 ms). */
async function statusUntil<A = undefined>(
  c: CoordinatorProcess,
  check: (s: StatusReport, arg: A) => boolean,
  what: string,
  arg?: A,
  timeoutMs = 90_000,
): Promise<StatusReport> {
  return (await coordinatorStatusUntil(c, (s) => check(s, arg as A), what, { timeoutMs, pollMs: 200 })).status;
}
