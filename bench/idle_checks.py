"""What checking an idle connection costs, side by side in one run (issue 17):

1. a database hop of one query on PostgreSQL, with the pool checking the connection it lends
   by an empty query (psycopg's `ConnectionPool.check_connection`, as `config.pool` does)
   and by a poll of the socket first, the empty query only when there is something to read
   (measured and not kept: bench/README, "Idle connections checked with one poll");
2. the model client's CPU per request with 1, 50 and 100 idle connections in its pool, as the
   SDK builds it by default (httpx2) and on the SDK's aiohttp client (what the app does since
   2026-11-27; until then the default, each idle connection checked with one poll);
3. the same for a web search on a worker's shared pool (its limits, on httpx).

    DATABASE_URL=postgres://... .venv/bin/python bench/idle_checks.py

Part 1 needs DATABASE_URL (PostgreSQL) and is skipped without it. The fake servers run in a
child process (as in bench/fakehost.py), so only the client's work is counted here.
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
    from tests.fakes import anthropic_server, exa_server
    from tests.fakes.anthropic_server import FakeAnthropic, Reply
    from tests.fakes.exa_server import FakeExa

    anthropic_server._Handler.disable_nagle_algorithm = True  # see bench/fakehost.py
    exa_server._Handler.disable_nagle_algorithm = True
    fake = FakeAnthropic().start()

    def responder(body: dict) -> Reply:
        if body.get("max_tokens") == HOLD:
            time.sleep(1.0)
        return Reply(text="THOUGHT: short")

    fake.responder = responder
    web = FakeExa().start()

    def on_search(body: dict) -> None:
        if body.get("query") == "hold":
            time.sleep(1.0)

    web.on_search = on_search
    address.put((fake.base_url, web.base_url, web.api_key))
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


async def model_requests(url: str) -> None:
    import anthropic

    from thinking import streaming

    request = {"model": "claude-test", "messages": [{"role": "user", "content": "hi"}]}

    async def ask(client: anthropic.AsyncAnthropic, *, hold: bool = False) -> None:
        tokens = HOLD if hold else 256
        stream = await client.messages.create(stream=True, max_tokens=tokens, **request)
        async with stream:
            await streaming.collect(streaming.api_events(stream))

    async def opened(client: anthropic.AsyncAnthropic, index: int) -> None:
        await asyncio.sleep(index * 0.01)  # the fake's listen queue is short
        await ask(client, hold=True)

    cpu: dict[tuple[str, int], list[float]] = {}
    kinds = ("SDK's pool", "aiohttp")
    for _ in range(2):
        for kind in kinds:
            for idle in (1, 50, 100):
                if kind == "aiohttp":
                    http = anthropic.DefaultAioHttpClient()
                else:
                    http = anthropic.DefaultAsyncHttpxClient()
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
    _report("model request", cpu, kinds)


async def web_searches(url: str, key: str) -> None:
    from exa_py import AsyncExa

    from research.web import SHARED_POOL_LIMITS, _Exa

    async def opened(exa: AsyncExa, index: int) -> None:
        await asyncio.sleep(index * 0.01)  # the fake's listen queue is short
        await exa.search("hold", num_results=1)

    cpu: dict[tuple[str, int], list[float]] = {}
    kinds = ("httpx",)
    for _ in range(2):
        for kind in kinds:
            for idle in (1, 50, 100):
                exa = _Exa(api_key=key, api_base=url, timeout=20.0, limits=SHARED_POOL_LIMITS)
                await asyncio.gather(*(opened(exa, i) for i in range(idle)))
                started = time.process_time()
                for n in range(REQUESTS):
                    await exa.search(f"query {n}", num_results=3)
                cpu.setdefault((kind, idle), []).append(
                    1000 * (time.process_time() - started) / REQUESTS
                )
                await exa.aclose()
    _report("web search", cpu, kinds)


def _report(what: str, cpu: dict[tuple[str, int], list[float]], kinds: tuple[str, ...]) -> None:
    for idle in (1, 50, 100):
        first = statistics.median(cpu[(kinds[0], idle)])
        shown = ", ".join(
            f"{kind} {ms:.2f} ms CPU ({ms / first:.2f} x)"
            for kind in kinds
            for ms in [statistics.median(cpu[(kind, idle)])]
        )
        print(f"{what}, {idle:3d} idle connections: {shown}")


async def main() -> None:
    import django

    django.setup()
    from django.db import connection

    if connection.vendor == "postgresql":
        await database_hops()
    else:
        print("one-query hop: skipped (set DATABASE_URL to a PostgreSQL database)")
    address: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(address,), daemon=True)
    server.start()
    model_url, web_url, web_key = address.get()
    try:
        await model_requests(model_url)
        await web_searches(web_url, web_key)
    finally:
        server.kill()


if __name__ == "__main__":
    asyncio.run(main())
