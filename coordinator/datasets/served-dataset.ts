/**
 * The dataset a coordinator serves, whatever its kind: the built-in IDX image set (node/idx.ts) or a
 * user's text or tensors (user-datasets.ts, served in chunks by dataset-chunks.ts). Start-up needs the
 * same four things of each: its name, how many training samples the sampler permutes (text: window
 * starts), the content hashes that key a run (a run resumes only over the same data), and its routes.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { JobSpec } from '../../core/training/job';
import type { VerifierDataset } from '../../core/protocol/verifier';
import { isTransformer, type ModelSpec } from '../../core/training/model-spec';
import { chunkedDatasetRoutes, tensorsPayloads, textPayloads } from './dataset-chunks';
import type { IdxDataset } from '../../node/idx';
import { datasetRoutes } from './idx-routes';
import { loadTensorsDataset, loadTextDataset, sha256, type TensorsDataset } from './user-datasets';

export interface ServedDataset {
  kind: 'images' | 'text' | 'tensors';
  name: string;
  /** Training samples: images, rows, or text windows (bytes − context). */
  trainCount: number;
  /** What a sample is, for the start-up line. */
  unit: 'images' | 'samples' | 'windows';
  /** Hex SHA-256 of the training data's parts; part of the key a run is resumed by. */
  contentKey: Record<string, string>;
  route(req: IncomingMessage, res: ServerResponse): boolean;
  /** The training data as the verifier process reads it (core/protocol/verifier.ts): the same samples the tabs get. */
  verifierData: VerifierDataset;
}

/** The IDX set `d`, loaded from the folder `dir` (the verifier process reads it there too). */
export function servedIdx(d: IdxDataset, dir: string): ServedDataset {
  return {
    kind: 'images',
    name: d.name,
    trainCount: d.train.count,
    unit: 'images',
    // The names of the key's fields are those of runs stored before other kinds existed: they resume.
    contentKey: { trainImages: d.sha256['train/images'], trainLabels: d.sha256['train/labels'] },
    route: datasetRoutes(d),
    verifierData: { kind: 'images', dir },
  };
}

/**
 * Why the job's model cannot train on its dataset's kind, or undefined: a language model needs text
 * and text needs a language model (checked before any file is read).
 */
export function jobMismatchReason(job: Pick<JobSpec, 'model' | 'dataset'>): string | undefined {
  const text = 'kind' in job.dataset && job.dataset.kind === 'text';
  if (isTransformer(job.model) && !text)
    return `model ${job.model.name} is a language model: its dataset must be { "kind": "text", "path": … }`;
  if (text && !isTransformer(job.model))
    return `a text dataset needs a language model ({ "type": "transformer", … } or "gpt-tiny"), not ${job.model.name}`;
  return undefined;
}

/** Why a classifier cannot take a tensors dataset's rows and labels, or undefined. */
export function tensorsMismatchReason(spec: ModelSpec, d: TensorsDataset): string | undefined {
  if (isTransformer(spec)) return `model ${spec.name} is a language model; a tensors dataset needs a classifier`;
  const features = d.shape[0] * d.shape[1] * d.shape[2];
  const input = spec.input[0] * spec.input[1] * spec.input[2];
  if (features !== input)
    return `${d.name}: rows of ${features} features ([${d.shape}]), model ${spec.name} takes ${input} ([${spec.input}])`;
  if (d.classes > spec.classes)
    return `${d.name}: labels go up to ${d.classes - 1}, model ${spec.name} has ${spec.classes} classes`;
  return undefined;
}

/** Load the user dataset a job names (text or tensors), checked against its model. */
export async function loadUserDataset(job: JobSpec): Promise<ServedDataset> {
  const spec = job.model;
  const source = job.dataset;
  if (!('kind' in source)) throw new Error('loadUserDataset: the job names the built-in image set');
  if (source.kind === 'text') {
    if (!isTransformer(spec)) throw new Error(jobMismatchReason(job));
    const d = await loadTextDataset(source, spec.context);
    const { metadata, payloads } = textPayloads(d, spec.context);
    return {
      kind: 'text',
      name: d.name,
      trainCount: metadata.train.count,
      unit: 'windows',
      contentKey: { trainText: d.sha256.train, testText: d.sha256.test },
      route: chunkedDatasetRoutes(metadata, payloads),
      verifierData: { kind: 'text', bytes: d.train },
    };
  }
  const d = await loadTensorsDataset(source);
  const mismatch = tensorsMismatchReason(spec, d);
  if (mismatch) throw new Error(mismatch);
  const { metadata, payloads } = tensorsPayloads(d);
  return {
    kind: 'tensors',
    name: d.name,
    trainCount: d.train.count,
    unit: 'samples',
    contentKey: { trainX: sha256(payloads['train/x']), trainY: sha256(payloads['train/y']) },
    route: chunkedDatasetRoutes(metadata, payloads),
    verifierData: { kind: 'tensors', x: d.train.x, y: d.train.y, features: d.shape[0] * d.shape[1] * d.shape[2] },
  };
}
