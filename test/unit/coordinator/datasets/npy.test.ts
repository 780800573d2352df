/**
 * `.npy` input for tensors datasets (coordinator/datasets/npy.ts): files NumPy 2.4 wrote (`np.save`, embedded
 * below as base64) read as NumPy defines them, every prefix of a file and a list of hostile headers
 * refused with one line naming the file, and the same data as a folder of x.npy and y.npy and as a
 * `.safetensors` file loading to identical tensors and identical served payloads (the bytes the tabs
 * train on, so the training is bit-identical). Under a second.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tensorsPayloads } from '../../../../coordinator/datasets/dataset-chunks';
import { parseNpy } from '../../../../coordinator/datasets/npy';
import { loadTensorsDataset } from '../../../../coordinator/datasets/user-datasets';
import { npyFile, npyWithHeader } from '../../../support/npy-file';
import { mulberry32 } from '../../../support/rng';
import { safetensorsFile } from '../../../support/safetensors-file';

/**
 * Written by NumPy 2.4.6:
 *   x = (np.arange(24, dtype=np.float32).reshape(4, 2, 3) / 8); np.save(f, x)
 *   y = np.array([0, 1, 2, 1], dtype='<i8'); np.save(f, y) and np.lib.format.write_array(f, y, version=(2, 0))
 *   np.save(f, np.arange(8, dtype=np.uint8).reshape(4, 2))
 *   np.save(f, np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3))); np.save(f, np.arange(4, dtype='>f4'))
 */
