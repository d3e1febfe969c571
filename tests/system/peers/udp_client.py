"""Kernel UDP client for the echo tests: sends N datagrams of random sizes to HOST:PORT with a
window of outstanding requests, verifies every reply byte for byte, resends what timed out, and
prints one JSON line: {"ok": .., "bad": .., "resent": .., "dup": .., "seconds": ..}.

    udp_client.py HOST PORT COUNT MINSIZE MAXSIZE [WINDOW] [SEED]
"""
import json
import os
import random
import socket
import sys
import time


def main():
    host, port, count, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    window = int(sys.argv[6]) if len(sys.argv) > 6 else 32
    rnd = random.Random(int(sys.argv[7]) if len(sys.argv) > 7 else 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.settimeout(0.5)
    pending, done = {}, set()
    ok = bad = resent = dup = 0
    seq = 0
    t0 = time.time()
    deadline = t0 + 600

    def payload(n, size):
        # A 4-byte sequence number, then random bytes: a reply is matched and checked whole.
        return n.to_bytes(4, "big") + os.urandom(max(0, size - 4))

    while (seq < count or pending) and time.time() < deadline:
        while seq < count and len(pending) < window:
            size = rnd.randint(lo, hi)
            d = payload(seq, size) if size >= 4 else seq.to_bytes(4, "big")[4 - size:] if size else b""
            # Datagrams under 4 bytes cannot carry the number; they are checked by exact content.
            pending[seq] = d
            s.sendto(d, (host, port))
            seq += 1
        try:
            r, _ = s.recvfrom(70000)
        except socket.timeout:
            for k, d in pending.items():
                s.sendto(d, (host, port))
                resent += 1
            continue
        if len(r) >= 4:
            k = int.from_bytes(r[:4], "big")
        else:
            k = next((k for k, d in pending.items() if d == r), None)
            if k is None:
                dup += 1
                continue
        if k in pending:
            if pending[k] == r:
                ok += 1
                done.add(k)
                del pending[k]
            else:
                bad += 1
                del pending[k]
        elif k in done:
            dup += 1
        else:
            bad += 1
    print(json.dumps({"ok": ok, "bad": bad, "resent": resent, "dup": dup, "missing": len(pending) + (count - seq),
                      "seconds": round(time.time() - t0, 2)}))


if __name__ == "__main__":
    main()
