"""Reading a document in a process of its own, with a time and a memory limit.

A parser fed a hostile file can run for minutes or take gigabytes (a decompression bomb, a
fuzzed PDF); in the web process that would hold up every page and session. `read` hands the
file to a child process and waits for it without holding the interpreter lock; the child
reads it with `documents.read_document` under an address-space limit and is killed when the
time is up, so the file is refused with a reason a person understands:

- over the time limit: "took longer than 60 s to read";
- over the memory limit: "needs more than 1,024 MB of memory to read";
- any error of a parser, or the child dying: "could not be read", with what happened logged.

The parsers' warnings (pypdf's "Ignoring wrong pointing object", trafilatura's) are caught
in the child, never printed, and come back as the document's notes.

Children come from a fork server that has the parsers imported (a child starts in a few
milliseconds, and not from a copy of the web process with its threads and connections).
This module imports nothing of Django: a child never touches the database.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
from multiprocessing.connection import Connection
from typing import Any

from .documents import Document, DocumentError, format_of, read_document

logger = logging.getLogger(__name__)

# Imported once by the fork server, so each child starts with them.
PRELOAD = ["research.documents", "pypdf", "trafilatura", "charset_normalizer", "lxml.html"]
MAX_NOTES = 5  # distinct parser warnings kept per file; the rest are counted


def _context() -> Any:
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        return context
    return multiprocessing.get_context("spawn")


def read(data: bytes, *, name: str, seconds: float, memory_bytes: int) -> Document:
    """The document in `data`, read in a child process that may run `seconds` and take
    `memory_bytes` more memory than it starts with. Raises DocumentError, whatever happens
    to the child."""
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(
        target=_child,
        args=(sending, data, name, seconds, memory_bytes),
        name="deepthink-read",
        daemon=True,
    )
    try:
        child.start()
    except OSError as error:  # no process to be had (out of memory, process limit)
        receiving.close()
        sending.close()
        logger.warning("Could not start a reader for %s: %r", name, error)
        raise DocumentError(
            f"“{name}” could not be read now: the server is out of room; try again later.",
            short="the server could not start a reader",
        ) from None
    try:
        sending.close()  # the child's end: reading sees EOF when the child is gone
        if receiving.poll(seconds):
            try:
                outcome = receiving.recv()
            except EOFError:  # it died without answering
                outcome = None
        else:
            outcome = ("timeout",)
    finally:
        receiving.close()
        if child.is_alive():
            child.kill()
        child.join()
    return _result(outcome, child.exitcode, name=name, seconds=seconds, memory_bytes=memory_bytes)


def _result(
    outcome: tuple | None, exitcode: int | None, *, name: str, seconds: float, memory_bytes: int
) -> Document:
    match outcome:
        case ("read", Document() as document):
            return document
        case ("refused", str(message), str(short)):
            raise DocumentError(message, short=short)
        case ("timeout",):
            raise DocumentError(
                f"“{name}” took longer than {seconds:g} s to read and was stopped; a file this "
                "slow to read is probably damaged or built to be.",
                short=f"took longer than {seconds:g} s to read",
            )
        case ("memory",):
            megabytes = memory_bytes // 1_000_000
            raise DocumentError(
                f"“{name}” needs more than {megabytes:,} MB of memory to read and was stopped.",
                short=f"needs more than {megabytes:,} MB of memory to read",
            )
        case ("failed", str(kind), str(error)):
            logger.warning("Reading %s failed in the %s reader: %s", name, kind, error)
            raise DocumentError(
                f"“{name}” could not be read: the {kind} reader failed on it.",
                short=f"the {kind} reader failed on it",
            )
    logger.warning("The reader of %s stopped without an answer (exit code %s)", name, exitcode)
    raise DocumentError(
        f"“{name}” could not be read: its reader stopped unexpectedly.",
        short="its reader stopped unexpectedly",
    )


def _kind(name: str) -> str:
    kind = format_of(name) or "document"
    return {"pdf": "PDF", "html": "HTML", "markdown": "Markdown"}.get(kind, kind)


class _Warnings(logging.Handler):
    """Every warning the parsers log (and `warnings.warn`, through logging), kept as notes."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())[:300]
        except Exception:  # a warning that cannot be formatted is not worth a note
            return
        if record.name == "py.warnings":  # "file.py:12: UserWarning: text" -> "text"
            message = message.rpartition("Warning: ")[2]
        self.messages[message] = self.messages.get(message, 0) + 1

    def notes(self) -> list[str]:
        items = list(self.messages.items())
        shown = [
            f"The reader warned: {message}" + (f" ({count} times)" if count > 1 else "")
            for message, count in items[:MAX_NOTES]
        ]
        if len(items) > MAX_NOTES:
            shown.append(f"… and {len(items) - MAX_NOTES} other warnings.")
        return shown


def _limit_memory(extra_bytes: int) -> None:
    """At most `extra_bytes` of address space beyond what the child has mapped now."""
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):  # not Linux: no way to know the base, no memory limit
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = mapped + extra_bytes
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    except (OSError, ValueError):  # a system that does not take it: the time limit remains
        return


def _child(sending: Connection, data: bytes, name: str, seconds: float, memory: int) -> None:
    # A CPU limit too: a child whose parent was killed outright still stops.
    cpu, hard = int(seconds) + 2, resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu if hard < 0 else min(cpu, hard), hard))
    _limit_memory(memory)
    caught = _Warnings()
    root = logging.getLogger()
    root.handlers = [caught]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    outcome: tuple
    try:
        document = read_document(data, name=name)
        document.notes.extend(caught.notes())
        outcome = ("read", document)
    except DocumentError as error:
        outcome = ("refused", str(error), error.short)
    except MemoryError:
        outcome = ("memory",)
    except RecursionError:
        outcome = ("failed", _kind(name), "nested too deeply")
    except Exception as error:  # any parser's failure is this file's problem
        outcome = ("failed", _kind(name), repr(error)[:500])
    del data
    sending.send(outcome)
    sending.close()
