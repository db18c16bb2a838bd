"""What checking an idle connection costs, side by side in one run (issue 17):

1. a database hop of one query on PostgreSQL, with the pool checking the connection it lends
   by an empty query (psycopg's `ConnectionPool.check_connection`, as `config.pool` does)
   and by a poll of the socket first, the empty query only when there is something to read
   (measured and not kept: bench/README, "Idle connections checked with one poll");
2. the model client's CPU per request with 1, 50 and 100 idle connections in its pool, as the
   SDK builds it by default (httpx2), with `config.http_pool.quick_idle_checks` (what the app
   did until 2026-11-27), and on the SDK's aiohttp client (what the app does).

    DATABASE_URL=postgres://... .venv/bin/python bench/idle_checks.py

Part 1 needs DATABASE_URL (PostgreSQL) and is skipped without it. The fake Claude server runs
in a child process (as in bench/fakehost.py), so only the client's work is counted here.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import select
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

ROUNDS = 5
HOPS = 1000
REQUESTS = 200
HOLD = 257  # max_tokens of the requests the fake holds for a second (to open connections)


def _serve(address: Any) -> None:
    from tests.fakes import anthropic_server
    from tests.fakes.anthropic_server import FakeAnthropic, Reply

    anthropic_server._Handler.disable_nagle_algorithm = True  # see bench/fakehost.py
    fake = FakeAnthropic().start()

    def responder(body: dict) -> Reply:
        if body.get("max_tokens") == HOLD:
            time.sleep(1.0)
        return Reply(text="THOUGHT: short")

    fake.responder = responder
    address.put(fake.base_url)
    time.sleep(3600)


async def database_hops() -> None:
    from django.db import connection
    from psycopg_pool import ConnectionPool

    from config.hops import db_hop

    def one() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchall()

    hop = db_hop(one)
    for _ in range(50):
        await hop()
    pool = await db_hop(lambda: connection.pool)()

    def socket_first(conn: Any) -> None:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
        if poller.poll(0):
            ConnectionPool.check_connection(conn)

    checks = {"empty query": ConnectionPool.check_connection, "socket first": socket_first}
    taken: dict[str, list[tuple[float, float]]] = {name: [] for name in checks}
    for _ in range(ROUNDS):  # alternated, so load on the machine falls on both alike
        for name, check in checks.items():
            pool._check = check
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(HOPS):
                await hop()
            taken[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    pool._check = ConnectionPool.check_connection
    for name, runs in taken.items():
        wall_ms = 1000 * statistics.median(w for w, _ in runs) / HOPS
        cpu_ms = 1000 * statistics.median(c for _, c in runs) / HOPS
        print(f"one-query hop, {name:12}: {wall_ms:.3f} ms wall, {cpu_ms:.3f} ms CPU")


async def model_requests() -> None:
    import anthropic

    from config.http_pool import quick_idle_checks
    from thinking import streaming

    address: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(address,), daemon=True)
    server.start()
    url = address.get()
    request = {"model": "claude-test", "messages": [{"role": "user", "content": "hi"}]}

    async def ask(client: anthropic.AsyncAnthropic, *, hold: bool = False) -> None:
        tokens = HOLD if hold else 256
        stream = await client.messages.create(stream=True, max_tokens=tokens, **request)
        async with stream:
            await streaming.collect(streaming.api_events(stream.response))

    async def opened(client: anthropic.AsyncAnthropic, index: int) -> None:
        await asyncio.sleep(index * 0.01)  # the fake's listen queue is short
        await ask(client, hold=True)

    cpu: dict[tuple[str, int], list[float]] = {}
    kinds = ("SDK's pool", "quick idle checks", "aiohttp")
    for _ in range(2):
        for kind in kinds:
            for idle in (1, 50, 100):
                if kind == "aiohttp":
                    http = anthropic.DefaultAioHttpClient()
                else:
                    http = anthropic.DefaultAsyncHttpxClient()
                if kind == "quick idle checks":
                    quick_idle_checks(http)
                client = anthropic.AsyncAnthropic(
                    api_key="test", base_url=url, max_retries=0, http_client=http
                )
                # `idle` requests at once leave `idle` connections in the pool.
                await asyncio.gather(*(opened(client, i) for i in range(idle)))
                started = time.process_time()
                for _ in range(REQUESTS):
                    await ask(client)
                cpu.setdefault((kind, idle), []).append(
                    1000 * (time.process_time() - started) / REQUESTS
                )
                await client.close()
    server.kill()
    for idle in (1, 50, 100):
        sdk = statistics.median(cpu[(kinds[0], idle)])
        shown = ", ".join(
            f"{kind} {ms:.2f} ms CPU ({ms / sdk:.2f} x)"
            for kind in kinds
            for ms in [statistics.median(cpu[(kind, idle)])]
        )
        print(f"model request, {idle:3d} idle connections: {shown}")


async def main() -> None:
    import django

    django.setup()
    from django.db import connection

    if connection.vendor == "postgresql":
        await database_hops()
    else:
        print("one-query hop: skipped (set DATABASE_URL to a PostgreSQL database)")
    await model_requests()


if __name__ == "__main__":
    asyncio.run(main())
