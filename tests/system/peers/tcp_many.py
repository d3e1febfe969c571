"""Many concurrent TCP connections against an echo server (kernel client side).

    tcp_many.py HOST PORT [--conns 1000] [--rounds 3] [--min 1] [--max 32768] [--seed 1]
                [--timeout 60]

Each round opens --conns connections at once; each one sends a random block (size in
[--min, --max]), reads the echo back, compares it, and closes. Prints one JSON line:
    {"conns": N, "rounds": R, "ok": n, "failed": n, "bytes": n, "round_seconds": [...],
     "errors": [first few error strings]}
Exit 0 when every connection of every round succeeded, else 1.
"""

import argparse
import asyncio
import json
import random
import resource
import sys
import time


async def one(host, port, data, timeout):
    async def run():
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(data)
            await writer.drain()
            got = await reader.readexactly(len(data))
            if got != data:
                diff = next(i for i in range(len(data)) if got[i] != data[i])
                raise ValueError(f"echo differs at byte {diff} of {len(data)}")
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
    await asyncio.wait_for(run(), timeout)


async def round_(host, port, blocks, timeout):
    res = await asyncio.gather(*(one(host, port, b, timeout) for b in blocks), return_exceptions=True)
    return [r for r in res if r is not None]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min", type=int, default=1)
    ap.add_argument("--max", type=int, default=32768)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per connection")
    a = ap.parse_args(argv)

    # One fd per connection: the usual soft limit of 1024 is too low for 1000 plus Python's own.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.conns + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY
                                                    else want, hard))
    rng = random.Random(a.seed)
    ok = failed = total = 0
    errors, secs = [], []
    for _ in range(a.rounds):
        blocks = [rng.randbytes(rng.randint(a.min, a.max)) for _ in range(a.conns)]
        t0 = time.monotonic()
        errs = asyncio.run(round_(a.host, a.port, blocks, a.timeout))
        secs.append(round(time.monotonic() - t0, 3))
        failed += len(errs)
        ok += a.conns - len(errs)
        total += sum(len(b) for b in blocks)
        for e in errs[:5]:
            if len(errors) < 10:
                errors.append(f"{type(e).__name__}: {e}")
    print(json.dumps({"conns": a.conns, "rounds": a.rounds, "ok": ok, "failed": failed, "bytes": total,
                      "round_seconds": secs, "errors": errors}), flush=True)
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
