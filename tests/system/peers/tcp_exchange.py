"""A kernel TCP exchange for coexistence tests.
    tcp_exchange.py server PORT        echo server, runs until killed
    tcp_exchange.py client HOST PORT N sends N random blocks, checks each echo, prints "tcp ok N"
"""
import os
import socket
import sys
import threading


def serve(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(16)
    print("listening", flush=True)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def echo(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)


def client(host, port, n):
    c = socket.create_connection((host, port), timeout=10)
    for i in range(n):
        d = os.urandom(1 + (i * 7919) % 20000)
        c.sendall(d)
        got = b""
        while len(got) < len(d):
            part = c.recv(len(d) - len(got))
            if not part:
                sys.exit("tcp: connection closed early")
            got += part
        if got != d:
            sys.exit("tcp: echo differs")
    print("tcp ok", n)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
