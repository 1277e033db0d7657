"""A TCP proxy that delays every byte by a fixed time each way, as tc
netem's "delay" does on a link, for kernels without sch_netem.

usage: delayproxy.py LISTEN_PORT UNIX_SOCKET DELAY_MS

Listens on 127.0.0.1:LISTEN_PORT and joins each connection to the Unix
socket. What one side sends reaches the other DELAY_MS later, in order;
it prints "ready" once listening.
"""

import asyncio
import sys
import time


async def pipe(reader, writer, delay):
    q = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await q.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    task = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            q.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    q.put_nowait((0, None))
    try:
        await task
    except ConnectionError:
        pass


async def main():
    port, sock, delay = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]) / 1e3

    async def handle(cr, cw):
        try:
            sr, sw = await asyncio.open_unix_connection(sock)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, sw, delay), pipe(sr, cw, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
