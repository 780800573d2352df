/**
 * A minimal reproduction, outside tabswarm, of the renderer growth that bench:soak measured in the
 * elastic path (docs/performance.md, "The renderer's growth in the elastic path"): a page driven by
 * Playwright keeps the body of every request it sends, because Playwright enables the DevTools Network
 * domain on every page, and Blink's network agent then holds each request's body in the renderer
 * (Blink's "buffer" PartitionAlloc partition) until its resource buffer is full.
 *
 * A local HTTP server on 127.0.0.1 serves an empty page and answers PUTs; the page PUTs `--count`
 * bodies of 2,823,380 bytes (the size of one `mlp` checkpoint upload) by `fetch`, then as many by
 * XMLHttpRequest (what web/elastic/checkpoint-transfer.ts uses), `--rounds` times; after each batch a
 * memory-infra dump (CDP Tracing on the browser target, which attaches no agent to the page) gives the
 * renderer's allocators. Expect "buffer" to grow by ~2.8 MB per upload and to stop near 200 MB.
 *
 *   npx tsx bench/devtools-upload-retention.ts --count 20 --rounds 2
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { launchSwarmChromium } from '../tools/swarm/chromium';

const BODY_BYTES = 2_823_380;

interface TraceEvent {
  ph: string;
  pid: number;
  ts: number;
  name?: string;
  args?: { name?: string; dumps?: { allocators?: Record<string, { attrs?: { size?: { value: string } } }> } };
}

function option(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  const n = i >= 0 ? Number(process.argv[i + 1]) : fallback;
  if (!Number.isInteger(n) || n < 1 || n > 200) throw new Error(`${name}: expected an integer in 1..200`);
  return n;
}

const PAGE_SCRIPT = `globalThis.upload = async (how, count, bytes) => {
  for (let i = 0; i < count; i++) {
    const body = new Uint8Array(bytes);
    if (how === 'fetch') await (await fetch('/put/' + i, { method: 'PUT', body, cache: 'no-store' })).text();
    else await new Promise((ok, fail) => {
      const x = new XMLHttpRequest();
      x.open('PUT', '/put/' + i);
      x.onload = ok;
      x.onerror = fail;
      x.send(body);
    });
  }
};`;

async function main(): Promise<void> {
  const count = option('--count', 20);
  const rounds = option('--rounds', 2);
  const server = createServer((req, res) => {
    if (req.method === 'PUT') {
      req.resume();
      req.on('end', () => res.writeHead(201, { 'content-type': 'text/plain' }).end('ok'));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>upload</title>');
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  const browser = await launchSwarmChromium();
  try {
    const cdp = await browser.newBrowserCDPSession();
    const events: TraceEvent[] = [];
    cdp.on('Tracing.dataCollected', (e) => events.push(...(e.value as unknown as TraceEvent[])));
    const complete = new Promise((done) => cdp.once('Tracing.tracingComplete', done));
    await cdp.send('Tracing.start', {
      traceConfig: {
        includedCategories: ['disabled-by-default-memory-infra'],
        excludedCategories: ['*'],
        memoryDumpConfig: { triggers: [] as string[] } as unknown as Record<string, string>,
      },
    });
    const page = await (await browser.newContext()).newPage();
    await page.goto(url);
    await page.evaluate(PAGE_SCRIPT);
    const labels = ['start'];
    await cdp.send('Tracing.requestMemoryDump', { deterministic: true, levelOfDetail: 'detailed' });
    let sent = 0;
    for (let r = 0; r < rounds; r++) {
      for (const how of ['fetch', 'xhr']) {
        await page.evaluate(`globalThis.upload('${how}', ${count}, ${BODY_BYTES})`);
        sent += count;
        labels.push(`${how} (${sent} sent)`);
        await cdp.send('Tracing.requestMemoryDump', { deterministic: true, levelOfDetail: 'detailed' });
      }
    }
    await cdp.send('Tracing.end');
    await complete;
    report(events, labels);
  } finally {
    await browser.close();
    server.close();
  }
}

/** The page's renderer: the one renderer whose dumps have a Blink heap and whose name is not WebUI. */
function report(events: TraceEvent[], labels: string[]): void {
  const names = new Map<number, string>();
  for (const e of events) if (e.ph === 'M' && e.name === 'process_name') names.set(e.pid, String(e.args?.name));
  const dumps = events.filter((e) => e.ph === 'v' && Object.keys(e.args?.dumps?.allocators ?? {}).length > 0);
  const size = (e: TraceEvent, key: string) =>
    Number.parseInt(e.args?.dumps?.allocators?.[key]?.attrs?.size?.value ?? '0', 16) / 1e6;
  const pids = [...new Set(dumps.map((d) => d.pid))].filter(
    (pid) =>
      names.get(pid)?.includes('--type=renderer') &&
      !names.get(pid)?.includes('top-chrome') &&
      dumps.some((d) => d.pid === pid && size(d, 'blink_gc') > 0),
  );
  const rows: Record<string, number | string>[] = [];
  for (const pid of pids) {
    const mine = dumps.filter((d) => d.pid === pid).sort((a, b) => a.ts - b.ts);
    mine.forEach((d, i) => {
      rows.push({
        after: labels[i] ?? '?',
        bufferMb: +size(d, 'partition_alloc/allocated_objects/partitions/buffer').toFixed(2),
        blinkGcMb: +size(d, 'blink_gc').toFixed(2),
        v8Mb: +size(d, 'v8').toFixed(2),
      });
    });
  }
  console.table(rows);
  console.log(JSON.stringify({ bench: 'devtools-upload-retention', bodyBytes: BODY_BYTES, rows }));
}

main().catch((err) => {
  console.error(`devtools-upload-retention: ${(err as Error).message}`);
  process.exit(1);
});
