import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseJobSpec } from '../../../core/training/job';

const JOBS_DIR = join(import.meta.dirname, '../../../coordinator/jobs');

describe('example job files shipped in coordinator/jobs', () => {
  const files = readdirSync(JOBS_DIR).filter((f) => f.endsWith('.json'));
  it('exist', () => expect(files.length).toBeGreaterThan(0));
  for (const file of files) {
    it(`${file} is a valid job`, () => {
      const job = parseJobSpec(JSON.parse(readFileSync(join(JOBS_DIR, file), 'utf8')));
      expect(job.globalBatch).toBeGreaterThan(0);
    });
  }
});
