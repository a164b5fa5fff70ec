"""Knowledge as data: the gotcha catalog, thresholds, GPU profiles and the dated stack matrix.

Every file carries ``version`` and ``last_verified``; numbers live here, not in checks. Every
packaged file is read by one function, :func:`read` (YAML safe loader, cached, its header checked),
and validated by its pydantic model through :func:`load_file`, so a bad edit fails loudly at load
with the file and the key named. The tool loads :class:`Knowledge` once (a front end or ``api``
calls :func:`load`) and passes it in; probes, checks and features take it as an argument.
"""

from __future__ import annotations

import re
from datetime import date
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from sparkops.core.modeling import BaseModel, ConfigDict, Field, ValidationError
from sparkops.knowledge.thresholds import Thresholds


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class SubCode(_Model):
    """One decision a gotcha's owner can reach (``G1.driver-cuda12``): its status, the line and the fix
    as templates over the decision's values, and where the fix must run."""

    status: str  # pass | fail | warn | skip | info | unknown
    line: str  # str.format template over the decision's values
    fix: str = ""  # template; empty on pass/info/skip
    where: str = ""  # host | container | target-env | anywhere: where the fix must be run
    # what this decision means for a log diagnosis (`diagnose --facts`): a fail/warn confirms its gotcha;
    # "rules-out" marks the few passes that exclude it (state that drifts, like free memory, never does)
    diagnose: Literal["confirms", "rules-out", "none", ""] = ""
    since: date | None = None  # when the sub-code was introduced


class Gotcha(_Model):
    """A catalog entry, in ruff's rule-doc sections, with the sub-codes its owner decides."""

    id: str
    title: str
    symptom: str
    cause: str
    check: str
    fix: str
    known_problems: str = ""
    references: list[str] = Field(default_factory=list)
    last_verified: date
    codes: dict[str, SubCode] = Field(default_factory=dict)


class Profile(_Model):
    """One GPU model's expectations."""

    key: str
    name_patterns: list[str]  # substrings matched against the NVML/nvidia-smi name (case-insensitive)
    capability: tuple[int, int] | None = None
    memory: str = ""  # "unified LPDDR5X", "141 GB HBM3e"
    unified_memory: bool = False
    spec_bandwidth_gbs: float | None = None
    board_power_w: float | None = None
    sustained_power_w: float | None = None
    expected_cuda_major: int | None = None
    nvfp4: bool = False  # has FP4 tensor cores (Blackwell)
    measured_bandwidth_gbs: tuple[float, float] | None = None
    typical_available_gb: float | None = None  # planning budget of an idle box (GB = 1e9), `plan --target`
    notes: str = ""


class PackagePin(_Model):
    name: str
    version: str
    note: str = ""


class HardBlocker(_Model):
    """A combination that is known to break (e.g. torchao < 0.16 beside current peft)."""

    package: str
    below: str
    when_installed: str
    message: str


class StackMatrix(_Model):
    version: int
    last_verified: date
    refresh_horizon_days: int
    base_image: str
    base_torch: str
    unsloth_image: str
    known_good: list[PackagePin]
    hard_blockers: list[HardBlocker]
    ngc_tags: dict[str, str]  # tag -> torch version inside
    component_status: dict[str, str]
    bare_pip_sequence: list[str]


class _File(_Model):
    version: int
    last_verified: date


class GotchasFile(_File):
    """``gotchas.yaml``."""

    gotchas: list[Gotcha]


class ThresholdsFile(_File):
    """``thresholds.yaml``."""

    thresholds: Thresholds


class ProfilesFile(_File):
    """``gpu_profiles.yaml``."""

    profiles: list[Profile]


class Knowledge(_Model):
    gotchas: dict[str, Gotcha]
    thresholds: Thresholds
    profiles: list[Profile]
    matrix: StackMatrix
    catalog_version: int
    catalog_last_verified: date

    def gotcha(self, gid: str) -> Gotcha:
        return self.gotchas[gid]

    def subcode(self, code: str) -> SubCode:
        """The catalog entry of a sub-code (``G3.page-cache`` lives under ``G3``)."""
        return self.gotchas[code.split(".", 1)[0]].codes[code]

    def with_thresholds(self, section: str, **values: Any) -> Knowledge:
        """A copy with some numbers of one ``thresholds.yaml`` section replaced and validated (tests,
        what-ifs); an unknown section or key fails as loading would."""
        old = getattr(self.thresholds, section)
        new = type(old).model_validate({**old.model_dump(), **values})
        return self.model_copy(update={"thresholds": self.thresholds.model_copy(update={section: new})})

    def profile_for(self, gpu_name: str) -> Profile | None:
        """First profile with a pattern standing as a whole word in the name ("L4" is not "L40S",
        "A10" is not "A100", "B200" is not "GB200")."""
        for p in self.profiles:
            for pat in p.name_patterns:
                if re.search(r"(?<![A-Za-z0-9])" + re.escape(pat) + r"(?![A-Za-z0-9])", gpu_name, re.IGNORECASE):
                    return p
        return None


