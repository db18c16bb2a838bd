"""The loop and its steps: `deliberate`, each step's open, ask, store and publish, the
stages, research, the tools, re-ranking, the final review and claim check, the worker.
"""

from __future__ import annotations
