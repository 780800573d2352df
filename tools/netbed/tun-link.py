#!/usr/bin/env python3
"""The test bed's delay line: user-space links between network namespaces.

This kernel has no netem, so delay and jitter are made here. For each link given as
`NAME_A,NAME_B,DELAY_MS,JITTER_MS` it opens two TUN devices (no packet info) and forwards every
packet read from one to the other after DELAY +- JITTER ms (uniform), keeping the order of packets
(a packet never overtakes an earlier one: TCP on a jittery link does not see reordering). The caller
moves the devices into namespaces (`ip link set NAME netns NS`: the open file stays valid) and
configures them; rate and loss come from tc (tbf) and nft on those devices.

Prints `ready` once every device exists; exits when stdin closes (the parent died) or on SIGTERM.
Only the Python standard library; one select loop for all links.
"""
import fcntl
import heapq
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main(specs):
    peer = {}  # fd -> (out fd, delay s, jitter s)
    for spec in specs:
        a, b, delay, jitter = spec.split(",")
        fa, fb = open_tun(a), open_tun(b)
        d, j = float(delay) / 1000, float(jitter) / 1000
        peer[fa] = (fb, d, j)
        peer[fb] = (fa, d, j)
    last_due = {fd: 0.0 for fd in peer}  # per direction (keyed by the output fd): FIFO order
    queue = []  # (due, seq, out fd, packet)
    seq = 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    stdin = sys.stdin.fileno()
    rlist = list(peer) + [stdin]
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, packet = heapq.heappop(queue)
            try:
                os.write(out, packet)
            except OSError:
                pass  # device down or its queue full: the packet is lost, as on a wire
        timeout = max(0.0, queue[0][0] - now) if queue else 1.0
        ready, _, _ = select.select(rlist, [], [], timeout)
        now = time.monotonic()
        for fd in ready:
            if fd == stdin:
                if not os.read(stdin, 4096):
                    return
                continue
            out, d, j = peer[fd]
            for _ in range(64):  # drain a burst, bounded so one busy link cannot starve the others
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    break
                due = max(now + d + random.uniform(-j, j), last_due[out])
                last_due[out] = due
                seq += 1
                heapq.heappush(queue, (due, seq, out, packet))


if __name__ == "__main__":
    main(sys.argv[1:])
