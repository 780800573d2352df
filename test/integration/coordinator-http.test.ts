/**
 * The coordinator's HTTP surface against a real process: read-only API, admin authorisation, checkpoint
 * upload/download rules, dataset, static pages, PeerJS signaling on the same port.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { makeTempDir } from '../support/fake-dataset';
import { SimTrainer, simulatedSnapshot } from '../support/sim-trainer';
import { SimWorker } from '../support/sim-worker';
import { decodeSnapshot, encodeSnapshot, type TrainingSnapshot } from '../../core/state/snapshot';
import { STATUS_PAGE_DEFAULT, STATUS_PAGE_MAX } from '../../core/protocol/views';

const JOB = {
  model: 'tiny-mlp',
  globalBatch: 32,
  minWorkers: 2,
  maxWorkers: 4,
  lastCallMs: 50,
  heartbeatMs: 1000,
  checkpointEvery: 3,
};

describe('coordinator HTTP API', () => {
  let proc: CoordinatorProcess;
  let distDir: string;

  beforeAll(async () => {
    distDir = makeTempDir('tabswarm-dist-');
    writeFileSync(join(distDir, 'index.html'), '<!doctype html><title>volunteer</title>');
    mkdirSync(join(distDir, 'web/admin'), { recursive: true });
    writeFileSync(join(distDir, 'web/admin/index.html'), '<!doctype html><title>admin</title>');
    mkdirSync(join(distDir, 'assets'));
    writeFileSync(join(distDir, 'assets/app-1234.js'), 'console.log(1)');
    proc = await spawnCoordinator({ job: JOB, extraArgs: ['--dist', distDir] });
  });
  afterAll(async () => {
    await proc?.stop();
  });

  it('reports status of a fresh run', async () => {
    const status = await proc.status();
    expect(status).toMatchObject({
      state: 'gathering',
      round: 0,
      step: 0,
      epoch: 0,
      world: { offset: 0, total: 0, items: [] },
      waiting: { offset: 0, total: 0, items: [] },
      counts: expect.objectContaining({ workers: 0, members: 0, waiting: 0 }),
      processedInEpoch: 0,
      datasetSize: 300,
      restarts: 0,
    });
    expect(status.lastCommit).toEqual({ step: 0, hash: null });
    expect(status.totalSteps).toBe(Math.ceil(300 / 32));
    expect(typeof status.runId).toBe('string');
  });

  it('pages /api/status by its query: a limit above the cap is cut, a malformed one is a 400 naming it', async () => {
    const capped = await proc.status('?limit=100000&waitingOffset=5');
    expect(capped.world).toMatchObject({ offset: 0, limit: STATUS_PAGE_MAX });
    expect(capped.waiting).toMatchObject({ offset: 5, limit: STATUS_PAGE_DEFAULT, items: [] });
    const bad = await proc.fetch('/api/status?offset=-3');
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ message: expect.stringMatching(/^offset must be a whole number/) });
  });

  it('audits an empty run as clean', async () => {
    const audit = await proc.audit();
    expect(audit).toMatchObject({ ok: true, commitRows: 0, recordAgrees: true, datasetSize: 300 });
    expect(audit.epochs).toEqual([
      expect.objectContaining({ epoch: 0, committed: 0, duplicates: [], finished: false, neverCommitted: null }),
    ]);
  });

  it('serves Prometheus text with the documented series', async () => {
    const res = await proc.fetch('/metrics');
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    for (const name of [
      'tabswarm_world_size',
      'tabswarm_steps_total',
      'tabswarm_samples_total',
      'tabswarm_commits_total',
      'tabswarm_restarts_total',
      'tabswarm_joins_total',
      'tabswarm_leaves_total',
      'tabswarm_message_errors_total',
      'tabswarm_rendezvous_duration_ms',
    ]) {
      expect(text).toMatch(new RegExp(`^# TYPE ${name} `, 'm'));
    }
    // Every sample line is `name{labels} value` with a number.
    for (const line of text.split('\n').filter((l) => l && !l.startsWith('#'))) {
      expect(line).toMatch(/^[a-z_]+(\{[^}]*\})? (-?[0-9.e+-]+|NaN|\+Inf|-Inf)$/);
    }
  });

  it('serves the dataset of the job (fake IDX: 300 train images)', async () => {
    const meta = await proc.getJson('/api/dataset');
    expect(meta.train.count).toBe(300);
    expect(meta.shape).toEqual([28, 28, 1]);
    const labels = new Uint8Array(await (await proc.fetch('/api/dataset/train/labels')).arrayBuffer());
    expect(labels.length).toBe(300);
    expect([...labels.slice(0, 12)]).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
  });

  it('serves the public job', async () => {
    const { job } = await proc.getJson('/api/job');
    expect(job).toMatchObject({ datasetSize: 300, globalBatch: 32, stepsPerEpoch: 10, totalSteps: 10 });
    expect(job.model.name).toBe('tiny-mlp');
  });

  it('serves the built pages at / and /admin/, assets, and 404 elsewhere', async () => {
    const index = await proc.fetch('/');
    expect(index.status).toBe(200);
    expect(index.headers.get('content-type')).toMatch(/text\/html/);
    expect(await index.text()).toContain('volunteer');
    expect(await (await proc.fetch('/admin/')).text()).toContain('admin');
    const asset = await proc.fetch('/assets/app-1234.js');
    expect(asset.headers.get('cache-control')).toMatch(/immutable/);
    expect((await proc.fetch('/nope.html')).status).toBe(404);
    expect((await proc.fetch('/../../etc/passwd')).status).toBe(404);
    expect((await proc.fetch('/%2e%2e/%2e%2e/etc/passwd')).status).toBe(404);
  });

  it('answers unknown API routes with a JSON 404', async () => {
    const res = await proc.fetch('/api/nope');
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: 'not_found' });
  });

  describe('admin', () => {
    const actions: [string, unknown][] = [
      ['pause', {}],
      ['resume', {}],
      ['checkpoint', {}],
      ['kick', { workerId: 'w1-x' }],
      ['workers', { min: 1, max: 2 }],
    ];

    it.each(actions)(
      'refuses %s without a token, with a wrong token, or with a non-bearer scheme (401)',
      async (action, body) => {
        const before = await proc.status();
        const attempts: Record<string, string>[] = [
          {},
          { authorization: 'Bearer wrong-token' },
          { authorization: `Basic ${proc.adminToken}` },
        ];
        for (const headers of attempts) {
          const res = await proc.fetch(`/api/admin/${action}`, { method: 'POST', headers, body: JSON.stringify(body) });
          expect(res.status).toBe(401);
          expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
          expect(await res.json()).toMatchObject({ error: 'unauthorized' });
        }
        const after = await proc.status();
        expect(after.state).toBe(before.state);
        expect(after.minWorkers).toBe(before.minWorkers);
      },
    );

    it('pauses and resumes with the token', async () => {
      const paused = await proc.admin('pause');
      expect(paused.status).toBe(200);
      expect((await paused.json()).status.state).toBe('paused');
      expect((await proc.status()).state).toBe('paused');
      const resumed = await proc.admin('resume');
      expect(resumed.status).toBe(200);
      expect((await proc.status()).state).toBe('gathering');
    });

    it('sets min/max workers, and rejects min > max and malformed bodies (400)', async () => {
      expect((await proc.admin('workers', { min: 3, max: 5 })).status).toBe(200);
      expect(await proc.status()).toMatchObject({ minWorkers: 3, maxWorkers: 5 });
      expect((await proc.admin('workers', { min: 4, max: 2 })).status).toBe(400);
      expect((await proc.admin('workers', { min: 'x', max: 2 })).status).toBe(400);
      const badJson = await proc.fetch('/api/admin/workers', {
        method: 'POST',
        headers: { authorization: `Bearer ${proc.adminToken}` },
        body: '{"min":',
      });
      expect(badJson.status).toBe(400);
      expect(await badJson.json()).toMatchObject({ error: 'bad_json' });
      expect(await proc.status()).toMatchObject({ minWorkers: 3, maxWorkers: 5 });
      expect((await proc.admin('workers', { min: JOB.minWorkers, max: JOB.maxWorkers })).status).toBe(200);
    });

    it('kicks a connected worker (its socket closes with 4001) and 404s an unknown one', async () => {
      const worker = await SimWorker.connect(proc.wsUrl);
      await worker.join();
      expect((await proc.status()).waiting.items.map((w: { id: string }) => w.id)).toContain(worker.workerId);
      expect((await proc.admin('kick', { workerId: 'w999-nobody' })).status).toBe(404);
      expect((await proc.admin('kick', { workerId: worker.workerId })).status).toBe(200);
      const closed = await worker.closed;
      expect(closed.code).toBe(4001);
      expect((await proc.status()).waiting.items.map((w: { id: string }) => w.id)).not.toContain(worker.workerId);
    });

    it('lists the event log with the token only', async () => {
      expect((await proc.fetch('/api/admin/events')).status).toBe(401);
      const res = await proc.fetch('/api/admin/events', { headers: { authorization: `Bearer ${proc.adminToken}` } });
      expect(res.status).toBe(200);
      // Log lines reach the store within a short flush delay.
      const events = (await res.json()).events as { event: string }[];
      expect(Array.isArray(events)).toBe(true);
    });

    it("mounts the admin page's routes (feed, checkpoint list) behind the same token", async () => {
      expect((await proc.fetch('/api/admin/checkpoints')).status).toBe(401);
      const list = await proc.fetch('/api/admin/checkpoints', {
        headers: { authorization: `Bearer ${proc.adminToken}` },
      });
      expect(list.status).toBe(200);
      expect((await list.json()).runId).toBe((await proc.status()).runId);
      expect((await proc.fetch('/api/admin/feed')).status).toBe(401);
      const abort = new AbortController();
      const feed = await proc.fetch(`/api/admin/feed?token=${proc.adminToken}`, { signal: abort.signal });
      expect(feed.status).toBe(200);
      expect(feed.headers.get('content-type')).toMatch(/^text\/event-stream/);
      abort.abort();
    });

    it('rejects GET on an action route (405) and unknown actions (404)', async () => {
      const get = await proc.fetch('/api/admin/pause', { headers: { authorization: `Bearer ${proc.adminToken}` } });
      expect(get.status).toBe(405);
      expect((await proc.admin('explode')).status).toBe(404);
    });
  });

  describe('checkpoints', () => {
    it('has none yet: latest is a JSON 404, bad step ids are 400', async () => {
      const latest = await proc.fetch('/api/checkpoints/latest');
      expect(latest.status).toBe(404);
      expect(await latest.json()).toMatchObject({ error: 'no_checkpoint' });
      for (const bad of ['-1', '1.5', 'abc', '1e3', '99999999999999999999']) {
        const res = await proc.fetch(`/api/checkpoints/${bad}`);
        expect(res.status, bad).toBe(400);
        expect((await res.json()).error).toBe('bad_step');
      }
      expect((await proc.fetch('/api/checkpoints/a%20b/3')).status).toBe(400);
      expect((await proc.fetch('/api/checkpoints/1/2/3')).status).toBe(404);
    });

    it('refuses uploads nobody asked for (409) and uploads to another run (409)', async () => {
      const status = await proc.status();
      const body = new Uint8Array(64);
      const unasked = await proc.fetch(`/api/checkpoints/${status.runId}/3?token=abc`, { method: 'PUT', body });
      expect(unasked.status).toBe(409);
      expect(await unasked.json()).toMatchObject({ error: 'not_requested' });
      const otherRun = await proc.fetch('/api/checkpoints/some-other-run/3?token=abc', { method: 'PUT', body });
      expect(otherRun.status).toBe(409);
      expect(await otherRun.json()).toMatchObject({ error: 'wrong_run' });
    });

    it('stores what rank 0 uploads when asked, and refuses forged, wrong or oversized uploads', async () => {
      // Two simulated workers that never upload on their own: the test uploads in their place.
      let resolveRequest: (r: { step: number; url: string }) => void;
      const requested = new Promise<{ step: number; url: string }>((resolve) => (resolveRequest = resolve));
      const a = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url, uploadCheckpoints: false, stopAfterStep: 3 });
      const b = await SimTrainer.join(proc.wsUrl, { httpUrl: proc.url, uploadCheckpoints: false, stopAfterStep: 3 });
      for (const t of [a, b]) {
        const inner = t.worker.onMessage!;
        t.worker.onMessage = (msg) => {
          if (msg.type === 'checkpoint_request') resolveRequest({ step: msg.step, url: msg.url });
          inner(msg);
        };
      }
      const request = await requested;
      expect(request.step).toBe(3);
      expect(request.url).toMatch(/^\/api\/checkpoints\/[^/]+\/3\?token=[0-9a-f]{32}$/);
      const job = a.job;
      const good = simulatedSnapshot(job, 3);
      const put = (url: string, body: Uint8Array<ArrayBuffer>) => proc.fetch(url, { method: 'PUT', body });
      const tokenless = request.url.replace(/\?token=.*/, '');

      expect((await put(tokenless, good)).status).toBe(403);
      expect((await put(`${tokenless}?token=${'0'.repeat(32)}`, good)).status).toBe(403);
      expect((await put(`${request.url}&workerId=w999-forged`, good)).status).toBe(403);
      const wrongStep = await put(request.url, simulatedSnapshot(job, 2));
      expect(wrongStep.status).toBe(422);
      expect((await wrongStep.json()).error).toBe('wrong_step');
      const garbage = await put(request.url, new Uint8Array(1000).fill(7));
      expect(garbage.status).toBe(422);
      expect((await garbage.json()).error).toBe('bad_snapshot');
      const tampered = simulatedSnapshot(job, 3);
      tampered[tampered.length - 1] ^= 1;
      expect((await put(request.url, tampered)).status).toBe(422);
      // Honest parameters with forged optimizer moments, a forged step count, or NaN moments (the issue's
      // poisoned checkpoint): every section is in the agreed hash, and no restore takes a non-finite value.
      const honest = decodeSnapshot(good);
      const reencoded = (edit: Partial<TrainingSnapshot>) =>
        new Uint8Array(encodeSnapshot({ ...honest, moments: honest.moments.map((m) => m.slice()), ...edit }));
      const forgedMoments = reencoded({ moments: honest.moments.map((m) => m.map((x, i) => (i === 9 ? 0.25 : x))) });
      const forgedT = reencoded({ optimizer: { kind: honest.optimizer.kind, t: honest.optimizer.t + 1000 } });
      const nanMoments = reencoded({ moments: honest.moments.map((m) => m.map(() => Number.NaN)) });
      for (const [what, body, code] of [
        ['forged moments', forgedMoments, 'hash_mismatch'],
        ['forged t', forgedT, 'hash_mismatch'],
        ['NaN moments', nanMoments, 'bad_snapshot'],
      ] as const) {
        const res = await put(request.url, body);
        expect(res.status, what).toBe(422);
        const answer = await res.json();
        expect(answer.error, what).toBe(code);
        if (code === 'bad_snapshot') expect(answer.message).toMatch(/section m holds a non-finite value/);
      }
      const huge = await put(request.url, new Uint8Array(4 * 1024 * 1024));
      expect(huge.status).toBe(413);
      expect((await proc.fetch('/api/checkpoints/latest')).status).toBe(404);

      const stored = await put(request.url, good);
      expect(stored.status).toBe(201);
      const sha256 = createHash('sha256').update(good).digest('hex');
      expect(await stored.json()).toMatchObject({ step: 3, sha256, bytes: good.length });
      // The grant is used up.
      expect((await put(request.url, good)).status).toBe(409);

      for (const path of ['/api/checkpoints/latest', '/api/checkpoints/3', `/api/checkpoints/${a.worker.runId}/3`]) {
        const res = await proc.fetch(path);
        expect(res.status, path).toBe(200);
        expect(res.headers.get('x-checkpoint-sha256')).toBe(sha256);
        expect(res.headers.get('x-checkpoint-step')).toBe('3');
        const bytes = new Uint8Array(await res.arrayBuffer());
        expect(createHash('sha256').update(bytes).digest('hex')).toBe(sha256);
      }
      expect((await proc.status()).latestCheckpoint).toEqual({ step: 3, sha256 });
      const metrics = await proc.metrics();
      expect(CoordinatorProcess.metricValue(metrics, 'tabswarm_checkpoint_uploads_total{result="stored"}')).toBe(1);
      expect(CoordinatorProcess.metricValue(metrics, 'tabswarm_checkpoint_uploads_total{result="forbidden"}')).toBe(3);
      a.stop();
      b.stop();
      await Promise.all([a.worker.close(), b.worker.close()]);
    });
  });

  describe('PeerJS signaling on the same port', () => {
    it('hands out ids over REST and opens a signaling socket at /peer/peerjs', async () => {
      const idRes = await proc.fetch('/peer/peerjs/id');
      expect(idRes.status).toBe(200);
      expect((await idRes.text()).length).toBeGreaterThan(8);
      const ws = new WebSocket(`${proc.url.replace('http', 'ws')}/peer/peerjs?key=peerjs&id=test-peer&token=tok`);
      const first = await new Promise<string>((resolve, reject) => {
        ws.once('message', (data) => resolve(data.toString()));
        ws.once('error', reject);
      });
      expect(JSON.parse(first)).toEqual({ type: 'OPEN' });
      ws.close();
    });

    it('refuses upgrades on unknown paths', async () => {
      const ws = new WebSocket(`${proc.url.replace('http', 'ws')}/elsewhere`);
      const error = await new Promise<Error>((resolve) => ws.once('error', resolve));
      expect(error.message).toMatch(/404/);
    });
  });
});
