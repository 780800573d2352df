/**
 * The Sample card of a language-model job: fetches the latest checkpoint as safetensors (with the
 * admin token), rebuilds the flat parameter buffer from its GPT-2-named tensors and the spec in its
 * metadata, and decodes 200 bytes after the prompt on this tab's own GPU with the training kernels
 * (kernels/model/generate.ts). The model is kept until a newer checkpoint is sampled from.
 *
 * The output element carries the generated tokens (`data-tokens`, comma-separated) and the checkpoint
 * step (`data-step`), so a test can compare them with a reference decode.
 */
import { parameterLayout } from '../../core/training/model-spec';
import { generate } from '../../kernels/model/generate';
import { createModel, type Model } from '../../kernels/model/model';
import { createGpu, type Gpu } from '../../kernels/runtime';
import type { AdminApi } from './admin-api';
import { byId } from './format';
import { modelFromSafetensors } from './model-file';

/** Bytes generated per click. */
export const SAMPLE_BYTES = 200;

let gpu: Gpu | null = null;
let loaded: { model: Model; step: number } | null = null;
let busy = false;

async function device(): Promise<Gpu> {
  if (gpu) return gpu;
  if (!('gpu' in navigator) || !navigator.gpu)
    throw new Error('this browser has no WebGPU, which sampling needs (it runs the model in this tab)');
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error('WebGPU found no GPU adapter in this browser, so the model cannot run here');
  const dev = await adapter.requestDevice();
  dev.lost.then(() => {
    gpu = null;
    loaded = null;
  });
  gpu = createGpu(dev);
  return gpu;
}

/** The model of the latest checkpoint on the GPU (fetched and built only when the step changed). */
async function latestModel(api: AdminApi, latestStep: number | null): Promise<{ model: Model; step: number }> {
  if (loaded && latestStep !== null && loaded.step === latestStep) return loaded;
  const result = await api.bytes('/api/admin/model.safetensors');
  if (!result.ok)
    throw new Error(result.status === 404 ? 'no checkpoint yet: press "Checkpoint now" first' : result.message);
  const file = modelFromSafetensors(result.body);
  const g = await device();
  loaded?.model.destroy();
  loaded = null;
  const model = createModel(g, file.spec, parameterLayout(file.spec), {
    maxBatch: 1,
    optimizer: { kind: 'sgd', lr: 0, momentum: 0 },
    params: file.params,
  });
  loaded = { model, step: file.step };
  return loaded;
}

function show(output: HTMLElement, prompt: string, tokens: number[]): void {
  const promptSpan = document.createElement('span');
  promptSpan.className = 'prompt';
  promptSpan.textContent = prompt;
  const text = new TextDecoder().decode(Uint8Array.from(tokens, (t) => t & 0xff));
  output.replaceChildren(promptSpan, document.createTextNode(text));
  output.dataset.tokens = tokens.join(',');
}

/** Wires the Sample form; `latestStep` gives the newest checkpoint's step the page knows of. */
export function wireSample(api: () => AdminApi | null, latestStep: () => number | null): void {
  const status = byId('sample-status');
  const output = byId('sample-output');
  const button = byId<HTMLButtonElement>('sample-button');
  byId<HTMLFormElement>('sample-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const client = api();
    const temperature = Number(byId<HTMLInputElement>('sample-temperature').value);
    const prompt = byId<HTMLInputElement>('sample-prompt').value || '\n';
    if (!client || busy) return;
    if (!(temperature >= 0) || !Number.isFinite(temperature)) {
      status.textContent = 'Temperature is a number ≥ 0 (0: always the most likely byte).';
      status.dataset.kind = 'problem';
      return;
    }
    busy = true;
    button.disabled = true;
    status.dataset.kind = 'ok';
    status.textContent = 'Loading the latest checkpoint…';
    output.dataset.state = 'running';
    try {
      const { model, step } = await latestModel(client, latestStep());
      const tokens: number[] = [];
      const began = performance.now();
      output.hidden = false;
      output.dataset.step = String(step);
      await generate(model, {
        prompt: new TextEncoder().encode(prompt),
        count: SAMPLE_BYTES,
        temperature,
        onToken: (token, i) => {
          tokens.push(token);
          show(output, prompt, tokens);
          status.textContent = `Step ${step}: ${i + 1} / ${SAMPLE_BYTES} bytes…`;
        },
      });
      const seconds = (performance.now() - began) / 1000;
      status.textContent = `Step ${step}, temperature ${temperature}: ${SAMPLE_BYTES} bytes in ${seconds.toFixed(1)} s.`;
      output.dataset.state = 'done';
    } catch (error) {
      status.textContent = `Cannot sample: ${(error as Error).message}`;
      status.dataset.kind = 'problem';
      output.dataset.state = 'failed';
    } finally {
      busy = false;
      button.disabled = false;
    }
  });
}
