"""A model on the Hugging Face Hub, sized before it is downloaded: its ``config.json`` and the JSON
headers of its safetensors files, read by HTTP Range requests (hf-mem's method; huggingface_hub's
``HfApi.get_safetensors_metadata`` reads the same 100,000 bytes first), never the weights.

Why: the question "will this model fit or serve on my Spark" comes before a 60 GB download, and a
catalog cannot keep up with what is published. The planner's counting (architecture.from_config) does
the rest, exactly as for a local folder.

The user's own settings are honoured: ``HF_ENDPOINT`` (a mirror), ``HF_TOKEN`` /
``HUGGING_FACE_HUB_TOKEN`` or the token file huggingface_hub writes (gated models), and
``HF_HUB_OFFLINE`` (no network). The token is sent to the endpoint's host only: a redirect to
another host (the Hub's CDN for large files) goes without it. What was read is cached under
``$XDG_CACHE_HOME/dgx-spark-ops/hub`` with the commit it came from, so a plan can be repeated
offline and says which revision it sized.

The one impure module of the planner: called only when a front end passes a :class:`HubAccess`.
"""

from __future__ import annotations

import json
import re
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sparkops.planner.architecture import ArchitectureError, WeightSums, parse_safetensors_header, weight_sums

DEFAULT_ENDPOINT = "https://huggingface.co"
FIRST_RANGE = 100_000  # bytes asked for first: most safetensors headers fit (huggingface_hub's choice)
HEADER_LIMIT = 100 * 1024 * 1024  # what read_safetensors_header accepts from a local file
MAX_SHARDS = 512
CACHE_TTL_S = 24 * 3600.0  # a branch (main) is re-read after a day; a commit id never changes
_TRUE = {"1", "on", "yes", "true"}
_HF_ID = re.compile(r"[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95}")
_SHA = re.compile(r"[0-9a-f]{40}")
_SEEN: dict[tuple[str, str, str], HubModel] = {}  # fetched in this process: (endpoint, id, revision) -> model


class HubError(ArchitectureError):
    """The Hub could not say what the model is: not found, gated, offline, unreachable or malformed."""


def is_hub_id(name: str) -> bool:
    """``org/name`` as the Hub spells repository ids (no path, no scheme)."""
    return bool(_HF_ID.fullmatch(name.strip())) and ".." not in name


@dataclass(frozen=True)
class HubAccess:
    """How to reach the Hub, from the user's environment. ``token`` never appears in a repr or an output."""

    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = field(default=None, repr=False)
    offline: bool = False
    offline_why: str = ""
    cache_dir: Path | None = None
    timeout_s: float = 10.0  # one request
    deadline_s: float = 30.0  # the whole model: config, index and every shard's header


