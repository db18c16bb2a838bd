"""Mutation testing of the core modules (issue 16): see mutation/README.md."""

from __future__ import annotations
