/**
 * The admin routes (feed, safetensors download, checkpoint list) on a real coordinator stack in this
 * process — store, executor, control WebSocket, HTTP server, composed as coordinator/start.ts does —
 * with the admin routes registered into the server's one API router (start.ts passes them the same
 * way), and simulated workers over real WebSockets. Every test runs twice: with the feed fed by the
 * executor's action hook (as start.ts wires it), and without one (the feed tails the store).
 */
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminRoutes, type AdminRoutes } from '../../coordinator/admin/admin-routes';
import { ControlChannel } from '../../coordinator/runtime/control-channel';
import { parseJobSpec, type JobSpec } from '../../core/training/job';
import { initialState } from '../../coordinator/machine/machine';
import { parameterLayout } from '../../core/training/model-spec';
import { MachineExecutor } from '../../coordinator/runtime/executor';
import { CoordinatorServer } from '../../coordinator/http/server';
import { CoordinatorMetrics } from '../../coordinator/admin/server-metrics';
import { staticFiles } from '../../coordinator/http/static-files';
import { SqliteStore } from '../../coordinator/runtime/store';
import type { FeedMessage } from '../../core/protocol/admin-feed';
import { FeedReader, is } from './admin-feed-reader';
import { makeTempDir } from '../support/fake-dataset';
import { SimTrainer, simulatedParams } from '../support/sim-trainer';

const TOKEN = 'admin-routes-test-token';
const JOB = parseJobSpec({
  model: 'tiny-mlp',
  globalBatch: 32,
  epochs: 6,
  minWorkers: 2,
  maxWorkers: 4,
  lastCallMs: 20,
  heartbeatMs: 1000,
  checkpointEvery: 3,
});
const DATASET_SIZE = 300;

interface Stack {
  url: string;
  wsUrl: string;
  executor: MachineExecutor;
  store: SqliteStore;
  routes: AdminRoutes;
  close(): Promise<void>;
}

/** start.ts's composition, in process (so the test can reach the executor and store). */
async function startStack(job: JobSpec): Promise<Stack> {
  const store = new SqliteStore(join(makeTempDir('tabswarm-admin-'), 'data'));
  const { runId } = store.openRun(job, 'admin-routes-test', DATASET_SIZE);
  let control: ControlChannel | null = null;
  const metrics = new CoordinatorMetrics(
    () => executor.state,
    () => ({ sockets: control?.size ?? 0, peers: 0 }),
  );
  const executor: MachineExecutor = new MachineExecutor(initialState(job, DATASET_SIZE, runId), {
    store,
    runId,
    metrics,
    sockets: {
      send: (conn, text) => control!.send(conn, text),
      close: (conn, code, reason) => control!.close(conn, code, reason),
    },
    onFatal: (error) => {
      throw error;
    },
  });
  control = new ControlChannel({ dispatch: (event) => executor.dispatch(event), metrics });
  const routes = adminRoutes({
    runId,
    adminToken: TOKEN,
    store,
    state: () => executor.state,
    dispatch: (action) => executor.dispatch({ kind: 'admin', action }),
    subscribe: (listener) => executor.subscribe(listener),
    feed: { statusIntervalMs: 200 },
  });
  const server = new CoordinatorServer({
    runId,
    store,
    executor,
    metrics,
    control,
    staticFiles: staticFiles(makeTempDir('tabswarm-nodist-')),
    datasetRoute: () => false,
    admin: routes,
    maxCheckpointBytes: parameterLayout(job.model).totalElements * 12 + 1024 * 1024,
  });
  await new Promise<void>((resolve) => server.http.listen(0, '127.0.0.1', resolve));
  executor.start();
  const { port } = server.http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    executor,
    store,
    routes,
    async close() {
      routes.close();
      executor.stop();
      control!.closeAll();
      await new Promise<void>((resolve) => {
        server.http.close(() => resolve());
        server.http.closeAllConnections();
      });
      store.close();
    },
  };
}