def _token(env: Mapping[str, str]) -> str | None:
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if env.get(key, "").strip():
            return env[key].strip()
    home = env.get("HF_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache" / "huggingface")
    path = Path(env.get("HF_TOKEN_PATH") or Path(home) / "token").expanduser()
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def access_from_env(env: Mapping[str, str], *, offline: bool = False) -> HubAccess:
    """The Hub as the user's huggingface_hub would reach it; ``offline`` (the command's --offline) wins."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    why = "--offline given" if offline else ""
    if not why and env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        why = "HF_HUB_OFFLINE is set"
    return HubAccess(endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"), token=_token(env),
                     offline=bool(why), offline_why=why, cache_dir=Path(base) / "dgx-spark-ops" / "hub")


# ------------------------------------------------------------------ what was read


@dataclass(frozen=True)
class HubModel:
    hf_id: str
    revision: str  # what was asked for (a branch, tag or commit)
    commit: str  # the commit the files came from ("" when the server did not say)
    config: dict[str, Any]
    weights: WeightSums | None  # None: no safetensors in the repository
    fetched_at: str
    from_cache: bool = False
    notes: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        at = self.commit[:12] or self.revision
        return f"hub:{self.hf_id}@{at}"


# ------------------------------------------------------------------ HTTP


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but send the token only to the host it was given for."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201 - urllib's signature
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


@dataclass
class _Client:
    access: HubAccess
    deadline: float
    opener: urllib.request.OpenerDirector = field(
        default_factory=lambda: urllib.request.build_opener(_SameHostAuth()))

    def url(self, hf_id: str, revision: str, filename: str) -> str:
        rev = urllib.parse.quote(revision, safe="")
        return f"{self.access.endpoint}/{hf_id}/resolve/{rev}/{urllib.parse.quote(filename)}"

    def get(self, url: str, *, first: int | None = None, last: int | None = None,
            limit: int = 16 * 1024 * 1024) -> tuple[bytes, Mapping[str, str]]:
        """The body (at most ``limit`` bytes; bytes first..last when a range is asked) and the headers.
        A server that ignores Range answers 200 with the whole file: only what was asked for is read."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise HubError(f"the Hub did not answer within {self.access.deadline_s:g} s (HF_ENDPOINT {self.access.endpoint})")
        req = urllib.request.Request(url, headers={"User-Agent": "dgx-spark-ops"})
        if first is not None:
            req.add_header("Range", f"bytes={first}-{last}")
        if self.access.token:
            req.add_header("Authorization", f"Bearer {self.access.token}")
        try:
            with self.opener.open(req, timeout=min(self.access.timeout_s, left)) as resp:
                want = limit if first is None else (last - first + 1)  # type: ignore[operator]
                if first and resp.status == 200:  # Range ignored: skip to the asked bytes
                    _read(resp, first)
                body = _read(resp, want)
                return body, resp.headers
        except urllib.error.HTTPError as exc:
            raise _http_error(exc, url) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HubError(f"the Hub is unreachable ({self.access.endpoint}: {reason}); "
                           "pass --config with a config.json or model folder, or run where the Hub is reachable") from None


