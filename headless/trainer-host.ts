/**
 * The main thread's side of one headless worker's training thread (trainer-thread.ts): start the thread
 * and wrap its Comlink endpoint, so the loop gets the same `TrainerPort` a tab gets from its Web Worker
 * (`comlinkTrainer`, web/elastic/ports.ts). The thread is given the coordinator's origin as its `location`,
 * as a browser's worker scope has the page's, so a chunked dataset's relative chunk URLs resolve there.
 */
import { MessageChannel, Worker } from 'node:worker_threads';
import * as Comlink from 'comlink';
import type { TrainingWorkerApi } from '../web/worker/training-worker';

export interface TrainerThread {
  readonly api: Comlink.Remote<TrainingWorkerApi>;
  /** Resolves when the thread ends (an error in it, or `terminate`), with why. */
  readonly ended: Promise<string>;
  /** Ask the thread to close its GPU devices and exit; resolves once it has. */
  terminate(): Promise<void>;
}

const ENTRY = new URL('./trainer-entry.js', import.meta.url);
/** How long a thread asked to close may take before it is terminated. */
const CLOSE_WAIT_MS = 5000;

export function startTrainerThread(origin: URL, name: string): TrainerThread {
  const close = new MessageChannel();
  const worker = new Worker(ENTRY, {
    workerData: { origin: origin.href, close: close.port2 },
    transferList: [close.port2],
    name: `tabswarm-training ${name}`,
  });
  const ended = new Promise<string>((resolve) => {
    worker.once('error', (err) => resolve(`training thread failed: ${err.message}`));
    worker.once('exit', (code) => resolve(`training thread exited (${code})`));
  });
  const api = Comlink.wrap<TrainingWorkerApi>(workerEndpoint(worker));
  return {
    api,
    ended,
    // Asked, not forced: the thread destroys its devices and exits by itself (trainer-thread.ts says why);
    // one that does not within CLOSE_WAIT_MS is terminated.
    terminate: async () => {
      api[Comlink.releaseProxy]();
      close.port1.postMessage('close');
      const timer = setTimeout(() => void worker.terminate(), CLOSE_WAIT_MS);
      await ended;
      clearTimeout(timer);
      close.port1.close();
    },
  };
}

/** A worker_threads `Worker` as Comlink's endpoint (what comlink's node adapter does: `data` events as `{ data }`). */
function workerEndpoint(worker: Worker): Comlink.Endpoint {
  const wrapped = new Map<EventListenerOrEventListenerObject, (data: unknown) => void>();
  return {
    postMessage: (message, transfer) => worker.postMessage(message, transfer as Parameters<Worker['postMessage']>[1]),
    addEventListener: (_type, handler) => {
      const listener = (data: unknown) => {
        const event = { data } as MessageEvent;
        if (typeof handler === 'function') handler(event);
        else handler.handleEvent(event);
      };
      wrapped.set(handler, listener);
      worker.on('message', listener);
    },
    removeEventListener: (_type, handler) => {
      const listener = wrapped.get(handler);
      if (!listener) return;
      worker.off('message', listener);
      wrapped.delete(handler);
    },
  };
}
