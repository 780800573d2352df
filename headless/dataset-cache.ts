/**
 * The dataset cache of a headless worker: what Cache Storage is to a tab (web/worker/data/dataset-client.ts
 * keeps each verified file under its URL + SHA-256), as files in a folder, so a worker that restarts, or a
 * second process on the same machine, does not download the dataset again. Only the three calls the
 * download makes are implemented; the bytes are checked against the coordinator's SHA-256 on every read
 * by the caller, so a corrupt or foreign file here is fetched again, never trained on.
 *
 * Layout: one file per entry, named by the SHA-256 of its URL without the query (so `delete(url,
 * {ignoreSearch})` finds every version of it) and of the whole key.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { DatasetCache } from '../web/worker/data/dataset-client';

/** `$XDG_CACHE_HOME/tabswarm/datasets`, else `~/.cache/tabswarm/datasets`. */
export function defaultCacheDir(env: Record<string, string | undefined> = process.env): string {
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'tabswarm', 'datasets');
}

const digest = (text: string) => createHash('sha256').update(text).digest('hex');

function requestUrl(request: RequestInfo | URL): string {
  return typeof request === 'string' ? request : request instanceof URL ? request.href : request.url;
}

function withoutSearch(url: string): string {
  const u = new URL(url);
  u.search = '';
  u.hash = '';
  return u.href;
}

export class FileDatasetCache implements DatasetCache {
  constructor(readonly dir: string) {}

  private fileOf(url: string): string {
    return join(this.dir, `${digest(withoutSearch(url)).slice(0, 32)}-${digest(url).slice(0, 32)}`);
  }

  async match(request: RequestInfo | URL): Promise<Response | undefined> {
    try {
      return new Response(await readFile(this.fileOf(requestUrl(request))));
    } catch {
      return undefined;
    }
  }

  async put(request: RequestInfo | URL, response: Response): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const file = this.fileOf(requestUrl(request));
    // Written aside and renamed: a reader never sees half a file (two processes may fill the cache at once).
    const partial = `${file}.${process.pid}.partial`;
    await writeFile(partial, new Uint8Array(await response.arrayBuffer()));
    await rename(partial, file);
  }

  async delete(request: RequestInfo | URL, options?: CacheQueryOptions): Promise<boolean> {
    const url = requestUrl(request);
    if (!options?.ignoreSearch) {
      await rm(this.fileOf(url), { force: true });
      return true;
    }
    const prefix = `${digest(withoutSearch(url)).slice(0, 32)}-`;
    const names = await readdir(this.dir).catch(() => [] as string[]);
    await Promise.all(names.filter((n) => n.startsWith(prefix)).map((n) => rm(join(this.dir, n), { force: true })));
    return true;
  }
}