def _read(resp: Any, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = resp.read(min(1 << 20, n - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _http_error(exc: urllib.error.HTTPError, url: str) -> HubError:
    path = urllib.parse.urlsplit(url).path
    if exc.code in (401, 403):
        return HubError(f"the Hub refused {path} (HTTP {exc.code}): a gated or private model; accept its licence on "
                        "the Hub and set HF_TOKEN (or run `hf auth login`), or pass --config")
    if exc.code == 404:
        return _NotFound(f"not on the Hub: {path} (HTTP 404)")
    return HubError(f"the Hub answered HTTP {exc.code} for {path}")


class _NotFound(HubError):
    pass


class HubOffline(HubError):
    """The Hub was not to be read and its cache does not hold the model."""


# ------------------------------------------------------------------ safetensors headers


def remote_header(client: _Client, url: str, where: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """One safetensors file's header: the first 100,000 bytes, then the rest of the header if longer."""
    head, _ = client.get(url, first=0, last=FIRST_RANGE - 1)
    if len(head) < 8:
        raise HubError(f"{where}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > HEADER_LIMIT:
        raise HubError(f"{where}: safetensors header claims {n} bytes (over the 100 MB limit); not a valid file")
    blob = head[8:8 + n]
    if len(blob) < n:
        more, _ = client.get(url, first=len(head), last=8 + n - 1)
        blob += more
    if len(blob) < n:
        raise HubError(f"{where}: truncated safetensors header ({len(blob)} of {n} bytes)")
    return parse_safetensors_header(blob, where)


# ------------------------------------------------------------------ the model


def _json(blob: bytes, where: str) -> Any:
    try:
        return json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise HubError(f"{where} is not valid JSON") from None


def _cache_file(access: HubAccess, hf_id: str, revision: str) -> Path | None:
    if access.cache_dir is None:
        return None
    safe_rev = re.sub(r"[^\w.\-]", "_", revision)[:80]
    return access.cache_dir / hf_id.replace("/", "--") / f"{safe_rev}.json"


def _from_cache(path: Path | None) -> HubModel | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path is not None else None
        w = doc.get("weights")
        weights = WeightSums(files=int(w["files"]), stored_bytes=int(w["stored_bytes"]), numel=int(w["numel"]),
                             by_dtype={str(k): int(v) for k, v in w["by_dtype"].items()}) if w else None
        return HubModel(hf_id=str(doc["hf_id"]), revision=str(doc["revision"]), commit=str(doc.get("commit") or ""),
                        config=dict(doc["config"]), weights=weights, fetched_at=str(doc["fetched_at"]),
                        from_cache=True, notes=tuple(str(n) for n in doc.get("notes") or ()))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _to_cache(path: Path | None, m: HubModel) -> None:
    if path is None:
        return
    doc = {"hf_id": m.hf_id, "revision": m.revision, "commit": m.commit, "fetched_at": m.fetched_at,
           "config": m.config, "notes": list(m.notes),
           "weights": None if m.weights is None else {"files": m.weights.files, "stored_bytes": m.weights.stored_bytes,
                                                      "numel": m.weights.numel, "by_dtype": m.weights.by_dtype}}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written costs the next run a fetch, nothing else


def _age_s(m: HubModel) -> float:
    try:
        return (datetime.now(timezone.utc) - datetime.fromisoformat(m.fetched_at)).total_seconds()  # noqa: UP017
    except ValueError:
        return float("inf")


def fetch_model(hf_id: str, access: HubAccess, *, revision: str = "main") -> HubModel:
    """config.json and the summed safetensors headers of ``hf_id`` at ``revision``: from the cache when it is
    fresh (or when offline), else from the Hub. Raises HubError saying what went wrong and what to do."""
    hf_id = hf_id.strip()
    if not is_hub_id(hf_id):
        raise HubError(f"'{hf_id}' is not a Hugging Face model id (org/name)")
    seen = _SEEN.get((access.endpoint, hf_id, revision))
    if seen is not None:  # this process read it already (serving asks twice; a cache may not be writable)
        return seen
    path = _cache_file(access, hf_id, revision)
    cached = _from_cache(path)
    if access.offline:
        if cached is not None:
            return cached
        raise HubOffline(f"'{hf_id}' is not in the catalog, the local Hugging Face cache or this tool's Hub cache, "
                       f"and the Hub is not read ({access.offline_why}); pass --config with its config.json")
    if cached is not None and (_SHA.fullmatch(revision) or _age_s(cached) < CACHE_TTL_S):
        return cached
    client = _Client(access, time.monotonic() + access.deadline_s)
    blob, headers = client.get(client.url(hf_id, revision, "config.json"))
    config = _json(blob, f"{hf_id}/config.json")
    if not isinstance(config, dict):
        raise HubError(f"{hf_id}/config.json is not a JSON object")
    commit = str(headers.get("X-Repo-Commit") or "").strip().lower()
    pinned = commit if _SHA.fullmatch(commit) else revision  # the other files from the same commit
    weights, notes = _weights(client, hf_id, pinned)
    m = HubModel(hf_id=hf_id, revision=revision, commit=commit if _SHA.fullmatch(commit) else "", config=config,
                 weights=weights, fetched_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017
                 notes=tuple(notes))
    _to_cache(path, m)
    _SEEN[(access.endpoint, hf_id, revision)] = m
    return m


def _weights(client: _Client, hf_id: str, revision: str) -> tuple[WeightSums | None, list[str]]:
    """The shards the index names (or model.safetensors alone), their headers read in parallel."""
    try:
        blob, _ = client.get(client.url(hf_id, revision, "model.safetensors.index.json"))
    except _NotFound:
        files = ["model.safetensors"]
    else:
        index = _json(blob, f"{hf_id}/model.safetensors.index.json")
        wm = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wm, dict) or not wm:
            raise HubError(f"{hf_id}/model.safetensors.index.json has no weight_map")
        files = sorted({str(v) for v in wm.values()})
        if len(files) > MAX_SHARDS:
            raise HubError(f"{hf_id}: the index names {len(files)} files (over {MAX_SHARDS}); not read")
    def header(f: str) -> dict[str, tuple[str, tuple[int, ...]]]:
        return remote_header(client, client.url(hf_id, revision, f), f"{hf_id}/{f}")

    try:
        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
            headers = list(pool.map(header, files))
    except _NotFound:
        if files == ["model.safetensors"]:
            return None, ["no safetensors files on the Hub: parameters are counted from config.json alone"]
        raise
    return weight_sums(headers), []
