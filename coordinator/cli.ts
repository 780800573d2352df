/**
 * `tabswarm coordinator [--port 8080] [--host 127.0.0.1] [--data-dir ./.tabswarm] [--job job.json]
 *  [--dataset DIR] [--admin-token T] [--dist DIR] [--local-workers N] [network flags: net-flags.ts]
 *  [trust flags: trust-flags.ts]`
 * `--local-workers N` starts N headless workers (`tabswarm worker`) as child processes beside it
 * (runtime/local-workers.ts; this file never imports headless/); chaos runs with Chromium tabs come from
 * the swarm tool (`npm run swarm`, tools/swarm/cli.ts), which this file never imports either.
 *
 * Every way the coordinator cannot start (bad job file, no dataset, port in use, unwritable data dir)
 * ends with one line on stderr naming the cause and the fix, and exit code 1: the person reading it is
 * starting a server, not debugging one. SIGINT/SIGTERM let the local workers say goodbye, then close
 * sockets, flush the store and exit 0.
 */
import { Command, InvalidArgumentError } from 'commander';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { addNetOptions, netConfigFrom, type NetFlags } from './config/net-flags';
import { startCoordinator, type RunningCoordinator } from './start';
import { withVerifyDefault } from '../core/training/job';
import {
  DEFAULT_DATASET_DIR,
  DEFAULT_DIST_DIR,
  loadJobDataset,
  loadJobFile,
  verifyLine,
  StartupError,
} from './config/startup-config';
import { addTrustFlags, trustOptionsOf, type TrustFlags } from './config/trust-flags';
import { capsForLocalWorkers, LocalWorkers, MAX_LOCAL_WORKERS } from './runtime/local-workers';

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new InvalidArgumentError('a port is an integer in 0..65535');
  return port;
}

function parseLocalWorkers(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > MAX_LOCAL_WORKERS)
    throw new InvalidArgumentError(`an integer in 0..${MAX_LOCAL_WORKERS}`);
  return n;
}

interface CoordinatorFlags extends TrustFlags, NetFlags {
  port: number;
  host: string;
  dataDir: string;
  job?: string;
  dataset?: string;
  adminToken?: string;
  dist: string;
  localWorkers: number;
}

async function runCoordinator(flags: CoordinatorFlags): Promise<void> {
  const net = netConfigFrom(flags);
  const join = flags.join ?? 'open';
  const job = withVerifyDefault(loadJobFile(flags.job), join);
  const dataset = await loadJobDataset(job, flags.dataset);
  const tokenGiven = flags.adminToken ?? process.env.TABSWARM_ADMIN_TOKEN;
  const adminToken = tokenGiven || randomBytes(18).toString('base64url');
  let coordinator: RunningCoordinator;
  try {
    coordinator = await startCoordinator({
      host: flags.host,
      port: flags.port,
      dataDir: resolve(flags.dataDir),
      job,
      dataset,
      adminToken,
      distDir: resolve(flags.dist),
      trust: { ...trustOptionsOf(flags), ...capsForLocalWorkers(flags.localWorkers, flags) },
      ice: net.ice,
      tls: net.tls,
      publicUrl: net.publicUrl,
      trustProxy: net.trustProxy,
    });
  } catch (error) {
    throw startupErrorOf(error, flags);
  }
  const info = coordinator.info;
  console.log(
    `tabswarm coordinator listening on ${coordinator.url}/ (admin: ${coordinator.url}/admin/, run ${info.runId}${info.resumed ? ' resumed' : ''}, ` +
      `step ${info.step}, dataset ${dataset.name} ${info.datasetSize} ${dataset.unit}, data dir ${resolve(flags.dataDir)})`,
  );
  console.log(`${net.summary}${net.publicUrl ? `; volunteers open ${net.publicUrl}/` : ''}`);
  if (!tokenGiven) console.log(`admin token: ${adminToken} (printed once; pass --admin-token to choose one)`);
  console.log(verifyLine(job, join));
  const local =
    flags.localWorkers > 0
      ? new LocalWorkers(coordinator.url, flags.localWorkers, (level, text) =>
          (level === 'warn' ? console.warn : console.log)(`tabswarm coordinator: ${text}`),
        )
      : null;
  closeOnSignals(coordinator, local);
}

