/**
 * The hostile tab: the normal elastic tab (web/elastic/start.ts, the real training worker, the real
 * peer mesh and coordinator client) with one port decorated by attacks.ts. Served by the test Vite
 * dev server (test/support/hostile-tab.ts), which proxies `/api`, `/ws` and `/peer` to the
 * coordinator from its own loopback address, so the coordinator tells this tab from the honest ones.
 *
 * `window.tabswarmHostile` is its state for the test: the attack, what the decorators did (`tally`),
 * and an error if the page could not start. `window.tabswarmElastic` is the loop's status, as in the
 * volunteer page.
 *
 * `?hold=1`: the page gets everything ready (its worker, the dataset) and then waits in phase `held`
 * until the test calls `window.tabswarmHostileRelease()`; only then does it say hello. A test that wants
 * the tab to join at a given point of the job opens it early and releases it there, so the join does
 * not wait on the page's load (Vite serves this page module by module: seconds on a loaded machine,
 * longer than a short job's whole run).
 */
import * as Comlink from 'comlink';
import { startElastic } from '../../../../web/elastic/start';
import type { ElasticStatus } from '../../../../web/elastic/elastic-loop';
import { datasetBuffers, fetchDataset } from '../../../../web/worker/data/dataset-client';
import type { TrainingWorkerApi } from '../../../../web/worker/training-worker';
import {
  type Attack,
  emptyTally,
  forgeHelloRunId,
  HOSTILE_TAB_MARKER,
  hostilePorts,
  parseAttack,
  type PublicCommit,
  type Tally,
} from './attacks';

export interface HostileState {
  attack: Attack | null;
  tally: Tally;
  /**
   * 'loading' → 'held' (`?hold=1`: until released) → 'waiting' (claim-state: until the job reached
   * fromStep) → 'started'; or 'error'.
   */
  phase: 'loading' | 'held' | 'waiting' | 'started' | 'error';
  error: string | null;
}

declare global {
  interface Window {
    tabswarmHostile?: HostileState;
    /** Set while the page is held (`?hold=1`): call it to let the tab join. */
    tabswarmHostileRelease?: () => void;
  }
}

const state: HostileState = { attack: null, tally: emptyTally(), phase: 'loading', error: null };
window.tabswarmHostile = state;

let status: ElasticStatus | null = null;
let committed: PublicCommit | null = null;

/** Poll the public status (what any visitor can read) for the last commit, every 300 ms for at most 10 minutes. */
async function watchCommits(): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    try {
      const s = (await (await fetch('/api/status', { cache: 'no-store' })).json()) as {
        runId: string;
        step: number;
        lastCommit: { hash: string | null };
      };
      if (s.lastCommit.hash) committed = { runId: s.runId, step: s.step, hash: s.lastCommit.hash };
    } catch {
      // The coordinator is going away with the test: nothing to claim.
    }
    await new Promise((r) => setTimeout(r, 300));
  }
}

async function main(): Promise<void> {
  const attack = parseAttack(new URLSearchParams(location.search));
  state.attack = attack;
  console.info(`${HOSTILE_TAB_MARKER}: mode ${attack.mode} from step ${attack.fromStep}`);
  const worker = new Worker(new URL('../../../../web/worker/training-worker.ts', import.meta.url), {
    type: 'module',
    name: 'tabswarm-training',
  });
  const api = Comlink.wrap<TrainingWorkerApi>(worker);
  const probe = await api.probe();
  if (!probe.ok) throw new Error(probe.reason);
  const dataset = await fetchDataset('');
  await api.loadData(Comlink.transfer(dataset, datasetBuffers(dataset)));
  if (new URLSearchParams(location.search).get('hold') === '1') {
    state.phase = 'held';
    await new Promise<void>((release) => {
      window.tabswarmHostileRelease = release;
    });
  }
  if (attack.mode === 'claim-state') {
    void watchCommits();
    forgeHelloRunId(WebSocket.prototype, { committed: () => committed, tally: state.tally });
    // Join late, once there is a committed state worth claiming.
    state.phase = 'waiting';
    const until = performance.now() + 120_000;
    while (!committed || committed.step < attack.fromStep) {
      if (performance.now() > until) throw new Error(`the job did not reach step ${attack.fromStep} within 120 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const { vendor, architecture, description } = probe.adapter;
  await startElastic(
    {
      worker: api,
      adapter: { vendor, architecture, description },
      wrapPorts: (ports) =>
        hostilePorts(ports, {
          attack,
          tally: state.tally,
          step: () => (status?.localStep ?? 0) + 1,
          committed: () => committed,
        }),
    },
    { onStatus: (s) => (status = s) },
  );
  state.phase = 'started';
}

main().catch((err) => {
  state.phase = 'error';
  state.error = err instanceof Error ? err.message : String(err);
  console.error(`hostile tab: ${state.error}`);
});
