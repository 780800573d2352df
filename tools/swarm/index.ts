/**
 * `tabswarm swarm` and `--local-workers`: headless Chromium tabs against a coordinator.
 * This entry stays light (the CLI imports it for every command): whatever needs playwright-core,
 * which takes seconds to import, is loaded on first use.
 */
import type { LocalWorkers, LocalWorkersOptions } from './local-workers';

export { registerSwarmCommand, swarmMain } from './swarm-command';
export { chaosSchedule, liveCountsAfter, type ChaosEvent, type ChaosKind, type ChaosOptions } from './chaos-schedule';
export { parseSwarmOptions, SwarmOptionsError, type SwarmOptions } from './swarm-options';
export { swarmVerdict, formatReportTable, type SwarmReport } from './swarm-report';
export { NoChromiumError, SwarmError } from './swarm-errors';
export type { LocalWorkers, LocalWorkersOptions };

/** Opens `workers` headless tabs that train against the coordinator at `url`; `stop()` closes them (goodbyes first). */
export async function startLocalWorkers(opts: LocalWorkersOptions): Promise<LocalWorkers> {
  const { startLocalWorkers: start } = await import('./local-workers');
  return start(opts);
}
