/**
 * `--local-workers N`: N headless workers (`tabswarm worker`, headless/) started beside the coordinator as
 * child processes, one worker each, for a one-command demo or a machine that trains on its own GPU with no
 * browser. The coordinator never loads their code: it starts `bin/tabswarm.js worker` by path, as it forks
 * the verifier, and they join over the loopback like any volunteer (WebSocket, PeerJS, HTTP).
 *
 * Shutdown (Ctrl-C): each gets SIGTERM and says goodbye before it exits; the coordinator closes after them
 * (or after `stopMs`, when the stragglers are killed), so their goodbyes reach a coordinator still running.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { swiftshaderEnv } from '../../node/gpu-env';

export const TABSWARM_BIN = resolve(import.meta.dirname, '../../bin/tabswarm.js');
export const MAX_LOCAL_WORKERS = 64;

/**
 * The per-address defences (socket gate: 64 sockets, 60 hellos a minute per client address by default)
 * with room for `count` local workers, which all come from the loopback address and each open two sockets
 * (the control channel and PeerJS's) and say hello at every reconnect: what an operator did not set
 * explicitly is raised to fit them, never lowered.
 */
export function capsForLocalWorkers(
  count: number,
  given: { maxSocketsPerAddress?: number; joinsPerMinute?: number },
): { maxSocketsPerAddress?: number; joinsPerMinute?: number } {
  if (count === 0) return given;
  return {
    maxSocketsPerAddress: given.maxSocketsPerAddress ?? Math.max(64, 2 * count + 64),
    joinsPerMinute: given.joinsPerMinute ?? Math.max(60, 4 * count + 60),
  };
}

export type LocalWorkersLog = (level: 'info' | 'warn', text: string) => void;

export class LocalWorkers {
  private readonly children: { name: string; child: ChildProcess; exited: Promise<void> }[] = [];

  /** Start `count` workers on the coordinator at `url`; their output goes to this process's, prefixed. */
  constructor(url: string, count: number, log: LocalWorkersLog, bin = TABSWARM_BIN) {
    for (let i = 1; i <= count; i++) {
      const name = `local-${i}`;
      const child = spawn(process.execPath, [bin, 'worker', '--url', url, '--name', name, '--quiet'], {
        env: { ...process.env, ...swiftshaderEnv(process.env) },
        stdio: ['ignore', 'inherit', 'inherit'],
      });
      const exited = new Promise<void>((done) =>
        child.once('exit', (code, signal) => {
          if (code !== 0) log('warn', `headless worker ${name} exited (${signal ?? code})`);
          done();
        }),
      );
      this.children.push({ name, child, exited });
    }
    log('info', `started ${count} headless worker${count === 1 ? '' : 's'} (local-1..local-${count}) on ${url}`);
  }

  /** SIGTERM to each (they say goodbye), then wait for them; after `stopMs` the rest are killed. */
  async stop(stopMs = 5000): Promise<void> {
    const running = this.children.filter((c) => c.child.exitCode === null && c.child.signalCode === null);
    for (const c of running) c.child.kill('SIGTERM');
    const timer = setTimeout(() => {
      for (const c of running) c.child.kill('SIGKILL');
    }, stopMs);
    await Promise.all(running.map((c) => c.exited));
    clearTimeout(timer);
  }
}
