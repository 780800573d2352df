/**
 * The issue's hostile visitor, end to end: scripted fake workers (test/kit/fake-workers.ts: plain
 * protocol clients, no browser, no GPU, inventing every step with mutually consistent claims) against a
 * real coordinator process with its real verifier process, in every-step and in local mode, for each way
 * to meet a check: upload the committed state at once (the verifier finds the lie), withhold it, upload
 * it late, and come back under a fresh id after the ban.
 *
 * Every fabricated commit must be rolled back within 60 s of being made (the coordinator's status is
 * sampled every 200 ms: no step stays committed longer), the job must never say `done` on the invented
 * record, and the audit must be clean. All workers are scripts, so every committed step is invented.
 * The cool-off is shortened (`--cool-off-ms 2000`) so a rejoining script comes back several times.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type CoordinatorProcess, spawnCoordinator } from '../support/coordinator-process';
import { skipWithoutNodeGpu } from '../support/node-gpu';
import { FakeTeam, type UploadPolicy } from '../kit/fake-workers';

const SYNCS = {
  'every-step': { mode: 'every-step', compression: 'none' },
  local: { mode: 'local', innerSteps: 3, compression: 'none' },
} as const;

/** The coordinator's record over time: when each step was first seen committed and when it was seen gone. */
class RecordWatch {
  private readonly since = new Map<number, number>();
  maxAgeMs = 0;
  sawDone = false;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly proc: CoordinatorProcess) {}

  start(): void {
    this.timer = setInterval(() => void this.sample(), 200);
  }

  private async sample(): Promise<void> {
    const status = await this.proc.status().catch(() => null);
    if (!status) return;
    const now = Date.now();
    if (status.state === 'done') this.sawDone = true;
    for (const step of [...this.since.keys()]) if (step > status.step) this.since.delete(step);
    for (let s = 1; s <= status.step; s++) if (!this.since.has(s)) this.since.set(s, now);
    for (const at of this.since.values()) this.maxAgeMs = Math.max(this.maxAgeMs, now - at);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}

let proc: CoordinatorProcess | null = null;
let team: FakeTeam | null = null;
afterEach(async () => {
  team?.stop();
  await proc?.stop();
  proc = null;
  team = null;
});

async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`not ${what} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const bannedCount = async (p: CoordinatorProcess) =>
  (await p.events()).filter((e) => e.event === 'cheater_banned').length;

describe.skipIf(await skipWithoutNodeGpu())('scripted fake workers against the real coordinator and verifier', () => {
  for (const mode of ['every-step', 'local'] as const) {
    for (const policy of ['honest', 'withhold', 'late', 'rejoin'] as const) {
      it(`${mode}, ${policy === 'rejoin' ? 'rejoin after the ban' : `${policy} upload`}: nothing invented stays committed 60 s, the job is not done`, {
        timeout: 120_000,
      }, async () => {
        proc = await spawnCoordinator({
          job: {
            model: 'tiny-mlp',
            globalBatch: 16,
            epochs: 30,
            minWorkers: 2,
            maxWorkers: 2,
            lastCallMs: 0,
            heartbeatMs: 2000,
            checkpointEvery: 1000,
            evalSamples: 0,
            sync: SYNCS[mode],
            verify: { probability: 0.05 },
          },
          extraArgs: ['--cool-off-ms', '2000'],
          startTimeoutMs: 120_000,
        });
        const watch = new RecordWatch(proc);
        watch.start();
        const upload: UploadPolicy = policy === 'rejoin' ? 'honest' : policy;
        team = new FakeTeam({
          wsUrl: proc.wsUrl,
          httpUrl: proc.url,
          size: 2,
          upload,
          rejoin: policy === 'rejoin',
          localAddress: '127.0.0.3',
        });
        team.start();
        const p = proc;
        await until(async () => (await bannedCount(p)) >= (policy === 'rejoin' ? 3 : 1), 'the scripts caught', 90_000);
        if (policy !== 'rejoin') team.stop();
        await until(async () => (await p.status()).step === 0, 'the record rolled back', 30_000);
        team.stop();
        watch.stop();
        const log = team.log;
        const events = await p.events();
        const names = new Set(events.map((e) => e.event));
        console.log(
          `fake workers ${mode}/${policy}: first lie → caught ${events.find((e) => e.event === 'cheater_banned') ? 'yes' : 'no'}, ` +
            `oldest committed step lived ${(watch.maxAgeMs / 1000).toFixed(1)} s, reports ${log.reports}, uploads ${JSON.stringify(log.uploads.map((u) => u.status))}, ` +
            `bans ${log.banned}, refused ${log.refusedHellos}, withheld ${events.filter((e) => e.event === 'verification_withheld').length}`,
        );
        expect(log.firstLieAt).not.toBeNull();
        expect(watch.maxAgeMs).toBeLessThan(60_000);
        expect(watch.sawDone).toBe(false);
        expect((await p.status()).state).not.toBe('done');
        const audit = await p.audit();
        expect(audit.ok, JSON.stringify(audit).slice(0, 500)).toBe(true);
        if (policy === 'withhold') expect(names.has('verification_withheld')).toBe(true);
        if (policy === 'honest')
          expect(events.some((e) => e.event === 'verification_done' && (e.data.cheaters as string[]).length > 0)).toBe(
            true,
          );
        if (policy === 'rejoin') {
          // Refused while its place cools off, then checked at every commit and caught again.
          expect(log.refusedHellos).toBeGreaterThan(0);
          expect(events.some((e) => e.event === 'place_cooled_off')).toBe(true);
        }
      });
    }
  }
});
