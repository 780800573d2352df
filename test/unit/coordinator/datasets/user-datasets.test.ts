/**
 * Datasets a user brings: text (UTF-8 bytes, window samples, held-out tail or testPath) and
 * safetensors tensors, each bad file refused with one line naming it; and chunked serving, where a
 * client fetches only the chunks its windows touch, verifies every chunk and gets 304 for an ETag.
 */
import { mkdtemp, mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobSpecSchema } from '../../../../core/training/job';
import { chunkedDatasetRoutes, tensorsPayloads, textPayloads } from '../../../../coordinator/datasets/dataset-chunks';
import {
  firstInvalidUtf8,
  loadTensorsDataset,
  loadTextDataset,
  parseSafetensors,
  windowCount,
} from '../../../../coordinator/datasets/user-datasets';
import { ChunkFetcher } from '../../../../web/worker/data/dataset-client';
import { mulberry32 } from '../../../support/rng';
import { safetensorsFile as safetensors } from '../../../support/safetensors-file';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tabswarm-user-data-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const f32 = (a: number[]) => new Uint8Array(Float32Array.from(a).buffer);
const i64 = (a: number[]) => new Uint8Array(BigInt64Array.from(a.map(BigInt)).buffer);

describe('UTF-8 check', () => {
  it('agrees with a fatal TextDecoder on random and crafted bytes, and gives the first bad offset', () => {
    const rand = mulberry32(1);
    const decoder = new TextDecoder('utf-8', { fatal: true });
    const valid = (b: Uint8Array) => {
      try {
        decoder.decode(b);
        return true;
      } catch {
        return false;
      }
    };
    for (let n = 0; n < 3000; n++) {
      const b = Uint8Array.from({ length: 1 + (n % 9) }, () => Math.floor(rand() * 256));
      expect(firstInvalidUtf8(b) < 0, `bytes ${Array.from(b)}`).toBe(valid(b));
    }
    const text = new TextEncoder().encode('héllo ✓ 𝄞 end');
    expect(firstInvalidUtf8(text)).toBe(-1);
    expect(firstInvalidUtf8(Uint8Array.from([0x61, 0x62, 0xed, 0xa0, 0x80]))).toBe(2); // a surrogate
    expect(firstInvalidUtf8(Uint8Array.from([0x61, 0xe2, 0x9c]))).toBe(1); // truncated at the end
  });
});

describe('text datasets', () => {
  it('reads a file, holds out the last 5%, and counts windows as samples', async () => {
    const text = 'the quick brown fox jumps over the lazy dog. '.repeat(50);
    await writeFile(join(dir, 'corpus.txt'), text);
    const d = await loadTextDataset({ path: join(dir, 'corpus.txt') }, 16);
    const cut = Math.floor(text.length * 0.95);
    expect(d.train.length).toBe(cut);
    expect(Buffer.from(d.test).toString()).toBe(text.slice(cut));
    expect(windowCount(d.train.length, 16)).toBe(cut - 16);
  });

  it('joins a folder by name, skips symlinks, hidden and skipped files, and takes an explicit testPath', async () => {
    const folder = join(dir, 'folder');
    await mkdir(folder);
    await writeFile(join(folder, 'b.txt'), 'second file. '.repeat(10));
    await writeFile(join(folder, 'a.txt'), 'first file. '.repeat(10));
    await writeFile(join(folder, 'a.dat'), Uint8Array.from([0xff, 0xfe, 0x00]));
    await writeFile(join(folder, '.hidden'), Uint8Array.from([0xff]));
    await symlink(join(folder, 'a.txt'), join(folder, 'c.u8'));
    await writeFile(join(dir, 'held.txt'), 'held out text, long enough. ');
    const d = await loadTextDataset({ path: folder, testPath: join(dir, 'held.txt'), skip: ['.dat'] }, 8);
    expect(Buffer.from(d.train).toString()).toBe('first file. '.repeat(10) + 'second file. '.repeat(10));
    expect(Buffer.from(d.test).toString()).toBe('held out text, long enough. ');
    await expect(loadTextDataset({ path: folder }, 8)).rejects.toThrow(
      /a\.dat: not UTF-8 \(invalid byte 0xff at offset 0\)/,
    );
  });

  it('refuses a missing, empty, non-UTF-8 or too-small corpus with one line', async () => {
    await writeFile(join(dir, 'empty.txt'), '');
    await writeFile(join(dir, 'latin1.txt'), Buffer.from('caf\xe9 ok', 'latin1'));
    await writeFile(join(dir, 'small.txt'), 'x'.repeat(100));
    const cases: [string, RegExp][] = [
      ['nope.txt', /no such file or folder/],
      ['empty.txt', /empty\.txt: the file is empty/],
      ['latin1.txt', /latin1\.txt: not UTF-8 \(invalid byte 0xe9 at offset 3\)/],
      ['small.txt', /held-out text has 5 bytes, too small for the context of 32/],
    ];
    for (const [name, message] of cases) {
      const error = await loadTextDataset({ path: join(dir, name) }, 32).catch((e: Error) => e);
      expect(error).toBeInstanceOf(Error);
      expect((error as Error).message).toMatch(message);
      expect((error as Error).message).not.toContain('\n');
    }
  });
});

