/**
 * The invites card of the admin page: create an invite link (optional label, tab limit, expiry), copy
 * it, revoke it. The list comes from `GET /api/admin/invites` (on sign-in and after each change); the
 * tabs using each invite are counted from the live status (every worker says which invite it came
 * through), so the page still runs no polling loop.
 */
import type { AdminApi } from './admin-api';
import type { FeedWorker, InvitesResponse, InviteView } from '../../core/protocol/admin-feed';
import { byId, el, setText } from './format';

export class InvitesPanel {
  private invites: InviteView[] = [];
  private counts = new Map<string, number>();

  constructor(
    private readonly api: () => AdminApi | null,
    private readonly say: (text: string, kind?: 'problem') => void,
  ) {
    const form = byId<HTMLFormElement>('invite-form');
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.create();
    });
  }

  async load(): Promise<void> {
    const api = this.api();
    if (!api) return;
    const result = await api.get<InvitesResponse>('invites');
    if (!result.ok) {
      this.say(`Cannot list invites: ${result.message}`, 'problem');
      return;
    }
    this.invites = result.body.invites;
    setText(
      byId('join-mode'),
      result.body.join === 'invite'
        ? 'Only tabs opened from an invite link may join.'
        : 'Anyone with the URL may join (--join open); invites only label tabs.',
    );
    this.render();
  }

  /** Tabs per invite from the page's worker rows (round members and waiting workers). */
  updateCounts(workers: Iterable<FeedWorker>): void {
    const counts = new Map<string, number>();
    for (const w of workers) if (w.invite) counts.set(w.invite, (counts.get(w.invite) ?? 0) + 1);
    const changed = counts.size !== this.counts.size || [...counts].some(([id, n]) => this.counts.get(id) !== n);
    this.counts = counts;
    if (changed) this.render();
  }

  private async create(): Promise<void> {
    const label = byId<HTMLInputElement>('invite-label').value.trim();
    const maxText = byId<HTMLInputElement>('invite-max-tabs').value;
    const minutesText = byId<HTMLInputElement>('invite-expires').value;
    const body: Record<string, unknown> = {};
    if (label) body.label = label;
    if (maxText) body.maxTabs = Number(maxText);
    if (minutesText) body.expiresInMinutes = Number(minutesText);
    const api = this.api();
    if (!api) return;
    const result = await api.post<InviteView>('invites', body);
    if (!result.ok) {
      this.say(`Invite not created: ${result.message}`, 'problem');
      return;
    }
    this.say(`Invite ${result.body.id} created: ${location.origin}${result.body.link}`);
    await this.load();
  }

  private async revoke(id: string): Promise<void> {
    const api = this.api();
    if (!api) return;
    const result = await api.post(`invites/${encodeURIComponent(id)}/revoke`, {});
    if (!result.ok) this.say(`Invite ${id} not revoked: ${result.message}`, 'problem');
    else this.say(`Invite ${id} revoked; tabs already in stay until they leave.`);
    await this.load();
  }

  private render(): void {
    const body = byId<HTMLTableSectionElement>('invites-body');
    byId('invites-empty').hidden = this.invites.length > 0;
    body.replaceChildren(
      ...this.invites.map((invite) => {
        const url = `${location.origin}${invite.link}`;
        const tabs = this.counts.get(invite.id) ?? 0;
        const revoke = el('button', { type: 'button', class: 'small', disabled: !invite.live }, 'Revoke');
        revoke.addEventListener('click', () => void this.revoke(invite.id));
        const state = invite.revokedAt !== null ? 'revoked' : invite.live ? 'live' : 'expired';
        return el(
          'tr',
          { 'data-invite-id': invite.id, 'data-state': state },
          el('td', { class: 'mono' }, invite.id),
          el('td', {}, invite.label || '–'),
          el('td', { class: 'mono invite-link' }, invite.live ? el('a', { href: url }, url) : state),
          el('td', { class: 'num' }, invite.maxTabs === null ? `${tabs}` : `${tabs} / ${invite.maxTabs}`),
          el('td', {}, invite.expiresAt === null ? 'never' : new Date(invite.expiresAt).toLocaleString()),
          el('td', { class: 'actions' }, revoke),
        );
      }),
    );
  }
}
