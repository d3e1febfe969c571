"""An asyncio echo server on uvloop (libuv), whose libuv registers epoll interest through
io_uring when the kernel has it.

    uvloop_echo.py ADDR PORT"""
import asyncio
import sys

import uvloop


class Echo(asyncio.Protocol):
    def connection_made(self, t):
        self.t = t

    def data_received(self, d):
        self.t.write(d)


async def main():
    srv = await asyncio.get_running_loop().create_server(Echo, sys.argv[1], int(sys.argv[2]))
    print("listening", flush=True)
    await srv.serve_forever()


uvloop.run(main())
