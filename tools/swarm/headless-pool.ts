/**
 * The headless workers of a swarm (headless-workers.ts starts each as a process of its own), with the
 * faults a tab gets: close = SIGTERM (goodbye), crash = SIGKILL, hang = SIGSTOP, resume = SIGCONT.
 * Throttling is not theirs (CDP); the test bed shapes their links instead.
 *
 * A headless worker has no page to read: its reading comes from the coordinator's `/api/status`, where a
 * member of the world is found by its peer id, which starts with the worker's name (headless-worker.ts).
 * Error lines it prints and an exit the swarm did not order are kept as problems, as a tab's are.
 */
import type { StatusResponse } from '../../core/protocol/views';
import { type HeadlessProcess, spawnHeadless } from './headless-workers';
import type { SwarmMember } from './swarm-pool';
import type { TabFate, TabProblem, TabReading } from './swarm-tabs';

export class HeadlessMember implements SwarmMember {
  readonly kind = 'headless' as const;
  fate: TabFate = 'opening';
  reading: TabReading | null = null;
  readAtMs = -1;
  closedAtMs: number | null = null;

  constructor(
    readonly name: string,
    readonly process: HeadlessProcess,
    readonly openedAtMs: number,
  ) {}

  get live(): boolean {
    return this.fate === 'open' || this.fate === 'opening';
  }
}

export interface HeadlessPoolOptions {
  /** The coordinator's URL as a volunteer opens it. */
  url: string;
  /** Milliseconds since the swarm started. */
  clock: () => number;
  onProblem?: (problem: TabProblem) => void;
  /** Extra `tabswarm worker` flags. */
  args?: string[];
  /** Runs each worker through this command (the test bed: `ip netns exec HOME`), per worker name. */
  prefix?: (name: string) => string[] | undefined;
  maxProblems?: number;
}

export class HeadlessPool {
  readonly members: HeadlessMember[] = [];
  readonly problems: TabProblem[] = [];
  droppedProblems = 0;
  private readonly ordered = new Set<HeadlessMember>();

  constructor(private readonly opts: HeadlessPoolOptions) {}

  byName(name: string): HeadlessMember | undefined {
    return this.members.find((m) => m.name === name);
  }

  private problem(name: string, kind: TabProblem['kind'], text: string, expected = false): void {
    const p: TabProblem = { tab: name, atMs: Math.round(this.opts.clock()), kind, text: text.slice(0, 2000), expected };
    if (this.problems.length < (this.opts.maxProblems ?? 1000)) this.problems.push(p);
    else this.droppedProblems += 1;
    this.opts.onProblem?.(p);
  }

  /** Start the worker's process; resolves at once (it joins on its own, as a tab that loaded). */
  async open(name: string): Promise<HeadlessMember> {
    const process = spawnHeadless({
      url: this.opts.url,
      name,
      args: ['--quiet', ...(this.opts.args ?? [])],
      prefix: this.opts.prefix?.(name),
      onLine: (line) => {
        // The worker's log lines are `ISO-TIME LEVEL text`; its errors count as a tab's console errors do.
        if (/^\S+ error /.test(line)) this.problem(name, 'console', line);
      },
    });
    const member = new HeadlessMember(name, process, this.opts.clock());
    member.fate = 'open';
    this.members.push(member);
    void process.exited.then(({ code, signal }) => {
      if (this.ordered.has(member)) return;
      member.fate = code === 0 ? 'closed' : 'crashed';
      member.closedAtMs ??= this.opts.clock();
      this.problem(name, 'crash', `headless worker exited (${signal ?? code}): ${process.lines.slice(-3).join(' | ')}`);
    });
    return member;
  }

  private order(m: HeadlessMember, fate: TabFate): void {
    this.ordered.add(m);
    m.fate = fate;
    m.closedAtMs = this.opts.clock();
  }

  /** SIGTERM: the worker says goodbye and exits. */
  async close(m: HeadlessMember): Promise<void> {
    this.order(m, 'closed');
    m.process.goodbye();
    await Promise.race([m.process.exited, new Promise((r) => setTimeout(r, 10_000))]);
    m.process.crash();
  }

  /** SIGKILL: nothing said, its sockets and data channels drop. */
  async crash(m: HeadlessMember): Promise<void> {
    this.order(m, 'crashed');
    this.problem(m.name, 'crash', 'headless worker killed (ordered by the swarm)', true);
    m.process.crash();
    await m.process.exited;
  }

  /** SIGSTOP: the process stops with its sockets open; only heartbeats and collectives notice. */
  async hang(m: HeadlessMember): Promise<void> {
    m.process.hang();
    m.fate = 'hung';
  }

  async resume(m: HeadlessMember): Promise<void> {
    m.process.resume();
    m.fate = 'open';
  }

  /** Each live worker's reading from the coordinator's status (a member of the world, or not yet). */
  readFrom(status: StatusResponse): void {
    const now = this.opts.clock();
    for (const m of this.members) {
      if (!m.live) continue;
      const entry = status.world.items.find((w) => w.peerId.startsWith(`${m.name}-`));
      m.reading = {
        state: entry ? 'training' : 'connecting',
        error: null,
        samplesPerSec: entry?.throughput ?? null,
        phase: entry ? (status.state === 'training' ? 'training' : status.state) : 'waiting',
        workerId: entry?.id ?? m.reading?.workerId ?? null,
        worldSize: entry ? status.world.total : 0,
        committedStep: status.step,
        localStep: entry?.lastStep ?? 0,
        restores: 0,
        stepsComputed: 0,
      };
      m.readAtMs = now;
    }
  }

  /** Goodbye from every worker still running (hung ones are resumed first). */
  async closeAll(): Promise<void> {
    await Promise.all(
      this.members.map(async (m) => {
        if (m.fate === 'hung') await this.resume(m);
        if (m.process.alive) await this.close(m);
      }),
    );
  }
}
