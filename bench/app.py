"""The app's entry points the benchmarks use, all of them, in one place.

Only what a deployment or a person relies on: the worker's `Supervisor` (what
`manage.py runworker thinking` runs), the models, the ASGI application with its WebSocket URL
(what a page connects to), and the knowledge base's `add_item` and `search_memory`. No
module's private function, no internal step: `bench/compare.py` runs these same benchmarks
on an older tree, so they must mean the same thing on both. Import this module only after
Django is set up (`harness.start_django`).
"""

from __future__ import annotations

from config.asgi import application
from research.knowledge import add_item
from research.memory import search_memory
from thinking.models import (
    CitationCheck,
    ModelCall,
    Source,
    Stage,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    Verdict,
)

try:
    from thinking.deliberation.worker import Supervisor
except ImportError:  # a tree from before the packages, as bench-compare's BASE
    from thinking.worker import Supervisor  # type: ignore[no-redef]  # relayout: keep

# The page's WebSocket: ws/sessions/<id>/?rev=<the revision the page shows>.
WS_PATH = "/ws/sessions/{session_id}/?rev={revision}"

# The admin's change lists of a session's rows (/admin/thinking/<kind>/?session=<id>).
ADMIN_ROWS = ("thought", "subquestion", "synthesis", "source", "stage", "modelcall")

__all__ = [
    "ADMIN_ROWS",
    "WS_PATH",
    "CitationCheck",
    "ModelCall",
    "Source",
    "Stage",
    "SubQuestion",
    "Supervisor",
    "Synthesis",
    "ThinkingSession",
    "Thought",
    "Verdict",
    "add_item",
    "application",
    "search_memory",
]
