"""No Memory: the frozen executor alone (no repo, no judge, no curation): the floor every method is
compared with."""

from __future__ import annotations

from skillos.methods.base import Method


class NoMemory(Method):
    name = "none"
    title = "No Memory"
    uses_repo = False
