/**
 * Who may join: `--join open` (the default: anyone who can reach the page) or `--join invite` (only a
 * tab opened from an invite link, `/?invite=<token>`). The server screens each `hello` before the
 * machine sees it: the token is checked (invites.ts) and replaced by the invite's id, so the machine,
 * the status and the admin page know which invite a worker came through without ever holding a token.
 */
import type { CoordinatorState } from '../machine/machine';
import type { ClientMessage, HelloMessage } from '../../core/protocol/tab-messages';
import type { InviteStore } from '../admin/invites';

import type { JoinMode } from '../../core/protocol/admin-feed';
import { workersOf } from '../machine/worker-table';

export type { JoinMode };

export type Screened = { ok: true; msg: ClientMessage } | { ok: false; message: string };

/** Workers connected now that joined through invite `inviteId`. */
export function tabsThrough(state: CoordinatorState, inviteId: string): number {
  let tabs = 0;
  for (const worker of workersOf(state.workers)) if (worker.invite === inviteId) tabs += 1;
  return tabs;
}

export class Admission {
  constructor(
    readonly mode: JoinMode,
    private readonly invites: InviteStore,
    private readonly now: () => number = Date.now,
  ) {}

  screen(msg: HelloMessage, state: CoordinatorState): Screened {
    const { invite: token, ...rest } = msg;
    const invite = token !== undefined ? this.invites.match(token, this.now()) : null;
    if (invite === null) {
      if (this.mode === 'invite')
        return { ok: false, message: 'this coordinator admits tabs by invite: open the invite link you were given' };
      return { ok: true, msg: rest };
    }
    if (invite.maxTabs !== null) {
      const using = tabsThrough(state, invite.id);
      if (using >= invite.maxTabs)
        return { ok: false, message: `invite ${invite.id} is in use by ${using} tab(s), its limit` };
    }
    return { ok: true, msg: { ...rest, invite: invite.id } };
  }
}
