/**
 * Where the CPU goes during one allreduce on the test bed (bench:net `--cpu`, issue 24's question for
 * the broadband profile): the CPU time of every thread of this process's descendants (the Chromiums with
 * their renderer, network and GPU processes, the coordinator, the delay line), and the time each spent
 * runnable but waiting for a core (/proc/…/schedstat: other processes had it), read from /proc before
 * and after, grouped by process kind and thread name; and a CDP `Profiler` profile of one tab's main
 * thread (the JavaScript: ours, the browser's idle and program time, garbage collection).
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { descendants } from './proc-sampler';

export interface CpuRow {
  /** `renderer`, `network`, `gpu`, `browser`, `delay line`, `coordinator`, `other`. */
  process: string;
  thread: string;
  /** Share of one core over the measured wall time. */
  cores: number;
  /** Time runnable but not running (waiting for a core), over the wall time, summed over the threads. */
  waiting: number;
}

export interface CpuBreakdown {
  wallMs: number;
  /** Threads by CPU, largest first, summed over processes of a kind. */
  threads: CpuRow[];
  /** The profiled tab's main thread: share of its samples per category (idle, program, GC, JS by script). */
  mainThread: Array<{ what: string; share: number }>;
}

function kindOf(cmdline: string): string {
  if (cmdline.includes('tun-link.py')) return 'delay line';
  if (cmdline.includes('coordinator/cli.ts')) return 'coordinator';
  if (!/chrom/i.test(cmdline)) return 'other';
  if (cmdline.includes('--type=renderer')) return 'renderer';
  if (cmdline.includes('--type=gpu-process')) return 'gpu';
  if (cmdline.includes('--utility-sub-type=network')) return 'network';
  if (cmdline.includes('--type=')) return 'other chromium';
  return 'browser';
}

/** Nanoseconds running and waiting on a run queue (/proc/…/schedstat) per `kind/thread name`, over this process's descendants. */
function threadTimes(): Map<string, { runNs: number; waitNs: number }> {
  const out = new Map<string, { runNs: number; waitNs: number }>();
  for (const p of descendants(process.pid)) {
    const kind = kindOf(p.cmdline);
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${p.pid}/task`);
    } catch {
      continue;
    }
    for (const tid of tids) {
      try {
        const name = readFileSync(`/proc/${p.pid}/task/${tid}/comm`, 'utf8').trim().replace(/\d+$/, '');
        const [runNs, waitNs] = readFileSync(`/proc/${p.pid}/task/${tid}/schedstat`, 'utf8').split(' ').map(Number);
        const key = `${kind}/${name}`;
        const sum = out.get(key) ?? { runNs: 0, waitNs: 0 };
        out.set(key, { runNs: sum.runNs + runNs, waitNs: sum.waitNs + waitNs });
      } catch {
        // exited while we looked
      }
    }
  }
  return out;
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  hitCount?: number;
}

/** Share of samples per category of a CDP profile: (idle), (program), (garbage collector), else the script's file. */
function categories(nodes: readonly ProfileNode[]): Array<{ what: string; share: number }> {
  const hits = new Map<string, number>();
  let total = 0;
  for (const n of nodes) {
    const count = n.hitCount ?? 0;
    if (count === 0) continue;
    const name = n.callFrame.functionName;
    const what = name.startsWith('(') ? name : `JS ${n.callFrame.url.split('/').pop() || '(anonymous)'}`;
    hits.set(what, (hits.get(what) ?? 0) + count);
    total += count;
  }
  return [...hits.entries()]
    .map(([what, n]) => ({ what, share: total > 0 ? n / total : 0 }))
    .sort((a, b) => b.share - a.share);
}

/** Runs `work` (one allreduce) with the thread sampler on and `profiled`'s main thread under the CDP profiler. */
export async function cpuBreakdown(profiled: Page, work: () => Promise<unknown>): Promise<CpuBreakdown> {
  const cdp = await profiled.context().newCDPSession(profiled);
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 1000 });
  const before = threadTimes();
  const t0 = performance.now();
  await cdp.send('Profiler.start');
  await work();
  const { profile } = (await cdp.send('Profiler.stop')) as unknown as { profile: { nodes: ProfileNode[] } };
  const wallMs = performance.now() - t0;
  const after = threadTimes();
  await cdp.detach();
  const threads: CpuRow[] = [];
  for (const [key, t] of after) {
    const was = before.get(key) ?? { runNs: 0, waitNs: 0 };
    const run = t.runNs - was.runNs;
    if (run <= 0) continue;
    const [proc, thread] = key.split('/');
    threads.push({ process: proc, thread, cores: run / 1e6 / wallMs, waiting: (t.waitNs - was.waitNs) / 1e6 / wallMs });
  }
  threads.sort((a, b) => b.cores - a.cores);
  return { wallMs, threads, mainThread: categories(profile.nodes) };
}

export function printCpuBreakdown(label: string, b: CpuBreakdown): void {
  const total = b.threads.reduce((sum, t) => sum + t.cores, 0);
  process.stdout.write(
    `\nCPU during one allreduce, ${label}: ${(b.wallMs / 1000).toFixed(1)} s, ${total.toFixed(2)} cores in all (this machine has 2)\nprocess         thread                      cores  waiting for a core\n`,
  );
  for (const t of b.threads.slice(0, 16))
    process.stdout.write(
      `${t.process.padEnd(16)}${t.thread.padEnd(28)}${t.cores.toFixed(3).padStart(5)}  ${t.waiting.toFixed(3).padStart(18)}\n`,
    );
  process.stdout.write('profiled tab, main thread (CDP Profiler samples):\n');
  for (const c of b.mainThread.slice(0, 8))
    process.stdout.write(`  ${c.what.padEnd(40)}${(c.share * 100).toFixed(1).padStart(6)} %\n`);
}
