/**
 * Changing the rate and loss of a running scene's access links, where tools/netbed/netbed.ts put them:
 * the benches that shape links mid-run (bench:sync's measured window, bench:net's lossy-link table)
 * share it.
 */
import type { LinkProfile } from '../../tools/netbed/netbed';
import type { Scene } from '../../tools/netbed/scene';

/**
 * Puts `link`'s rate and loss on every access link of the scene: the tbf qdisc on the home's and the
 * router's TUN device (`tc qdisc change`) and a random drop in the router's forward chain (the scene may
 * start without loss; the rule is inserted here, and replaced or removed by the next call). The delay
 * line keeps its delay.
 */
export function shapeAccessLinks(scene: Scene, link: LinkProfile): void {
  const burst = Math.max(3200, Math.round((link.rateMbit * 1e6) / 8 / 1000) * 4); // as netbed's configureHome
  for (const home of scene.bed.homes) {
    for (const ns of [home.ns, home.router]) {
      const qdiscs = scene.bed.run(ns, 'tc', ['qdisc', 'show']);
      const dev = /qdisc tbf \S+ dev (\S+) root/.exec(qdiscs)?.[1];
      if (!dev) throw new Error(`no tbf qdisc in ${ns}: ${qdiscs}`);
      const tbf = ['rate', `${link.rateMbit}mbit`, 'burst', String(burst), 'latency', '200ms'];
      scene.bed.run(ns, 'tc', ['qdisc', 'change', 'dev', dev, 'root', 'tbf', ...tbf]);
    }
    // Any loss rule this function or netbed inserted before goes first (found by its handle).
    const chain = scene.bed.run(home.router, 'nft', ['-a', 'list', 'chain', 'ip', 'netbed', 'forwarding']);
    for (const m of chain.matchAll(/numgen random .* drop # handle (\d+)/g))
      scene.bed.run(home.router, 'nft', ['delete', 'rule', 'ip', 'netbed', 'forwarding', 'handle', m[1]]);
    const lossPerMyriad = Math.round(link.lossPercent * 100);
    if (lossPerMyriad > 0)
      scene.bed.run(home.router, 'nft', [
        `insert rule ip netbed forwarding numgen random mod 10000 < ${lossPerMyriad} drop`,
      ]);
  }
}
