/**
 * One headless worker's training thread: the tab's training Web Worker (web/worker/training-worker.ts),
 * unchanged, in a Node worker_thread. Before that module loads, this file gives it the three things a
 * browser's worker scope has and Node's lacks:
 *
 * - `navigator.gpu`: Dawn through the `webgpu` package (one instance per thread, so each headless worker
 *   opens its own device), with WebGPU's enum globals (`GPUBufferUsage`, …);
 * - `self` with `isSecureContext` (a Node process is as trusted as a secure context) and `location`, the
 *   coordinator's origin (a page's worker has the page's; relative chunk URLs resolve against it);
 * - the worker scope's message port (`addEventListener('message')`, `postMessage`) over `parentPort`, which
 *   is where `Comlink.expose(api)` listens: the page's side is a `Comlink.wrap` over the same port
 *   (trainer-host.ts).
 *
 * SwiftShader's Vulkan ICD (node/gpu-env.ts) must be in the process's environment from its start; the CLI
 * re-executes itself once to put it there (headless/cli.ts).
 *
 * Ending the thread: `Worker.terminate()` while Dawn still has a callback pending aborts the whole process
 * (a N-API throw into a dying environment). So the host asks instead, on a port of its own (`workerData.close`): the
 * thread destroys the devices it opened (recorded here as the worker requests them), lets Dawn deliver what
 * is pending, and exits by itself.
 */
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import { create, globals } from 'webgpu';

if (!parentPort) throw new Error('headless/trainer-thread.ts runs as a worker thread (trainer-host.ts starts it)');
const port = parentPort;

type Handler = (event: { data: unknown }) => void;
const listeners = new Map<Handler, (data: unknown) => void>();

Object.assign(globalThis, globals);
/** Held for the thread's life: if Dawn's instance is garbage-collected it tears the device down. */
const gpu = create([]);
const devices: GPUDevice[] = [];
const requestAdapter = gpu.requestAdapter.bind(gpu);
gpu.requestAdapter = async (options) => {
  const adapter = await requestAdapter(options);
  if (!adapter) return adapter;
  const requestDevice = adapter.requestDevice.bind(adapter);
  adapter.requestDevice = async (descriptor) => {
    const device = await requestDevice(descriptor);
    devices.push(device);
    return device;
  };
  return adapter;
};
const closePort = (workerData as { close: MessagePort }).close;
closePort.once('message', async () => {
  // The training worker reports a lost device as an error; here it is the point.
  console.error = () => {};
  for (const device of devices) device.destroy();
  // Dawn resolves what was pending (as errors: the device is gone) on its next ticks.
  await new Promise((r) => setTimeout(r, 200));
  process.exit(0);
});
Object.defineProperty(globalThis, 'navigator', {
  configurable: true,
  value: Object.assign(Object.create((globalThis as { navigator?: object }).navigator ?? null), { gpu }),
});
Object.assign(globalThis, {
  self: globalThis,
  isSecureContext: true,
  location: new URL((workerData as { origin: string }).origin),
  postMessage: (message: unknown, transfer?: Transferable[]) =>
    port.postMessage(message, transfer as Parameters<typeof port.postMessage>[1]),
  addEventListener: (type: string, handler: Handler) => {
    if (type !== 'message') return;
    const wrapped = (data: unknown) => handler({ data });
    listeners.set(handler, wrapped);
    port.on('message', wrapped);
  },
  removeEventListener: (type: string, handler: Handler) => {
    const wrapped = listeners.get(handler);
    if (type !== 'message' || !wrapped) return;
    port.off('message', wrapped);
    listeners.delete(handler);
  },
});

await import('../web/worker/training-worker');
