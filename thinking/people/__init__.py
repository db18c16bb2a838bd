"""What people do: start, pause, resume, cancel, steer, conclude, think longer, with the
limits and budgets that allow it, and the mail and webhooks when a session ends.
"""

from __future__ import annotations
