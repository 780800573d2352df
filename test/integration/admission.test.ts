/**
 * Admission by invite (`--join invite`) against a real coordinator: invite links created and revoked
 * through `/api/admin/invites`, a tab limit and an expiry per invite, the invite of each worker in the
 * status, invites kept across a restart; and `--join open`, where an invite only labels a tab.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { SimWorker } from '../support/sim-worker';

const JOB = { model: 'tiny-mlp', globalBatch: 32, epochs: 100, minWorkers: 5, maxWorkers: 8, heartbeatMs: 1000 };

let procs: CoordinatorProcess[] = [];
let sockets: SimWorker[] = [];
afterEach(async () => {
  await Promise.all(sockets.map((s) => s.terminate()));
  sockets = [];
  await Promise.all(procs.map((p) => p.stop()));
  procs = [];
});

function api(proc: CoordinatorProcess, path: string, init: RequestInit = {}, token = proc.adminToken) {
  return proc.fetch(`/api/admin/invites${path}`, {
    ...init,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
  });
}

async function createInvite(proc: CoordinatorProcess, body: Record<string, unknown>) {
  const res = await api(proc, '', { method: 'POST', body: JSON.stringify(body) });
  expect(res.status).toBe(201);
  const invite = (await res.json()) as { id: string; link: string; maxTabs: number | null };
  return { ...invite, token: new URL(invite.link, 'http://x').searchParams.get('invite')! };
}

/** A hello with `invite`: the welcome, or the refusal and the close code. */
async function hello(proc: CoordinatorProcess, invite?: string) {
  const s = await SimWorker.connect(proc.wsUrl);
  sockets.push(s);
  s.send({
    type: 'hello',
    runId: null,
    workerId: null,
    peerId: `p-${Math.random().toString(36).slice(2, 10)}`,
    adapter: { vendor: '', architecture: '', description: '' },
    haveStep: null,
    haveHash: null,
    ...(invite ? { invite } : {}),
  });
  const reply = await s.next((m) => m.type === 'welcome' || m.type === 'error');
  if (reply.type === 'welcome') return { welcomed: true as const, workerId: reply.workerId as string, socket: s };
  return { welcomed: false as const, code: reply.code as string, close: (await s.closed).code };
}

describe('admission', () => {
  it('--join invite: only invite links join; limits, expiry and revocation hold; the status names the invite', async () => {
    const proc = await spawnCoordinator({ job: JOB, extraArgs: ['--join', 'invite'] });
    procs.push(proc);
    expect(await hello(proc)).toEqual({ welcomed: false, code: 'no_invite', close: 4007 });
    expect(await hello(proc, 'made-up-token-000000')).toMatchObject({ welcomed: false, code: 'no_invite' });

    expect((await api(proc, '', { method: 'POST', body: '{}' }, 'wrong')).status).toBe(401);
    expect((await api(proc, '', { method: 'POST', body: JSON.stringify({ maxTabs: 0 }) })).status).toBe(400);
    expect((await api(proc, '', { method: 'POST', body: JSON.stringify({ extra: 1 }) })).status).toBe(400);

    const lab = await createInvite(proc, { label: 'lab', maxTabs: 1 });
    expect(lab.link).toMatch(/^\/\?invite=[A-Za-z0-9_-]{20,}$/);
    const first = await hello(proc, lab.token);
    expect(first.welcomed).toBe(true);
    const status = await proc.status();
    expect(status.waiting.items.find((w) => first.welcomed && w.id === first.workerId)?.invite).toBe(lab.id);
    // The tab limit: a second tab through the same invite is refused while the first is connected.
    expect(await hello(proc, lab.token)).toMatchObject({ welcomed: false, code: 'no_invite' });

    const brief = await createInvite(proc, { expiresInMinutes: 0.001 }); // 60 ms
    await new Promise((r) => setTimeout(r, 150));
    expect(await hello(proc, brief.token)).toMatchObject({ welcomed: false, code: 'no_invite' });

    const open = await createInvite(proc, { label: 'open' });
    expect((await hello(proc, open.token)).welcomed).toBe(true);
    expect((await api(proc, `/${open.id}`, { method: 'DELETE' })).status).toBe(200);
    expect((await api(proc, `/${open.id}`, { method: 'DELETE' })).status).toBe(404);
    expect(await hello(proc, open.token)).toMatchObject({ welcomed: false, code: 'no_invite' });
    // Tabs already in stay.
    expect((await proc.status()).waiting.items.filter((w) => w.invite === open.id)).toHaveLength(1);

    const list = (await (await api(proc, '')).json()) as {
      join: string;
      invites: { id: string; live: boolean; tabs: number }[];
    };
    expect(list.join).toBe('invite');
    expect(list.invites.map((i) => [i.id, i.live])).toEqual([
      [lab.id, true],
      [brief.id, false],
      [open.id, false],
    ]);
    expect(list.invites[0].tabs).toBe(1);

    // Invites live in the SQLite store: a restarted coordinator still honours them.
    await Promise.all(sockets.map((s) => s.terminate()));
    await proc.stop();
    const again = await proc.restart();
    procs.push(again);
    expect((await hello(again, lab.token)).welcomed).toBe(true);
    expect(await hello(again, open.token)).toMatchObject({ welcomed: false, code: 'no_invite' });
  }, 40_000);

  it('--join open (default): anyone joins; a valid invite labels the tab, a bad one is ignored', async () => {
    const proc = await spawnCoordinator({ job: JOB });
    procs.push(proc);
    expect((await hello(proc)).welcomed).toBe(true);
    expect((await hello(proc, 'not-a-real-invite-token')).welcomed).toBe(true);
    const tagged = await createInvite(proc, { label: 'class of 2026' });
    const joined = await hello(proc, tagged.token);
    expect(joined.welcomed).toBe(true);
    const waiting = (await proc.status()).waiting.items;
    expect(waiting.map((w) => w.invite)).toEqual([null, null, tagged.id]);
  }, 30_000);
});
