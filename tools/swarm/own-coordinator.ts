/**
 * `tabswarm swarm --job FILE`: the coordinator the swarm starts itself, in this process, so a chaos run
 * can use any job (local steps, compression) without a second terminal. It listens on 127.0.0.1 (a free
 * port), keeps its store in a fresh temporary folder that is removed when it closes, and serves the
 * built web app from dist/. The job was validated before (`loadJobFile`), so nothing starts for a bad one.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { JobSpec } from '../../core/training/job';
import { startCoordinator } from '../../coordinator/start';
import {
  DEFAULT_DIST_DIR,
  loadJobDataset,
  resolveDatasetDir,
  StartupError,
} from '../../coordinator/config/startup-config';

export interface OwnCoordinator {
  /** `http://127.0.0.1:PORT`. */
  url: string;
  runId: string;
  /** Stops it and removes its data folder. Idempotent. */
  close(): Promise<void>;
}

export async function startOwnCoordinator(
  job: JobSpec,
  datasetFlag: string | undefined,
  log: (line: string) => void,
  distFlag?: string,
): Promise<OwnCoordinator> {
  const distDir = resolve(distFlag ?? DEFAULT_DIST_DIR);
  if (!existsSync(join(distDir, 'index.html')))
    throw new StartupError(
      `no built web app in ${distDir} for the tabs: run \`npm run build\` first (or pass --dist DIR)`,
    );
  const dataset = await loadJobDataset(job, datasetFlag);
  const dataDir = mkdtempSync(join(tmpdir(), 'tabswarm-swarm-'));
  let coordinator: Awaited<ReturnType<typeof startCoordinator>>;
  try {
    coordinator = await startCoordinator({
      host: '127.0.0.1',
      port: 0,
      dataDir,
      job,
      dataset,
      adminToken: randomBytes(18).toString('base64url'),
      distDir,
      log: (line) => log(`coordinator: ${line}`),
      // Every tab and headless worker of the swarm comes from 127.0.0.1: the per-address caps meant for
      // strangers would refuse a swarm of more than 32 (two sockets each).
      trust: { maxSocketsPerAddress: 1000, joinsPerMinute: 1000, policy: { addressQuota: 1000 } },
      ...('kind' in job.dataset ? {} : { verifierDatasetDir: resolveDatasetDir(datasetFlag) }),
    });
  } catch (error) {
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
  log(
    `swarm coordinator at ${coordinator.url}/ (run ${coordinator.info.runId}, data in ${dataDir}, removed at the end)`,
  );
  let closed: Promise<void> | null = null;
  return {
    url: coordinator.url,
    runId: coordinator.info.runId,
    close() {
      closed ??= coordinator.close().finally(() => rmSync(dataDir, { recursive: true, force: true }));
      return closed;
    },
  };
}
