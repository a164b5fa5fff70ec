"""Where the quick path's model modules get ``BaseModel`` and its helpers from: pydantic, or the lite runtime.

The facts, findings, workload, knowledge and report models import ``BaseModel``, ``Field``,
``ConfigDict``, ``BeforeValidator``, ``field_validator``, ``model_validator`` and
``ValidationError`` from here, never from pydantic directly. By default these are pydantic's
(loaded on first use). :func:`use_lite` (called by :func:`sparkops.front.fast_preflight` before
any model module is imported) makes them :mod:`sparkops.core.lite`'s for the rest of the process:
``preflight --quick`` then never imports pydantic. Every other command keeps pydantic.
"""

from __future__ import annotations

import sys
from typing import Any

NAMES = ("BaseModel", "BeforeValidator", "ConfigDict", "Field", "ValidationError", "field_validator",
         "model_validator")
_chosen: str | None = None  # "pydantic" or "lite", fixed by the first name handed out
_verdict_given = False


def use_lite() -> None:
    """Hand out the lite runtime's names from now on. Refused (RuntimeError) once a name was handed
    out or a model module is loaded: models of two runtimes must never meet in one process."""
    global _chosen
    if _chosen == "lite":
        return
    loaded = sorted(m for m in sys.modules if m.startswith("sparkops.") and _uses_models(m))
    if _chosen is not None or loaded:
        held = ", ".join(loaded) or f"to {_chosen}"
        raise RuntimeError(f"sparkops.core.modeling: pydantic's names were already handed out ({held}); "
                           "too late for the lite runtime")
    _chosen = "lite"


def _uses_models(name: str) -> bool:
    """A loaded module that holds a model class (it took BaseModel from here or from pydantic)."""
    module = sys.modules.get(name)
    return any(isinstance(v, type) and any(b.__name__ == "BaseModel" for b in v.__mro__[1:])
               for v in list(vars(module).values())) if module is not None else False


def runtime() -> str | None:
    """"lite", "pydantic", or None when no model module has been imported yet."""
    return _chosen


def lite_active() -> bool:
    return _chosen == "lite"


def lite_verdict(*models: Any) -> None:
    """Called once before the first byte of a command's output: under the lite runtime, dump each of
    ``models`` to JSON (as the command will) and raise :class:`~sparkops.core.lite.LiteDeclined` if
    the lite runtime refused or declined anything in this process, even where a caller caught it
    (a probe thread records any exception). Nothing under pydantic."""
    global _verdict_given
    if _chosen != "lite":
        return
    from sparkops.core import lite

    for model in models:
        model.model_dump_json(indent=2)
    if lite.DECLINED:
        raise lite.LiteDeclined(f"lite runtime declined: {lite.DECLINED[0]}")
    _verdict_given = True


def verdict_given() -> bool:
    """True once :func:`lite_verdict` passed: output may have started, no way back to pydantic."""
    return _verdict_given


def __getattr__(name: str) -> Any:
    global _chosen
    if name not in NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _chosen == "lite":
        from sparkops.core import lite as source
    else:
        _chosen = "pydantic"
        import pydantic as source
    value = getattr(source, name)
    globals()[name] = value
    return value
