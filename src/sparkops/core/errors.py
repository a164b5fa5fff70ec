"""Errors the front ends report as "the tool could not run" (exit 3). Light on purpose."""


class InputError(Exception):
    """Something the user gave cannot be used (a file, an option's value); the message says why."""


class SnapshotError(InputError):
    """The snapshot cannot be used (unreadable, not JSON, wrong schema)."""


class OutputError(InputError, OSError):
    """An output path cannot be written (a directory, a socket, a read-only place, a full disk).
    Also an OSError, so callers that guarded the old plain write keep working."""
