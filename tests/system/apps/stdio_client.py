"""Kernel-side peer of test_stdio.py (host a): one connection per mode, in order, to a server
that answers lines (tests/prog/stdio_server.c).
  stdio_client.py ADDR PORT TIMEOUT JSON   JSON: [[mode, [line, ...], how], ...]
Sends each connection's lines at once ("pipeline"), or each after the answer to the one before
("lockstep"), or at once and then shuts its side down ("halfclose"); reads until EOF or TIMEOUT
seconds of silence. Prints JSON {mode: received text, or {"timeout": text so far}};
it stops at the first timeout (the server is stuck there) or error."""
import json
import socket
import sys


def main():
    addr, port, timeout, plan = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
    got = {}
    for mode, lines, how in plan:
        chunks = []
        try:
            s = socket.create_connection((addr, port), timeout=timeout)
            if how == "lockstep":
                # a stream open for update must not read ahead of what it answers (glibc seeks
                # between reading and writing, which a socket refuses): one line at a time
                for i, line in enumerate(lines[:-1]):
                    s.sendall(line.encode())
                    while b"".join(chunks).count(b"\n") <= i:
                        b = s.recv(1 << 16)
                        if not b:
                            break
                        chunks.append(b)
                lines = lines[-1:]
            s.sendall("".join(lines).encode())
            if how == "halfclose":
                s.shutdown(socket.SHUT_WR)
            while True:
                b = s.recv(1 << 16)
                if not b:
                    break
                chunks.append(b)
        except socket.timeout:
            got[mode] = {"timeout": b"".join(chunks).decode(errors="replace")}
            break
        except OSError as e:
            got[mode] = {"error": str(e), "got": b"".join(chunks).decode(errors="replace")}
            break
        s.close()
        got[mode] = b"".join(chunks).decode(errors="replace")
    print(json.dumps(got))


if __name__ == "__main__":
    main()
