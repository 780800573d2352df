import { describe, expect, it } from 'vitest';
import type { ClientMessage } from '../../../core/protocol/tab-messages';
import { checkpointPath, type ServerMessage } from '../../../core/protocol/coordinator-messages';
import {
  MAX_CONTROL_MESSAGE_BYTES,
  parseClientMessage,
  parseServerMessage,
  utf8Length,
} from '../../../core/protocol/control-parse';
import { defaultJob, jobPublic } from '../../../core/training/job';
import { mulberry32 } from '../../support/rng';

const HASH = '0123456789abcdef'.repeat(4);

/** Hellos whose kernels report a coordinator must refuse: it is a claim from a tab, bounded like any. */
function badKernels(): [string, string, string][] {
  const hello = validClient[1] as Extract<ClientMessage, { type: 'hello' }>;
  const kernels = hello.kernels!;
  const with_ = (patch: Record<string, unknown>) => JSON.stringify({ ...hello, kernels: { ...kernels, ...patch } });
  const variant = { family: 'matmul', variant: 'x' };
  return [
    ['a kernels report with an unknown source', with_({ source: 'guessed' }), 'bad_message'],
    ['a kernels report with an unknown field', with_({ admin: true }), 'bad_message'],
    ['a kernels report with 9 variants', with_({ variants: Array(9).fill(variant) }), 'bad_message'],
    [
      'a variant name of 65 characters',
      with_({ variants: [{ family: 'matmul', variant: 'x'.repeat(65) }] }),
      'bad_message',
    ],
    ['negative GFLOP/s', with_({ gflops: -1 }), 'bad_message'],
    ['GFLOP/s beyond 1e7', with_({ gflops: 2e7 }), 'bad_message'],
    ['an unknown feature', with_({ features: ['timestamp-query'] }), 'bad_message'],
    ['a tuning of an hour', with_({ tuneMs: 3_600_000 }), 'bad_message'],
  ];
}

