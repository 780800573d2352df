/**
 * The coordinator's durable store: runs, rounds, commits, the machine's durable state, checkpoints and an
 * event log. `Store` is the small interface the executor needs; `SqliteStore` is the embedded default
 * (better-sqlite3, WAL, synchronous=FULL), so a `kill -9` at any instant leaves either the whole of a
 * transaction or none of it. Checkpoint bytes live in files next to the database (written to a temp
 * file, fsynced, renamed, directory fsynced) and the row naming them is inserted only after the rename,
 * so a row never points at a torn file. The SQL itself (schema, connection settings, prepared
 * statements) is store-sql.ts.
 */
import type Database from 'better-sqlite3';
import { createHash, randomUUID } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { CommitRecord } from '../machine/state';
import type { PositionRange } from '../../core/training/groups';
import {
  type CheckpointDbRow,
  type CommitDbRow,
  type EventDbRow,
  openDatabase,
  prepareStatements,
  type Statements,
} from './store-sql';

export type { CommitRecord };

export interface CommitRow extends CommitRecord {
  rolledBack: boolean;
  committedAt: number;
}

export interface CheckpointMeta {
  step: number;
  epoch: number;
  /** Sampler cursor after `step` (position in `epoch`'s order). */
  cursor: number;
}

export interface CheckpointRow extends CheckpointMeta {
  sha256: string;
  bytes: number;
  path: string;
  createdAt: number;
}

export interface RoundRow {
  round: number;
  step: number;
  epoch: number;
  world: unknown;
  startedAt: number;
}

export interface EventRow {
  id: number;
  at: number;
  level: string;
  event: string;
  data: unknown;
}

/** One write, applied in order with the others of its batch in a single transaction. */
export type StoreOp =
  | { kind: 'persist'; durable: unknown }
  | { kind: 'commit'; commit: CommitRecord }
  /**
   * The machine's `rollback_commits`: commits with step > afterStep no longer count (the record went back
   * to a checkpoint). Rows are marked, not deleted, so the log keeps what happened; only live rows count
   * in audits and in the one-live-commit-per-step constraint.
   */
  | { kind: 'rollback'; afterStep: number }
  | { kind: 'round'; round: RoundRow }
  | { kind: 'event'; level: string; event: string; data: unknown; at: number };

export interface OpenedRun {
  runId: string;
  /** The durable state last persisted for this run, or null for a new run. */
  durable: unknown | null;
  /** True when an existing run with the same job was found and is resumed. */
  resumed: boolean;
  /** Run replaced by this new one because the job changed, if any. */
  supersededRunId: string | null;
}

export interface Store {
  /** Resumes the run whose job key equals `jobKey`, or starts a new one (the job changed or none exists). */
  openRun(job: unknown, jobKey: string, datasetSize: number): OpenedRun;
  /** Applies `ops` in order in one transaction (all or nothing, durable when it returns). */
  apply(runId: string, ops: StoreOp[]): void;
  commits(runId: string, opts?: { includeRolledBack?: boolean }): CommitRow[];
  /** Live commit rows with step >= fromStep, ascending by step, at most `limit` of them. */
  commitsFrom(runId: string, fromStep: number, limit: number): CommitRow[];
  rounds(runId: string): RoundRow[];
  events(runId: string, opts?: { afterId?: number; limit?: number }): EventRow[];
  /** Event-log rows named `event` (e.g. 'evaluation') with id > afterId, oldest first, at most `limit`. */
  eventsNamed(runId: string, event: string, opts?: { afterId?: number; limit?: number }): EventRow[];
  /** Writes checkpoint bytes atomically and records them; replaces an earlier checkpoint of the same step. */
  putCheckpoint(runId: string, meta: CheckpointMeta, bytes: Uint8Array): CheckpointRow;
  checkpoint(runId: string, step: number): CheckpointRow | null;
  latestCheckpoint(runId: string): CheckpointRow | null;
  checkpoints(runId: string): CheckpointRow[];
  readCheckpoint(row: CheckpointRow): Buffer;
  /**
   * Event-log retention: keeps the newest `keep` rows of the run (and every `evaluation` and
   * `record_rolled_back` row: `/api/evaluations` serves the first and drops what the second undid);
   * returns the number of rows deleted.
   */
  pruneEvents(runId: string, keep: number): number;
  /** Deletes every checkpoint of the run whose step is not in `keepSteps` (rows, then files). Returns the steps deleted. */
  pruneCheckpoints(runId: string, keepSteps: readonly number[]): number[];
  close(): void;
}

