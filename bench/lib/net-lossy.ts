/**
 * bench:net's `lossy` part (issue 24): allreduce bus bandwidth against the link rate on lossy, long
 * links. Per access-link RTT (2 × the one-way delay of each access link; a ring hop crosses two access
 * links, so its RTT is twice that and its loss about twice the access link's) one scene of `tabs` homes
 * behind endpoint-independent NATs; the tabs open the collectives harness, join the coordinator's PeerJS
 * server with a volunteer's ICE configuration, form the ring on the unshaped links, and then, per loss
 * rate, the access links get the rate and the loss (bench/lib/shape-links.ts) and the ring runs fp32
 * allreduces of each size from a common start instant. Bus bandwidth is NCCL's, 2·(P−1)/P·size over the
 * time to the last rank's finish, set against the access link's rate.
 *
 * With several stripe settings (`variants`, e.g. one stripe and `auto`) every tab opens one mesh per
 * setting, each with its own ring, and the runs alternate between them size by size: the settings are
 * compared on the same links at the same moments, which on a shared machine matters more than anything.
 */
import type { Page } from 'playwright-core';
import { COORDINATOR_IP, type LinkProfile } from '../../tools/netbed/netbed';
import { COORDINATOR_PORT, Scene } from '../../tools/netbed/scene';
import { PEER_PATH } from '../../coordinator/http/peer-signaling';
import type { NetHarness } from '../../test/browser/pages/net-harness';
import { NET_HARNESS_PATH } from '../../test/support/harness-site';
import { allreduceFromCommonStart } from '../../test/support/net-harness-client';
import { ringAllreduceBusBytes } from '../../web/net/ring-allreduce';
import { shapeAccessLinks } from './shape-links';
import type { StripeSetting } from '../../web/net/stripe-policy';

declare const netHarness: NetHarness;

const MiB = 1024 * 1024;

export interface LossyOptions {
  tabs: number;
  /** Access-link RTTs, ms (each access link gets half as its one-way delay). */
  rttsMs: number[];
  /** Loss of each access link, per direction, percent. */
  lossesPercent: number[];
  rateMbit: number;
  sizesMib: number[];
  repeat: number;
  /** The stripe settings compared, one mesh and ring each (`undefined`: the mesh's default). */
  variants: Array<StripeSetting | undefined>;
  job: Record<string, unknown>;
  dataset: string;
  site: string;
}

export interface LossyRow {
  accessRttMs: number;
  /** RTT of a ring hop (two access links). */
  pathRttMs: number;
  lossPercent: number;
  /** Loss of a ring hop per direction: two access links, 1 − (1 − p)². */
  pathLossPercent: number;
  rateMbit: number;
  mib: number;
  /** Median ms from the common start to the last rank's finish. */
  ms: number;
  runsMs: number[];
  busMbit: number;
  ofRate: number;
  /** The stripe setting of the ring these runs used ('default': the mesh's). */
  setting: string;
  /** Stripes per ring link the tabs reported after the runs (min–max over links), '' when not striped. */
  stripes: string;
}

const nameOf = (v: StripeSetting | undefined) => (v === undefined ? 'default' : String(v));

/** The tabs' pages, each with one mesh and ring per stripe setting (harness `openExtra`, named by `nameOf`). */
async function openRings(scene: Scene, tabs: number, variants: LossyOptions['variants']): Promise<Page[]> {
  const run = Math.floor(Math.random() * 1e9).toString(36);
  const ids = (v: StripeSetting | undefined) => Array.from({ length: tabs }, (_, i) => `lossy${i}-${run}-${nameOf(v)}`);
  const pages = await Promise.all(
    Array.from({ length: tabs }, async (_, i) => {
      const { page } = await scene.openPage(i, NET_HARNESS_PATH);
      await page.waitForFunction(() => 'netHarness' in window);
      const id = `lossy${i}-${run}`;
      const opts = { id, host: COORDINATOR_IP, port: COORDINATOR_PORT, secure: true, path: PEER_PATH };
      await page.evaluate((o) => netHarness.open(o), { ...opts, rtcConfig: scene.iceConfig(id) });
      for (const v of variants)
        await page.evaluate(([name, own, stripes]) => netHarness.openExtra(name, own, stripes), [
          nameOf(v),
          ids(v)[i],
          v,
        ] as const);
      return page;
    }),
  );
  for (const v of variants)
    await Promise.all(
      pages.map((p) => p.evaluate(([name, m]) => netHarness.ringExtra(name, m, 120_000), [nameOf(v), ids(v)] as const)),
    );
  return pages;
}