/** The one line an operator sees for a start-up failure the coordinator can name; other errors pass through. */
function startupErrorOf(error: unknown, flags: CoordinatorFlags): unknown {
  const err = error as NodeJS.ErrnoException;
  if (err.code === 'EADDRINUSE')
    return new StartupError(
      `port ${flags.port} on ${flags.host} is already in use: stop what holds it, or pass --port N (--port 0 picks a free one)`,
    );
  if (err.code === 'EACCES' && err.syscall === 'listen')
    return new StartupError(`not allowed to listen on ${flags.host}:${flags.port}: pick a port above 1023 with --port`);
  if (err.code === 'EADDRNOTAVAIL')
    return new StartupError(`cannot listen on ${flags.host}: no such local address (see --host)`);
  if (err.code === 'ERESUME') return new StartupError(err.message);
  if (['EACCES', 'EROFS', 'ENOTDIR', 'EEXIST', 'SQLITE_CANTOPEN'].includes(err.code ?? ''))
    return new StartupError(`data dir ${flags.dataDir} is not writable (${err.code}): pass --data-dir DIR`);
  return error;
}

/**
 * Ctrl-C / SIGTERM: the local workers say goodbye, then the coordinator closes (sockets, then the store); a
 * second signal exits at once.
 */
function closeOnSignals(coordinator: RunningCoordinator, local: LocalWorkers | null): void {
  let closing = false;
  const shutdown = (signal: string) => {
    // A second signal: the operator wants out now. The store is consistent after every transaction.
    if (closing) process.exit(1);
    closing = true;
    console.log(`tabswarm coordinator: ${signal}, closing`);
    (local?.stop() ?? Promise.resolve())
      .then(() => coordinator.close())
      .then(() => process.exit(0))
      .catch((error) => {
        console.error(`tabswarm: error while closing: ${oneLine((error as Error).message)}`);
        process.exit(1);
      });
  };
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
}

function buildProgram(): Command {
  const program = new Command('tabswarm');
  program.description('Elastic data-parallel training in browser tabs.').showHelpAfterError(false);
  const coordinator = program.command('coordinator');
  addTrustFlags(coordinator);
  coordinator
    .description('Serve the web app, the control WebSocket, PeerJS signaling and the REST API on one port.')
    .option('--port <port>', 'TCP port (0: any free port)', parsePort, 8080)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--data-dir <dir>', 'folder for the SQLite store and checkpoints', './.tabswarm')
    .option('--job <file>', 'job JSON file (default: Fashion-MNIST mlp, see core/training/job.ts)')
    .option(
      '--dataset <dir>',
      `folder with the four IDX files (default: $TABSWARM_DATASET, then ${DEFAULT_DATASET_DIR}); a job with a text or tensors dataset names its own files`,
    )
    .option(
      '--admin-token <token>',
      'bearer token for /api/admin (default: $TABSWARM_ADMIN_TOKEN, else random, printed once)',
    )
    .option('--dist <dir>', 'the built web app to serve', DEFAULT_DIST_DIR)
    .option(
      '--local-workers <n>',
      `start N headless workers beside the coordinator (tabswarm worker; 0..${MAX_LOCAL_WORKERS})`,
      parseLocalWorkers,
      0,
    );
  addNetOptions(coordinator).action(async (flags: CoordinatorFlags) => {
    await runCoordinator(flags);
  });
  return program;
}

async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (error) {
    const message =
      error instanceof StartupError ? error.message : `unexpected error: ${(error as Error).stack ?? error}`;
    process.stderr.write(`tabswarm: ${error instanceof StartupError ? oneLine(message) : message}\n`);
    process.exit(1);
  }
}

await main(process.argv);
