"""For test_apps.py: an HTTP/1.1 keep-alive server on epoll that answers each request with two
send() calls, the headers and then the body (as nginx does without tcp_nopush), the body being
the request's path repeated to 600 bytes. argv: port. Runs until killed."""
import select
import socket
import sys

from listening import listen

l = listen(int(sys.argv[1]), 128)
l.setblocking(False)
ep = select.epoll()
ep.register(l.fileno(), select.EPOLLIN)
conns = {}      # fd -> [socket, request bytes, bytes waiting to be sent]


def answer(c, path):
    body = (path * (600 // len(path) + 1))[:600]
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n" % len(body)
    return [head, body]


def push(fd):
    c, _, out = conns[fd]
    while out:
        try:
            n = c.send(out[0])
        except BlockingIOError:
            break
        if n < len(out[0]):
            out[0] = out[0][n:]
            break
        out.pop(0)
    ep.modify(fd, select.EPOLLIN | (select.EPOLLOUT if out else 0))


while True:
    for fd, ev in ep.poll():
        if fd == l.fileno():
            try:
                c, _ = l.accept()
            except BlockingIOError:
                continue
            c.setblocking(False)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns[c.fileno()] = [c, b"", []]
            ep.register(c.fileno(), select.EPOLLIN)
            continue
        c, buf, out = conns[fd]
        if ev & select.EPOLLIN:
            try:
                d = c.recv(65536)
            except (BlockingIOError, ConnectionError):
                d = b"" if not isinstance(sys.exc_info()[1], BlockingIOError) else None
            if d == b"":
                ep.unregister(fd)
                c.close()
                del conns[fd]
                continue
            if d:
                buf += d
                while b"\r\n\r\n" in buf:
                    req, buf = buf.split(b"\r\n\r\n", 1)
                    path = req.split(b" ")[1]
                    out.extend(answer(c, path))
                conns[fd][1] = buf
        push(fd)
