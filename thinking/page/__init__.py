"""The live session page: its contexts, live updates and catch-ups from the same partials,
the model's reasoning streamed while a call runs, who is watching.
"""

from __future__ import annotations
