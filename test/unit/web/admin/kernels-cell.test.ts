/**
 * The admin page's kernels cell (web/admin/format.ts `formatKernels`): what a tab's hello said about its
 * kernels, in one line and a tooltip listing every family.
 */
import { describe, expect, it } from 'vitest';
import type { KernelsReport } from '../../../../core/protocol/tab-messages';
import { formatKernels } from '../../../../web/admin/format';

const tuned: KernelsReport = {
  source: 'tuned',
  precision: 'f32',
  variants: [
    { family: 'matmul', variant: '4x4 wgmem wg16x16 tk16' },
    { family: 'optimizer', variant: 'wg256 x4' },
  ],
  gflops: 812.5,
  tuneMs: 2345,
  features: ['subgroups'],
};

describe('the kernels cell', () => {
  it('shows the matmul tile, its GFLOP/s and how long the tuning took, every family in the title', () => {
    expect(formatKernels(tuned)).toEqual({
      text: '4x4 wgmem wg16x16 tk16 · 813 GFLOP/s · tuned in 2.3 s',
      title: 'matmul: 4x4 wgmem wg16x16 tk16\noptimizer: wg256 x4\nfeatures: subgroups',
    });
  });

  it('says cached or defaults, marks the f16 mode, and shows a dash for a tab that sent nothing', () => {
    expect(formatKernels({ ...tuned, source: 'cached', tuneMs: null }).text).toBe(
      '4x4 wgmem wg16x16 tk16 · 813 GFLOP/s · cached',
    );
    const defaults = { ...tuned, source: 'default' as const, gflops: null, tuneMs: null, precision: 'f16' as const };
    expect(formatKernels(defaults).text).toBe('f16 · 4x4 wgmem wg16x16 tk16 · defaults');
    expect(formatKernels({ ...tuned, features: [] }).title.endsWith('features: none')).toBe(true);
    expect(formatKernels(null).text).toBe('–');
  });
});
