"""A server whose fork children hold its accepted connections and then go away without closing
them, as redis's BGSAVE child or a crashed worker does. Run under `slipstream run`.

    fork_hold.py PORT MODE ROUNDS

Each round accepts one connection, then by MODE:
  exit: a child is forked and leaves at once with os._exit (no close); the parent sends
        "parent <n>\\n" and closes. The client must then see EOF: the child's copy is gone.
  kill: a child is forked and sleeps holding the connection; the parent sends "parent <n>\\n",
        closes its own fd, then SIGKILLs the child. The client must see EOF once the child died.
Prints "listening" when ready and "done ROUNDS" at the end."""
import os
import signal
import socket
import sys
import time

port, mode, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", port))
ls.listen(16)
print("listening", flush=True)
for n in range(rounds):
    c, _ = ls.accept()
    pid = os.fork()
    if pid == 0:
        if mode == "exit":
            os._exit(0)
        while True:
            time.sleep(1)
    if mode == "exit":
        os.waitpid(pid, 0)
    c.sendall(f"parent {n}\n".encode())
    c.close()
    if mode == "kill":
        time.sleep(0.2)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
print("done", rounds, flush=True)
