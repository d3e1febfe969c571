"""Child of the spawn tests: writes MSG to the inherited accelerated socket FD, then closes it
(giving back the reference its parent counted for it). Exits 3 if the write fails: under
slipstream the fd behind it is an unconnected kernel socket, so the message can only arrive if
the child took the socket over from the stack."""
import os
import sys

fd, msg = int(sys.argv[1]), sys.argv[2].encode() + b"\n"
try:
    done = 0
    while done < len(msg):
        done += os.write(fd, msg[done:])
    os.close(fd)
except OSError as e:
    print(f"spawn_child: write to fd {fd} failed: {e}", file=sys.stderr)
    sys.exit(3)
