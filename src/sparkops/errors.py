"""Errors the front ends report as "the tool could not run" (exit 3). Light on purpose."""


class SnapshotError(Exception):
    """The snapshot cannot be used (unreadable, not JSON, wrong schema)."""
