// The entry of `tabswarm worker` (bin/tabswarm.js imports it after registering tsx's loader): register the
// module hook that gives Node the same `peerjs` build Vite gives the tabs (module-hooks.js), install the
// browser globals (node-globals.ts) before PeerJS loads (it checks for RTCPeerConnection once, at load),
// then run the command (cli.ts). The training threads register their own hooks (trainer-entry.js).
import { register } from 'node:module';

register('./module-hooks.js', import.meta.url);
const { installNodeGlobals } = await import('./node-globals.ts');
installNodeGlobals();
const { main } = await import('./cli.ts');
await main(process.argv);
