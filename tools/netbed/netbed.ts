/**
 * A virtual internet on one Linux machine, for tests, benches and `tabswarm swarm --netbed`: network
 * namespaces made at run time, torn down afterwards (also on failure, SIGINT and SIGTERM). Root only.
 *
 *   home i (100.64.i.2/24) ══ access link ══ NAT router i (100.64.i.1 | 203.0.113.(10+i)) ── bridge ── public
 *                                                                        coordinator 203.0.113.2, TURN 203.0.113.3
 *
 * - The "public" segment is a bridge in its own namespace holding the coordinator's and the TURN
 *   server's addresses (RFC 5737 TEST-NET-3). Each NAT router's WAN side is a veth on that bridge.
 * - Each volunteer is a "home" namespace (RFC 6598 shared address space) behind its own NAT router
 *   namespace: nft `masquerade` (endpoint-independent mapping: Linux keeps the source port when it
 *   can) or `masquerade random,fully-random` (a new random port per connection, so the mapping
 *   depends on the destination: a symmetric NAT, which defeats STUN and forces TURN).
 * - The access link (home ↔ router) is a TUN pair forwarded by `tun-link.py` after the profile's
 *   delay ± jitter (this kernel has no netem); the rate is a `tbf` qdisc on each TUN device (the
 *   sending side of each direction), loss an nft `numgen random` drop in the router's forward path.
 * - No default route anywhere and no link to the machine's root namespace: the homes route only to
 *   203.0.113.0/24, the routers know only their two subnets. The test process reaches the public
 *   namespace through a Unix socket (`unixProxy`), which crosses namespaces without any route.
 *
 * Names carry a per-run prefix (pid + random), so parallel runs cannot collide.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface LinkProfile {
  /** One-way delay of the access link, ms (each direction). */
  delayMs: number;
  /** Uniform ± jitter around the delay, ms. */
  jitterMs: number;
  /** Rate of each direction, Mbit/s. */
  rateMbit: number;
  /** Packet loss of each direction, percent. */
  lossPercent: number;
}

export type NatKind = 'endpoint-independent' | 'symmetric';

export interface HomeSpec {
  nat: NatKind;
  link: LinkProfile;
}

export interface Home {
  index: number;
  spec: HomeSpec;
  /** The volunteer's namespace. */
  ns: string;
  /** Its NAT router's namespace. */
  router: string;
  /** The volunteer's address (inside the home). */
  ip: string;
  /** The router's public address. */
  wanIp: string;
}

export const PUBLIC_PREFIX = '203.0.113';
export const COORDINATOR_IP = `${PUBLIC_PREFIX}.2`;
export const TURN_IP = `${PUBLIC_PREFIX}.3`;
const MAX_HOMES = 200;

export class NetbedError extends Error {}

/** Parses `"DELAY JITTER RATE LOSS"`, e.g. `"40ms 0ms 20mbit 0%"` (units optional: ms, mbit, %). */
export function parseLinkProfile(text: string): LinkProfile {
  const parts = text.trim().split(/\s+/);
  const fail = (why: string): never => {
    throw new NetbedError(`--link "${text}": ${why} (expected "DELAY JITTER RATE LOSS", e.g. "40ms 5ms 20mbit 1%")`);
  };
  if (parts.length !== 4) fail('four values');
  const num = (raw: string, unit: RegExp, what: string, min: number, max: number): number => {
    const value = Number(raw.replace(unit, ''));
    if (!Number.isFinite(value) || value < min || value > max) fail(`${what} ${raw} is not in ${min}..${max}`);
    return value;
  };
  const link = {
    delayMs: num(parts[0], /ms$/i, 'delay', 0, 5000),
    jitterMs: num(parts[1], /ms$/i, 'jitter', 0, 5000),
    rateMbit: num(parts[2], /mbit(\/s)?$/i, 'rate', 0.1, 10_000),
    lossPercent: num(parts[3], /%$/, 'loss', 0, 50),
  };
  if (link.jitterMs > link.delayMs) fail('jitter must not exceed the delay');
  return link;
}

