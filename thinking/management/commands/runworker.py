"""`runworker thinking`: channels' worker, plus the supervisor that heartbeats and sweeps."""

from __future__ import annotations

from channels.management.commands import runworker

from thinking.deliberation.worker import ThinkingWorker


class Command(runworker.Command):
    worker_class = ThinkingWorker
