"""A client with a thread per connection: THREADS threads, each with its own TCP connection to
an echo server, each sending SIZE bytes and reading the echo back ROUNDS times, either with
blocking calls (`block`) or non-blocking ones waiting in poll() on the one socket (`poll`, as
libmemcached does). Run under `slipstream run`, every thread waits on the same stack at once.

    thread_clients.py HOST PORT MODE [--threads 16] [--rounds 200] [--size 100]

Prints one JSON line: {"ok": rounds echoed intact, "errors": [...], "lat_ms": sorted per-round
times (ms, rounded), "seconds": wall time}; exit 0 when every round of every thread succeeded.
"""
import argparse
import json
import os
import select
import socket
import sys
import threading
import time


def recv_exact_block(s, n):
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            raise ConnectionError(f"EOF after {len(buf)} of {n} bytes")
        buf += d
    return buf


def recv_exact_poll(s, n, poller):
    buf = b""
    while len(buf) < n:
        if not poller.poll(10000):
            raise TimeoutError(f"poll: nothing for 10 s after {len(buf)} of {n} bytes")
        try:
            d = s.recv(n - len(buf))
        except BlockingIOError:
            continue
        if not d:
            raise ConnectionError(f"EOF after {len(buf)} of {n} bytes")
        buf += d
    return buf


def send_all_poll(s, data, poller_out):
    view = memoryview(data)
    while view:
        try:
            view = view[s.send(view):]
        except BlockingIOError:
            poller_out.poll(10000)


def worker(i, args, lat, errors, ok):
    try:
        s = socket.create_connection((args.host, args.port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if args.mode == "poll":
            s.setblocking(False)
            pin = select.poll()
            pin.register(s.fileno(), select.POLLIN)
            pout = select.poll()
            pout.register(s.fileno(), select.POLLOUT)
        mine = []
        for r in range(args.rounds):
            data = os.urandom(args.size)
            t = time.monotonic()
            if args.mode == "poll":
                send_all_poll(s, data, pout)
                got = recv_exact_poll(s, len(data), pin)
            else:
                s.sendall(data)
                got = recv_exact_block(s, len(data))
            mine.append(time.monotonic() - t)
            if got != data:
                raise ValueError(f"round {r}: the echo differs")
        s.close()
        lat.extend(mine)
        ok.append(len(mine))
    except Exception as e:  # noqa: BLE001 - reported in the JSON line
        errors.append(f"thread {i}: {type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("mode", choices=["block", "poll"])
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    lat, errors, ok = [], [], []
    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i, args, lat, errors, ok)) for i in range(args.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"ok": sum(ok), "errors": errors[:5], "seconds": round(time.monotonic() - t0, 3),
                      "lat_ms": [round(x * 1000, 2) for x in sorted(lat)]}))
    return 0 if not errors and sum(ok) == args.threads * args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
