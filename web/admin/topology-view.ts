/**
 * Who syncs with whom: one drawing per sync group, each member a dot and each link a line coloured by
 * its ICE path (host, srflx, prflx, relay = through TURN; grey: not reported yet), with the link's RTT
 * in its tooltip; under it the group's figures and its slowest links.
 *
 * Today every round is one ring over all ranks (rank r sends to r + 1), so `syncGroups` returns one
 * group; when rounds carry groups (a ring inside each group and one among leaders), they come out of
 * `syncGroups` and each is drawn the same way. Link figures come from the workers' heartbeats
 * (`peerLinks`: the selected candidate pair's types and RTT of each ring link).
 */
import type { FeedWorker } from '../../core/protocol/admin-feed';
import type { CandidateType } from '../../core/protocol/tab-messages';
import { el, formatNumber } from './format';

/** A set of ranks that sync with each other, in ring order. */
export interface SyncGroup {
  name: string;
  /** Members in the order the ring passes them (rank order today). */
  members: FeedWorker[];
}

/** One directed link of a group: `from` sends to `to`. */
export interface GroupLink {
  from: FeedWorker;
  to: FeedWorker;
  /** The path as `from` (or else `to`) reported it; null when neither reported this link. */
  path: CandidateType | null;
  rttMs: number | null;
}

/** The groups of the current round: one ring over every member, by rank. */
export function syncGroups(workers: Iterable<FeedWorker>): SyncGroup[] {
  const members = [...workers].filter((w) => w.rank !== null).sort((a, b) => a.rank! - b.rank!);
  return members.length === 0 ? [] : [{ name: `ring of ${members.length}`, members }];
}

/** The ring's links with what either end reported of them. */
export function groupLinks(group: SyncGroup): GroupLink[] {
  const n = group.members.length;
  if (n < 2) return [];
  const links: GroupLink[] = [];
  for (let i = 0; i < n; i++) {
    const from = group.members[i];
    const to = group.members[(i + 1) % n];
    if (n === 2 && i === 1) break; // a ring of two is one link
    const own = from.peerLinks.find((l) => l.peer === to.id) ?? to.peerLinks.find((l) => l.peer === from.id);
    const path = own ? (own.local === 'relay' || own.remote === 'relay' ? 'relay' : own.local) : null;
    links.push({ from, to, path, rttMs: own?.rttMs ?? null });
  }
  return links;
}

const PATH_CLASS: Record<CandidateType, string> = { host: 'host', srflx: 'srflx', prflx: 'prflx', relay: 'relay' };
const SVG = 'http://www.w3.org/2000/svg';
/** Links listed under a group, slowest first. */
const SLOWEST_SHOWN = 5;

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>,
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function titled<T extends SVGElement>(node: T, text: string): T {
  const title = document.createElementNS(SVG, 'title');
  title.textContent = text;
  node.append(title);
  return node;
}

/** The ring drawn on a circle: links as chords between neighbours, members as dots. */
function ringDrawing(group: SyncGroup, links: GroupLink[]): SVGSVGElement {
  const size = 320;
  const c = size / 2;
  const r = size / 2 - 14;
  const n = group.members.length;
  const at = new Map(
    group.members.map((w, i) => {
      const angle = (2 * Math.PI * i) / n - Math.PI / 2;
      return [w.id, { x: c + r * Math.cos(angle), y: c + r * Math.sin(angle) }];
    }),
  );
  const root = svg('svg', { viewBox: `0 0 ${size} ${size}`, class: 'ring', role: 'img', 'aria-label': group.name });
  for (const link of links) {
    const a = at.get(link.from.id)!;
    const b = at.get(link.to.id)!;
    const line = svg('line', {
      x1: a.x,
      y1: a.y,
      x2: b.x,
      y2: b.y,
      class: `link ${link.path ? PATH_CLASS[link.path] : 'unknown'}`,
    });
    root.append(
      titled(
        line,
        `${link.from.id} → ${link.to.id}: ${link.path ?? 'path not reported'}${link.rttMs !== null ? `, ${link.rttMs} ms` : ''}`,
      ),
    );
  }
  // A few members: dots; many: small gaps between the links, so each link's colour shows.
  const dot = n <= 32 ? 5 : Math.max(1, Math.min(3, 160 / n));
  for (const w of group.members) {
    const p = at.get(w.id)!;
    const node = svg('circle', {
      cx: p.x,
      cy: p.y,
      r: dot,
      class: `member ${w.state}${n > 32 ? ' small' : ''}`,
      'data-worker-id': w.id,
    });
    root.append(
      titled(
        node,
        `rank ${w.rank} · ${w.id} · ${w.state}${w.peerRttMs !== null ? ` · ring RTT ${w.peerRttMs} ms` : ''}`,
      ),
    );
  }
  return root;
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** The group's figures: links by path, RTT median and max, and the slowest links. */
function groupFacts(group: SyncGroup, links: GroupLink[]): HTMLElement {
  const byPath = new Map<string, number>();
  for (const l of links) byPath.set(l.path ?? 'unknown', (byPath.get(l.path ?? 'unknown') ?? 0) + 1);
  const rtts = links.map((l) => l.rttMs).filter((x): x is number => x !== null);
  const paths = ['host', 'srflx', 'prflx', 'relay', 'unknown']
    .filter((p) => byPath.has(p))
    .map((p) => el('span', { class: `path-chip ${p}` }, `${p} ${byPath.get(p)}`));
  const slowest = links
    .filter((l) => l.rttMs !== null)
    .sort((a, b) => b.rttMs! - a.rttMs!)
    .slice(0, SLOWEST_SHOWN);
  return el(
    'div',
    { class: 'group-facts' },
    el('h3', {}, group.name),
    el('p', { class: 'muted' }, `${links.length} link${links.length === 1 ? '' : 's'}: `, ...paths),
    el(
      'p',
      { class: 'muted' },
      rtts.length > 0
        ? `link RTT median ${formatNumber(median(rtts))} ms, max ${formatNumber(Math.max(...rtts))} ms (${rtts.length} reported)`
        : 'no link RTT reported yet',
    ),
    slowest.length > 0
      ? el(
          'ol',
          { class: 'slowest' },
          ...slowest.map((l) =>
            el(
              'li',
              {},
              el('span', { class: 'mono' }, `${l.from.id} → ${l.to.id}`),
              ` ${formatNumber(l.rttMs)} ms · ${l.path ?? '?'}`,
            ),
          ),
        )
      : null,
  );
}

/** Draws every group into `root` (replacing what was there); returns how many groups there are. */
export function renderTopology(root: HTMLElement, workers: Iterable<FeedWorker>): number {
  const groups = syncGroups(workers);
  root.replaceChildren(
    ...groups.map((group) => {
      const links = groupLinks(group);
      return el(
        'div',
        { class: 'group', 'data-group': group.name },
        ringDrawing(group, links),
        groupFacts(group, links),
      );
    }),
  );
  return groups.length;
}
