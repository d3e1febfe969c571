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


loop = uvloop.new_event_loop()     # uvloop.run() is 0.18+; Debian 12 has 0.17
asyncio.set_event_loop(loop)
loop.run_until_complete(main())