# libyaml's safe loader when PyYAML was built with it (10x faster than the pure-Python one,
# same safety: no arbitrary object construction); the pure-Python SafeLoader otherwise.
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - a SafeLoader, never the full one


class KnowledgeFileError(ValueError):
    """A packaged knowledge file that does not load: a packaging bug, named by file and key."""


M = TypeVar("M", bound=BaseModel)


_HERE = Path(__file__).parent


def _text(name: str) -> str:
    """A packaged file's text: read beside this module (importlib.resources costs the quick path more
    than the read), through importlib.resources when the package is not plain files (a zip)."""
    try:
        return (_HERE / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        from importlib import resources

        return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@cache
def read(name: str) -> dict[str, Any]:
    """A packaged knowledge file (``thresholds.yaml``...) as read: safe-loaded once and cached, its
    ``version`` (an int) and ``last_verified`` (a date) checked, at the top or under the one
    top-level section (``stack_matrix.yaml``'s ``matrix:``). Immutable data: callers copy before
    changing it."""
    try:
        data = safe_load(_text(name))
    except (OSError, yaml.YAMLError) as exc:
        raise KnowledgeFileError(f"knowledge/{name}: cannot be read: {exc}") from exc
    if not isinstance(data, dict):
        raise KnowledgeFileError(f"knowledge/{name}: not a mapping at the top")
    head = data
    if "version" not in data and len(data) == 1 and isinstance(next(iter(data.values())), dict):
        head = next(iter(data.values()))
    for key, kind in (("version", int), ("last_verified", date)):
        if not isinstance(head.get(key), kind) or isinstance(head.get(key), bool):
            raise KnowledgeFileError(f"knowledge/{name}: `{key}` missing or not a{'n int' if kind is int else ' date'}"
                                     f" (got {head.get(key)!r})")
    return data


def validation_message(name: str, exc: ValidationError, prefix: str = "") -> str:
    """``knowledge/<name>: <key path>: <what is wrong>`` for every error pydantic found."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        lines.append(f"knowledge/{name}: {loc or '(top)'}: {err['msg']}")
    return "; ".join(lines)


@cache
def load_file(name: str, model: type[M], section: str | None = None) -> M:
    """A packaged file (or its top-level ``section``) validated by ``model``, once. A misspelled or
    missing key fails with :class:`KnowledgeFileError` naming the file and the key."""
    data: Any = read(name)
    if section is not None:
        if section not in data:
            raise KnowledgeFileError(f"knowledge/{name}: `{section}` missing")
        data = data[section]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise KnowledgeFileError(validation_message(name, exc, section or "")) from exc


def load_matrix_file(path: Path) -> StackMatrix:
    """A user-supplied newer matrix (``--matrix FILE``, same shape as the packaged stack_matrix.yaml)."""
    from sparkops.core.errors import InputError
    from sparkops.core.modeling import ValidationError

    try:
        data = safe_load(Path(path).read_text(encoding="utf-8"))
        return StackMatrix.model_validate(data["matrix"])
    except OSError as exc:
        raise InputError(f"cannot read the matrix {path}: {exc.strerror or exc}") from exc
    except (yaml.YAMLError, TypeError, KeyError) as exc:
        raise InputError(f"{path} is not a stack matrix (a YAML file with a top-level `matrix:`): {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{path}: matrix.{'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def engines_data() -> dict[str, Any]:
    """``engines.yaml`` as read (the serving engines' dated accounting). The planner validates it into
    its models; the G3 owner reads vLLM's default share from it. Cached: immutable data, read once."""
    return read("engines.yaml")


@lru_cache(maxsize=1)
def load() -> Knowledge:
    """The packaged knowledge base (cached: it is immutable data)."""
    g = load_file("gotchas.yaml", GotchasFile)
    # every part is validated by its own file's model above: assembling them validates nothing new,
    # and Knowledge's own validator would cost a schema build of the whole tree (~3 ms on the device)
    return Knowledge.model_construct(
        gotchas={e.id: e for e in g.gotchas},
        thresholds=load_file("thresholds.yaml", ThresholdsFile).thresholds,
        profiles=load_file("gpu_profiles.yaml", ProfilesFile).profiles,
        matrix=load_file("stack_matrix.yaml", StackMatrix, "matrix"),
        catalog_version=g.version,
        catalog_last_verified=g.last_verified,
    )


def load_with_matrix(matrix: Path | None = None) -> Knowledge:
    """The packaged knowledge, with a user-supplied newer stack matrix (``--matrix FILE``) when given."""
    kb = load()
    if matrix is not None:
        kb = kb.model_copy(update={"matrix": load_matrix_file(matrix)})
    return kb
