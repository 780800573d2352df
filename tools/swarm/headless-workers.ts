/**
 * Headless workers (`tabswarm worker`, headless/) as child processes of a developer tool: the swarm mixes
 * them with Chromium tabs, bench:scale runs dozens, the tests kill them. Each process runs `--count` workers
 * (1 by default, so a fault hits exactly one worker, as a tab's does):
 *
 * - goodbye: SIGTERM (every worker of the process says goodbye, then it exits), as a closed tab;
 * - crash: SIGKILL, nothing said (the coordinator sees the sockets drop), as a crashed renderer;
 * - hang: SIGSTOP, then SIGCONT after a while (heartbeats and collectives stop), as a frozen tab.
 *
 * SwiftShader's environment (node/gpu-env.ts) is passed here, so the worker does not re-execute itself and
 * the pid signalled is the workers' own. `prefix` runs the command through another (e.g. `ip netns exec NS`
 * for the test bed, tools/netbed).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { swiftshaderEnv } from '../../node/gpu-env';

const REPO_ROOT = resolve(import.meta.dirname, '../..');
export const TABSWARM_BIN = join(REPO_ROOT, 'bin/tabswarm.js');

export interface HeadlessSpawnOptions {
  /** The coordinator's URL as a volunteer opens it. */
  url: string;
  name: string;
  count?: number;
  /** Extra `tabswarm worker` flags. */
  args?: string[];
  /** A command (and its arguments) to run the worker through, e.g. `['ip', 'netns', 'exec', 'h1']`. */
  prefix?: string[];
  env?: Record<string, string | undefined>;
  /** Called with each line the process prints (stdout and stderr). */
  onLine?(line: string): void;
  /** Open stdin for control lines (`--control`: leave NAME, crash NAME, join NAME) sent with `send`. */
  control?: boolean;
}

export interface HeadlessProcess {
  readonly name: string;
  readonly child: ChildProcess;
  /** Resolves when the process has exited (code, or the signal that ended it). */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The last lines it printed (at most 200). */
  readonly lines: readonly string[];
  goodbye(): void;
  crash(): void;
  hang(): void;
  resume(): void;
  /** A control line to the process (with `control`). */
  send(line: string): void;
  readonly alive: boolean;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export function spawnHeadless(o: HeadlessSpawnOptions): HeadlessProcess {
  const command = [
    process.execPath,
    TABSWARM_BIN,
    'worker',
    '--url',
    o.url,
    '--name',
    o.name,
    '--count',
    String(o.count ?? 1),
    ...(o.control ? ['--control'] : []),
    ...(o.args ?? []),
  ];
  const [file, ...args] = [...(o.prefix ?? []), ...command];
  const child = spawn(file!, args, {
    cwd: REPO_ROOT,
    env: { ...process.env, ...swiftshaderEnv(process.env), ...o.env },
    stdio: [o.control ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const lines: string[] = [];
  let exitedNow = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.once('exit', (code, signal) => {
      exitedNow = true;
      live.delete(child);
      done({ code, signal });
    }),
  );
  for (const stream of [child.stdout!, child.stderr!]) {
    let partial = '';
    stream.on('data', (chunk: Buffer) => {
      const parts = (partial + chunk.toString()).split('\n');
      partial = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        if (lines.length > 200) lines.shift();
        o.onLine?.(line);
      }
    });
  }
  const signal = (s: NodeJS.Signals) => {
    if (!exitedNow) child.kill(s);
  };
  return {
    name: o.name,
    child,
    exited,
    lines,
    goodbye: () => signal('SIGTERM'),
    crash: () => signal('SIGKILL'),
    hang: () => signal('SIGSTOP'),
    resume: () => signal('SIGCONT'),
    send: (line) => {
      if (!exitedNow) child.stdin?.write(`${line}\n`);
    },
    get alive() {
      return !exitedNow;
    },
  };
}
