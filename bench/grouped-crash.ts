/**
 * bench:grouped-crash — issue 23's "a failure inside one group costs only that group's retry", with real
 * Chromium tabs and headless workers on loopback, against the plain ring as the reference.
 *
 *   npm run bench:grouped-crash -- [--trials 3] [--tabs 8] [--headless 2] [--topologies groups,ring]
 *
 * Each trial starts a fresh coordinator (local mode, H = 8, int8 wire, unverified: a verifying job keeps
 * the ring) with `--tabs` tabs and `--headless` headless workers, waits for a commit by the whole world
 * (in groups, for `groups` and `auto`), then polls `/api/status` every 20 ms until every member has reported the
 * group's last inner step (the outer allreduce in progress, by the coordinator's own record) and kills a
 * tab's renderer at once. It classifies what the coordinator did with that outer step:
 *
 * - `absorbed`: the round went on without the tab (`outer_loss_deferred`) and committed the outer step in
 *   that same round with exactly the tab's slices as holes (checked against test/support/lost-slices.ts,
 *   not the product's split): only its group retried;
 * - `expired`: the round waited for the survivors' reports, which did not all come by the deadline, so it
 *   closed and the survivors carried the outer step on in a new round;
 * - `failed`: the round waited, then a survivor's grouped allreduce failed (its report says why) and the
 *   round closed;
 * - `closed`: the round waited, then closed for another reason (`why` lists the events it logged after
 *   the deferral) and a new round committed the outer step;
 * - `carried`: the crash was not taken as a loss at the outer sync (the ring's only outcome, and a grouped
 *   round's when a member had not reported yet): every survivor takes the outer step again in a new round;
 * - `ungrouped` (no crash): the round was planned as one ring (the planner's choice from the RTTs it was
 *   given, after a round re-formed) and stayed so for 30 s.
 *
 * and the time from the crash to the commit of that outer step. Prints a table and one JSON line; the
 * results are in bench/RESULTS.md. Not a test: with real WebRTC on this 2-core machine the outcome varies
 * from run to run (docs/networking.md, "A failure inside one group").
 */
import type { Browser } from 'playwright-core';
import type { StatusResponse } from '../core/protocol/views';
import { launchChromium } from '../test/support/browser';
import { lostSlices, openedRounds, sharesByRank } from '../test/support/lost-slices';
import { MixedSwarm, tinyLocalJob } from '../test/support/mixed-swarm';
import { coordinatorStatusUntil } from '../test/support/swarm';
import { commitsFrom } from '../tools/swarm/coordinator-api';
import { arg, chromiumVersion, exitUnlessReady, nowMs } from './lib/common';
import { median } from './lib/elastic-figures';

const TRIALS = Number(arg('trials', '3'));
const TABS = Number(arg('tabs', '8'));
const HEADLESS = Number(arg('headless', '2'));
type Topology = 'auto' | 'groups' | 'ring';
const TOPOLOGIES = arg('topologies', 'groups,ring').split(',') as Topology[];
const H = 8;
const GLOBAL_BATCH = 64;
const TRAIN = 6 * H * GLOBAL_BATCH;
/**
 * How long a trial of `auto` waits while the round is planned as one ring before it gives up (`ungrouped`);
 * `groups` (the default) always plans groups (job `topology`, core/training/job.ts).
 */
const UNGROUPED_MS = 30_000;

type Outcome = 'absorbed' | 'expired' | 'failed' | 'closed' | 'carried' | 'ungrouped';

interface Trial {
  topology: Topology;
  trial: number;
  groups: number[] | null;
  outcome: Outcome;
  /** Crash → commit of the outer step it hit, ms (null: none within the wait). */
  toCommitMs: number | null;
  /** Why a survivor's call failed (`failed`), or the round's events after the deferral (`closed`), else null. */
  why: string | null;
}

const job = (topology: Topology) =>
  tinyLocalJob({ innerSteps: H, globalBatch: GLOBAL_BATCH, maxWorkers: TABS + HEADLESS, topology, verify: false });

