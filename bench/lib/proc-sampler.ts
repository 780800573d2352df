/**
 * What bench:soak reads of the machine's processes through Linux's /proc: this process's descendants
 * (coordinator, Chromium and its renderers and GPU process) with their RSS and CPU ticks, the machine's
 * CPU ticks, and nice values (its own, and every descendant thread's put back at each sample).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import type { CpuTicks, Sample } from './soak-stats';

export interface ProcInfo {
  pid: number;
  ppid: number;
  cmdline: string;
  rssMb: number;
  /** utime + stime + cutime + cstime, in USER_HZ ticks. */
  cpuTicks: number;
}

/** utime, stime, cutime, cstime: fields 14–17 of /proc/PID/stat, i.e. 11–14 after the state field. */
function cpuTicksOf(fieldsAfterName: readonly string[]): number {
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(fieldsAfterName[i] ?? 0), 0);
}

function readProc(pid: number): ProcInfo | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ppid = Number(fields[1]);
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
    return { pid, ppid, cmdline, rssMb: rssKb / 1024, cpuTicks: cpuTicksOf(fields) };
  } catch {
    return null; // exited while we looked
  }
}

/** Every live descendant of `root`. */
export function descendants(root: number): ProcInfo[] {
  const all = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((d) => readProc(Number(d)))
    .filter((p): p is ProcInfo => p !== null);
  const children = new Map<number, ProcInfo[]>();
  for (const p of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out: ProcInfo[] = [];
  const stack = [root];
  while (stack.length > 0) {
    for (const c of children.get(stack.pop()!) ?? []) {
      out.push(c);
      stack.push(c.pid);
    }
  }
  return out;
}

/**
 * RSS and CPU ticks now, of `procs` (this process's descendants, read once per sample). Renderers started
 * before the tabs opened (`ignore`: Chromium's own pages) are left out, and of the rest the `tabs` largest
 * are taken (a browser context also starts an idle renderer or two of ~75-160 MB; a training tab's
 * renderer, which also runs its worker, is well above them), by pid.
 */
export function rssNow(
  procs: readonly ProcInfo[],
  coordinatorPid: number,
  ignore: ReadonlySet<number>,
  tabs: number,
): Omit<Sample, 't' | 'steps'> {
  const self = readProc(process.pid);
  const renderers = procs
    .filter((p) => p.cmdline.includes('--type=renderer') && !ignore.has(p.pid))
    .sort((a, b) => b.rssMb - a.rssMb)
    .slice(0, tabs)
    .sort((a, b) => a.pid - b.pid);
  const gpu = procs.find((p) => p.cmdline.includes('--type=gpu-process'));
  const coordinator = procs.find((p) => p.pid === coordinatorPid);
  return {
    coordinatorMb: coordinator?.rssMb ?? 0,
    renderersMb: renderers.map((r) => r.rssMb),
    gpuMb: gpu?.rssMb ?? 0,
    cpu: machineTicks((self?.cpuTicks ?? 0) + procs.reduce((sum, p) => sum + p.cpuTicks, 0)),
  };
}

/** The machine's CPU ticks from /proc/stat's `cpu` line: user nice system idle iowait irq softirq steal. */
function machineTicks(ours: number): CpuTicks | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
    const busy = user + nice + system + irq + softirq + (steal || 0);
    return { ours, machineBusy: busy, machineTotal: busy + idle + (iowait || 0) };
  } catch {
    return undefined; // not Linux: the wall-clock ratio stands alone
  }
}

/**
 * Sets this process's nice value (children spawned from now on inherit it) and returns the one it
 * had; on refusal (raising priority needs root) it warns and returns null.
 */
export function setOwnNice(nice: number): number | null {
  const before = getPriority();
  try {
    setPriority(nice);
    return before;
  } catch (err) {
    console.error(`soak: cannot set nice ${nice} (${(err as Error).message}); running at ${before}`);
    return null;
  }
}

/**
 * Chromium sets its renderers' nice values itself (0 for a page, 5 for its own UI pages) instead of
 * keeping the one they inherited, so the sampler sets every descendant's back at each sample. Linux
 * keeps a nice value per thread (a tab's training worker and SwiftShader's threads are threads of
 * their processes), so it sets each thread's, from /proc/PID/task.
 */
export function renice(procs: readonly ProcInfo[], nice: number): void {
  for (const p of procs) {
    let tids: number[];
    try {
      tids = readdirSync(`/proc/${p.pid}/task`).map(Number);
    } catch {
      continue; // exited while we looked
    }
    for (const tid of tids) {
      try {
        if (getPriority(tid) !== nice) setPriority(tid, nice);
      } catch {
        // exited while we looked
      }
    }
  }
}