describe('tensors datasets', () => {
  it('reads x (F32) and y (I64), holds out the last 5%, and derives the classes', async () => {
    const count = 40;
    const x = Array.from({ length: count * 6 }, (_, i) => i / 10);
    const y = Array.from({ length: count }, (_, i) => i % 3);
    const file = join(dir, 'data.safetensors');
    await writeFile(
      file,
      safetensors({
        x: { dtype: 'F32', shape: [count, 2, 3], data: f32(x) },
        y: { dtype: 'I64', shape: [count], data: i64(y) },
      }),
    );
    const d = await loadTensorsDataset({ path: file });
    expect(d.shape).toEqual([2, 3, 1]);
    expect(d.classes).toBe(3);
    expect(d.train.count).toBe(38);
    expect(d.test.count).toBe(2);
    expect(Array.from(d.test.x.subarray(0, 2))).toEqual([Math.fround(38 * 0.6), Math.fround(38 * 0.6 + 0.1)]);
    expect(Array.from(d.train.y.subarray(0, 4))).toEqual([0, 1, 2, 0]);
  });

  it('refuses wrong dtypes, shapes, offsets and missing tensors with one line naming the file', async () => {
    const ok = { dtype: 'F32', shape: [2, 2], data: f32([1, 2, 3, 4]) };
    const labels = { dtype: 'U8', shape: [2], data: Uint8Array.from([0, 1]) };
    const cases: [Uint8Array, RegExp][] = [
      [safetensors({ x: { ...ok, dtype: 'I32' }, y: labels }), /x has dtype I32; use F32 or U8/],
      [
        safetensors({ x: ok, y: { ...labels, shape: [3], data: Uint8Array.from([0, 1, 1]) } }),
        /y has shape \[3\]; expected \[2\]/,
      ],
      [
        safetensors({ x: ok, y: { dtype: 'F32', shape: [2], data: f32([0, 1]) } }),
        /y has dtype F32; labels must be integers/,
      ],
      [safetensors({ x: { ...ok, shape: [3, 2] }, y: labels }), /F32 \[3,2\] needs 24 bytes, the offsets give 16/],
      [safetensors({ y: labels }), /no tensor "x" \(has: y\)/],
      [Uint8Array.from([1, 2, 3]), /not a safetensors file \(3 bytes\)/],
      [new Uint8Array(0), /the file is empty/],
    ];
    for (const [i, [bytes, message]] of cases.entries()) {
      const file = join(dir, `bad${i}.safetensors`);
      await writeFile(file, bytes);
      const error = (await loadTensorsDataset({ path: file }).catch((e: Error) => e)) as Error;
      expect(error.message).toMatch(message);
      expect(error.message).toContain(`bad${i}.safetensors`);
    }
    expect(() => parseSafetensors(Buffer.from([200, 0, 0, 0, 0, 0, 0, 0, 123]), 'f')).toThrow(/header length 200/);
  });
});

