/**
 * A tiny dedicated worker that posts a tick every `periodMs` (set by the page's first message).
 *
 * Why: the coordinator client sends heartbeats from a main-thread `setInterval`. In a hidden tab
 * Chrome runs main-thread timers at most once a second, and after 5 minutes hidden it runs chained
 * timers (a `setInterval` is one) only once a minute unless the page uses WebRTC — a waiting tab has
 * no peer connection yet, and a one-minute gap is far past the coordinator's 3 × heartbeatMs. Timers
 * in a dedicated worker are not throttled that way, and the page handles a worker's message as an
 * ordinary task, so each tick lets the page send a heartbeat on time in the background too.
 */
let timer: ReturnType<typeof setInterval> | undefined;

self.onmessage = (ev: MessageEvent<{ periodMs: number } | 'stop'>) => {
  if (timer !== undefined) clearInterval(timer);
  timer = undefined;
  if (ev.data === 'stop') return;
  const period = Math.max(50, Math.floor(ev.data.periodMs));
  timer = setInterval(() => self.postMessage('tick'), period);
};
