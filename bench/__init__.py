"""Benchmarks for Deep Think (issue #10): `make bench`, or `BENCH_QUICK=1 make bench`."""

from __future__ import annotations