/** Why this process cannot build a test bed (not root, a tool missing), or null when it can. */
export function netbedUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'the network test bed needs root (network namespaces, NAT, tc)';
  if (!existsSync('/dev/net/tun')) return 'the network test bed needs /dev/net/tun (TUN devices for its delay lines)';
  for (const tool of ['ip', 'nft', 'tc', 'python3']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `the network test bed needs \`${tool}\` (apt-get install iproute2 nftables python3)`;
    }
  }
  return null;
}

const LINK_SCRIPT = join(import.meta.dirname, 'tun-link.py');
const live = new Set<Netbed>();
let exitHooked = false;

function hookExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  process.on('exit', () => {
    for (const bed of live) bed.closeSync();
  });
  // `on`, not `once`: Ctrl-C signals the whole process group, so under tsx (or npm) this process gets
  // SIGINT twice, from the terminal and forwarded by its parent. With `once` the first removed the only
  // listener, Node gave the signal back its default action, and the second killed the process in the
  // middle of `closeSync`, leaving namespaces behind (seen: one router namespace of three). The listener
  // stays until the teardown is done, then the signal is raised again to end the process as it asked.
  let tearingDown = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    const onSignal = () => {
      if (tearingDown) return;
      tearingDown = true;
      for (const bed of live) bed.closeSync();
      process.off(signal, onSignal);
      process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

export class Netbed {
  readonly prefix: string;
  readonly publicNs: string;
  readonly homes: Home[] = [];
  readonly dir: string;
  private readonly namespaces: string[] = [];
  private readonly children = new Set<ChildProcess>();
  private linkProcess: ChildProcess | null = null;
  private closed = false;

  private constructor(private readonly log: (line: string) => void) {
    this.prefix = `nb${(process.pid % 1296).toString(36)}${randomBytes(2).toString('hex').slice(0, 3)}`;
    this.publicNs = `${this.prefix}-pub`;
    this.dir = mkdtempSync(join(tmpdir(), `tabswarm-${this.prefix}-`));
  }

  /** Builds the public segment and one NATed home per spec. Throws NetbedError (after tearing down) on failure. */
  static async create(homes: HomeSpec[], opts: { log?: (line: string) => void } = {}): Promise<Netbed> {
    const why = netbedUnavailable();
    if (why) throw new NetbedError(why);
    if (homes.length < 1 || homes.length > MAX_HOMES)
      throw new NetbedError(`1..${MAX_HOMES} homes, not ${homes.length}`);
    const bed = new Netbed(opts.log ?? (() => {}));
    live.add(bed);
    hookExit();
    try {
      await bed.build(homes);
      return bed;
    } catch (error) {
      bed.closeSync();
      throw error;
    }
  }

  private ip(args: string[]): void {
    try {
      execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (error) {
      const stderr = String((error as { stderr?: Buffer }).stderr ?? '').trim();
      throw new NetbedError(`ip ${args.join(' ')}: ${stderr || (error as Error).message}`);
    }
  }

  /** Runs `cmd` in namespace `ns` to completion (stdin from `input`). */
  run(ns: string, cmd: string, args: string[], input?: string): string {
    try {
      return execFileSync('ip', ['netns', 'exec', ns, cmd, ...args], {
        input,
        stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      }).toString();
    } catch (error) {
      const stderr = String((error as { stderr?: Buffer }).stderr ?? '').trim();
      throw new NetbedError(`${cmd} ${args.join(' ')} in ${ns}: ${stderr || (error as Error).message}`);
    }
  }

  private addNamespace(name: string): void {
    this.ip(['netns', 'add', name]);
    this.namespaces.push(name);
    this.ip(['-n', name, 'link', 'set', 'lo', 'up']);
  }

  private async build(specs: HomeSpec[]): Promise<void> {
    const p = this.prefix;
    this.addNamespace(this.publicNs);
    this.ip(['-n', this.publicNs, 'link', 'add', 'br0', 'type', 'bridge']);
    this.ip(['-n', this.publicNs, 'link', 'set', 'br0', 'up']);
    for (const host of [COORDINATOR_IP, TURN_IP])
      this.ip(['-n', this.publicNs, 'addr', 'add', `${host}/24`, 'dev', 'br0']);

    const linkSpecs: string[] = [];
    specs.forEach((spec, index) => {
      const home: Home = {
        index,
        spec,
        ns: `${p}-h${index}`,
        router: `${p}-r${index}`,
        ip: `100.64.${index}.2`,
        wanIp: `${PUBLIC_PREFIX}.${10 + index}`,
      };
      this.homes.push(home);
      this.addNamespace(home.ns);
      this.addNamespace(home.router);
      // WAN: router ↔ public bridge.
      this.ip([
        'link',
        'add',
        `${p}w${index}`,
        'netns',
        home.router,
        'type',
        'veth',
        'peer',
        'name',
        `${p}b${index}`,
        'netns',
        this.publicNs,
      ]);
      this.ip(['-n', this.publicNs, 'link', 'set', `${p}b${index}`, 'master', 'br0', 'up']);
      this.ip(['-n', home.router, 'addr', 'add', `${home.wanIp}/24`, 'dev', `${p}w${index}`]);
      this.ip(['-n', home.router, 'link', 'set', `${p}w${index}`, 'up']);
      linkSpecs.push(`${p}a${index},${p}l${index},${spec.link.delayMs},${spec.link.jitterMs}`);
    });

    // The access links: TUN pairs made by the delay line, then moved into home and router.
    await this.startLinks(linkSpecs);
    for (const home of this.homes) this.configureHome(home);
    this.log(`netbed ${p}: public ${this.publicNs}, ${this.homes.length} home(s)`);
  }

  private startLinks(specs: string[]): Promise<void> {
    const child = spawn('python3', [LINK_SCRIPT, ...specs], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.linkProcess = child;
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new NetbedError('the delay line (tun-link.py) did not start in 10 s')),
        10_000,
      );
      createInterface({ input: child.stdout! }).once('line', (line) => {
        clearTimeout(timer);
        if (line === 'ready') resolve();
        else reject(new NetbedError(`tun-link.py: ${line}`));
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new NetbedError(`tun-link.py exited (${code}): ${stderr.trim().split('\n').pop()}`));
      });
    });
  }

  private configureHome(home: Home): void {
    const p = this.prefix;
    const i = home.index;
    const inside = `${p}a${i}`;
    const outside = `${p}l${i}`;
    const { link, nat } = home.spec;
    this.ip(['link', 'set', inside, 'netns', home.ns]);
    this.ip(['link', 'set', outside, 'netns', home.router]);
    this.ip(['-n', home.ns, 'addr', 'add', `${home.ip}/24`, 'dev', inside]);
    this.ip(['-n', home.ns, 'link', 'set', inside, 'up']);
    this.ip(['-n', home.ns, 'route', 'add', `${PUBLIC_PREFIX}.0/24`, 'dev', inside]);
    this.ip(['-n', home.router, 'addr', 'add', `100.64.${i}.1/24`, 'dev', outside]);
    this.ip(['-n', home.router, 'link', 'set', outside, 'up']);
    this.run(home.router, 'sysctl', ['-qw', 'net.ipv4.ip_forward=1']);
    // Rate: a token bucket on the sending device of each direction (burst ≥ one 1 ms of data, ≥ 2 MTU).
    const burst = Math.max(3200, Math.round((link.rateMbit * 1e6) / 8 / 1000) * 4);
    for (const [ns, dev] of [
      [home.ns, inside],
      [home.router, outside],
    ]) {
      this.ip(['-n', ns, 'link', 'set', dev, 'txqueuelen', '1000']);
      const tbf = ['rate', `${link.rateMbit}mbit`, 'burst', String(burst), 'latency', '200ms'];
      this.run(ns, 'tc', ['qdisc', 'add', 'dev', dev, 'root', 'tbf', ...tbf]);
    }
    const lossPerMyriad = Math.round(link.lossPercent * 100);
    const masquerade = nat === 'symmetric' ? 'masquerade random,fully-random' : 'masquerade';
    this.run(
      home.router,
      'nft',
      ['-f', '-'],
      [
        'table ip netbed {',
        '  chain post { type nat hook postrouting priority srcnat; policy accept;',
        `    oifname "${p}w${i}" ${masquerade}`,
        '  }',
        // Unsolicited packets to the router itself are dropped before conntrack confirms an entry for
        // them: otherwise a peer's early hole-punching packet would claim the public port the home's
        // own outgoing flow wants, the masquerade would pick another port, and two endpoint-
        // independent NATs would fall back to TURN (real home routers drop such packets too).
        '  chain input { type filter hook input priority filter; policy accept;',
        `    iifname "${p}w${i}" ct state new drop`,
        '  }',
        '  chain forwarding { type filter hook forward priority filter; policy drop;',
        lossPerMyriad > 0 ? `    numgen random mod 10000 < ${lossPerMyriad} drop` : '',
        `    iifname "${outside}" oifname "${p}w${i}" accept`,
        `    iifname "${p}w${i}" oifname "${outside}" ct state established,related accept`,
        '  }',
        '}',
      ].join('\n'),
    );
  }

  /** The delay line's process id (tun-link.py), for benches that measure its CPU time. */
  get delayLinePid(): number | undefined {
    return this.linkProcess?.pid;
  }

  /** Starts `cmd` inside namespace `ns`; killed at `close()`. */
  spawn(ns: string, cmd: string, args: string[], opts: SpawnOptions = {}): ChildProcess {
    if (this.closed) throw new NetbedError('netbed closed');
    const child = spawn('ip', ['netns', 'exec', ns, cmd, ...args], { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    return child;
  }

  /** A shell script that runs `executable` inside `ns` (for Playwright's `executablePath`). */
  wrapper(ns: string, executable: string): string {
    const path = join(this.dir, `in-${ns}.sh`);
    writeFileSync(path, `#!/bin/sh\nexec ip netns exec '${ns}' '${executable}' "$@"\n`);
    chmodSync(path, 0o755);
    return path;
  }

  /**
   * A Unix socket in this process's file system that leads to `host:port` inside `ns` (a tiny Node
   * relay started in that namespace): how the test process, which has no route into the test bed,
   * reaches the coordinator. Pass it as `socketPath` to http(s).request.
   */
  async unixProxy(ns: string, host: string, port: number): Promise<string> {
    const socketPath = join(this.dir, `proxy-${host}-${port}.sock`);
    const script =
      "const net=require('node:net');const [,sock,host,port]=process.argv;" +
      'net.createServer((c)=>{const s=net.connect(Number(port),host);c.pipe(s).pipe(c);' +
      "c.on('error',()=>s.destroy());s.on('error',()=>c.destroy());}).listen(sock,()=>console.log('ready'));" +
      "process.stdin.on('end',()=>process.exit(0));process.stdin.resume();";
    const child = this.spawn(ns, process.execPath, ['-e', script, socketPath, host, String(port)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    await new Promise<void>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once('line', () => resolve());
      child.once('exit', (code) => reject(new NetbedError(`unix proxy into ${ns} exited (${code})`)));
    });
    return socketPath;
  }

  /** Stops every process started here, deletes every namespace (and with them every link). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    const exits = [...this.children].map(
      (child) =>
        new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', () => resolve()))),
    );
    for (const child of this.children) child.kill('SIGTERM');
    await Promise.race([Promise.all(exits), new Promise((r) => setTimeout(r, 3000))]);
    this.closeSync();
  }

  /** The synchronous teardown (for `exit` and signal handlers). */
  closeSync(): void {
    if (this.closed) return;
    this.closed = true;
    live.delete(this);
    for (const child of this.children) child.kill('SIGKILL');
    this.linkProcess?.kill('SIGKILL');
    for (const ns of this.namespaces) {
      try {
        // Anything still running inside (a browser's helpers) goes with its namespace.
        const pids = execFileSync('ip', ['netns', 'pids', ns]).toString().split(/\s+/).filter(Boolean);
        for (const pid of pids) process.kill(Number(pid), 'SIGKILL');
      } catch {
        // namespace already gone or process exited
      }
      try {
        execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
      } catch {
        // already deleted
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
