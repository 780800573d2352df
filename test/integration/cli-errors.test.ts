/**
 * The CLI's failure modes: each ends with exactly one line on stderr that names the cause, and a
 * non-zero exit — never a stack trace, never a server half up.
 */
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTempDir, sharedFakeDataset, writeFakeIdxDataset } from '../support/fake-dataset';
import { runCoordinatorCli, runSwarmCli } from '../support/coordinator-process';
import { safetensorsFile } from '../support/safetensors-file';
import {
  DEFAULT_DATASET_DIR,
  loadDataset,
  resolveDatasetDir,
  SHIPPED_DATASET_DIR,
  StartupError,
  verifyChecksums,
} from '../../coordinator/config/startup-config';

function baseArgs(dataDir: string): string[] {
  return ['coordinator', '--port', '0', '--data-dir', dataDir, '--admin-token', 't'];
}

function expectOneLineFailure(result: { code: number | null; stderr: string; stdout: string }, pattern: RegExp): void {
  expect(result.code, `stdout: ${result.stdout}\nstderr: ${result.stderr}`).not.toBe(0);
  expect(result.code).not.toBeNull();
  const lines = result.stderr.trim().split('\n');
  expect(lines, result.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^tabswarm: /);
  expect(lines[0]).toMatch(pattern);
  expect(result.stdout).not.toMatch(/listening on/);
}

