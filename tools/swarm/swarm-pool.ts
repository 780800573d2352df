/**
 * The members of a swarm, whatever they are: Chromium tabs (swarm-tabs.ts) and headless workers
 * (headless-pool.ts) behind one interface, so the chaos schedule, the monitor and the report treat them
 * alike. Which kind a new member is: the first `--workers` names are tabs, the next `--headless-workers`
 * headless; a join opens a tab while fewer than `--workers` tabs are live (the tab budget of the machine)
 * and a headless worker otherwise.
 */
import type { StatusResponse } from '../../core/protocol/views';
import type { HeadlessPool } from './headless-pool';
import type { TabFate, TabPool, TabProblem, TabReading } from './swarm-tabs';

export type MemberKind = 'tab' | 'headless';

/** One member as the run sees it (a `SwarmTab` or a `HeadlessMember`). */
export interface SwarmMember {
  readonly name: string;
  readonly kind: MemberKind;
  fate: TabFate;
  reading: TabReading | null;
  readAtMs: number;
  readonly openedAtMs: number;
  closedAtMs: number | null;
  readonly live: boolean;
}

export class MixedPool {
  private readonly tabKinds = new Map<string, MemberKind>();
  private initialLeft: { tabs: number; headless: number };

  constructor(
    private readonly tabsPool: TabPool | null,
    readonly headless: HeadlessPool,
    private readonly budget: { tabs: number; headless: number },
  ) {
    this.initialLeft = { ...budget };
  }

  get tabs(): SwarmMember[] {
    const all: SwarmMember[] = [...(this.tabsPool?.tabs ?? []), ...this.headless.members];
    return all.sort((a, b) => a.openedAtMs - b.openedAtMs);
  }

  get liveTabs(): SwarmMember[] {
    return this.tabs.filter((t) => t.live);
  }

  get problems(): TabProblem[] {
    return [...(this.tabsPool?.problems ?? []), ...this.headless.problems].sort((a, b) => a.atMs - b.atMs);
  }

  get droppedProblems(): number {
    return (this.tabsPool?.droppedProblems ?? 0) + this.headless.droppedProblems;
  }

  byName(name: string): SwarmMember | undefined {
    return this.tabsPool?.byName(name) ?? this.headless.byName(name);
  }

  /** The kind the next member named `name` gets (see the file comment). */
  kindOf(name: string): MemberKind {
    const known = this.tabKinds.get(name);
    if (known) return known;
    let kind: MemberKind;
    if (this.initialLeft.tabs > 0) {
      this.initialLeft.tabs--;
      kind = 'tab';
    } else if (this.initialLeft.headless > 0) {
      this.initialLeft.headless--;
      kind = 'headless';
    } else {
      const liveTabs = this.tabsPool?.liveTabs.length ?? 0;
      kind = this.tabsPool && liveTabs < this.budget.tabs ? 'tab' : 'headless';
    }
    this.tabKinds.set(name, kind);
    return kind;
  }

  open(name: string): Promise<SwarmMember> {
    return this.kindOf(name) === 'tab' ? this.tabsPool!.open(name) : this.headless.open(name);
  }

  close(m: SwarmMember): Promise<void> {
    return m.kind === 'tab' ? this.tabsPool!.close(m as never) : this.headless.close(m as never);
  }

  crash(m: SwarmMember): Promise<void> {
    return m.kind === 'tab' ? this.tabsPool!.crash(m as never) : this.headless.crash(m as never);
  }

  hang(m: SwarmMember): Promise<void> {
    return m.kind === 'tab' ? this.tabsPool!.hang(m as never) : this.headless.hang(m as never);
  }

  resume(m: SwarmMember): Promise<void> {
    return m.kind === 'tab' ? this.tabsPool!.resume(m as never) : this.headless.resume(m as never);
  }

  /** Throttling is a CDP feature: headless workers are not throttled (the test bed shapes their links). */
  async throttle(m: SwarmMember, kbps: number): Promise<void> {
    if (m.kind === 'tab') await this.tabsPool!.throttle(m as never, kbps);
    else throw new Error('throttle applies to Chromium tabs only (use --netbed --link for headless workers)');
  }

  /** Read every live tab, and every headless worker from the coordinator's `status`. */
  async readAll(status: StatusResponse): Promise<void> {
    this.headless.readFrom(status);
    await this.tabsPool?.readAll();
  }

  async closeAll(): Promise<void> {
    await Promise.all([this.tabsPool?.closeAll(), this.headless.closeAll()]);
  }
}
