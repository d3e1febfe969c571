"""A Python asyncio TCP echo server, the application under test in test_apps.py: every byte a
client sends comes back on the same connection. Prints "listening PORT" when ready and, on
SIGTERM, one line "served CONNS BYTES" before it exits."""
import asyncio
import signal
import sys

stats = {"conns": 0, "bytes": 0}


async def echo(reader, writer):
    stats["conns"] += 1
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            stats["bytes"] += len(data)
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(host, port):
    server = await asyncio.start_server(echo, host, port, backlog=512)
    print("listening", server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    # A second SIGTERM (timeout(1) forwarding one, say) must not fail the finished future.
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    await stop
    server.close()
    print("served", stats["conns"], stats["bytes"], flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