function commitFromDb(row: CommitDbRow): CommitRow {
  return {
    step: row.step,
    firstStep: row.first_step,
    epoch: row.epoch,
    cursorStart: row.cursor_start,
    count: row.count,
    ...(row.ranges_json ? { ranges: JSON.parse(row.ranges_json) as PositionRange[] } : {}),
    ...(row.skipped_json ? { skipped: JSON.parse(row.skipped_json) as PositionRange[] } : {}),
    hash: row.hash,
    round: row.round,
    world: JSON.parse(row.world_json) as CommitRecord['world'],
    loss: row.loss ?? Number.NaN,
    rolledBack: row.rolled_back !== 0,
    committedAt: row.committed_at,
  };
}

function eventFromDb(row: EventDbRow): EventRow {
  return { id: row.id, at: row.at, level: row.level, event: row.event, data: JSON.parse(row.data_json) };
}

function checkpointFromDb(row: CheckpointDbRow | undefined): CheckpointRow | null {
  if (!row) return null;
  return {
    step: row.step,
    epoch: row.epoch,
    cursor: row.cursor,
    sha256: row.sha256,
    path: row.path,
    bytes: row.bytes,
    createdAt: row.created_at,
  };
}

/** Writes `bytes` to `path` so that after a crash the path holds either nothing, the old file, or all of `bytes`. */
export function writeFileAtomic(path: string, bytes: Uint8Array, mode = 0o644): void {
  const dir = join(path, '..');
  const temp = `${path}.${process.pid}.${randomUUID()}.tmp`;
  const fd = openSync(temp, 'w', mode);
  try {
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    renameSync(temp, path);
  } catch (error) {
    rmSync(temp, { force: true });
    throw error;
  }
  // The rename is durable only once the directory entry is.
  const dirFd = openSync(dir, 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export class SqliteStore implements Store {
  readonly dataDir: string;
  private readonly db: Database.Database;
  private readonly checkpointDir: string;
  private readonly statements: Statements;

  constructor(dataDir: string) {
    this.dataDir = dataDir;
    mkdirSync(dataDir, { recursive: true });
    this.checkpointDir = join(dataDir, 'checkpoints');
    mkdirSync(this.checkpointDir, { recursive: true });
    this.db = openDatabase(join(dataDir, 'tabswarm.sqlite'));
    this.statements = prepareStatements(this.db);
  }

  openRun(job: unknown, jobKey: string, datasetSize: number): OpenedRun {
    return this.db.transaction((): OpenedRun => {
      const current = this.statements.currentRun.get();
      if (current && current.job_key === jobKey) {
        const durable = this.statements.durable.get(current.run_id);
        return {
          runId: current.run_id,
          durable: durable ? JSON.parse(durable.state_json) : null,
          resumed: true,
          supersededRunId: null,
        };
      }
      this.statements.retireRuns.run();
      const runId = randomUUID();
      this.statements.insertRun.run(runId, jobKey, JSON.stringify(job), datasetSize, Date.now());
      return { runId, durable: null, resumed: false, supersededRunId: current?.run_id ?? null };
    })();
  }

  apply(runId: string, ops: StoreOp[]): void {
    if (ops.length === 0) return;
    const now = Date.now();
    this.db.transaction(() => {
      for (const op of ops) {
        switch (op.kind) {
          case 'persist':
            this.statements.persist.run(runId, JSON.stringify(op.durable), now);
            break;
          case 'commit': {
            const c = op.commit;
            // NaN is not storable as REAL (better-sqlite3 writes NULL); a loss is for display only.
            const loss = Number.isFinite(c.loss) ? c.loss : null;
            this.statements.commit.run(
              runId,
              c.step,
              c.firstStep,
              c.epoch,
              c.cursorStart,
              c.count,
              c.ranges ? JSON.stringify(c.ranges) : null,
              c.skipped ? JSON.stringify(c.skipped) : null,
              c.hash,
              c.round,
              JSON.stringify(c.world),
              loss,
              now,
            );
            break;
          }
          case 'rollback':
            this.statements.rollback.run(runId, op.afterStep);
            break;
          case 'round': {
            const r = op.round;
            this.statements.round.run(runId, r.round, r.step, r.epoch, JSON.stringify(r.world), r.startedAt);
            break;
          }
          case 'event':
            this.statements.event.run(runId, op.at, op.level, op.event, JSON.stringify(op.data ?? null));
            break;
        }
      }
    })();
  }

  commits(runId: string, opts: { includeRolledBack?: boolean } = {}): CommitRow[] {
    const rows = opts.includeRolledBack
      ? this.statements.allCommits.all(runId)
      : this.statements.liveCommits.all(runId);
    return rows.map(commitFromDb);
  }

  commitsFrom(runId: string, fromStep: number, limit: number): CommitRow[] {
    return this.statements.liveCommitsFrom.all(runId, fromStep, limit).map(commitFromDb);
  }

  rounds(runId: string): RoundRow[] {
    return this.statements.rounds.all(runId).map((row) => ({
      round: row.round,
      step: row.step,
      epoch: row.epoch,
      world: JSON.parse(row.world_json),
      startedAt: row.started_at,
    }));
  }

  events(runId: string, opts: { afterId?: number; limit?: number } = {}): EventRow[] {
    return this.statements.events.all(runId, opts.afterId ?? 0, opts.limit ?? 1000).map(eventFromDb);
  }

  eventsNamed(runId: string, event: string, opts: { afterId?: number; limit?: number } = {}): EventRow[] {
    return this.statements.eventsNamed.all(runId, event, opts.afterId ?? 0, opts.limit ?? 1000).map(eventFromDb);
  }

  putCheckpoint(runId: string, meta: CheckpointMeta, bytes: Uint8Array): CheckpointRow {
    const dir = join(this.checkpointDir, runId);
    mkdirSync(dir, { recursive: true });
    const sha256 = sha256Hex(bytes);
    // The name carries the hash so that replacing a step's checkpoint never overwrites the file a reader
    // may be streaming; the old file is removed after the row moved on.
    const path = join(dir, `step-${meta.step}-${sha256.slice(0, 16)}.ckpt`);
    writeFileAtomic(path, bytes);
    const previous = this.checkpoint(runId, meta.step);
    const createdAt = Date.now();
    this.statements.putCheckpoint.run(runId, meta.step, meta.epoch, meta.cursor, sha256, path, bytes.length, createdAt);
    if (previous && previous.path !== path) rmSync(previous.path, { force: true });
    return { ...meta, sha256, path, bytes: bytes.length, createdAt };
  }

  checkpoint(runId: string, step: number): CheckpointRow | null {
    return checkpointFromDb(this.statements.checkpoint.get(runId, step));
  }

  latestCheckpoint(runId: string): CheckpointRow | null {
    return checkpointFromDb(this.statements.latestCheckpoint.get(runId));
  }

  checkpoints(runId: string): CheckpointRow[] {
    return this.statements.checkpoints.all(runId).map((row) => checkpointFromDb(row)!);
  }

  readCheckpoint(row: CheckpointRow): Buffer {
    return readFileSync(row.path);
  }

  pruneEvents(runId: string, keep: number): number {
    return this.statements.pruneEvents.run(runId, runId, Math.max(0, Math.floor(keep))).changes;
  }

  pruneCheckpoints(runId: string, keepSteps: readonly number[]): number[] {
    const keep = new Set(keepSteps);
    const doomed = this.checkpoints(runId).filter((row) => !keep.has(row.step));
    if (doomed.length === 0) return [];
    // Rows first: a crash between the two leaves an orphan file, never a row without its file.
    this.db.transaction(() => {
      for (const row of doomed) this.statements.deleteCheckpoint.run(runId, row.step);
    })();
    for (const row of doomed) rmSync(row.path, { force: true });
    return doomed.map((row) => row.step);
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
