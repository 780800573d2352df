/**
 * The set-up shared by the tests (and bench:grouped-crash) that put Chromium tabs and headless workers in
 * one job: a fake IDX dataset in a temporary directory, a real coordinator serving the web build, one
 * Chromium, a `Swarm` of its tabs, and the `tabswarm worker` processes the caller starts; `stop` tears
 * all of it down, also after a failure.
 *
 * ```ts
 * let mixed: MixedSwarm;
 * beforeAll(async () => { mixed = await MixedSwarm.start({ job: JOB, trainCount: 512, seed: 3, name: 'mixed' }); });
 * afterAll(() => mixed?.stop());
 * mixed.spawnHeadless('hl-a'); await mixed.swarm.openMany(2);
 * ```
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { type HeadlessProcess, spawnHeadless } from '../../tools/swarm/headless-workers';
import { launchChromium, WEB_BUILD_DIR } from './browser';
import { CoordinatorProcess } from './coordinator-process';
import { makeTempDir, writeFakeIdxDataset } from './fake-dataset';
import { Swarm } from './swarm';

/**
 * The job these swarms train: tiny-mlp in local sync mode (H = `innerSteps`, int8 wire), a commit per outer
 * step, no evaluation, rare checkpoints, a 1-s heartbeat. `topology` and `verify: false` only when given.
 */
export function tinyLocalJob(o: {
  innerSteps: number;
  globalBatch: number;
  maxWorkers: number;
  topology?: 'ring' | 'auto' | 'groups';
  verify?: false;
}): Record<string, unknown> {
  return {
    model: 'tiny-mlp',
    optimizer: { kind: 'sgd', lr: 0.05, momentum: 0 },
    globalBatch: o.globalBatch,
    epochs: 1000,
    minWorkers: 2,
    maxWorkers: o.maxWorkers,
    commitEvery: o.innerSteps,
    lastCallMs: 500,
    heartbeatMs: 1000,
    evalSamples: 0,
    checkpointEvery: 1000,
    ...(o.topology !== undefined ? { topology: o.topology } : {}),
    ...(o.verify === false ? { verify: false } : {}),
    sync: { mode: 'local', innerSteps: o.innerSteps, compression: 'int8' },
  };
}

export interface MixedSwarmOptions {
  /** The job file's contents. */
  job: Record<string, unknown>;
  /** Training images of the fake dataset (16 test images). */
  trainCount: number;
  /** The fake dataset's seed. */
  seed: number;
  /** Names the temporary directory (`tabswarm-<name>-`). */
  name: string;
  /** Launch this browser instead of a fresh Chromium (kept open by `stop`: its owner closes it). */
  browser?: Browser;
}

export class MixedSwarm {
  readonly headless: HeadlessProcess[] = [];

  private constructor(
    readonly coordinator: CoordinatorProcess,
    readonly browser: Browser,
    readonly swarm: Swarm,
    private readonly ownsBrowser: boolean,
  ) {}

  static async start(o: MixedSwarmOptions): Promise<MixedSwarm> {
    const datasetDir = writeFakeIdxDataset(join(makeTempDir(`tabswarm-${o.name}-`), 'fake-mnist'), {
      trainCount: o.trainCount,
      testCount: 16,
      seed: o.seed,
    });
    const coordinator = await CoordinatorProcess.spawn({
      job: o.job,
      datasetDir,
      extraArgs: ['--dist', WEB_BUILD_DIR],
    });
    try {
      const browser = o.browser ?? (await launchChromium());
      const swarm = new Swarm(browser, coordinator.url, { query: { testSubset: '0' } });
      return new MixedSwarm(coordinator, browser, swarm, !o.browser);
    } catch (err) {
      await coordinator.stop();
      throw err;
    }
  }

  /** Start a `tabswarm worker` process of `count` workers named after `name`, stopped by `stop`. */
  spawnHeadless(name: string, count = 1): HeadlessProcess {
    const process = spawnHeadless({ url: this.coordinator.url, name, count, args: ['--no-cache', '--quiet'] });
    this.headless.push(process);
    return process;
  }

  async stop(): Promise<void> {
    for (const h of this.headless) h.crash();
    await this.swarm.closeAll().catch(() => undefined);
    if (this.ownsBrowser) await this.browser.close();
    await this.coordinator.stop();
  }
}
