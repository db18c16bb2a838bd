"""Running sessions in the background, on the `thinking` worker channel.

A start message is only a doorbell (channel layers deliver at most once): the database row
is the truth. A worker claims a session with a lease before running it, renews the lease
while it runs, and sweeps for sessions whose doorbell was lost or whose worker died.
Each session runs as its own asyncio task, so the consumer's handler returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from channels.consumer import AsyncConsumer
from channels.layers import get_channel_layer
from channels.worker import Worker
from django.conf import settings
from django.utils import timezone

from config.hops import db_hop
from config.logs import about_session
from research.web import SharedWebClient
from thinking.deliberation import loop, steps
from thinking.deliberation.run import Clock, Meter, PerLoop
from thinking.events import Publish, SessionEvent
from thinking.models import ThinkingSession, WorkerHeartbeat
from thinking.page import broadcast
from thinking.page.publishing import SessionPublisher
from thinking.people import notify
from thinking.provider.llm import LLMError, SharedModelClient
from thinking.state import StartMessage

logger = logging.getLogger(__name__)

CHANNEL = "thinking"


def doorbell(session_id: uuid.UUID) -> StartMessage:
    """The start message for a session: rung on start, on handover, and passed on."""
    return {"type": "session.start", "id": str(session_id)}


def new_worker_id(prefix: str = "worker") -> str:
    return f"{prefix}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Supervisor:
    """Claims, runs and keeps alive the sessions of one worker process.

    Its sessions share one model client and one web-search client (one connection pool
    each, built on first use on this supervisor's event loop): `aclose()` (or `shutdown()`)
    closes them."""

    def __init__(
        self,
        *,
        worker_id: str | None = None,
        capacity: int | None = None,
        publish: Publish = broadcast.publish,
        sweeping: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.worker_id = worker_id or new_worker_id()
        self.capacity = capacity or settings.DEEPTHINK_WORKER_CAPACITY
        self.model_client = SharedModelClient()
        self.web_client = SharedWebClient()
        self.publish = publish
        self.sweeping = sweeping
        self.clock = clock  # the sessions' clock (tests hand in a frozen one)
        self.running: dict[uuid.UUID, asyncio.Task[Any]] = {}
        self._background: asyncio.Task[Any] | None = None
        self.closing = False  # shutting down: it claims nothing more
        self._starting: set[asyncio.Task[bool]] = set()  # claims under way (`start`)
        self._handed_back: list[uuid.UUID] = []  # claimed as the shutdown began, let go of
        self._beaten = False  # its WorkerHeartbeat row exists (for /healthz)

    def open_clients(self) -> None:
        """Build the shared model and web clients now, on this event loop (~30 ms of CPU
        each, once in a worker's life), rather than in its first session's time. Without a
        provider nothing is built: each session reports that itself."""
        with contextlib.suppress(LLMError):
            self.model_client.llm()
        self.web_client.open()

    @property
    def has_room(self) -> bool:
        return len(self.running) < self.capacity

    async def start(self, session_id: uuid.UUID) -> bool:
        """Claim and run a session. False if it is running elsewhere, not runnable, or this
        worker is full (then the sweeper of some worker picks it up later), or shutting
        down."""
        if self.closing or session_id in self.running or not self.has_room:
            return False
        starting = asyncio.ensure_future(self._start(session_id))
        self._starting.add(starting)
        starting.add_done_callback(self._starting.discard)
        # Shielded: a claim runs on its hop thread and may commit whatever happens here, so
        # a start cancelled mid-claim (a shutdown cancels the sweep) still ends in a run or,
        # once the shutdown has begun, a release, which `shutdown` waits for: never in a
        # lease nobody uses until it goes stale.
        return await asyncio.shield(starting)

    async def _start(self, session_id: uuid.UUID) -> bool:
        claimed = await db_hop(ThinkingSession.claim)(
            session_id, worker_id=self.worker_id, lease_seconds=settings.DEEPTHINK_LEASE_SECONDS
        )
        if not claimed:
            return False
        if self.closing:  # the shutdown began while the claim ran: hand the session over
            await steps.release_lease(session_id, worker_id=self.worker_id)
            self._handed_back.append(session_id)
            return False
        task = asyncio.create_task(self._run(session_id), name=f"session-{session_id}")
        self.running[session_id] = task
        return True

    async def _run(self, session_id: uuid.UUID) -> str | None:
        with about_session(session_id):  # what this task logs names the session
            return await self._run_session(session_id)

    async def _run_session(self, session_id: uuid.UUID) -> str | None:
        # The session's updates go out in order from their own task, so rendering and
        # sending them does not delay its next model call.
        publish = SessionPublisher(self.publish)
        try:
            try:
                llm = self.model_client.llm()
            except LLMError as error:
                failed = await steps.fail(
                    session_id, worker_id=self.worker_id, meter=Meter(), message=str(error)
                )
                if failed is not None:
                    await self.publish(SessionEvent(session_id, finished=True))
                return None
            # The LLM and the web search only borrow the shared pools: nothing to close here.
            return await loop.run_session(
                session_id,
                llm=llm,
                publish=publish,
                worker_id=self.worker_id,
                clock=self.clock,
                web_search=self.web_client.web_search,
            )
        except Exception:
            logger.exception("Session %s crashed its task", session_id)
            return None
        finally:
            try:
                await publish.aclose()  # what the session stored last is shown
            finally:
                self.running.pop(session_id, None)

    async def heartbeat(self) -> int:
        if not self.running:
            return 0
        renewed = await db_hop(ThinkingSession.renew)(list(self.running), worker_id=self.worker_id)
        # Open pages get a fresh header: their clock runs only while the lease is renewed.
        for session_id in list(self.running):
            try:
                await self.publish(SessionEvent(session_id))
            except Exception as error:  # a lost header is refreshed by the next one
                logger.warning("Could not publish the heartbeat of %s: %r", session_id, error)
        return renewed

    async def beat(self) -> None:
        """Say this worker is alive, for /healthz (thinking.models.WorkerHeartbeat)."""
        await db_hop(WorkerHeartbeat.beat)(self.worker_id)
        self._beaten = True

    async def sweep(self) -> int:
        """Start sessions nobody runs: a lost start message, a dead worker, a resume."""
        room = self.capacity - len(self.running)
        if room <= 0:
            return 0

        def candidates() -> list[uuid.UUID]:
            rows = ThinkingSession.objects.unclaimed_or_stale(
                now=timezone.now(), lease_seconds=settings.DEEPTHINK_LEASE_SECONDS
            ).order_by("created_at")
            return list(rows.values_list("pk", flat=True)[:room])

        started = 0
        for session_id in await db_hop(candidates)():
            if await self.start(session_id):
                started += 1
        return started

    async def run_forever(self) -> None:
        """Heartbeats and sweeps, until cancelled."""
        beat = settings.DEEPTHINK_HEARTBEAT_SECONDS
        sweep_every = settings.DEEPTHINK_SWEEP_SECONDS
        since_sweep = sweep_every  # sweep at once on start-up: resume what a restart left
        while True:
            try:
                await self.beat()
                await self.heartbeat()
                if self.sweeping and since_sweep >= sweep_every:
                    await self.sweep()
                    notify.start_delivery()  # mails and webhooks, retried (#19)
                    since_sweep = 0.0
            except Exception:
                logger.exception("Worker %s: heartbeat or sweep failed", self.worker_id)
            tick = min(beat, sweep_every)
            await asyncio.sleep(tick)
            since_sweep += tick

    def ensure_background(self) -> None:
        if self._background is None or self._background.done():
            self._background = asyncio.create_task(self.run_forever(), name="thinking-supervisor")

    async def shutdown(self) -> list[uuid.UUID]:
        """Stop every running session at once, releasing its lease, and let go of what a
        claim under way takes; returns their ids so the caller can ring another worker's
        doorbell."""
        self.closing = True
        if self._background is not None:
            self._background.cancel()
            await asyncio.gather(self._background, return_exceptions=True)
        if self._beaten:  # /healthz stops counting this worker at once
            try:
                await db_hop(WorkerHeartbeat.forget)(self.worker_id)
                self._beaten = False
            except Exception as error:  # its row goes stale within the lease instead
                logger.warning(
                    "Worker %s: could not remove its heartbeat: %r", self.worker_id, error
                )
        # Claims under way end in a run (stopped below) or a release (handed over below).
        for failed in await asyncio.gather(*self._starting, return_exceptions=True):
            if isinstance(failed, Exception):  # its lease, if it took one, goes stale
                logger.warning(
                    "Worker %s: a start failed as it stopped: %r", self.worker_id, failed
                )
        stopped = list(self.running)
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.aclose()
        return [*stopped, *self._handed_back]

    async def aclose(self) -> None:
        """Close the clients the sessions shared (when this worker stops; tests, the CLI).
        Sessions started afterwards build new ones."""
        try:
            await self.model_client.aclose()
        finally:
            await self.web_client.aclose()

    async def wait_idle(self) -> None:
        """Wait until every running session's task has finished (tests, the CLI)."""
        while self.running:
            await asyncio.gather(*list(self.running.values()), return_exceptions=True)


def _new_supervisor() -> Supervisor:
    supervisor = Supervisor()
    try:
        supervisor.open_clients()
    except Exception:  # each session meets (and reports) the same error itself
        logger.exception("Worker %s: building its clients failed", supervisor.worker_id)
    return supervisor


_supervisors = PerLoop(_new_supervisor)


def get_supervisor() -> Supervisor:
    """The supervisor of this process's running event loop."""
    return _supervisors.get()


class ThinkingWorkerConsumer(AsyncConsumer):
    """Handles `session.start` doorbells on the `thinking` channel."""

    async def session_start(self, message: StartMessage) -> None:
        try:
            session_id = uuid.UUID(str(message.get("id")))
        except ValueError:
            logger.warning("Ignoring a start message with a bad id: %r", message.get("id"))
            return
        supervisor = get_supervisor()
        if supervisor.closing:  # this process is handing its sessions over: pass it on
            await self.channel_layer.send(CHANNEL, doorbell(session_id))
            return
        supervisor.ensure_background()
        await supervisor.start(session_id)


class ThinkingWorker(Worker):
    """`runworker thinking`: the channel listener plus this process's supervisor.

    On SIGTERM (a deploy, a scale-down) it stops listening, releases the leases of the
    sessions it runs and rings the doorbell for each, so another worker takes them over at
    once instead of after the lease goes stale. In a web process (`chain_signal`) the
    server's own SIGTERM handler runs afterwards, so the process still exits.
    """

    def __init__(self, *args: Any, chain_signal: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chain_signal = chain_signal
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Hand the sessions over and stop listening, as on SIGTERM."""
        self._stop.set()

    def _on_sigterm(self, stop: asyncio.Event) -> Any:
        running = asyncio.get_running_loop()
        if not self.chain_signal:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                running.add_signal_handler(signal.SIGTERM, stop.set)
            return None
        # Chained, not replaced: asyncio's add_signal_handler would drop daphne's (twisted's)
        # handler, and the process would hand its sessions over but never exit.
        previous = signal.getsignal(signal.SIGTERM)
        with contextlib.suppress(ValueError):  # not the main thread: nothing to chain
            signal.signal(signal.SIGTERM, lambda *_: running.call_soon_threadsafe(stop.set))
        return previous

    async def handle(self) -> None:
        supervisor = get_supervisor()
        supervisor.ensure_background()
        stop = self._stop
        previous = self._on_sigterm(stop)
        # channels' Worker.handle, with the listeners' tasks kept here: cancelling that
        # method leaves them running, and a listener still taking doorbells after the
        # handover would take this process's own and claim the session back as it exits.
        listeners = [asyncio.ensure_future(self.listener(channel)) for channel in self.channels]
        # Operators (and the process tests) see when a started worker takes doorbells.
        logger.info("Worker %s: listening on %s", supervisor.worker_id, ", ".join(self.channels))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({*listeners, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            stopping.cancel()
            await _cancel(listeners)
            for listener in listeners:  # one failed (the channel layer's error): surface it
                if not listener.cancelled():
                    listener.result()
            return
        logger.info("Worker %s: SIGTERM, handing sessions over", supervisor.worker_id)
        await _cancel(listeners)
        stopped = await supervisor.shutdown()
        layer = self.channel_layer
        if hasattr(layer, "close_pools"):
            # The connections the cancelled pops used are dropped; so are the rest.
            await layer.close_pools()
        for session_id in stopped:
            await layer.send(CHANNEL, doorbell(session_id))
        if self.chain_signal:
            logger.info(
                "Worker %s: sessions handed over, stopping the server", supervisor.worker_id
            )
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)


async def _cancel(tasks: list[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def request_start(session_id: uuid.UUID) -> None:
    """Ring the doorbell for a session (call after its row is committed). If the message is
    lost, a sweeper finds the session anyway."""
    from asgiref.sync import async_to_sync

    try:
        async_to_sync(get_channel_layer().send)(CHANNEL, doorbell(session_id))
    except Exception as error:
        logger.warning(
            "Could not send the start message for %s (%r); the sweeper will", session_id, error
        )


def with_inprocess_worker(application: Any) -> Any:
    """Wrap the ASGI app so that, on embedded defaults, the web process is also the thinking
    worker. It starts with the process (`start_with_server` under daphne, the ASGI lifespan
    under other servers), so sessions a restart interrupted resume with nobody visiting; the
    first connection starts it too, should neither hook have run."""
    started: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
    tasks: set[asyncio.Task[Any]] = set()  # held so the worker task is not garbage collected

    def start(running: asyncio.AbstractEventLoop) -> None:
        if not settings.DEEPTHINK_INPROCESS_WORKER or running in started:
            return
        started.add(running)
        worker = ThinkingWorker(
            application=application,
            channels=[CHANNEL],
            channel_layer=get_channel_layer(),
            chain_signal=True,
        )
        task = running.create_task(worker.arun(), name="thinking-worker")
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send, lambda: start(asyncio.get_running_loop()))
        if scope["type"] in ("http", "websocket"):
            start(asyncio.get_running_loop())
        return await application(scope, receive, send)

    def start_with_server() -> None:
        """Under daphne (no lifespan events): start once twisted's reactor runs, after it
        installed its signal handlers, on the asyncio loop daphne serves on."""
        reactor_module = sys.modules.get("twisted.internet.reactor")
        server = sys.modules.get("daphne.server")
        if reactor_module is None or server is None or not settings.DEEPTHINK_INPROCESS_WORKER:
            return
        serving = server.twisted_loop
        reactor_module.callWhenRunning(lambda: serving.call_soon(start, serving))

    app.start_with_server = start_with_server  # type: ignore[attr-defined]
    return app


async def _lifespan(receive: Any, send: Any, on_startup: Callable[[], None]) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            on_startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
