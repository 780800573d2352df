/**
 * SqliteStore on disk: batches are all-or-nothing, a step is live at most once, rollbacks mark rows,
 * runs resume by job key, checkpoint files are written atomically — and a writer killed with SIGKILL
 * mid-stream leaves a database whose durable state and commit rows agree.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { sha256Hex, SqliteStore, type CommitRecord } from '../../coordinator/runtime/store';
import { makeTempDir } from '../support/fake-dataset';
import { REPO_ROOT } from '../support/coordinator-process';

const stores: SqliteStore[] = [];
afterEach(() => {
  for (const s of stores.splice(0)) s.close();
});

function open(dir: string): SqliteStore {
  const store = new SqliteStore(dir);
  stores.push(store);
  return store;
}

function commit(step: number, extra: Partial<CommitRecord> = {}): CommitRecord {
  return {
    step,
    firstStep: step,
    epoch: 0,
    cursorStart: (step - 1) * 10,
    count: 10,
    hash: `h${step}`,
    round: 1,
    world: [{ workerId: 'w1', rank: 0, share: 1 }],
    loss: 0.25,
    ...extra,
  };
}

describe('SqliteStore', () => {
  it('resumes the run with the same job key and starts a new one when the key changes', () => {
    const dir = makeTempDir();
    const first = open(dir).openRun({ a: 1 }, 'key-1', 100);
    expect(first).toMatchObject({ resumed: false, durable: null, supersededRunId: null });
    stores[0].apply(first.runId, [{ kind: 'persist', durable: { step: 7 } }]);
    stores.pop()!.close();

    const again = open(dir).openRun({ a: 1 }, 'key-1', 100);
    expect(again).toEqual({ runId: first.runId, resumed: true, durable: { step: 7 }, supersededRunId: null });
    const changed = stores[0].openRun({ a: 2 }, 'key-2', 100);
    expect(changed.runId).not.toBe(first.runId);
    expect(changed).toMatchObject({ resumed: false, durable: null, supersededRunId: first.runId });
  });

  it('applies a batch in order in one transaction: a failing op leaves none of the batch', () => {
    const store = open(makeTempDir());
    const { runId } = store.openRun({}, 'k', 100);
    store.apply(runId, [
      { kind: 'commit', commit: commit(1) },
      { kind: 'persist', durable: { step: 1 } },
    ]);
    // Step 1 is live already: the unique index refuses a second live row, and the persist with it is undone.
    expect(() =>
      store.apply(runId, [
        { kind: 'persist', durable: { step: 99 } },
        { kind: 'commit', commit: commit(1) },
      ]),
    ).toThrow(/UNIQUE/);
    expect(store.openRun({}, 'k', 100).durable).toEqual({ step: 1 });
    expect(store.commits(runId).map((c) => c.step)).toEqual([1]);
  });

  it('marks rows after a rollback point and lets those steps commit again', () => {
    const store = open(makeTempDir());
    const { runId } = store.openRun({}, 'k', 100);
    for (let step = 1; step <= 5; step++) store.apply(runId, [{ kind: 'commit', commit: commit(step) }]);
    store.apply(runId, [
      { kind: 'rollback', afterStep: 2 },
      { kind: 'commit', commit: commit(3, { hash: 'again3' }) },
    ]);
    expect(store.commits(runId).map((c) => [c.step, c.hash])).toEqual([
      [1, 'h1'],
      [2, 'h2'],
      [3, 'again3'],
    ]);
    const all = store.commits(runId, { includeRolledBack: true });
    expect(all.filter((c) => c.rolledBack).map((c) => c.step)).toEqual([3, 4, 5]);
    expect(all[0]).toMatchObject({
      firstStep: 1,
      cursorStart: 0,
      count: 10,
      round: 1,
      loss: 0.25,
      world: [{ workerId: 'w1', rank: 0, share: 1 }],
    });
  });

  it('keeps a partial commit’s ranges and skipped positions, and reads a store from before holes as without them', () => {
    const dir = makeTempDir();
    // A database as an older release wrote it: the commits table without the two range columns.
    const old = new Database(join(dir, 'tabswarm.sqlite'));
    old.exec(`CREATE TABLE commits (
      id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, step INTEGER NOT NULL,
      first_step INTEGER NOT NULL, epoch INTEGER NOT NULL, cursor_start INTEGER NOT NULL, count INTEGER NOT NULL,
      hash TEXT NOT NULL, round INTEGER NOT NULL, world_json TEXT NOT NULL, loss REAL,
      rolled_back INTEGER NOT NULL DEFAULT 0, committed_at INTEGER NOT NULL)`);
    old
      .prepare(
        `INSERT INTO commits (run_id, step, first_step, epoch, cursor_start, count, hash, round, world_json, loss, committed_at)
         VALUES ('r-old', 1, 1, 0, 0, 10, 'h1', 1, '[]', 0.5, 0)`,
      )
      .run();
    old.close();
    const store = open(dir);
    expect(store.commits('r-old')).toMatchObject([{ step: 1, cursorStart: 0, count: 10 }]);
    expect(store.commits('r-old')[0]).not.toHaveProperty('ranges');
    const { runId } = store.openRun({}, 'k', 100);
    const partial = commit(2, {
      firstStep: 2,
      cursorStart: 10,
      count: 7,
      ranges: [
        [10, 13],
        [16, 20],
      ],
      skipped: [[13, 16]],
    });
    store.apply(runId, [{ kind: 'commit', commit: partial }]);
    stores.pop()!.close();
    expect(open(dir).commits(runId)).toMatchObject([{ ...partial, rolledBack: false }]);
  });

  it('stores rounds and events', () => {
    const store = open(makeTempDir());
    const { runId } = store.openRun({}, 'k', 100);
    store.apply(runId, [
      { kind: 'round', round: { round: 1, step: 1, epoch: 0, world: [{ rank: 0 }], startedAt: 5 } },
      { kind: 'event', level: 'info', event: 'join', data: { workerId: 'w1' }, at: 6 },
      { kind: 'event', level: 'warn', event: 'message_rejected', data: { code: 'bad_json' }, at: 7 },
    ]);
    expect(store.rounds(runId)).toEqual([{ round: 1, step: 1, epoch: 0, world: [{ rank: 0 }], startedAt: 5 }]);
    const events = store.events(runId);
    expect(events.map((e) => e.event)).toEqual(['join', 'message_rejected']);
    expect(store.events(runId, { afterId: events[0].id }).map((e) => e.event)).toEqual(['message_rejected']);
  });

  it('prunes the event log to the newest rows, keeping every evaluation and rollback', () => {
    const store = open(makeTempDir());
    const { runId } = store.openRun({}, 'k', 100);
    const ops = Array.from({ length: 50 }, (_, i) => ({
      kind: 'event' as const,
      level: 'info',
      event: i % 10 === 0 ? 'evaluation' : i === 5 ? 'record_rolled_back' : 'join',
      data: { i },
      at: i,
    }));
    store.apply(runId, ops);
    expect(store.pruneEvents(runId, 20)).toBe(26); // 30 older rows, 3 of them evaluations and 1 a rollback
    const left = store.events(runId);
    expect(left.map((e) => (e.data as { i: number }).i)).toEqual([
      0,
      5,
      10,
      20,
      ...Array.from({ length: 20 }, (_, i) => 30 + i),
    ]);
    expect(store.pruneEvents(runId, 20)).toBe(0);
  });

  it('writes checkpoints atomically with their sha256, replacing a step without leaving files behind', () => {
    const dir = makeTempDir();
    const store = open(dir);
    const { runId } = store.openRun({}, 'k', 100);
    const bytes = new Uint8Array(1000).map((_, i) => i % 251);
    const row = store.putCheckpoint(runId, { step: 4, epoch: 0, cursor: 40 }, bytes);
    expect(row).toMatchObject({ step: 4, epoch: 0, cursor: 40, bytes: 1000, sha256: sha256Hex(bytes) });
    expect(readFileSync(row.path)).toEqual(Buffer.from(bytes));
    const replaced = store.putCheckpoint(
      runId,
      { step: 4, epoch: 0, cursor: 40 },
      bytes.map((b) => 255 - b),
    );
    expect(replaced.sha256).not.toBe(row.sha256);
    expect(store.checkpoint(runId, 4)).toEqual(replaced);
    store.putCheckpoint(runId, { step: 8, epoch: 0, cursor: 80 }, bytes);
    expect(store.latestCheckpoint(runId)?.step).toBe(8);
    expect(store.checkpoints(runId).map((c) => c.step)).toEqual([4, 8]);
    // One file per stored checkpoint, no temp files.
    expect(readdirSync(join(dir, 'checkpoints', runId)).sort()).toHaveLength(2);
    expect(readdirSync(join(dir, 'checkpoints', runId)).some((f) => f.endsWith('.tmp'))).toBe(false);
    // Pruning keeps what the machine still references, rows and files alike.
    expect(store.pruneCheckpoints(runId, [8])).toEqual([4]);
    expect(store.checkpoints(runId).map((c) => c.step)).toEqual([8]);
    expect(readdirSync(join(dir, 'checkpoints', runId))).toHaveLength(1);
  });

  it('survives SIGKILL mid-stream: the durable state names the last live commit, every printed step is there', async () => {
    const dir = makeTempDir();
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', join(REPO_ROOT, 'test/integration/fixtures/store-writer.ts'), dir],
      {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let printed = 0;
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<string | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        const lines = d.toString().trim().split('\n');
        printed = Math.max(printed, Number(lines[lines.length - 1]));
        // Kill while it is writing, after enough transactions that the WAL is in use.
        if (printed >= 200) {
          child.kill('SIGKILL');
          resolve();
        }
      });
      child.once('exit', () => reject(new Error(`writer exited early: ${stderr}`)));
    });
    expect(await exited).toBe('SIGKILL');

    const store = open(dir);
    const run = store.openRun({ test: true }, 'store-writer', 1000);
    expect(run.resumed).toBe(true);
    const steps = store.commits(run.runId).map((c) => c.step);
    const durableStep = (run.durable as { step: number }).step;
    expect(steps.length).toBeGreaterThanOrEqual(printed);
    expect(steps).toEqual(Array.from({ length: steps.length }, (_, i) => i + 1));
    expect(durableStep).toBe(steps[steps.length - 1]);
  });
});
