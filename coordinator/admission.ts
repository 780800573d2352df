/**
 * Who may join: `--join open` (the default: anyone who can reach the page) or `--join invite` (only a
 * tab opened from an invite link, `/?invite=<token>`). The server screens each `hello` before the
 * machine sees it: the token is checked (invites.ts) and replaced by the invite's id, so the machine,
 * the status and the admin page know which invite a worker came through without ever holding a token.
 */
import type { CoordinatorState } from './core/machine';
import type { ClientMessage, HelloMessage } from './core/protocol';
import type { InviteStore } from './invites';

export type JoinMode = 'open' | 'invite';

export type Screened = { ok: true; msg: ClientMessage } | { ok: false; message: string };

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
      const using = Object.values(state.workers).filter((w) => w.invite === invite.id).length;
      if (using >= invite.maxTabs)
        return { ok: false, message: `invite ${invite.id} is in use by ${using} tab(s), its limit` };
    }
    return { ok: true, msg: { ...rest, invite: invite.id } };
  }
}
