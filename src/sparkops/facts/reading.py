"""A reading that is missing carries its reason.

A probe never leaves a bare ``None`` behind: a value that could not be read is an
:class:`Unavailable` saying *why* (``not_supported`` is a fact on GB10, not a failure), and
comparing it with a number raises instead of quietly coming out true or false.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

from sparkops.core.modeling import BaseModel, ConfigDict

T = TypeVar("T")


class Why(str, Enum):
    """Why a reading is missing."""

    not_supported = "not_supported"  # the device/driver says it has no such reading (GB10 memory)
    no_permission = "no_permission"
    not_found = "not_found"  # tool, file, library or package absent
    timeout = "timeout"
    error = "error"  # the probe ran and failed
    not_collected = "not_collected"  # nobody asked (e.g. --quick skips the live torch probe)
    not_applicable = "not_applicable"


class Unavailable(BaseModel):
    """A missing reading and why. Falsy; ordering against numbers raises TypeError."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    unavailable: Why
    detail: str = ""

    def __bool__(self) -> bool:  # so `if reading:` treats it as absent
        return False

    def __str__(self) -> str:
        return f"unavailable ({self.unavailable.value}{': ' + self.detail if self.detail else ''})"

    def _refuse(self, other: object):
        raise TypeError(f"cannot compare an unavailable reading ({self}) with {other!r}")

    __lt__ = __le__ = __gt__ = __ge__ = _refuse


def missing(why: Why | str, detail: str = "") -> Unavailable:
    """Shorthand constructor used by probes."""
    return Unavailable(unavailable=Why(why), detail=detail[:500])


def from_os_error(exc: OSError, what: str) -> Unavailable:
    """An OSError as the reason a reading is missing (absent, forbidden, or other)."""
    if isinstance(exc, FileNotFoundError):
        return missing(Why.not_found, f"{what} does not exist")
    if isinstance(exc, PermissionError):
        return missing(Why.no_permission, f"{what}: permission denied")
    return missing(Why.error, f"{what}: {exc}")


NOT_COLLECTED = Unavailable(unavailable=Why.not_collected)


def known(value: object) -> bool:
    """True when a reading holds a real value (not Unavailable, not None)."""
    return value is not None and not isinstance(value, Unavailable)


def value_or(value: T | Unavailable | None, default: T) -> T:
    """The reading, or ``default`` when it is missing."""
    return value if known(value) else default  # type: ignore[return-value]