const validClient: ClientMessage[] = [
  {
    v: 1,
    type: 'hello',
    runId: null,
    workerId: null,
    peerId: 'peer-1',
    adapter: { vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader Device (Subzero)' },
    haveStep: null,
    haveHash: null,
  },
  {
    v: 1,
    type: 'hello',
    runId: 'run-1',
    workerId: 'w1-abc',
    peerId: 'peer-1',
    adapter: { vendor: '', architecture: '', description: '' },
    haveStep: 12,
    haveHash: HASH,
    pending: { step: 13, hash: HASH },
    kernels: {
      source: 'tuned',
      precision: 'f16',
      variants: [
        { family: 'matmul', variant: '4x4 wgmem wg16x16 tk16' },
        { family: 'optimizer', variant: 'wg256 x4' },
      ],
      gflops: 812.5,
      tuneMs: 2300,
      features: ['subgroups', 'shader-f16'],
    },
  },
  { v: 1, type: 'heartbeat', runId: 'run-1', workerId: 'w1-abc' },
  { v: 1, type: 'ready', runId: 'run-1', workerId: 'w1-abc', round: 3 },
  {
    v: 1,
    type: 'step_report',
    runId: 'run-1',
    workerId: 'w1-abc',
    round: 3,
    rank: 1,
    step: 14,
    hash: HASH,
    lossSum: 12.5,
    samples: 43,
    computeMs: 17.25,
  },
  {
    v: 1,
    type: 'failure',
    runId: 'run-1',
    workerId: 'w1-abc',
    round: 3,
    reason: 'data channel closed',
    peer: 'w2-def',
  },
  { v: 1, type: 'goodbye', runId: 'run-1', workerId: 'w1-abc' },
  {
    v: 1,
    type: 'outer_report',
    runId: 'run-1',
    workerId: 'w1-abc',
    round: 3,
    rank: 1,
    step: 16,
    hash: HASH,
    wireBytes: 0,
  },
];

const validServer: ServerMessage[] = [
  { v: 1, type: 'welcome', runId: 'run-1', workerId: 'w1-abc', job: jobPublic(defaultJob, 60000) },
  { v: 1, type: 'wait', reason: 'round_running', position: 2 },
  {
    v: 1,
    type: 'round',
    runId: 'run-1',
    round: 4,
    world: [
      { workerId: 'w1-abc', peerId: 'p1', rank: 0, share: 0.6 },
      { workerId: 'w2-def', peerId: 'p2', rank: 1, share: 0.4 },
    ],
    step: 15,
    epoch: 0,
    cursor: 1792,
    committedHash: HASH,
    stateFrom: { kind: 'checkpoint', step: 10, url: checkpointPath('run-1', 10), sha256: 'ab'.repeat(32) },
  },
  { v: 1, type: 'train', round: 4 },
  { v: 1, type: 'round_closed', round: 4, reason: 'failure', restore: true },
  { v: 1, type: 'committed', round: 4, step: 15, epoch: 0, cursor: 1920, hash: HASH },
  { v: 1, type: 'checkpoint_request', step: 15, url: checkpointPath('run-1', 15) },
  { v: 1, type: 'error', code: 'forged_rank', message: 'no' },
  { v: 1, type: 'done', step: 469 },
];

describe('parseClientMessage', () => {
  it('accepts every message type and returns it unchanged', () => {
    for (const msg of validClient) expect(parseClientMessage(JSON.stringify(msg))).toEqual({ ok: true, msg });
  });

  const report = validClient[4];
  const bad: [string, string, string][] = [
    ['an empty frame', '', 'bad_json'],
    ['a truncated frame', JSON.stringify(report).slice(0, 30), 'bad_json'],
    ['a JSON array', '[]', 'bad_message'],
    ['a JSON string', '"hello"', 'bad_message'],
    ['a message without a version', JSON.stringify({ ...report, v: undefined }), 'bad_message'],
    ['a message of protocol version 2', JSON.stringify({ ...report, v: 2 }), 'bad_version'],
    ['an unknown type', JSON.stringify({ ...report, type: 'steal' }), 'bad_message'],
    ['an unknown field', JSON.stringify({ ...report, admin: true }), 'bad_message'],
    ['a missing field', JSON.stringify({ ...report, hash: undefined }), 'bad_message'],
    ['an id with a space', JSON.stringify({ ...report, workerId: 'w 1' }), 'bad_message'],
    ['an id of 65 characters', JSON.stringify({ ...report, workerId: 'w'.repeat(65) }), 'bad_message'],
    ['an upper-case hash', JSON.stringify({ ...report, hash: HASH.toUpperCase() }), 'bad_message'],
    [
      'a 64-bit hash (16 hex digits, before SHA-256)',
      JSON.stringify({ ...report, hash: HASH.slice(0, 16) }),
      'bad_message',
    ],
    ['a hash of 65 hex digits', JSON.stringify({ ...report, hash: `${HASH}0` }), 'bad_message'],
    ['a fractional step', JSON.stringify({ ...report, step: 1.5 }), 'bad_message'],
    ['step 0 (steps start at 1)', JSON.stringify({ ...report, step: 0 }), 'bad_message'],
    ['a negative rank', JSON.stringify({ ...report, rank: -1 }), 'bad_message'],
    ['an infinite loss (1e999)', JSON.stringify(report).replace('"lossSum":12.5', '"lossSum":1e999'), 'bad_message'],
    ['a negative loss', JSON.stringify({ ...report, lossSum: -1 }), 'bad_message'],
    ['a number as a string', JSON.stringify({ ...report, computeMs: '5' }), 'bad_message'],
    ['too many samples', JSON.stringify({ ...report, samples: 2 ** 21 }), 'bad_message'],
    [
      'a failure reason of 257 characters',
      JSON.stringify({ ...validClient[5], reason: 'x'.repeat(257) }),
      'bad_message',
    ],
    ['a hello without adapter fields', JSON.stringify({ ...validClient[0], adapter: { vendor: 'x' } }), 'bad_message'],
    ...badKernels(),
    ...(() => {
      const outer = validClient.find((m) => m.type === 'outer_report')!;
      return [
        ['an outer report without its hash', JSON.stringify({ ...outer, hash: undefined }), 'bad_message'],
        ['an outer report with samples', JSON.stringify({ ...outer, samples: 3 }), 'bad_message'],
        ['an outer report of negative bytes', JSON.stringify({ ...outer, wireBytes: -1 }), 'bad_message'],
        ['an outer report of step 0', JSON.stringify({ ...outer, step: 0 }), 'bad_message'],
      ] as [string, string, string][];
    })(),
  ];
  for (const [name, text, code] of bad) {
    it(`rejects ${name} as ${code}`, () => {
      const parsed = parseClientMessage(text);
      expect(parsed.ok).toBe(false);
      if (!parsed.ok) {
        expect(parsed.code).toBe(code);
        expect(parsed.message.length).toBeGreaterThan(0);
        expect(parsed.message.length).toBeLessThanOrEqual(1024);
      }
    });
  }

  it('counts the size limit in UTF-8 bytes, not characters', () => {
    const text = JSON.stringify({ ...validClient[5], reason: 'é€'.repeat(40) });
    const bytes = Buffer.byteLength(text);
    expect(bytes).toBeGreaterThan(text.length);
    expect(parseClientMessage(text, bytes).ok).toBe(true);
    expect(parseClientMessage(text, bytes - 1)).toMatchObject({ ok: false, code: 'too_large' });
    expect(parseClientMessage(text, text.length)).toMatchObject({ ok: false, code: 'too_large' });
  });

  it('has a default limit that admits real messages and refuses a megabyte', () => {
    expect(MAX_CONTROL_MESSAGE_BYTES).toBeGreaterThanOrEqual(4096);
    expect(parseClientMessage(' '.repeat(1 << 20))).toMatchObject({ ok: false, code: 'too_large' });
  });
});

describe('utf8Length', () => {
  it('agrees with Node Buffer.byteLength, surrogate pairs and lone surrogates included', () => {
    const rand = mulberry32(4);
    const alphabet = ['a', 'é', '€', '😀', '\ud800', '\udc00', '\u0000', '\u07ff', '\u0800', '\uffff'];
    for (let i = 0; i < 300; i++) {
      let text = '';
      const len = Math.floor(rand() * 12);
      for (let k = 0; k < len; k++) text += alphabet[Math.floor(rand() * alphabet.length)];
      expect(utf8Length(text)).toBe(Buffer.byteLength(text, 'utf8'));
    }
  });
});

describe('parseServerMessage', () => {
  it('accepts every server message type unchanged', () => {
    for (const msg of validServer) expect(parseServerMessage(JSON.stringify(msg))).toEqual({ ok: true, msg });
  });

  it('rejects a round with an unknown state source and a share above 1', () => {
    const round = validServer[2] as Extract<ServerMessage, { type: 'round' }>;
    expect(parseServerMessage(JSON.stringify({ ...round, stateFrom: { kind: 'magic' } }))).toMatchObject({
      ok: false,
      code: 'bad_message',
    });
    expect(parseServerMessage(JSON.stringify({ ...round, world: [{ ...round.world[0], share: 1.5 }] }))).toMatchObject({
      ok: false,
      code: 'bad_message',
    });
  });
});

describe('holes and carries in round and committed', () => {
  const round = validServer[2] as Extract<ServerMessage, { type: 'round' }>;
  const committed = validServer.find((m) => m.type === 'committed')!;
  // The round's two ranks carry slots 0 and 2 of a split of three on (slot 1 was lost).
  const carry = { shares: [0.25, 0.25, 0.5], slots: [0, 2], reported: [17, 16] };

  it('accepts holes below the cursor and a carry that fits the round', () => {
    const withHoles = {
      ...round,
      cursor: 100,
      holes: [
        [2, 5],
        [40, 41],
      ],
    };
    expect(parseServerMessage(JSON.stringify(withHoles))).toEqual({ ok: true, msg: withHoles });
    const carried = { ...round, carry };
    expect(parseServerMessage(JSON.stringify(carried))).toEqual({ ok: true, msg: carried });
    // An overlapped job's carry of two groups, the second planned without the first's lost slices.
    const two = { ...round, cursor: 100, holes: [[2, 4]], carry: { ...carry, through: 22, deferred: [[2, 4]] } };
    expect(parseServerMessage(JSON.stringify(two))).toEqual({ ok: true, msg: two });
    const drain = { ...committed, drain: true };
    expect(parseServerMessage(JSON.stringify(drain))).toEqual({ ok: true, msg: drain });
    const done = { ...committed, cursor: 1920, holes: [[0, 64]] };
    expect(parseServerMessage(JSON.stringify(done))).toEqual({ ok: true, msg: done });
  });

  const bad: [string, unknown][] = [
    ['a hole past the cursor', { ...round, cursor: 10, holes: [[8, 12]] }],
    [
      'overlapping holes',
      {
        ...round,
        cursor: 100,
        holes: [
          [2, 6],
          [5, 9],
        ],
      },
    ],
    [
      'holes out of order',
      {
        ...round,
        cursor: 100,
        holes: [
          [20, 30],
          [2, 6],
        ],
      },
    ],
    ['an empty hole', { ...round, cursor: 100, holes: [[4, 4]] }],
    ['a hole that is no pair', { ...round, cursor: 100, holes: [[4, 5, 6]] }],
    [
      'more holes than MAX_HOLES',
      { ...round, cursor: 10_000, holes: Array.from({ length: 1025 }, (_, i) => [3 * i, 3 * i + 1]) },
    ],
    ['a carry with a slot per rank missing', { ...round, carry: { ...carry, slots: [0] } }],
    ['a carry with one slot twice', { ...round, carry: { ...carry, slots: [2, 2] } }],
    ['a carry whose slot is outside its split', { ...round, carry: { ...carry, slots: [0, 3] } }],
    ['a carry with a report mark per rank missing', { ...round, carry: { ...carry, reported: [17] } }],
    ['a carry through a step before the round’s', { ...round, carry: { ...carry, through: 14 } }],
    [
      'a carry with deferred holes out of order',
      {
        ...round,
        carry: {
          ...carry,
          deferred: [
            [9, 12],
            [2, 4],
          ],
        },
      },
    ],
    ['a committed that drains with false', { ...committed, drain: false }],
    ['a committed with a hole past its cursor', { ...committed, cursor: 10, holes: [[9, 11]] }],
  ];
  for (const [name, msg] of bad) {
    it(`rejects ${name}`, () => {
      expect(parseServerMessage(JSON.stringify(msg))).toMatchObject({ ok: false, code: 'bad_message' });
    });
  }
});

describe('checkpointPath', () => {
  it('names a checkpoint by run and step, escaping the run id', () => {
    expect(checkpointPath('run-1', 40)).toBe('/api/checkpoints/run-1/40');
    expect(checkpointPath('a/b', 1)).toBe('/api/checkpoints/a%2Fb/1');
  });
});
