/**
 * The coordinators and tab swarms one browser test file starts: `start` spawns a coordinator process
 * that serves the web build and opens a `Swarm` of volunteer tabs on it; `closeAll` (in `afterEach`)
 * closes every swarm, then stops every coordinator, also the ones a test restarted (`adopt`).
 */
import type { Browser } from 'playwright-core';
import { WEB_BUILD_DIR } from './browser';
import { CoordinatorProcess, type SpawnOptions } from './coordinator-process';
import { Swarm, type SwarmOptions } from './swarm';

export class SwarmRuns {
  private readonly coordinators: CoordinatorProcess[] = [];
  private readonly swarms: Swarm[] = [];

  /** `browser`: read at each `start` (tests launch it in `beforeAll`). `swarmOptions`: every swarm's. */
  constructor(
    private readonly browser: () => Browser,
    private readonly swarmOptions: SwarmOptions = {},
  ) {}

  /** A coordinator (`--dist` the web build, plus `spawn.extraArgs`) and a swarm of tabs pointed at it. */
  async start(spawn: SpawnOptions): Promise<{ coordinator: CoordinatorProcess; swarm: Swarm }> {
    const coordinator = this.adopt(
      await CoordinatorProcess.spawn({ ...spawn, extraArgs: ['--dist', WEB_BUILD_DIR, ...(spawn.extraArgs ?? [])] }),
    );
    const swarm = new Swarm(this.browser(), coordinator.url, {
      echo: !!process.env.TABSWARM_ECHO_BROWSER,
      ...this.swarmOptions,
    });
    this.swarms.push(swarm);
    return { coordinator, swarm };
  }

  /** Stop `coordinator` with the others (e.g. one a test restarted). */
  adopt(coordinator: CoordinatorProcess): CoordinatorProcess {
    this.coordinators.push(coordinator);
    return coordinator;
  }

  /** The coordinator started (or adopted) last. */
  get latest(): CoordinatorProcess | undefined {
    return this.coordinators.at(-1);
  }

  async closeAll(): Promise<void> {
    for (const s of this.swarms.splice(0)) await s.closeAll();
    for (const c of this.coordinators.splice(0)) await c.stop();
  }
}
