"""Kernel-side client for asyncio_echo.py: CONNS concurrent connections, each sending MSGS
messages of random size 1..MAXSIZE (seeded) and checking that exactly the same bytes come back.
Prints one JSON line: conns, msgs, bytes, bad (connections that failed or saw wrong bytes), seconds."""
import asyncio
import json
import random
import sys
import time


async def one(host, port, k, msgs, maxsize, seed, res):
    rnd = random.Random(seed * 100003 + k)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        for _ in range(msgs):
            msg = rnd.randbytes(rnd.randint(1, maxsize))
            writer.write(msg)
            await writer.drain()
            back = await asyncio.wait_for(reader.readexactly(len(msg)), 60)
            if back != msg:
                res["bad"] += 1
                res["errors"].append(f"conn {k}: {len(msg)} bytes came back different")
                break
            res["msgs"] += 1
            res["bytes"] += len(msg)
        writer.close()
        await writer.wait_closed()
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
        res["bad"] += 1
        res["errors"].append(f"conn {k}: {type(e).__name__}: {e}")


async def main(host, port, conns, msgs, maxsize, seed):
    res = {"conns": conns, "msgs": 0, "bytes": 0, "bad": 0, "errors": []}
    t0 = time.monotonic()
    await asyncio.gather(*(one(host, port, k, msgs, maxsize, seed, res) for k in range(conns)))
    res["seconds"] = round(time.monotonic() - t0, 3)
    res["errors"] = res["errors"][:5]
    print(json.dumps(res))


if __name__ == "__main__":
    a = sys.argv
    asyncio.run(main(a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), int(a[6]) if len(a) > 6 else 1))
