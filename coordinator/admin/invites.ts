/**
 * Invite links (`/?invite=<token>`), kept in the coordinator's SQLite file (table `invites`, its own
 * connection: the store's schema is not touched). An invite has an id (shown on the admin page and in
 * the workers table), a secret token (in the link), an optional label, an optional limit on the tabs
 * connected through it at once, an optional expiry, and can be revoked. Tokens are matched in constant
 * time against every live invite, so the time a lookup takes says nothing about how close a guess was.
 */
import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { sameSecret } from '../http/http-util';

export interface Invite {
  id: string;
  token: string;
  label: string;
  /** Tabs that may be connected through it at once; null: no limit. */
  maxTabs: number | null;
  /** ms since the epoch; null: never expires. */
  expiresAt: number | null;
  createdAt: number;
  revokedAt: number | null;
}

interface InviteRow {
  id: string;
  token: string;
  label: string;
  max_tabs: number | null;
  expires_at: number | null;
  created_at: number;
  revoked_at: number | null;
}

const fromRow = (r: InviteRow): Invite => ({
  id: r.id,
  token: r.token,
  label: r.label,
  maxTabs: r.max_tabs,
  expiresAt: r.expires_at,
  createdAt: r.created_at,
  revokedAt: r.revoked_at,
});

/** Not revoked and not expired at `now`. */
export function isLive(invite: Pick<Invite, 'revokedAt' | 'expiresAt'>, now: number): boolean {
  return invite.revokedAt === null && (invite.expiresAt === null || invite.expiresAt > now);
}

export class InviteStore {
  private readonly db: Database.Database;

  constructor(dataDir: string) {
    this.db = new Database(join(dataDir, 'tabswarm.sqlite'));
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`CREATE TABLE IF NOT EXISTS invites (
      id TEXT PRIMARY KEY,
      token TEXT NOT NULL UNIQUE,
      label TEXT NOT NULL,
      max_tabs INTEGER,
      expires_at INTEGER,
      created_at INTEGER NOT NULL,
      revoked_at INTEGER
    )`);
  }

  create(opts: { label?: string; maxTabs?: number | null; expiresAt?: number | null }, now = Date.now()): Invite {
    const invite: Invite = {
      id: `inv-${randomBytes(4).toString('hex')}`,
      token: randomBytes(18).toString('base64url'),
      label: opts.label ?? '',
      maxTabs: opts.maxTabs ?? null,
      expiresAt: opts.expiresAt ?? null,
      createdAt: now,
      revokedAt: null,
    };
    this.db
      .prepare('INSERT INTO invites (id, token, label, max_tabs, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?)')
      .run(invite.id, invite.token, invite.label, invite.maxTabs, invite.expiresAt, invite.createdAt);
    return invite;
  }

  list(): Invite[] {
    return this.db.prepare<[], InviteRow>('SELECT * FROM invites ORDER BY created_at').all().map(fromRow);
  }

  /** Revokes `id`; false when there is no such invite (or it was revoked already). */
  revoke(id: string, now = Date.now()): boolean {
    return (
      this.db.prepare('UPDATE invites SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(now, id).changes > 0
    );
  }

  /** The live (not revoked, not expired) invite whose token is `token`, compared in constant time. */
  match(token: string, now = Date.now()): Invite | null {
    let found: Invite | null = null;
    for (const invite of this.list()) {
      // Compare with every invite (no early exit), each in constant time.
      if (sameSecret(token, invite.token) && isLive(invite, now)) found = invite;
    }
    return found;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
