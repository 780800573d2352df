/**
 * The admin's invite routes, registered into the API router (http/router.ts) by the admin routes
 * (admin-routes.ts), behind their token guard:
 *
 *   GET    /api/admin/invites            every invite: id, link, label, tab limit, tabs connected, expiry, revoked
 *   POST   /api/admin/invites            {label?, maxTabs?, expiresInMinutes?} → the new invite (201)
 *   DELETE /api/admin/invites/{id}       revoke (also POST /api/admin/invites/{id}/revoke); tabs already in stay
 *
 * Body fields are validated (zod, strict); a bad one is a 400 that changes nothing.
 */
import { z } from 'zod';
import { tabsThrough } from '../runtime/admission';
import type { InvitesResponse, InviteView, JoinMode } from '../../core/protocol/admin-feed';
import type { CoordinatorState } from '../machine/machine';
import { HttpError, readJsonBody, sendJson } from '../http/http-util';
import type { RouteHandler, Router } from '../http/router';
import { type Invite, type InviteStore, isLive } from './invites';

const createSchema = z.strictObject({
  label: z.string().max(120).optional(),
  maxTabs: z.int().min(1).max(100_000).nullable().optional(),
  expiresInMinutes: z.number().positive().max(525_600).nullable().optional(),
});

/** Registers `/api/admin/invites[/…]` into the API router; the admin guard in front of them is admin-routes.ts's. */
export interface InviteRoutes {
  register(router: Router): void;
}

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
  const list: RouteHandler = (_req, res) => {
    const body: InvitesResponse = { join: deps.join, invites: deps.invites.list().map(view) };
    sendJson(res, 200, body);
  };
  const create: RouteHandler = async (req, res) => {
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
  };
  const revoke: RouteHandler = (_req, res, { params }) => {
    if (!deps.invites.revoke(params.id, now()))
      throw new HttpError(404, 'unknown_invite', `no live invite ${params.id.slice(0, 40)}`);
    sendJson(res, 200, { ok: true, id: params.id });
  };
  return {
    register(router) {
      for (const path of ['/api/admin/invites', '/api/admin/invites/'])
        router.on('GET', path, list).on('POST', path, create);
      router.on('DELETE', '/api/admin/invites/:id', revoke).on('POST', '/api/admin/invites/:id/revoke', revoke);
    },
  };
}