async function trial(browser: Browser, topology: Topology, index: number): Promise<Trial> {
  const bed = await MixedSwarm.start({
    job: job(topology),
    trainCount: TRAIN,
    seed: 7 + index,
    name: 'grouped-crash',
    browser,
  });
  const { coordinator, swarm } = bed;
  const until = async (check: (s: StatusResponse) => boolean, what: string, pollMs = 250) =>
    (await coordinatorStatusUntil(coordinator, check, what, { timeoutMs: 180_000, pollMs })).status;
  const grouped = (s: StatusResponse) => topology === 'ring' || (s.topology?.groups.length ?? 0) >= 2;
  try {
    for (let i = 0; i < HEADLESS; i++) bed.spawnHeadless(`hl-${i}`);
    const tabs = await swarm.openMany(TABS);
    const world = await until(
      (s) => s.world.total === TABS + HEADLESS && s.state === 'training' && grouped(s),
      'the whole world training',
    );
    await until((s) => s.step >= world.step + H, 'a commit by the whole world');
    const ids = new Map<string, (typeof tabs)[number]>();
    for (const t of tabs) ids.set((await swarm.status(t))!.workerId!, t);
    // A round re-formed meanwhile (a live member judged hung on this loaded machine) may be planned as one
    // ring: the trial then stops after UNGROUPED_MS rather than wait for a round that never comes.
    const since = nowMs();
    const at = await until(
      (s) =>
        (!grouped(s) && nowMs() - since > UNGROUPED_MS) ||
        (s.state === 'training' &&
          grouped(s) &&
          s.world.items.length === TABS + HEADLESS &&
          s.world.items.every((w) => w.lastStep === s.step + H - 1)),
      'every member at the outer sync',
      20,
    );
    if (!grouped(at))
      return { topology, trial: index, groups: null, toCommitMs: null, why: null, outcome: 'ungrouped' };
    const victimId = at.world.items.find((w) => ids.has(w.id))!.id;
    await swarm.crash(ids.get(victimId)!);
    const crashedAt = nowMs();
    const point = at.step + H;
    await until((s) => s.step >= point, `the commit of step ${point}`);
    const events = await coordinator.events();
    const commits = await commitsFrom((path) => coordinator.getJson(path));
    const cut = commits.find((c) => c.step === point);
    const toCommitMs = cut ? Math.round(cut.committedAt - crashedAt) : null;
    const deferred = events.find(
      (e) => e.event === 'outer_loss_deferred' && (e.data.lost as string[]).includes(victimId),
    );
    const groups = at.topology?.groups ?? null;
    const base = { topology, trial: index, groups, toCommitMs, why: null };
    if (!deferred) return { ...base, outcome: 'carried' };
    const round = deferred.data.round as number;
    // Whatever happened next, the outer step commits with exactly the tab's slices (by the split of the
    // round that deferred the loss, which a carry keeps for that group) as holes.
    const open = openedRounds(events).find((o) => o.round === round)!;
    const rank = open.world.find((m) => m.workerId === victimId)!.rank;
    const want = lostSlices(
      [...(cut?.ranges ?? []), ...(cut?.skipped ?? [])],
      sharesByRank(open),
      [rank],
      GLOBAL_BATCH,
    );
    if (JSON.stringify(cut?.skipped) !== JSON.stringify(want))
      throw new Error(
        `step ${point}: committed in round ${cut?.round} skipping ${JSON.stringify(cut?.skipped)}, want ${JSON.stringify(want)}`,
      );
    if (events.some((e) => e.event === 'outer_loss_expired' && e.data.round === round))
      return { ...base, outcome: 'expired' };
    const report = events.find((e) => e.event === 'failure_report' && e.data.round === round);
    if (report) return { ...base, outcome: 'failed', why: String(report.data.reason).slice(0, 160) };
    if (cut?.round !== round) {
      const after = events.slice(events.indexOf(deferred) + 1).filter((e) => e.data.round === round);
      return { ...base, outcome: 'closed', why: [...new Set(after.map((e) => e.event))].join(', ') };
    }
    return { ...base, outcome: 'absorbed' };
  } finally {
    await bed.stop();
  }
}

exitUnlessReady('bench:grouped-crash');
const browser = await launchChromium();
const trials: Trial[] = [];
try {
  for (let i = 0; i < TRIALS; i++)
    for (const topology of TOPOLOGIES) {
      const t = await trial(browser, topology, i);
      trials.push(t);
      console.error(`trial ${i} ${topology}: ${t.outcome}, ${t.toCommitMs ?? '-'} ms${t.why ? ` (${t.why})` : ''}`);
    }
} finally {
  await browser.close();
}

console.log(
  `${TABS} tabs + ${HEADLESS} headless workers, local H = ${H}, int8, loopback; a tab crashed at the outer sync`,
);
console.log('topology  trial  groups    outcome   crash → commit ms  why');
for (const t of trials)
  console.log(
    `${t.topology.padEnd(8)}  ${String(t.trial).padStart(5)}  ${(t.groups ? t.groups.join('+') : 'ring').padEnd(8)}  ${t.outcome.padEnd(8)}  ${String(t.toCommitMs ?? '-').padStart(17)}  ${t.why ?? ''}`,
  );
const summary = {
  bench: 'grouped-crash',
  chromium: chromiumVersion(),
  tabs: TABS,
  headless: HEADLESS,
  byTopology: Object.fromEntries(
    TOPOLOGIES.map((topology) => {
      const mine = trials.filter((t) => t.topology === topology);
      const count = (o: Outcome) => mine.filter((t) => t.outcome === o).length;
      const times = mine.map((t) => t.toCommitMs).filter((x): x is number => x !== null);
      return [
        topology,
        {
          trials: mine.length,
          absorbed: count('absorbed'),
          expired: count('expired'),
          failed: count('failed'),
          closed: count('closed'),
          carried: count('carried'),
          ungrouped: count('ungrouped'),
          medianCrashToCommitMs: times.length ? median(times) : null,
        },
      ];
    }),
  ),
  trials,
};
console.log(JSON.stringify(summary));
