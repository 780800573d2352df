/**
 * The Node side of test/browser/pages/net-harness.ts, shared by the collectives test, bench:elastic and
 * bench:net.
 */
import type { Page } from 'playwright-core';
import type { AllreduceParams, NetHarness } from '../browser/pages/net-harness';

declare const netHarness: NetHarness;

const MiB = 1024 * 1024;
/** Wall-clock milliseconds, the clock the harness pages start their transfers by. */
const now = () => performance.timeOrigin + performance.now();

/** A page with the harness open under peer id `id`. */
export interface HarnessPage {
  readonly id: string;
  readonly page: Page;
}

/**
 * Raw data-channel throughput `from` → `to` in MiB/s: `total` bytes in `messageBytes` messages, the
 * send starting `leadMs` from now (both sides ready by then), timed to the last byte's arrival. The raw
 * link must be connected (`netHarness.rawConnect`); `highWaterBytes` defaults to the collectives' own.
 */
export async function rawThroughput(
  from: HarnessPage,
  to: HarnessPage,
  total: number,
  messageBytes: number,
  opts: { leadMs?: number; highWaterBytes?: number } = {},
): Promise<number> {
  const startAt = now() + (opts.leadMs ?? 300);
  const receiving = to.page.evaluate(([peer, t]) => netHarness.rawReceive(peer as string, t as number), [
    from.id,
    total,
  ] as const);
  await from.page.evaluate(
    ([peer, t, m, s, h]) =>
      netHarness.rawSend(peer as string, t as number, m as number, s as number, h as number | undefined),
    [to.id, total, messageBytes, startAt, opts.highWaterBytes] as const,
  );
  const { endAt } = await receiving;
  return total / MiB / ((endAt - startAt) / 1000);
}

/**
 * One allreduce on every page (a formed ring, in any order) from a common start instant `leadMs` from now;
 * milliseconds from that instant to the last rank's finish. Throws if a rank fails or the ranks' results
 * differ.
 */
export async function allreduceFromCommonStart(
  pages: readonly Page[],
  params: Omit<AllreduceParams, 'startAt'>,
  leadMs = 300,
): Promise<number> {
  const startAt = now() + leadMs;
  const outcomes = await Promise.all(
    pages.map((p) => p.evaluate((o) => netHarness.allreduce(o), { ...params, startAt })),
  );
  const hashes = new Set<string>();
  let end = 0;
  for (const o of outcomes) {
    if (!o.ok) throw new Error(`allreduce failed: ${o.error.kind} ${o.error.message}`);
    hashes.add(o.hash);
    end = Math.max(end, o.endAt);
  }
  if (hashes.size !== 1) throw new Error(`ranks disagree on the allreduce result: ${[...hashes].join(' ')}`);
  return end - startAt;
}
