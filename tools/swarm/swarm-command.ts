/**
 * `tabswarm swarm (--url URL | --job FILE [--dataset DIR] [--dist DIR]) --workers N [--duration S] [--seed X]
 *  [--close-every S] [--crash-every S] [--hang-every S] [--hang-for S] [--join-every S] [--throttle KBPS]
 *  [--max-tabs N] [--warmup S] [--json]`
 *
 * `--url`: load-test a running coordinator (with whatever job it runs). `--job FILE`: the swarm starts
 * its own coordinator (own-coordinator.ts) running that job file, e.g. local steps; the two exclude each
 * other (a file cannot change a running coordinator's job). The job file is validated like
 * `tabswarm coordinator --job` before anything starts.
 *
 * Output: the live progress line on stderr (rewritten in place on a terminal, a line every few seconds
 * otherwise); at the end the report table (stdout, or stderr with --json) and with --json exactly one
 * line `{"swarm": {...}}` on stdout. Exit 0 on PASS, 1 on FAIL (audit broken, no progress) and on
 * anything that stops the run from starting (bad flags, no coordinator, no Chromium) — the latter with
 * one line on stderr. Ctrl-C ends the chaos early and still reports; a second Ctrl-C exits at once.
 */
import type { Command } from 'commander';
import { loadJobFile, StartupError } from '../../coordinator/config/startup-config';
import { CoordinatorUnreachableError } from './coordinator-api';
import type { OwnCoordinator } from './own-coordinator';
import { NoChromiumError, SwarmError } from './swarm-errors';
import {
  jobProblem,
  parseSwarmOptions,
  SwarmOptionsError,
  withCoordinatorUrl,
  type RawSwarmOptions,
  type SwarmOptions,
} from './swarm-options';
import { formatReportTable, type SwarmReport } from './swarm-report';

/** Non-TTY progress: one line this often. */
const PLAIN_PROGRESS_MS = 5000;

function writeOut(stream: NodeJS.WriteStream, text: string): Promise<void> {
  return new Promise((resolve) => stream.write(text, () => resolve()));
}

function progressWriter(stream: NodeJS.WriteStream): { update(line: string): void; end(): void } {
  if (stream.isTTY) {
    let shown = false;
    return {
      update(line) {
        const width = stream.columns ? stream.columns - 1 : 200;
        stream.write(`\r${line.slice(0, width)}\x1b[K`);
        shown = true;
      },
      end() {
        if (shown) stream.write('\n');
        shown = false;
      },
    };
  }
  let last = -Infinity;
  return {
    update(line) {
      const now = performance.now();
      if (now - last < PLAIN_PROGRESS_MS) return;
      last = now;
      stream.write(`${line}\n`);
    },
    end() {},
  };
}

/** Runs the swarm as the CLI does; resolves with the exit code (it does not exit). */
export async function swarmMain(raw: RawSwarmOptions): Promise<number> {
  let report: SwarmReport;
  const progress = progressWriter(process.stderr);
  const interrupt = new AbortController();
  let interrupts = 0;
  const onSigint = () => {
    interrupts += 1;
    if (interrupts > 1) process.exit(130);
    interrupt.abort();
  };
  process.on('SIGINT', onSigint);
  process.on('SIGTERM', onSigint);
  process.on('SIGHUP', onSigint);
  let own: OwnCoordinator | null = null;
  const log = (line: string) => {
    progress.end();
    process.stderr.write(`${line}\n`);
  };
  try {
    let options = parseSwarmOptions(raw);
    // A bad job file is one line, before the seed line and before anything starts.
    const job = options.ownCoordinator ? checkedJob(options, options.ownCoordinator.jobFile) : null;
    if (options.seedDrawn)
      process.stderr.write(
        `tabswarm swarm: seed ${options.seed} (pass --seed ${options.seed} to replay this schedule)\n`,
      );
    if (job) {
      const { startOwnCoordinator } = await import('./own-coordinator');
      const { dataset, dist } = options.ownCoordinator!;
      own = await startOwnCoordinator(job, dataset, log, dist);
      options = withCoordinatorUrl(options, own.url);
    }
    // Loaded on use: playwright-core takes seconds to import, and `tabswarm coordinator` never needs it.
    const { runSwarm } = await import('./run-swarm');
    report = await runSwarm(options, { progress: (line) => progress.update(line), log }, interrupt.signal);
    progress.end();
    const table = `${formatReportTable(report)}\n`;
    if (options.json) {
      await writeOut(process.stderr, table);
      await writeOut(process.stdout, `${JSON.stringify({ swarm: report })}\n`);
    } else {
      await writeOut(process.stdout, table);
    }
    return report.ok ? 0 : 1;
  } catch (error) {
    progress.end();
    const known =
      error instanceof SwarmOptionsError ||
      error instanceof StartupError ||
      error instanceof CoordinatorUnreachableError ||
      error instanceof NoChromiumError ||
      error instanceof SwarmError;
    const message = known ? (error as Error).message : `unexpected error: ${(error as Error).stack ?? error}`;
    await writeOut(process.stderr, `tabswarm swarm: ${message}\n`);
    return 1;
  } finally {
    await own?.close().catch((error: Error) => log(`tabswarm swarm: closing its coordinator: ${error.message}`));
    process.off('SIGINT', onSigint);
    process.off('SIGTERM', onSigint);
    process.off('SIGHUP', onSigint);
  }
}

