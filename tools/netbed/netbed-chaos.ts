/**
 * The members of a test-bed swarm and the chaos schedule played on them (`tabswarm swarm --netbed` with
 * the chaos flags and `--headless-workers`). Each member lives in a NATed home of its own: a Chromium tab
 * (scene.ts `openTab`) or a headless worker (`tabswarm worker`, run through `ip netns exec HOME`, trusting
 * the scene's test CA), with the same faults as in the plain swarm: close (a tab's `pagehide`, a worker's
 * SIGTERM: goodbye), crash (CDP `Page.crash`, SIGKILL), hang (CDP `Debugger.pause`, SIGSTOP) and resume.
 * A join opens the next home: a tab while fewer than `--workers` tabs are live, else a headless worker.
 *
 * The schedule is the plain swarm's pure `chaosSchedule` (same seed, same events), so it has one home per
 * member it can ever open: the initial ones and one per join it holds.
 */
import type { CDPSession } from 'playwright-core';
import { type ChaosEvent, chaosSchedule } from '../swarm/chaos-schedule';
import { type HeadlessProcess, spawnHeadless } from '../swarm/headless-workers';
import type { Scene, SceneTab } from './scene';

export interface NetbedChaos {
  seed: number;
  closeEvery: number;
  crashEvery: number;
  hangEvery: number;
  joinEvery: number;
  hangFor: number;
}

export interface HeadlessMemberOptions {
  args?: string[];
  onLine?(line: string): void;
}

type Member =
  | { name: string; kind: 'tab'; home: number; tab: SceneTab; cdp: CDPSession | null; fate: string }
  | { name: string; kind: 'headless'; home: number; process: HeadlessProcess; fate: string };

export interface FiredNetbedEvent extends ChaosEvent {
  outcome: 'done' | 'skipped' | 'failed';
  note?: string;
  /**
   * For a crash or a close, when `NetbedSwarmOptions.faultCosts` asks: the world as the coordinator's
   * status showed it just before the fault (the last commit, each member's last reported step and share),
   * and when it was fired (ms since the epoch, the coordinator's clock on this machine).
   */
  before?: WorldBeforeFault;
  atMs?: number;
}

/** What bench:scale reads of the world just before a fault to tell the work in flight. */
export interface WorldBeforeFault {
  step: number;
  members: { peerId: string; lastStep: number; share: number }[];
}

/** The events of a run (the initial members are `t1`…`tN`, joins `tN+1`…). */
export function netbedSchedule(chaos: NetbedChaos, members: number, durationS: number): ChaosEvent[] {
  return chaosSchedule({ ...chaos, workers: members, duration: durationS, maxTabs: members * 2 });
}

/** Homes the run needs: one per member it may open. */
export function homesNeeded(members: number, schedule: readonly ChaosEvent[]): number {
  return members + schedule.filter((e) => e.kind === 'join').length;
}

export class NetbedMembers {
  readonly members: Member[] = [];
  private nextHome = 0;

  constructor(
    private readonly scene: Scene,
    private readonly tabBudget: number,
    private readonly log: (line: string) => void,
    /** Extra `tabswarm worker` flags for every headless member, and a reader of each line it prints. */
    private readonly headless: HeadlessMemberOptions = {},
  ) {}

  get live(): Member[] {
    return this.members.filter((m) => m.fate === 'open');
  }

  /** Open member `name` in the next home: a tab within the tab budget, else a headless worker. */
  async open(name: string, kind?: 'tab' | 'headless'): Promise<Member> {
    const home = this.nextHome++;
    const liveTabs = this.live.filter((m) => m.kind === 'tab').length;
    const as = kind ?? (liveTabs < this.tabBudget ? 'tab' : 'headless');
    if (as === 'tab') {
      const member: Member = { name, kind: 'tab', home, tab: await this.scene.openTab(home), cdp: null, fate: 'open' };
      this.members.push(member);
      return member;
    }
    const process = spawnHeadless({
      url: this.scene.url,
      name,
      args: ['--quiet', ...(this.headless.args ?? [])],
      prefix: ['ip', 'netns', 'exec', this.scene.bed.homes[home]!.ns],
      env: { NODE_EXTRA_CA_CERTS: this.scene.certs.caCert },
      onLine: (line) => {
        if (/^\S+ error /.test(line)) this.log(`${name}: ${line}`);
        this.headless.onLine?.(line);
      },
    });
    const member: Member = { name, kind: 'headless', home, process, fate: 'open' };
    void process.exited.then(() => {
      if (member.fate === 'open') member.fate = 'exited';
    });
    this.members.push(member);
    return member;
  }

  private async cdp(m: Extract<Member, { kind: 'tab' }>): Promise<CDPSession> {
    m.cdp ??= await m.tab.page.context().newCDPSession(m.tab.page);
    return m.cdp;
  }

  /** Apply one event of the schedule. */
  async fire(event: ChaosEvent): Promise<FiredNetbedEvent> {
    if (event.kind === 'join') {
      const m = await this.open(event.tab);
      return { ...event, outcome: 'done', note: `${m.kind} in home ${m.home}` };
    }
    const m = this.members.find((x) => x.name === event.tab);
    if (!m) return { ...event, outcome: 'skipped', note: 'no such member' };
    if (event.kind === 'resume') {
      if (m.fate !== 'hung') return { ...event, outcome: 'skipped', note: `member is ${m.fate}` };
      if (m.kind === 'tab') await (await this.cdp(m)).send('Debugger.resume');
      else m.process.resume();
      m.fate = 'open';
      return { ...event, outcome: 'done' };
    }
    if (event.kind === 'throttle') return { ...event, outcome: 'skipped', note: 'the test bed shapes links (--link)' };
    if (m.fate !== 'open') return { ...event, outcome: 'skipped', note: `member is ${m.fate}` };
    if (this.live.length === 1) return { ...event, outcome: 'skipped', note: 'the last live member' };
    await this.fault(m, event.kind);
    return { ...event, outcome: 'done', note: m.kind };
  }

  private async fault(m: Member, kind: 'close' | 'crash' | 'hang'): Promise<void> {
    if (m.kind === 'headless') {
      if (kind === 'close') m.process.goodbye();
      else if (kind === 'crash') m.process.crash();
      else m.process.hang();
    } else if (kind === 'close') {
      await m.tab.page.close({ runBeforeUnload: true });
    } else if (kind === 'crash') {
      (await this.cdp(m)).send('Page.crash').catch(() => undefined);
    } else {
      const cdp = await this.cdp(m);
      await cdp.send('Debugger.enable');
      await cdp.send('Debugger.pause');
    }
    m.fate = kind === 'close' ? 'closed' : kind === 'crash' ? 'crashed' : 'hung';
  }

  /** End every headless worker (tabs close with the scene). */
  async close(): Promise<void> {
    for (const m of this.members) if (m.kind === 'headless') m.process.crash();
    await Promise.all(this.members.flatMap((m) => (m.kind === 'headless' ? [m.process.exited] : [])));
  }
}
