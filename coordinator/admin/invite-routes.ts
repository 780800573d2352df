/**
 * The admin's invite routes, served by the one admin router (admin-routes.ts) behind its token guard:
 *
 *   GET    /api/admin/invites            every invite: id, link, label, tab limit, tabs connected, expiry, revoked
 *   POST   /api/admin/invites            {label?, maxTabs?, expiresInMinutes?} → the new invite (201)
 *   DELETE /api/admin/invites/{id}       revoke (also POST /api/admin/invites/{id}/revoke); tabs already in stay
 *
 * Body fields are validated (zod, strict); a bad one is a 400 that changes nothing.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { tabsThrough } from '../runtime/admission';
import type { InvitesResponse, InviteView, JoinMode } from '../../core/protocol/admin-feed';
import type { CoordinatorState } from '../machine/machine';
import { HttpError, readJsonBody, sendJson } from '../http/http-util';
import { type Invite, type InviteStore, isLive } from './invites';

const createSchema = z.strictObject({
  label: z.string().max(120).optional(),
  maxTabs: z.int().min(1).max(100_000).nullable().optional(),
  expiresInMinutes: z.number().positive().max(525_600).nullable().optional(),
});

/** Serves `/api/admin/invites[/…]`; `rest` is the path after `invites`. The admin router guards it. */
export type InviteRoutes = (req: IncomingMessage, res: ServerResponse, rest: string[]) => Promise<void>;

export function inviteRoutes(deps: {
  invites: InviteStore;
  join: JoinMode;
  state: () => CoordinatorState;
  now?: () => number;
}): InviteRoutes {
  const now = deps.now ?? Date.now;
  const view = (invite: Invite): InviteView => ({
    id: invite.id,
    link: `/?invite=${invite.token}`,
    label: invite.label,
    maxTabs: invite.maxTabs,
    tabs: tabsThrough(deps.state(), invite.id),
    expiresAt: invite.expiresAt,
    createdAt: invite.createdAt,
    revokedAt: invite.revokedAt,
    live: isLive(invite, now()),
  });

  async function handle(req: IncomingMessage, res: ServerResponse, rest: string[]): Promise<void> {
    const method = req.method ?? 'GET';
    if (rest.length === 0 && method === 'GET') {
      const body: InvitesResponse = { join: deps.join, invites: deps.invites.list().map(view) };
      sendJson(res, 200, body);
      return;
    }
    if (rest.length === 0 && method === 'POST') {
      const body = createSchema.parse(await readJsonBody(req));
      const minutes = body.expiresInMinutes ?? null;
      const invite = deps.invites.create(
        {
          label: body.label,
          maxTabs: body.maxTabs ?? null,
          expiresAt: minutes === null ? null : now() + minutes * 60_000,
        },
        now(),
      );
      sendJson(res, 201, view(invite));
      return;
    }
    const revoke =
      (rest.length === 1 && method === 'DELETE') || (rest.length === 2 && rest[1] === 'revoke' && method === 'POST');
    if (revoke) {
      if (!deps.invites.revoke(rest[0], now()))
        throw new HttpError(404, 'unknown_invite', `no live invite ${rest[0].slice(0, 40)}`);
      sendJson(res, 200, { ok: true, id: rest[0] });
      return;
    }
    throw new HttpError(405, 'method_not_allowed', 'GET or POST /api/admin/invites, DELETE /api/admin/invites/{id}');
  }

  return handle;
}
