/**
 * What the volunteer page puts on `window`, typed for the page and for Playwright tests
 * (`page.waitForFunction(() => window.tabswarm.state === 'done')`).
 */
import type * as Comlink from 'comlink';
import type { TrainingWorkerApi } from '../worker/training-worker';
import type { TabStatus } from './status';

declare global {
  interface Window {
    /** Read-only status: every read returns a frozen copy. */
    readonly tabswarm: Readonly<TabStatus>;
    /** The training worker, exposed only with `?debug=1` (tests drive it directly). */
    tabswarmWorker?: Comlink.Remote<TrainingWorkerApi>;
  }
}
