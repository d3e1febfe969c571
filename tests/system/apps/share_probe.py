"""Asks the process serving a stack's rendezvous name for the stack, TRIES times, as whoever runs
it (the tests run it as another user), and prints JSON: how many answers carried fds, and the
first fd's target when one did (it should never)."""
import json
import os
import socket
import struct
import sys
import time

name, tries = sys.argv[1], int(sys.argv[2])
got, answered, targets = 0, 0, []
for _ in range(tries):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(2.0)
    try:
        s.connect("\0" + name)
        msg, anc, flags, _ = s.recvmsg(4096, socket.CMSG_SPACE(64 * 4))
    except (OSError, socket.timeout):
        s.close()
        time.sleep(0.05)
        continue
    if msg:
        answered += 1
    fds = []
    for lvl, typ, data in anc:
        if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    if fds:
        got += 1
        targets.append(os.readlink(f"/proc/self/fd/{fds[0]}"))
        for f in fds:
            os.close(f)
    s.close()
    time.sleep(0.05)
print(json.dumps({"tries": tries, "answered": answered, "got_fds": got, "targets": targets[:3]}))
