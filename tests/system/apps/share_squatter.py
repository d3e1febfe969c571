"""Binds a stack's rendezvous name before any stack exists and answers every program that
connects with a "stack" of its own making: a memfd whose header says slipstream (magic and the
layout version given on the command line) and whose every offset and size is garbage, plus a
regular file where the AF_XDP sockets should be. Run as another user it plays the squatter of
issue 11; run as root it checks that even a trusted server's memory is checked before use.

    share_squatter.py NAME VERSION SEALED(0|1) STATEFILE

Writes one JSON line per connection to STATEFILE: the peer's pid and whether it could be sent
the fds (a peer that refuses before reading still lets sendmsg succeed, so "sent" only says that
our answer left)."""
import json
import os
import socket
import struct
import sys

name, version, sealed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"

MAGIC = 0x736c6970737472
fd = os.memfd_create("slip-squat", os.MFD_ALLOW_SEALING)
hdr = struct.pack("<QI", MAGIC, version) + b"\x7f" * (65536 - 12)
os.write(fd, hdr)
os.ftruncate(fd, 64 << 20)     # larger than any header: the check under test is the layout
if sealed:
    import fcntl
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
bogus = os.open("/proc/self/status", os.O_RDONLY)

srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
srv.bind("\0" + name)
srv.listen(16)
print("squatting", name, flush=True)
while True:
    c, _ = srv.accept()
    pid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    # One interface, one queue: memfd, link + 3 maps, one "AF_XDP socket".
    spec = f"{fd};{bogus},{bogus},{bogus},{bogus},{bogus};p0".encode() + b"\0"
    sent = True
    try:
        c.sendmsg([spec], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("6i", fd, *[bogus] * 5))])
    except OSError:
        sent = False
    c.close()
    print(json.dumps({"pid": pid, "sent": sent}), flush=True)