/** One RTT's rows: a scene, the ring, then every loss rate in turn on the same ring. */
async function lossyScenario(accessRttMs: number, o: LossyOptions): Promise<LossyRow[]> {
  const link: LinkProfile = { delayMs: accessRttMs / 2, jitterMs: 0, rateMbit: o.rateMbit, lossPercent: 0 };
  const scene = await Scene.start({
    homes: Array.from({ length: o.tabs }, () => ({ nat: 'endpoint-independent' as const, link })),
    job: o.job,
    datasetDir: o.dataset,
    distDir: o.site,
  });
  const rows: LossyRow[] = [];
  try {
    const pages = await openRings(scene, o.tabs, o.variants);
    let step = 1;
    const time = (mib: number, seed: number, v: StripeSetting | undefined) =>
      allreduceFromCommonStart(
        pages,
        { n: (mib * MiB) / 4, seed, id: { round: 1, step: step++, seq: 0 }, timeoutMs: 900_000, ring: nameOf(v) },
        500,
      );
    for (const v of o.variants) await time(1, 0, v); // warm-up on the unshaped link: channels open, stripes grown
    for (const lossPercent of o.lossesPercent) {
      shapeAccessLinks(scene, { ...link, lossPercent });
      const runs = new Map<string, number[]>();
      for (let r = 0; r < o.repeat; r++) {
        for (const mib of o.sizesMib) {
          for (const v of o.variants) {
            const ms = await time(mib, r + 1, v);
            const key = `${nameOf(v)}|${mib}`;
            runs.set(key, [...(runs.get(key) ?? []), ms]);
            process.stderr.write(
              `  lossy: RTT ${accessRttMs} ms, loss ${lossPercent} %, ${mib} MiB, stripes ${nameOf(v)}: ${ms.toFixed(0)} ms\n`,
            );
          }
        }
      }
      for (const v of o.variants) {
        const stripes = await stripeCounts(pages, nameOf(v));
        for (const mib of o.sizesMib)
          rows.push(lossyRow(accessRttMs, lossPercent, mib, runs.get(`${nameOf(v)}|${mib}`)!, nameOf(v), stripes, o));
      }
    }
  } finally {
    await scene.close();
  }
  return rows;
}

/** The stripes of the ring links as `min–max` over the tabs' links ('' when the harness has no striping). */
async function stripeCounts(pages: Page[], name: string): Promise<string> {
  const counts = (await Promise.all(pages.map((p) => p.evaluate((n) => netHarness.stripes(n), name)))).flat();
  if (counts.length === 0) return '';
  const lo = Math.min(...counts);
  const hi = Math.max(...counts);
  return lo === hi ? String(lo) : `${lo}–${hi}`;
}

function lossyRow(
  accessRttMs: number,
  lossPercent: number,
  mib: number,
  runsMs: number[],
  setting: string,
  stripes: string,
  o: LossyOptions,
): LossyRow {
  const sorted = [...runsMs].sort((a, b) => a - b);
  const ms = sorted[Math.floor(sorted.length / 2)];
  const busMbit = (ringAllreduceBusBytes((mib * MiB) / 4, o.tabs) * 8) / (ms / 1000) / 1e6;
  const q = lossPercent / 100;
  return {
    accessRttMs,
    pathRttMs: 2 * accessRttMs,
    lossPercent,
    pathLossPercent: Math.round((1 - (1 - q) ** 2) * 10_000) / 100,
    rateMbit: o.rateMbit,
    mib,
    ms: Math.round(ms),
    runsMs: runsMs.map(Math.round),
    busMbit: Math.round(busMbit * 100) / 100,
    ofRate: Math.round((busMbit / o.rateMbit) * 100) / 100,
    setting,
    stripes,
  };
}

export async function lossyTable(o: LossyOptions): Promise<LossyRow[]> {
  const rows: LossyRow[] = [];
  for (const rtt of o.rttsMs) {
    process.stderr.write(`bench:net: lossy links, access-link RTT ${rtt} ms, ${o.rateMbit} Mbit/s, ${o.tabs} tabs…\n`);
    rows.push(...(await lossyScenario(rtt, o)));
  }
  return rows;
}

export function printLossyRows(rows: readonly LossyRow[]): void {
  process.stdout.write(
    '\nallreduce on lossy links (fp32 wire)\nsetting  access RTT ms  hop RTT ms  loss %  hop loss %  rate Mbit/s  size MiB  median ms  bus Mbit/s  bus/rate  stripes  runs ms\n',
  );
  for (const r of rows) {
    process.stdout.write(
      `${r.setting.padEnd(7)}  ${String(r.accessRttMs).padStart(12)}  ${String(r.pathRttMs).padStart(10)}  ${String(r.lossPercent).padStart(6)}  ${r.pathLossPercent.toFixed(2).padStart(10)}  ${String(r.rateMbit).padStart(11)}  ${String(r.mib).padStart(8)}  ${String(r.ms).padStart(9)}  ${r.busMbit.toFixed(2).padStart(10)}  ${r.ofRate.toFixed(2).padStart(8)}  ${(r.stripes || '–').padStart(7)}  ${r.runsMs.join(' ')}\n`,
    );
  }
}