describe('chunked serving', () => {
  let server: Server;
  let base: string;
  const corpus = new TextEncoder().encode(Array.from({ length: 2000 }, (_, i) => `line ${i}\n`).join(''));

  beforeAll(async () => {
    await writeFile(join(dir, 'served.txt'), corpus);
    const d = await loadTextDataset({ path: join(dir, 'served.txt') }, 32);
    const { metadata, payloads } = textPayloads(d, 32, 1000);
    const route = chunkedDatasetRoutes(metadata, payloads);
    server = createServer((req, res) => {
      if (!route(req, res)) res.writeHead(404).end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('serves metadata, and windows from only the chunks they touch, verified', async () => {
    const meta = await (await fetch(`${base}/api/dataset`)).json();
    expect(meta).toMatchObject({ kind: 'text', vocab: 256, context: 32 });
    const train = meta.files.train;
    expect(meta.train.count).toBe(train.bytes - 32);
    expect(train.chunks.length).toBe(Math.ceil(train.bytes / 1000));
    const fetcher = new ChunkFetcher(base);
    const starts = [0, 990, 5000, 5010];
    const windows = await Promise.all(starts.map((s) => fetcher.range(train, s, s + 33)));
    starts.forEach((s, i) => {
      expect(Array.from(windows[i])).toEqual(Array.from(corpus.subarray(s, s + 33)));
    });
    // Chunks 0, 1 and 5: window 990 spans chunks 0 and 1; 5000 and 5010 share chunk 5.
    expect(fetcher.requests).toBe(3);
    await expect(fetcher.range(train, 0, train.bytes + 1)).rejects.toThrow(/outside/);
  });

  it('answers 304 to a known ETag, 404 to unknown chunks, 405 to writes', async () => {
    const first = await fetch(`${base}/api/dataset/chunks/train/0`);
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^"sha256-[0-9a-f]{64}"$/);
    expect((await fetch(`${base}/api/dataset/chunks/train/0`, { headers: { 'If-None-Match': etag } })).status).toBe(
      304,
    );
    for (const path of ['train/999', 'train/01', 'nope/0', 'train/-1', '__proto__/0'])
      expect((await fetch(`${base}/api/dataset/chunks/${path}`)).status, path).toBe(404);
    expect((await fetch(`${base}/api/dataset`, { method: 'POST' })).status).toBe(405);
  });

  it('rejects a chunk whose bytes do not match the published SHA-256', async () => {
    const meta = await (await fetch(`${base}/api/dataset`)).json();
    const tampered = {
      ...meta.files.train,
      chunks: meta.files.train.chunks.map((h: string, i: number) => (i === 2 ? '0'.repeat(64) : h)),
    };
    const fetcher = new ChunkFetcher(base);
    await expect(fetcher.range(tampered, 2100, 2200)).rejects.toThrow(/chunk 2: SHA-256 does not match/);
    expect(Array.from(await fetcher.range(tampered, 100, 200))).toEqual(Array.from(corpus.subarray(100, 200)));
  });

  it('tensors payloads: x as float32 and y as u32 bytes, chunked', async () => {
    const file = join(dir, 'chunks.safetensors');
    const x = Array.from({ length: 20 * 4 }, (_, i) => i);
    await writeFile(
      file,
      safetensors({
        x: { dtype: 'F32', shape: [20, 4], data: f32(x) },
        y: { dtype: 'U8', shape: [20], data: Uint8Array.from({ length: 20 }, (_, i) => i % 2) },
      }),
    );
    const { metadata, payloads } = tensorsPayloads(await loadTensorsDataset({ path: file }), 64);
    expect(metadata.train.count).toBe(19);
    expect(metadata.files['train/x'].chunks.length).toBe(Math.ceil((19 * 16) / 64));
    expect(Array.from(new Uint32Array(payloads['test/y'].slice().buffer))).toEqual([1]);
  });
});

describe('job dataset field', () => {
  it('accepts the three kinds and refuses unknown fields', () => {
    const parse = (dataset: unknown) => jobSpecSchema.safeParse({ dataset });
    expect(parse({ name: 'fashion-mnist' }).success).toBe(true);
    expect(parse({ kind: 'text', path: '/x', skip: ['.dat'] }).data?.dataset).toMatchObject({
      kind: 'text',
      name: 'text',
    });
    expect(parse({ kind: 'tensors', path: '/x.safetensors' }).success).toBe(true);
    expect(parse({ kind: 'text' }).success).toBe(false);
    expect(parse({ kind: 'text', path: '/x', colour: 'red' }).success).toBe(false);
  });
});

describe('safetensors export of a transformer', () => {
  it('names the tensors as GPT-2 does, with their shapes and the layout convention in the metadata', async () => {
    const { encodeSafetensors } = await import('../../../../coordinator/datasets/safetensors');
    const { GPT_TINY_SPEC, parameterLayout } = await import('../../../../core/training/model-spec');
    const layout = parameterLayout(GPT_TINY_SPEC);
    const params = Float32Array.from({ length: layout.totalElements }, (_, i) => i % 7);
    const file = encodeSafetensors({ spec: GPT_TINY_SPEC, params, step: 3, epoch: 0, cursor: 48 });
    const tensors = parseSafetensors(file, 'export');
    expect(tensors['h.3.attn.c_attn.weight']).toMatchObject({ dtype: 'F32', shape: [128, 384] });
    expect(tensors['wte.weight'].shape).toEqual([256, 128]);
    expect(tensors['ln_f.bias'].shape).toEqual([128]);
    const e = layout.entries.find((x) => x.name === 'h.1.mlp.c_fc.bias')!;
    expect(Array.from(new Float32Array(tensors['h.1.mlp.c_fc.bias'].data.slice().buffer))).toEqual(
      Array.from(params.subarray(e.offset, e.offset + e.size)),
    );
    const headerLength = Number(Buffer.from(file).readBigUInt64LE(0));
    const meta = JSON.parse(Buffer.from(file.subarray(8, 8 + headerLength)).toString()).__metadata__;
    expect(meta['tabswarm.layout']).toMatch(/GPT-2 names/);
  });
});

describe('the example transformer job', () => {
  it('parses and passes start-up; a model that does not fit its dataset kind is refused with one line', async () => {
    const { loadJobFile } = await import('../../../../coordinator/config/startup-config');
    const path = 'coordinator/jobs/gpt-tiny-fortunes.json';
    const job = loadJobFile(path);
    expect(job.model).toMatchObject({ type: 'transformer', name: 'gpt-tiny', context: 128 });
    expect(job.dataset).toMatchObject({ kind: 'text', path: '/usr/share/games/fortunes', skip: ['.dat'] });
    const raw = JSON.parse(await import('node:fs').then((fs) => fs.readFileSync(path, 'utf8')));
    const mismatched = join(dir, 'mismatched.json');
    await writeFile(mismatched, JSON.stringify({ ...raw, model: 'mlp' }));
    expect(() => loadJobFile(mismatched)).toThrow(/mismatched\.json: a text dataset needs a language model/);
    await writeFile(mismatched, JSON.stringify({ ...raw, dataset: { name: 'fashion-mnist' } }));
    expect(() => loadJobFile(mismatched)).toThrow(/model gpt-tiny is a language model: its dataset must be/);
  });

  it('a tensors dataset must fit the classifier: features and classes', async () => {
    const { tensorsMismatchReason } = await import('../../../../coordinator/datasets/served-dataset');
    const { TINY_MLP_SPEC } = await import('../../../../core/training/model-spec');
    const file = join(dir, 'fit.safetensors');
    const rows = (features: number, top: number) =>
      safetensors({
        x: { dtype: 'U8', shape: [40, features], data: new Uint8Array(40 * features) },
        y: { dtype: 'U8', shape: [40], data: Uint8Array.from({ length: 40 }, (_, i) => i % (top + 1)) },
      });
    await writeFile(file, rows(784, 9));
    expect(tensorsMismatchReason(TINY_MLP_SPEC, await loadTensorsDataset({ path: file }))).toBeUndefined();
    await writeFile(file, rows(10, 9));
    expect(tensorsMismatchReason(TINY_MLP_SPEC, await loadTensorsDataset({ path: file }))).toMatch(
      /rows of 10 features .* takes 784/,
    );
    await writeFile(file, rows(784, 12));
    expect(tensorsMismatchReason(TINY_MLP_SPEC, await loadTensorsDataset({ path: file }))).toMatch(
      /labels go up to 12, model tiny-mlp has 10 classes/,
    );
  });
});
