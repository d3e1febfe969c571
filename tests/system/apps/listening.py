"""Shared by the test programs in this folder: a TCP listener on every address of the host,
SO_REUSEADDR as servers set it, that says "listening" on stdout once it listens (the tests
wait for that line before they start the peer)."""
import socket


def listen(port, backlog=8):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(backlog)
    print("listening", flush=True)
    return l
