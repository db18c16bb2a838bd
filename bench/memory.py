"""What resident memory is made of, for benchmark 9: Python's own heap against the C
allocator's, and (opt-in, `BENCH_TRACEMALLOC=N` frames) which lines of code hold what grew.

Resident memory rising can be Python objects kept alive (a leak of ours) or glibc's malloc
keeping freed memory in per-thread arenas (the process asked for it once, it is reused, not
returned). The two look alike in VmRSS; these numbers tell them apart:

- `py_blocks`, `pymalloc_used_mb`: objects and buffers Python's small-object allocator holds
  now; flat if Python does not retain more. `pymalloc_arenas_mb`: the memory it holds them in.
- `malloc_used_mb` / `malloc_free_mb` / `arenas`: glibc's `mallinfo2` (bytes handed out and
  bytes held free, summed over every arena) and the number of arenas (`malloc_info`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import re
import sys
import tempfile
import tracemalloc
from collections import Counter
from typing import Any


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        libc.open_memstream.restype = ctypes.c_void_p
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.free.argtypes = [ctypes.c_void_p]
        return libc
    except (OSError, AttributeError):  # not glibc
        return None


_LIBC = _libc()


def _arenas() -> int:
    """How many malloc arenas the process has (the `<heap nr=` entries of `malloc_info`)."""
    buffer, size = ctypes.c_void_p(), ctypes.c_size_t()
    stream = _LIBC.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    if not stream:
        return 0
    _LIBC.malloc_info(0, stream)
    _LIBC.fclose(stream)
    text = ctypes.string_at(buffer, size.value).decode("ascii", "replace")
    _LIBC.free(buffer)
    return len(re.findall(r"<heap nr=", text))


def _pymalloc() -> dict[str, float]:
    """Python's small-object allocator: its arenas (1 MiB each, given back only when wholly
    empty) and the bytes in use in them. `sys._debugmallocstats` writes to the C stderr only,
    so that is pointed at a file for the call."""
    with tempfile.TemporaryFile() as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode("ascii", "replace")
    found = dict(
        re.findall(r"# (arenas allocated current|bytes in allocated blocks) *= *([\d,]+)", text)
    )
    if len(found) < 2:
        return {}
    number = {k: int(v.replace(",", "")) for k, v in found.items()}
    return {
        "pymalloc_arenas_mb": number["arenas allocated current"],  # 1 MiB each
        "pymalloc_used_mb": round(number["bytes in allocated blocks"] / 2**20, 1),
    }


def heap_now() -> dict[str, float]:
    """Python's allocated blocks and arenas, the C allocator's in-use and free bytes and its
    arenas, right now."""
    now: dict[str, float] = {"py_blocks": sys.getallocatedblocks(), **_pymalloc()}
    if _LIBC is not None:
        info = _LIBC.mallinfo2()
        now["malloc_used_mb"] = round((info.uordblks + info.hblkhd) / 2**20, 1)
        now["malloc_free_mb"] = round(info.fordblks / 2**20, 1)
        now["arenas"] = _arenas()
    return now


def traced_frames() -> int:
    """`BENCH_TRACEMALLOC=N`: trace N frames per allocation (1, by line, is the cheapest;
    more for the tracebacks); 0 or unset: off."""
    value = os.environ.get("BENCH_TRACEMALLOC", "").strip()
    return int(value) if value.isdigit() else 0


class HeapDiff:
    """With `BENCH_TRACEMALLOC=N`: tracemalloc from `start()`, a snapshot and live objects by
    type at `mark()`, and at `finish()` what grew since the mark, by line of code. Tracing
    slows the run many times over (20 times with 12 frames): its timings are not the benchmark's."""

    def __init__(self, top: int = 15) -> None:
        self.top = top
        self.marked: tracemalloc.Snapshot | None = None
        self.types: Counter[str] = Counter()
        self.traced_at_mark = 0

    def start(self) -> None:
        if frames := traced_frames():
            tracemalloc.start(frames)

    @staticmethod
    def _types() -> Counter[str]:
        gc.collect()
        return Counter(type(o).__qualname__ for o in gc.get_objects())

    def _snapshot(self) -> tracemalloc.Snapshot:
        ignore = (tracemalloc.__file__, "<frozen importlib._bootstrap>", "<unknown>")
        return tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, name) for name in ignore]
        )

    def mark(self) -> None:
        if not tracemalloc.is_tracing():
            return
        self.types = self._types()
        self.marked = self._snapshot()
        self.traced_at_mark = tracemalloc.get_traced_memory()[0]

    def finish(self) -> dict[str, Any]:
        """What grew between the mark and now: traced bytes, the top lines and tracebacks,
        and the object types whose count changed most."""
        if not tracemalloc.is_tracing():
            return {}
        if self.marked is None:  # the session ended before its middle was seen
            tracemalloc.stop()
            return {}
        types = self._types()
        snapshot = self._snapshot()
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()

        def kb(stat: tracemalloc.StatisticDiff) -> dict[str, Any]:
            return {
                "kb": round(stat.size_diff / 1024, 1),
                "count": stat.count_diff,
                "where": [f"{f.filename}:{f.lineno}" for f in list(stat.traceback)[-4:]],
            }

        def grew(key: str) -> list[tracemalloc.StatisticDiff]:
            diff = snapshot.compare_to(self.marked, key)
            return sorted(diff, key=lambda s: s.size_diff, reverse=True)

        by_line, by_trace = grew("lineno"), grew("traceback")
        grown = Counter({k: types[k] - self.types.get(k, 0) for k in types | self.types})
        return {
            "traced_mb_at_mark": round(self.traced_at_mark / 2**20, 1),
            "traced_mb_at_end": round(traced / 2**20, 1),
            "top_lines": [kb(s) for s in by_line[: self.top]],
            "top_tracebacks": [kb(s) for s in by_trace[: self.top]],
            "objects_grown": grown.most_common(self.top),
            "objects_at_end": sum(types.values()),
        }