/** An independent safetensors reader: tensors by name, values read little-endian. */
function readSafetensors(bytes: Uint8Array): {
  meta: Record<string, string>;
  tensors: Map<string, { shape: number[]; values: Float32Array }>;
} {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = Number(view.getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
  const tensors = new Map<string, { shape: number[]; values: Float32Array }>();
  for (const [name, info] of Object.entries<any>(header)) {
    if (name === '__metadata__') continue;
    const [b, e] = info.data_offsets;
    const values = new Float32Array((e - b) / 4);
    for (let i = 0; i < values.length; i++) values[i] = view.getFloat32(8 + n + b + 4 * i, true);
    tensors.set(name, { shape: info.shape, values });
  }
  return { meta: header.__metadata__, tensors };
}

describe("admin routes (one router, one guard; the feed from the executor's action hook)", () => {
  let stack: Stack;
  const trainers: SimTrainer[] = [];

  beforeAll(async () => {
    stack = await startStack(JOB);
  });
  afterAll(async () => {
    for (const t of trainers) {
      t.stop();
      await t.worker.close();
    }
    await stack?.close();
  });

  it('refuses every admin route without the token, or with a wrong one (401)', async () => {
    for (const path of [
      '/api/admin/feed',
      '/api/admin/model.safetensors',
      '/api/admin/checkpoints',
      '/api/admin/checkpoints?token=nope',
    ]) {
      const res = await fetch(`${stack.url}${path}`);
      expect(res.status, path).toBe(401);
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(await res.json()).toMatchObject({ error: 'unauthorized' });
    }
    const wrong = await fetch(`${stack.url}/api/admin/checkpoints`, {
      headers: { authorization: 'Bearer not-the-token' },
    });
    expect(wrong.status).toBe(401);
    // The actions sit behind the same guard, and never take the token from the URL.
    const pause = await fetch(`${stack.url}/api/admin/pause`, { method: 'POST' });
    expect(pause.status).toBe(401);
    const pauseByQuery = await fetch(`${stack.url}/api/admin/pause?token=${TOKEN}`, { method: 'POST' });
    expect(pauseByQuery.status).toBe(401);
    const unknown = await fetch(`${stack.url}/api/admin/nope`);
    expect(unknown.status).toBe(401);
    const unknownAuthed = await fetch(`${stack.url}/api/admin/nope`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(unknownAuthed.status).toBe(404);
    const status = await fetch(`${stack.url}/api/status`);
    expect(status.status).toBe(200);
  });

  it('answers 404 for the model before any checkpoint, 400 for a malformed step, 405 for POST', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const none = await fetch(`${stack.url}/api/admin/model.safetensors`, { headers: auth });
    expect(none.status).toBe(404);
    expect(await none.json()).toMatchObject({ error: 'no_checkpoint' });
    const bad = await fetch(`${stack.url}/api/admin/model.safetensors?step=1e3`, { headers: auth });
    expect(bad.status).toBe(400);
    const post = await fetch(`${stack.url}/api/admin/checkpoints`, { method: 'POST', headers: auth });
    expect(post.status).toBe(405);
    const list = await fetch(`${stack.url}/api/admin/checkpoints`, { headers: auth });
    expect(await list.json()).toEqual({ runId: stack.executor.state.runId, checkpoints: [] });
  });

  it('streams a snapshot, then live commits, events and status; kicking a worker shows up', async () => {
    const { res, feed } = await FeedReader.open(`${stack.url}/api/admin/feed?token=${TOKEN}`);
    try {
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const first = await feed.next(is('snapshot'), 'snapshot');
      expect(first.runId).toBe(stack.executor.state.runId);
      expect(first.job).toMatchObject({
        model: 'tiny-mlp',
        globalBatch: 32,
        epochs: 6,
        datasetSize: 300,
        stepsPerEpoch: 10,
      });
      expect(first.workers).toEqual([]);
      expect(first.status.counts.members).toBe(0);
      expect(first.commits).toEqual([]);

      for (let i = 0; i < 3; i++)
        trainers.push(await SimTrainer.join(stack.wsUrl, { httpUrl: stack.url, computeMs: 15 }));
      const training = await feed.next(
        is('delta', (m) => m.status.counts.members === 3 && m.status.state === 'training'),
        'a world of 3 training',
      );
      const members = feed.members();
      expect(members.map((w) => w.rank)).toEqual([0, 1, 2]);
      expect(members.every((w) => w.adapter === 'sim none' && w.lastSeen <= training.at)).toBe(true);
      expect(feed.gaps).toBe(0);
      const commit = await feed.next(is('commit'), 'a commit');
      expect(commit.commit).toMatchObject({ worldSize: 3, loss: 0.5 });
      expect(commit.commit.count).toBeGreaterThan(0);
      const joinEvent = feed.messages.find((m) => m.type === 'event' && m.event.category === 'join');
      expect(joinEvent).toBeDefined();

      // Kick rank 1 through the server's own admin action; the feed shows the admin event, the leave and the smaller world.
      const victim = members[1].id;
      const kick = await fetch(`${stack.url}/api/admin/kick`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ workerId: victim }),
      });
      expect(kick.status).toBe(200);
      await feed.next(
        is('event', (m) => m.event.category === 'leave' && (m.event.data as { workerId?: string }).workerId === victim),
        'the leave of the kicked worker',
      );
      const after = await feed.next(
        is('delta', (m) => m.status.counts.members === 2 && m.status.state === 'training'),
        'a world of 2 training again',
      );
      expect(feed.members().map((w) => w.id)).not.toContain(victim);
      expect([...feed.workers.keys()]).not.toContain(victim);
      expect(feed.members().map((w) => w.rank)).toEqual([0, 1]);
      const stepBefore = after.status.step;
      await feed.next(
        is('commit', (m) => m.commit.step > stepBefore && m.commit.worldSize === 2),
        'a commit by the smaller world',
      );
      expect(feed.messages.some((m) => m.type === 'event' && m.event.category === 'admin')).toBe(true);
      // Commits arrive in step order, without duplicates.
      const steps = feed.messages
        .filter((m): m is Extract<FeedMessage, { type: 'commit' }> => m.type === 'commit')
        .map((m) => m.commit.step);
      expect([...steps].sort((a, b) => a - b)).toEqual(steps);
      expect(new Set(steps).size).toBe(steps.length);
    } finally {
      feed.close();
    }
  });

  it('lists checkpoints and downloads the model as safetensors equal to the checkpointed parameters', async () => {
    await trainers[0].until(
      () => stack.store.checkpoints(stack.executor.state.runId).length > 0,
      'a checkpoint stored',
      20_000,
    );
    const list = await fetch(`${stack.url}/api/admin/checkpoints`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(list.status).toBe(200);
    const { checkpoints } = (await list.json()) as {
      checkpoints: { step: number; safetensorsUrl: string; sha256: string; bytes: number }[];
    };
    expect(checkpoints.length).toBeGreaterThan(0);
    const checkpoint = checkpoints[checkpoints.length - 1];
    expect(checkpoint.step % 3 === 0 || checkpoint.step % 10 === 0).toBe(true);
    expect(checkpoint.safetensorsUrl).toBe(`/api/admin/model.safetensors?step=${checkpoint.step}`);

    const download = await fetch(`${stack.url}${checkpoint.safetensorsUrl}&token=${TOKEN}`);
    expect(download.status).toBe(200);
    expect(download.headers.get('content-disposition')).toBe(
      `attachment; filename="tabswarm-tiny-mlp-step${checkpoint.step}.safetensors"`,
    );
    const bytes = new Uint8Array(await download.arrayBuffer());
    expect(Number(download.headers.get('content-length'))).toBe(bytes.length);
    const { meta, tensors } = readSafetensors(bytes);
    expect(meta['tabswarm.step']).toBe(String(checkpoint.step));
    expect(meta['tabswarm.checkpoint_sha256']).toBe(checkpoint.sha256);
    // What the simulated rank uploaded at that step, read at the layout's offsets.
    const expected = simulatedParams(JOB.model, checkpoint.step);
    const layout = parameterLayout(JOB.model);
    expect([...tensors.keys()]).toEqual(layout.entries.map((e) => e.name));
    for (const entry of layout.entries) {
      const t = tensors.get(entry.name)!;
      expect(t.shape).toEqual(entry.shape);
      expect(t.values).toEqual(expected.subarray(entry.offset, entry.offset + entry.size));
    }

    const latest = await fetch(`${stack.url}/api/admin/model.safetensors`, {
      method: 'HEAD',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(latest.status).toBe(200);
    expect(Number(latest.headers.get('x-checkpoint-step'))).toBeGreaterThanOrEqual(checkpoint.step);
    const missing = await fetch(`${stack.url}/api/admin/model.safetensors?step=99999&token=${TOKEN}`);
    expect(missing.status).toBe(404);
  });

  it('gives a page that connects later the whole history: every commit row, rates, events, checkpoints', async () => {
    // The simulated ranks go on committing and uploading: a checkpoint may be stored while the feed opens.
    const storedSteps = () => stack.store.checkpoints(stack.executor.state.runId).map((c) => c.step);
    const before = storedSteps();
    const { feed } = await FeedReader.open(`${stack.url}/api/admin/feed`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    try {
      const snapshot = await feed.next(is('snapshot'), 'snapshot');
      const rows = stack.store.commits(stack.executor.state.runId).filter((r) => r.step <= snapshot.status.step);
      expect(rows.length).toBeGreaterThan(0);
      expect(snapshot.commits.map((c) => c.step).slice(0, rows.length)).toEqual(rows.map((r) => r.step));
      expect(snapshot.commits.every((c) => c.loss === 0.5 && c.count > 0)).toBe(true);
      // A rate for every commit but the first of each round.
      snapshot.commits.forEach((c, i) => {
        const firstOfRound = i === 0 || snapshot.commits[i - 1].round !== c.round;
        if (!firstOfRound) expect(c.samplesPerSecond, `step ${c.step}`).toBeGreaterThan(0);
      });
      expect(new Set(snapshot.commits.map((c) => c.worldSize))).toEqual(new Set([3, 2]));
      const categories = new Set(snapshot.events.map((e) => e.category));
      for (const category of ['join', 'leave', 'admin', 'round', 'checkpoint'] as const)
        expect(categories, category).toContain(category);
      // Every checkpoint stored before the page connected (and not pruned since), and none the store did not
      // hold before or after.
      const listed = snapshot.checkpoints.map((c) => c.step);
      const after = storedSteps();
      expect(listed.length).toBeGreaterThan(0);
      for (const step of before.filter((s) => after.includes(s))) expect(listed).toContain(step);
      for (const step of listed) expect([...before, ...after]).toContain(step);
    } finally {
      feed.close();
    }
  });
});
