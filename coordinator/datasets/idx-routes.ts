/**
 * Serving a dataset over HTTP under `/api/dataset`: the shared router of metadata and payloads
 * (`datasetRouter`, also used by dataset-chunks.ts for a user's chunked data) and the routes of the
 * built-in IDX image set (`datasetRoutes`; the parser and loader are node/idx.ts, shared with the
 * verifier process, which serves nothing). The server mounts these under its one API router.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { DatasetFileKey } from '../../core/data/idx-metadata';
import { DATASET_FILE_KEYS, datasetMetadata, type IdxDataset, payload, sha256Etag } from '../../node/idx';

/**
 * HTTP routes for the dataset: `GET /api/dataset` (metadata JSON) and
 * `GET /api/dataset/{train,test}/{images,labels}` (raw bytes). Returns false for any other URL so
 * the caller can try its other routes.
 */
export function datasetRoutes(dataset: IdxDataset): (req: IncomingMessage, res: ServerResponse) => boolean {
  return datasetRouter(JSON.stringify(datasetMetadata(dataset)), (path) => {
    const key = path.slice('/api/dataset/'.length) as DatasetFileKey;
    if (!DATASET_FILE_KEYS.includes(key))
      return { notFound: `no dataset file ${key} (files: ${DATASET_FILE_KEYS.join(', ')})` };
    return { sha256: dataset.sha256[key], body: payload(dataset, key) };
  });
}

/** What a dataset router serves at a path under `/api/dataset/`: bytes and their SHA-256, or why not. */
export type DatasetFile = { sha256: string; body: Uint8Array } | { notFound: string };

/**
 * The HTTP side both dataset routers share (the IDX files above, the chunks of dataset-chunks.ts):
 * `/api/dataset` answers `metadataJson`; any other path under it is `fileAt(path)`, or a 404 with its
 * message. Nothing but GET and HEAD. Payloads never change while the process runs, so each is served
 * with its SHA-256 as a strong ETag and revalidated (`no-cache`), which answers 304 to a known ETag.
 * False for URLs outside `/api/dataset`.
 */
export function datasetRouter(
  metadataJson: string,
  fileAt: (path: string) => DatasetFile,
): (req: IncomingMessage, res: ServerResponse) => boolean {
  return (req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (path !== '/api/dataset' && !path.startsWith('/api/dataset/')) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { Allow: 'GET, HEAD', 'Content-Type': 'text/plain' }).end('method not allowed\n');
      return true;
    }
    const head = req.method === 'HEAD';
    if (path === '/api/dataset') {
      res.writeHead(200, {
        'Content-Type': 'application/json',
        'Content-Length': Buffer.byteLength(metadataJson),
        'Cache-Control': 'no-cache',
      });
      res.end(head ? undefined : metadataJson);
      return true;
    }
    const file = fileAt(path);
    if ('notFound' in file) {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`${file.notFound}\n`);
      return true;
    }
    const etag = sha256Etag(file.sha256);
    const headers = { ETag: etag, 'Cache-Control': 'no-cache' };
    const ifNoneMatch = req.headers['if-none-match'];
    if (ifNoneMatch?.split(',').some((tag) => tag.trim() === etag)) {
      res.writeHead(304, headers).end();
      return true;
    }
    res.writeHead(200, {
      ...headers,
      'Content-Type': 'application/octet-stream',
      'Content-Length': file.body.byteLength,
    });
    res.end(head ? undefined : file.body);
    return true;
  };
}