const NUMPY = {
  x: 'k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDQsIDIsIDMpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAAAAPgAAgD4AAMA+AAAAPwAAID8AAEA/AABgPwAAgD8AAJA/AACgPwAAsD8AAMA/AADQPwAA4D8AAPA/AAAAQAAACEAAABBAAAAYQAAAIEAAAChAAAAwQAAAOEA=',
  y: 'k05VTVBZAQB2AHsnZGVzY3InOiAnPGk4JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDQsKSwgfSAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAAAAAAEAAAAAAAAAAgAAAAAAAAABAAAAAAAAAA==',
  yVersion2:
    'k05VTVBZAgB0AAAAeydkZXNjcic6ICc8aTgnLCAnZm9ydHJhbl9vcmRlcic6IEZhbHNlLCAnc2hhcGUnOiAoNCwpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAAAAAAEAAAAAAAAAAgAAAAAAAAABAAAAAAAAAA==',
  xU8: 'k05VTVBZAQB2AHsnZGVzY3InOiAnfHUxJywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDQsIDIpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAQIDBAUGBw==',
  fortran:
    'k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBUcnVlLCAnc2hhcGUnOiAoMiwgMyksIH0gICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAABAQAAAgD8AAIBAAAAAQAAAoEA=',
  bigEndian:
    'k05VTVBZAQB2AHsnZGVzY3InOiAnPmY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDQsKSwgfSAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAP4AAAEAAAABAQAAA',
};
const numpy = (name: keyof typeof NUMPY) => new Uint8Array(Buffer.from(NUMPY[name], 'base64'));
const floats = (data: Uint8Array) => Array.from(new Float32Array(data.slice().buffer));

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tabswarm-npy-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('parseNpy', () => {
  it("reads NumPy's own files (versions 1.0 and 2.0), and the test writer produces the same bytes", () => {
    const x = parseNpy(numpy('x'), 'x.npy');
    expect(x).toMatchObject({ dtype: 'F32', shape: [4, 2, 3] });
    expect(floats(x.data)).toEqual(Array.from({ length: 24 }, (_, i) => i / 8));
    for (const name of ['y', 'yVersion2'] as const) {
      const y = parseNpy(numpy(name), name);
      expect(y).toMatchObject({ dtype: 'I64', shape: [4] });
      expect(Array.from(new BigInt64Array(y.data.slice().buffer), Number)).toEqual([0, 1, 2, 1]);
    }
    expect(parseNpy(numpy('xU8'), 'u8')).toMatchObject({ dtype: 'U8', shape: [4, 2] });
    expect(npyFile('<f4', [4, 2, 3], x.data)).toEqual(numpy('x'));
    const y = parseNpy(numpy('y'), 'y');
    expect(npyFile('<i8', [4], y.data)).toEqual(numpy('y'));
    expect(npyFile('<i8', [4], y.data, { version: 2 })).toEqual(numpy('yVersion2'));
  });

  it('refuses every truncation of a valid file with one line naming it', () => {
    const whole = numpy('x');
    for (let n = 0; n < whole.length; n++) {
      expect(() => parseNpy(whole.subarray(0, n), 'cut.npy'), `${n} bytes`).toThrow(
        /^cut\.npy: not a usable \.npy file \([^\n]+\)$/,
      );
    }
  });

  it('refuses Fortran order, big-endian, unread dtypes and malformed headers, each with its reason', () => {
    const f4 = new Uint8Array(16);
    const header = (dict: string, data = f4, version = 1) => npyWithHeader(dict, data, version);
    const good = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
    expect(parseNpy(header(good), 'ok')).toMatchObject({ dtype: 'F32', shape: [4] });
    const cases: [Uint8Array, RegExp][] = [
      [numpy('fortran'), /Fortran order; save np\.ascontiguousarray/],
      [numpy('bigEndian'), /dtype '>f4' \(big-endian/],
      [header(good.replace('<f4', '<f8'), new Uint8Array(32)), /dtype '<f8'; read are/],
      [header(good.replace("'<f4'", "[('a', '<f4')]")), /expected a quoted string/],
      [header(good.replace('<f4', '|O')), /dtype '\|O'/],
      [header(good.replace(' }', " 'extra': 1, }")), /expected a quoted string|keys/],
      [header(good.replace(' }', " 'extra': 'x', }")), /keys descr, extra, fortran_order, shape/],
      [header("{'descr': '<f4', 'shape': (4,), }"), /keys descr, shape; expected/],
      [header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"), /names 'descr' twice/],
      [header(good.replace('(4,)', '(4)')), /written \(n,\), not \(n\)/],
      [header(good.replace('(4,)', '(-4,)')), /non-negative integer/],
      [header(good.replace('(4,)', '(1.5,)')), /expected ','|expected '\)'/],
      [header(good.replace('(4,)', '(99999999999999999999,)')), /too large/],
      [header(good.replace('(4,)', '(4294967296, 4294967296)')), /too large/],
      [header(good.replace('(4,)', '(5,)')), /needs 20 data bytes, the file has 16/],
      [header(good, new Uint8Array(17)), /needs 16 data bytes, the file has 17/],
      [header(good.replace('False', 'false')), /expected a quoted string/],
      [header("{'descr': '<f4, }"), /unterminated string/],
      [header(good.replace("'<f4'", "'<\\x66\\x34'")), /escapes/],
      [header(`${good} junk`), /does not end in a newline/],
      [header(good.replace('False', 'é')), /not ASCII/],
      [header(good, f4, 4), /format version 4\.0/],
      [
        Uint8Array.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, 0xff, 0xff, 0x7b]),
        /header of 65535 bytes does not fit/,
      ],
      [new TextEncoder().encode('PK\x03\x04 this is a zip'), /no \\x93NUMPY magic/],
    ];
    for (const [bytes, reason] of cases) {
      const error = (() => {
        try {
          parseNpy(bytes, 'bad.npy');
        } catch (e) {
          return e as Error;
        }
        return null;
      })();
      expect(error, String(reason)).toBeInstanceOf(Error);
      expect(error!.message).toMatch(/^bad\.npy: not a usable \.npy file \(/);
      expect(error!.message).toMatch(reason);
      expect(error!.message).not.toContain('\n');
    }
  });

  it('never throws anything but its one-line error on random byte flips of a valid file', () => {
    const rand = mulberry32(9);
    const whole = numpy('x');
    let parsed = 0;
    for (let n = 0; n < 2000; n++) {
      const bytes = whole.slice();
      for (let k = 0; k < 3; k++) bytes[Math.floor(rand() * 128)] = Math.floor(rand() * 256);
      try {
        parseNpy(bytes, 'flip.npy');
        parsed++;
      } catch (e) {
        expect((e as Error).message).toMatch(/^flip\.npy: not a usable \.npy file \([^\n]+\)$/);
      }
    }
    // Flips inside the padding keep the file valid; most flips do not.
    expect(parsed).toBeLessThan(2000);
  });
});

describe('tensors datasets from .npy', () => {
  it('a folder of x.npy and y.npy loads to the same tensors and served bytes as the same data in safetensors', async () => {
    const rand = mulberry32(3);
    const count = 60;
    const x = Float32Array.from({ length: count * 12 }, () => rand() * 2 - 1);
    const y = BigInt64Array.from({ length: count }, () => BigInt(Math.floor(rand() * 5)));
    const xBytes = new Uint8Array(x.buffer);
    const yBytes = new Uint8Array(y.buffer);
    const folder = join(dir, 'npy');
    await mkdir(folder);
    await writeFile(join(folder, 'x.npy'), npyFile('<f4', [count, 3, 4], xBytes));
    await writeFile(join(folder, 'y.npy'), npyFile('<i8', [count], yBytes));
    const file = join(dir, 'same.safetensors');
    await writeFile(
      file,
      safetensorsFile({
        x: { dtype: 'F32', shape: [count, 3, 4], data: xBytes },
        y: { dtype: 'I64', shape: [count], data: yBytes },
      }),
    );
    const fromNpy = await loadTensorsDataset({ path: folder });
    const fromSafetensors = await loadTensorsDataset({ path: file });
    expect(fromNpy.shape).toEqual([3, 4, 1]);
    expect(fromNpy.classes).toBe(fromSafetensors.classes);
    expect(fromNpy.train.count).toBe(57);
    for (const split of ['train', 'test'] as const) {
      expect(fromNpy[split].x).toEqual(fromSafetensors[split].x);
      expect(fromNpy[split].y).toEqual(fromSafetensors[split].y);
    }
    const a = tensorsPayloads(fromNpy).payloads;
    const b = tensorsPayloads(fromSafetensors).payloads;
    for (const key of Object.keys(b) as (keyof typeof b)[]) expect(Buffer.compare(a[key], b[key]), key).toBe(0);
    // uint8 images scale by 1/255, as from safetensors U8.
    const u8 = join(dir, 'u8');
    await mkdir(u8);
    await writeFile(join(u8, 'x.npy'), numpy('xU8'));
    await writeFile(join(u8, 'y.npy'), npyFile('|u1', [4], Uint8Array.from([0, 1, 0, 1])));
    await writeFile(
      join(dir, 'u8-test.safetensors'),
      safetensorsFile({
        x: { dtype: 'U8', shape: [2, 2], data: Uint8Array.from([9, 10, 11, 12]) },
        y: { dtype: 'U8', shape: [2], data: Uint8Array.from([1, 0]) },
      }),
    );
    const mixed = await loadTensorsDataset({ path: u8, testPath: join(dir, 'u8-test.safetensors') });
    expect(Array.from(mixed.train.x)).toEqual(Array.from({ length: 8 }, (_, i) => Math.fround(i / 255)));
    expect(Array.from(mixed.test.y)).toEqual([1, 0]);
  });

  it('names the file at fault: a missing y.npy, a lone .npy, a label count that does not match, float labels, integer features', async () => {
    const folder = join(dir, 'bad');
    await mkdir(folder);
    await writeFile(join(folder, 'x.npy'), numpy('x'));
    const load = (path: string) =>
      loadTensorsDataset({ path }).then(
        () => null,
        (e: Error) => e.message,
      );
    expect(await load(folder)).toMatch(/bad\/y\.npy: no such file/);
    expect(await load(join(folder, 'x.npy'))).toMatch(/x\.npy: a \.npy file holds one array; name the folder/);
    await writeFile(join(folder, 'y.npy'), npyFile('<i4', [3], new Uint8Array(12)));
    expect(await load(folder)).toMatch(/bad\/y\.npy: y has shape \[3\]; expected \[4\]/);
    await writeFile(join(folder, 'y.npy'), npyFile('<f4', [4], new Uint8Array(16)));
    expect(await load(folder)).toMatch(/bad\/y\.npy: y has dtype F32; labels must be integers/);
    await writeFile(join(folder, 'x.npy'), npyFile('<i4', [4, 2], new Uint8Array(32)));
    expect(await load(folder)).toMatch(/bad\/x\.npy: x has dtype I32; use F32 or U8/);
  });
});