describe('tabswarm coordinator refuses to start with one clear line', () => {
  const dir = makeTempDir('tabswarm-cli-');
  const dataDir = join(dir, 'data');

  it('when the job file is not JSON', async () => {
    const job = join(dir, 'broken.json');
    writeFileSync(job, '{"model": "tiny-mlp",');
    const result = await runCoordinatorCli([...baseArgs(dataDir), '--job', job, '--dataset', sharedFakeDataset()]);
    expectOneLineFailure(result, /job file .*broken\.json is not valid JSON/);
  });

  it('when the job file breaks the schema (and names the field)', async () => {
    const job = join(dir, 'invalid.json');
    writeFileSync(job, JSON.stringify({ globalBatch: -3, minWorkers: 5, maxWorkers: 2 }));
    const result = await runCoordinatorCli([...baseArgs(dataDir), '--job', job, '--dataset', sharedFakeDataset()]);
    expectOneLineFailure(result, /invalid\.json: invalid job: .*globalBatch/);
  });

  it('when the job file names an unknown model', async () => {
    const job = join(dir, 'model.json');
    writeFileSync(job, JSON.stringify({ model: 'resnet-9000' }));
    const result = await runCoordinatorCli([...baseArgs(dataDir), '--job', job, '--dataset', sharedFakeDataset()]);
    expectOneLineFailure(result, /model\.json: invalid job: model/);
  });

  it('when the job file does not exist', async () => {
    const result = await runCoordinatorCli([
      ...baseArgs(dataDir),
      '--job',
      join(dir, 'nope.json'),
      '--dataset',
      sharedFakeDataset(),
    ]);
    expectOneLineFailure(result, /cannot read job file .*nope\.json: ENOENT/);
  });

  it('when a user dataset file is bad or does not fit the model (one line naming the file)', async () => {
    const text = join(dir, 'latin1.txt');
    writeFileSync(text, Buffer.from('caf\xe9 au lait, and more text than a context of 16 needs', 'latin1'));
    const tensors = join(dir, 'small.safetensors');
    writeFileSync(
      tensors,
      safetensorsFile({
        x: { dtype: 'F32', shape: [40, 10], data: new Uint8Array(1600) },
        y: { dtype: 'U8', shape: [40], data: new Uint8Array(40) },
      }),
    );
    const model = { type: 'transformer', vocab: 256, context: 16, dModel: 16, heads: 2, layers: 1 };
    const cases: [unknown, RegExp][] = [
      [{ model, dataset: { kind: 'text', path: text } }, /latin1\.txt: not UTF-8 \(invalid byte 0xe9 at offset 3\)/],
      [{ model: 'tiny-mlp', dataset: { kind: 'tensors', path: tensors } }, /rows of 10 features .* takes 784/],
      [{ model, dataset: { name: 'fashion-mnist' } }, /language model: its dataset must be \{ "kind": "text"/],
    ];
    for (const [i, [content, pattern]] of cases.entries()) {
      const job = join(dir, `user-data-${i}.json`);
      writeFileSync(job, JSON.stringify(content));
      expectOneLineFailure(await runCoordinatorCli([...baseArgs(dataDir), '--job', job]), pattern);
    }
  });

  it('when the dataset folder does not exist (and says how to get Fashion-MNIST)', async () => {
    const result = await runCoordinatorCli([...baseArgs(dataDir), '--dataset', join(dir, 'no-such-dataset')]);
    expectOneLineFailure(result, /no-such-dataset.*does not exist.*apt-get install dataset-fashion-mnist/);
  });

  it('when no dataset is given and neither the Debian folder nor the shipped copy exists, says how to get one', () => {
    const missing = join(dir, 'no-debian-package');
    const noShipped = join(dir, 'no-shipped-copy');
    expect(() => resolveDatasetDir(undefined, {}, missing, noShipped)).toThrow(StartupError);
    expect(() => resolveDatasetDir(undefined, {}, missing, noShipped)).toThrow(
      /apt-get install dataset-fashion-mnist.*--dataset DIR/,
    );
    // The order of precedence: flag, then environment, then the package folder, then the shipped copy.
    expect(resolveDatasetDir('/flag', { TABSWARM_DATASET: '/env' }, missing)).toBe('/flag');
    expect(resolveDatasetDir(undefined, { TABSWARM_DATASET: '/env' }, missing)).toBe('/env');
    expect(resolveDatasetDir(undefined, {}, dir)).toBe(dir);
    expect(resolveDatasetDir(undefined, {}, missing)).toBe(SHIPPED_DATASET_DIR);
    expect(DEFAULT_DATASET_DIR).toBe('/usr/share/datasets/fashion-mnist/');
  });

  it('the shipped copy has its licence and matches its checksums; a changed byte stops the start with the file named', async () => {
    expect(readFileSync(join(SHIPPED_DATASET_DIR, 'LICENSE'), 'utf8')).toMatch(/MIT[\s\S]*2017 Zalando SE/);
    await verifyChecksums(SHIPPED_DATASET_DIR);
    const copy = join(dir, 'shipped-copy');
    mkdirSync(copy);
    writeFileSync(join(copy, 'SHA256SUMS'), readFileSync(join(SHIPPED_DATASET_DIR, 'SHA256SUMS')));
    const labels = readFileSync(join(SHIPPED_DATASET_DIR, 't10k-labels-idx1-ubyte.gz'));
    for (const name of ['train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz', 't10k-images-idx3-ubyte.gz'])
      symlinkSync(join(SHIPPED_DATASET_DIR, name), join(copy, name));
    labels[labels.length - 1] ^= 1;
    writeFileSync(join(copy, 't10k-labels-idx1-ubyte.gz'), labels);
    await expect(loadDataset(copy, copy)).rejects.toThrow(
      /t10k-labels-idx1-ubyte\.gz has sha256 [0-9a-f]{64}, SHA256SUMS says/,
    );
    rmSync(join(copy, 't10k-labels-idx1-ubyte.gz'));
    await expect(verifyChecksums(copy)).rejects.toThrow(
      /t10k-labels-idx1-ubyte\.gz is listed in SHA256SUMS but missing/,
    );
  });

  it('when $TABSWARM_DATASET points nowhere', async () => {
    const result = await runCoordinatorCli(baseArgs(dataDir), { env: { TABSWARM_DATASET: join(dir, 'env-dataset') } });
    expectOneLineFailure(result, /env-dataset.*does not exist/);
  });

  it('when the dataset folder lacks one of the four IDX files (and names it)', async () => {
    const partial = writeFakeIdxDataset(join(dir, 'partial'), { trainCount: 20, testCount: 5 });
    rmSync(join(partial, 't10k-labels-idx1-ubyte'));
    const result = await runCoordinatorCli([...baseArgs(dataDir), '--dataset', partial]);
    expectOneLineFailure(result, /t10k-labels-idx1-ubyte/);
  });

  it('when the data dir cannot be created', async () => {
    const file = join(dir, 'a-file');
    writeFileSync(file, 'x');
    const result = await runCoordinatorCli([
      'coordinator',
      '--port',
      '0',
      '--data-dir',
      join(file, 'data'),
      '--admin-token',
      't',
      '--dataset',
      sharedFakeDataset(),
    ]);
    expectOneLineFailure(result, /data dir .* is not writable/);
  });

  describe('when the port is in use', () => {
    let blocker: Server;
    let port: number;
    beforeAll(async () => {
      blocker = createServer();
      await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
      port = (blocker.address() as { port: number }).port;
    });
    afterAll(() => new Promise<void>((resolve) => blocker.close(() => resolve())));

    it('names the port and how to pick another', async () => {
      mkdirSync(dataDir, { recursive: true });
      const result = await runCoordinatorCli([
        'coordinator',
        '--port',
        String(port),
        '--data-dir',
        dataDir,
        '--admin-token',
        't',
        '--dataset',
        sharedFakeDataset(),
      ]);
      expectOneLineFailure(result, new RegExp(`port ${port} on 127\\.0\\.0\\.1 is already in use.*--port`));
    });
  });
});

describe('tabswarm swarm --job refuses a bad job file with one line, before anything starts', () => {
  const dir = makeTempDir('tabswarm-swarm-job-');

  /** One `tabswarm swarm: …` line on stderr, exit 1, nothing started (no coordinator, no seed line, no tab). */
  function expectSwarmRefusal(result: { code: number | null; stderr: string; stdout: string }, pattern: RegExp) {
    expect(result.code, `stdout: ${result.stdout}\nstderr: ${result.stderr}`).toBe(1);
    const lines = result.stderr.trim().split('\n');
    expect(lines, result.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/^tabswarm swarm: /);
    expect(lines[0]).toMatch(pattern);
    expect(result.stdout).toBe('');
  }

  it('when the job file breaks the schema (local sync with H = 0), naming the field', async () => {
    const job = join(dir, 'local-h0.json');
    writeFileSync(job, JSON.stringify({ model: 'tiny-mlp', sync: { mode: 'local', innerSteps: 0 } }));
    const result = await runSwarmCli(['swarm', '--job', job, '--dataset', sharedFakeDataset()]);
    expectSwarmRefusal(result, /job file .*local-h0\.json: invalid job: sync\.innerSteps/);
  });

  it('when the job file is missing or not JSON', async () => {
    const missing = await runSwarmCli(['swarm', '--job', join(dir, 'nope.json')]);
    expectSwarmRefusal(missing, /cannot read job file .*nope\.json: ENOENT/);
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{"sync": {"mode": "local",');
    expectSwarmRefusal(await runSwarmCli(['swarm', '--job', broken]), /broken\.json is not valid JSON/);
  });

  it('when the job needs more tabs than the swarm opens, or --url is given too', async () => {
    const job = join(dir, 'three.json');
    writeFileSync(job, JSON.stringify({ model: 'tiny-mlp', minWorkers: 3, maxWorkers: 4 }));
    expectSwarmRefusal(
      await runSwarmCli(['swarm', '--job', job, '--workers', '2', '--seed', '1']),
      /minWorkers is 3 but the swarm opens --workers 2/,
    );
    expectSwarmRefusal(
      await runSwarmCli(['swarm', '--job', job, '--url', 'http://127.0.0.1:9']),
      /the coordinator at --url already runs its own job/,
    );
  });
});

describe('tabswarm coordinator says at start whether it checks contributions', () => {
  it('verifies by default where anyone may join, warns when a job file turns it off, trusts invited tabs', async () => {
    const { spawnCoordinator } = await import('../support/coordinator-process');
    // The CLI's own default job (no job file), as `npm start` runs it: the verifier starts with it.
    const plain = await spawnCoordinator({ cliDefaults: true, startTimeoutMs: 120_000 });
    try {
      await waitForOutput(plain, /verifies contributions/);
      expect(plain.stdout).toMatch(
        /tabswarm verifies contributions: a new worker's commits are recomputed at 0\.5 until it passed 10 checks, then at 0\.05/,
      );
      expect(plain.stdout).toMatch(/verifier ready on/);
    } finally {
      await plain.stop();
    }
    const off = await spawnCoordinator({ job: { verify: false } });
    try {
      await waitForOutput(off, /does not verify/);
      expect(off.stdout).toMatch(
        /warning: this job does not verify contributions \("verify": false\).*anyone with the URL may join/,
      );
    } finally {
      await off.stop();
    }
    // The default job behind invites: invited tabs are trusted, and the start says so.
    const invited = await spawnCoordinator({ cliDefaults: true, extraArgs: ['--join', 'invite'] });
    try {
      await waitForOutput(invited, /not verified/);
      expect(invited.stdout).toMatch(/contributions are not verified: invited tabs are trusted/);
      expect(invited.stdout).not.toMatch(/verifier ready/);
    } finally {
      await invited.stop();
    }
  }, 180_000);
});

async function waitForOutput(proc: { stdout: string }, pattern: RegExp): Promise<void> {
  for (let i = 0; i < 100 && !pattern.test(proc.stdout); i++) await new Promise((r) => setTimeout(r, 100));
}
