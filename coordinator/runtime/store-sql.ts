/**
 * The SQL of the coordinator's store (store.ts): the schema, the connection's settings (WAL,
 * synchronous=FULL, foreign keys) and every prepared statement, with the row shapes they return.
 * store.ts owns what the statements mean (transactions, row ↔ record conversion, checkpoint files);
 * nothing else imports this file.
 */
import Database from 'better-sqlite3';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY,
  job_key TEXT NOT NULL,
  job_json TEXT NOT NULL,
  dataset_size INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  current INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS durable_state (
  run_id TEXT PRIMARY KEY REFERENCES runs(run_id),
  state_json TEXT NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
  run_id TEXT NOT NULL REFERENCES runs(run_id),
  round INTEGER NOT NULL,
  step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  world_json TEXT NOT NULL,
  started_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, round)
);
CREATE TABLE IF NOT EXISTS commits (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL REFERENCES runs(run_id),
  step INTEGER NOT NULL,
  first_step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  cursor_start INTEGER NOT NULL,
  count INTEGER NOT NULL,
  ranges_json TEXT,
  skipped_json TEXT,
  hash TEXT NOT NULL,
  round INTEGER NOT NULL,
  world_json TEXT NOT NULL,
  loss REAL,
  rolled_back INTEGER NOT NULL DEFAULT 0,
  committed_at INTEGER NOT NULL
);
-- A step is live at most once: a second live commit of the same step is a bug the database refuses.
CREATE UNIQUE INDEX IF NOT EXISTS commits_live_step ON commits(run_id, step) WHERE rolled_back = 0;
CREATE TABLE IF NOT EXISTS checkpoints (
  run_id TEXT NOT NULL REFERENCES runs(run_id),
  step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  cursor INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  path TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL,
  at INTEGER NOT NULL,
  level TEXT NOT NULL,
  event TEXT NOT NULL,
  data_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, id);
`;

export interface CommitDbRow {
  step: number;
  first_step: number;
  loss: number | null;
  epoch: number;
  cursor_start: number;
  count: number;
  /** JSON of the committed position ranges when they are not [cursor_start, cursor_start+count); NULL: that range. */
  ranges_json: string | null;
  /** JSON of the positions the commit left as holes (a partial commit); NULL: none. */
  skipped_json: string | null;
  hash: string;
  round: number;
  world_json: string;
  rolled_back: number;
  committed_at: number;
}

export interface CheckpointDbRow {
  step: number;
  epoch: number;
  cursor: number;
  sha256: string;
  path: string;
  bytes: number;
  created_at: number;
}

export interface EventDbRow {
  id: number;
  at: number;
  level: string;
  event: string;
  data_json: string;
}

/** Opens (or creates) the database at `path` with the store's settings and schema. */
export function openDatabase(path: string): Database.Database {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // FULL: every committed transaction is fsynced to the WAL before commit() returns.
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  db.exec(SCHEMA);
  migrate(db);
  return db;
}

/**
 * Columns added after a store may have been created: a database written by an older release gains them
 * (NULL in its rows, which read as "no holes": a commit covered [cursor_start, cursor_start+count)).
 */
function migrate(db: Database.Database): void {
  const columns = new Set((db.prepare('PRAGMA table_info(commits)').all() as { name: string }[]).map((c) => c.name));
  for (const column of ['ranges_json', 'skipped_json'])
    if (!columns.has(column)) db.exec(`ALTER TABLE commits ADD COLUMN ${column} TEXT`);
}

/** Runs and their durable state (`openRun`), and the writes `apply` runs in one transaction. */
function writeStatements(db: Database.Database) {
  return {
    currentRun: db.prepare<[], { run_id: string; job_key: string }>(
      'SELECT run_id, job_key FROM runs WHERE current = 1 ORDER BY created_at DESC LIMIT 1',
    ),
    retireRuns: db.prepare('UPDATE runs SET current = 0 WHERE current = 1'),
    insertRun: db.prepare(
      'INSERT INTO runs (run_id, job_key, job_json, dataset_size, created_at, current) VALUES (?, ?, ?, ?, ?, 1)',
    ),
    durable: db.prepare<[string], { state_json: string }>('SELECT state_json FROM durable_state WHERE run_id = ?'),
    persist: db.prepare(
      `INSERT INTO durable_state (run_id, state_json, updated_at) VALUES (?, ?, ?)
       ON CONFLICT(run_id) DO UPDATE SET state_json = excluded.state_json, updated_at = excluded.updated_at`,
    ),
    commit: db.prepare(
      `INSERT INTO commits (run_id, step, first_step, epoch, cursor_start, count, ranges_json, skipped_json, hash, round, world_json, loss, committed_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    rollback: db.prepare('UPDATE commits SET rolled_back = 1 WHERE run_id = ? AND step > ? AND rolled_back = 0'),
    round: db.prepare(
      `INSERT INTO rounds (run_id, round, step, epoch, world_json, started_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT(run_id, round) DO UPDATE SET step = excluded.step, epoch = excluded.epoch,
         world_json = excluded.world_json, started_at = excluded.started_at`,
    ),
    event: db.prepare('INSERT INTO events (run_id, at, level, event, data_json) VALUES (?, ?, ?, ?, ?)'),
  };
}