/** The job file of `--job`, validated as `tabswarm coordinator --job` does, and fit for the swarm's tabs. */
function checkedJob(options: SwarmOptions, file: string) {
  const job = loadJobFile(file);
  const problem = jobProblem(options, job);
  if (problem) throw new SwarmOptionsError(`--job ${file}: ${problem}`);
  return job;
}

export function registerSwarmCommand(program: Command): Command {
  return program
    .command('swarm')
    .description(
      'Load-test a coordinator with headless Chromium tabs and a seeded chaos schedule (close, crash, hang, join, throttle).',
    )
    .option('--url <url>', 'the coordinator, e.g. http://127.0.0.1:8080 (a query string is passed on to the tabs)')
    .option(
      '--job <file>',
      'instead of --url: start a coordinator in this process that runs this job file (e.g. local steps), on 127.0.0.1 with a temporary data dir; with --netbed: the job of its coordinator (default a small tiny-mlp job)',
    )
    .option(
      '--dataset <dir>',
      "with --job or --netbed: the dataset folder of the swarm's coordinator (default as tabswarm coordinator)",
    )
    .option('--dist <dir>', 'with --job: the built web app its coordinator serves (default dist/)')
    .option('--workers <n>', 'Chromium tabs open at the start (default 2, or 0 with --headless-workers)')
    .option(
      '--headless-workers <n>',
      'headless workers (tabswarm worker, a process each) open at the start beside the tabs; joins past --workers tabs open headless workers',
    )
    .option('--duration <s>', 'seconds of chaos, counted from the first committed step', '60')
    .option('--seed <x>', 'seed of the chaos schedule (default: random, printed)')
    .option('--close-every <s>', 'close a tab (pagehide → goodbye) about every S seconds')
    .option('--crash-every <s>', 'crash a renderer (CDP Page.crash) about every S seconds')
    .option('--hang-every <s>', 'hang a tab (CDP Debugger.pause) about every S seconds')
    .option('--hang-for <s>', 'seconds a hung tab stays hung before it is resumed', '10')
    .option('--join-every <s>', 'open a new tab about every S seconds')
    .option('--throttle <kbps>', "throttle one tab's HTTP/WebSocket traffic to KBPS kbit/s")
    .option('--max-tabs <n>', 'joins never make more tabs than this (default: max(2·workers, workers+2))')
    .option('--warmup <s>', 'seconds to wait for the first committed step', '180')
    .option('--json', 'print one JSON line {"swarm": {...}} on stdout (the table goes to stderr)')
    .option(
      '--netbed',
      'root: each tab and headless worker in its own NATed home of a network test bed, with its own HTTPS coordinator and coturn (the chaos flags work there too, --throttle excepted)',
    )
    .option('--nat <kind>', 'with --netbed: endpoint-independent, symmetric or mixed (default mixed)')
    .option('--link <profile>', 'with --netbed: access link "DELAY JITTER RATE LOSS", e.g. "40ms 5ms 20mbit 1%"')
    .action(async (flags: RawSwarmOptions & { netbed?: boolean }) => {
      // Loaded on use, like run-swarm: the test bed is only for --netbed.
      const code = flags.netbed
        ? await (await import('../netbed/netbed-swarm')).netbedSwarmMain(flags)
        : await swarmMain(flags);
      // Playwright's pipes can keep the loop alive a moment after the browser closed: leave now.
      process.exit(code);
    });
}