/** The reads of the record: commits, rounds, the event log (and its retention). */
function readStatements(db: Database.Database) {
  return {
    liveCommits: db.prepare<[string], CommitDbRow>(
      'SELECT * FROM commits WHERE run_id = ? AND rolled_back = 0 ORDER BY step, id',
    ),
    allCommits: db.prepare<[string], CommitDbRow>('SELECT * FROM commits WHERE run_id = ? ORDER BY id'),
    // The partial unique index commits_live_step serves this range scan.
    liveCommitsFrom: db.prepare<[string, number, number], CommitDbRow>(
      'SELECT * FROM commits WHERE run_id = ? AND rolled_back = 0 AND step >= ? ORDER BY step LIMIT ?',
    ),
    rounds: db.prepare<
      [string],
      { round: number; step: number; epoch: number; world_json: string; started_at: number }
    >('SELECT * FROM rounds WHERE run_id = ? ORDER BY round'),
    events: db.prepare<[string, number, number], EventDbRow>(
      'SELECT * FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?',
    ),
    eventsNamed: db.prepare<[string, string, number, number], EventDbRow>(
      'SELECT * FROM events WHERE run_id = ? AND event = ? AND id > ? ORDER BY id LIMIT ?',
    ),
    pruneEvents: db.prepare(
      `DELETE FROM events WHERE run_id = ? AND event NOT IN ('evaluation', 'record_rolled_back') AND id <= (
         SELECT id FROM events WHERE run_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
    ),
  };
}

/** The checkpoint rows (their bytes are files next to the database). */
function checkpointStatements(db: Database.Database) {
  return {
    putCheckpoint: db.prepare(
      `INSERT INTO checkpoints (run_id, step, epoch, cursor, sha256, path, bytes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT(run_id, step) DO UPDATE SET epoch = excluded.epoch, cursor = excluded.cursor,
         sha256 = excluded.sha256, path = excluded.path, bytes = excluded.bytes, created_at = excluded.created_at`,
    ),
    checkpoint: db.prepare<[string, number], CheckpointDbRow>(
      'SELECT * FROM checkpoints WHERE run_id = ? AND step = ?',
    ),
    latestCheckpoint: db.prepare<[string], CheckpointDbRow>(
      'SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step DESC LIMIT 1',
    ),
    checkpoints: db.prepare<[string], CheckpointDbRow>('SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step'),
    deleteCheckpoint: db.prepare('DELETE FROM checkpoints WHERE run_id = ? AND step = ?'),
  };
}

export type Statements = ReturnType<typeof prepareStatements>;

/** Every statement the store runs, prepared once per connection. */
export function prepareStatements(db: Database.Database) {
  return { ...writeStatements(db), ...readStatements(db), ...checkpointStatements(db) };
}
