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

The planner's only network access: used only when a front end passes a :class:`HubAccess`; a model in the
catalog, a local path or the local Hugging Face cache never reaches it.
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
from typing import TYPE_CHECKING, Any

from sparkops.planner.architecture import ArchitectureError, WeightSums, parse_safetensors_header, weight_sums
from sparkops.planner.gguf import SPLIT_NAME

if TYPE_CHECKING:
    from sparkops.planner.gguf import GGUFHeader

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


def shown(endpoint: str) -> str:
    """An endpoint as messages may show it: without a user or password written into the URL."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.username is None and parts.password is None:
        return endpoint
    host = parts.hostname or ""
    return urllib.parse.urlunsplit((parts.scheme, host + (f":{parts.port}" if parts.port else ""), parts.path, "", ""))


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
            raise HubError(f"the Hub did not answer within {self.access.deadline_s:g} s (HF_ENDPOINT {shown(self.access.endpoint)})")
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
            where = shown(self.access.endpoint)
            raise HubOffline(f"the Hub is unreachable ({where}: {reason}); "
                             "pass --config with a config.json or model folder, or run where the Hub is reachable",
                             f"{where} unreachable: {reason}") from None


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
    """The Hub was not read (offline, or unreachable) and this tool's cache does not hold the model: callers fall
    back to what they know without it. ``why`` says which, for the user."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


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
    _write_json(path, {"hf_id": m.hf_id, "revision": m.revision, "commit": m.commit, "fetched_at": m.fetched_at,
                       "config": m.config, "notes": list(m.notes),
                       "weights": None if m.weights is None else {
                           "files": m.weights.files, "stored_bytes": m.weights.stored_bytes,
                           "numel": m.weights.numel, "by_dtype": m.weights.by_dtype}})


def _age_s(m: HubModel) -> float:
    return _age_s_text(m.fetched_at)


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
                         f"and the Hub is not read ({access.offline_why}); pass --config with its config.json",
                         access.offline_why)
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


# ------------------------------------------------------------------ GGUF repositories (llama.cpp -hf, Ollama hf.co/)

GGUF_FIRST = 2 * 1024 * 1024  # a GGUF header is mostly its tokenizer: a few MB; read more while it is truncated
DEFAULT_GGUF_TAG = "Q4_K_M"  # llama.cpp's -hf without :TAG, and Ollama's hf.co/ default


def gguf_ref(model: str) -> tuple[str, str | None] | None:
    """(repo, tag) of a GGUF repository as llama.cpp's ``-hf org/repo[:TAG]`` and Ollama's
    ``hf.co/org/repo[:TAG]`` name it; None when ``model`` is not such a reference (a repo without
    "gguf" in its name needs the hf.co/ prefix or a tag)."""
    text = model.strip()
    prefixed = False
    for pre in ("https://huggingface.co/", "huggingface.co/", "hf.co/"):
        if text.lower().startswith(pre):
            text, prefixed = text[len(pre):], True
            break
    repo, _, tag = text.partition(":")
    if not is_hub_id(repo) or (tag and not re.fullmatch(r"[\w.\-]{1,60}", tag)):
        return None
    if not (prefixed or tag or "gguf" in repo.lower()):
        return None
    return repo, tag or None


def _api_files(client: _Client, repo: str, revision: str) -> tuple[list[str], str]:
    """The repository's file names and commit, from the Hub's model API (what llama.cpp and Ollama list)."""
    url = f"{client.access.endpoint}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}"
    blob, _ = client.get(url)
    doc = _json(blob, f"{repo} (the Hub's file list)")
    sib = doc.get("siblings") if isinstance(doc, dict) else None
    if not isinstance(sib, list):
        raise HubError(f"{repo}: the Hub's answer lists no files")
    names = [str(f.get("rfilename")) for f in sib if isinstance(f, dict) and f.get("rfilename")]
    sha = str(doc.get("sha") or "").lower()
    return names, sha if _SHA.fullmatch(sha) else ""


def pick_gguf(files: list[str], tag: str | None, repo: str) -> list[str]:
    """The GGUF file(s) for ``tag`` as llama.cpp's ``common_get_hf_file`` picks them (common/arg.cpp, read
    2026-12-04): the tag as a whole quantization name in the file name (case-insensitive), else as its prefix
    (``q4`` -> Q4_K_M first, then another Q4); no tag ("latest"): Q4_K_M, then any Q4, then the first GGUF. Never a
    vision projector (mmproj); every shard of a split file."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower().rsplit("/", 1)[-1])
    if not ggufs:
        raise HubError(f"{repo} holds no GGUF file")

    def named(q: str, *, prefix: bool) -> list[str]:
        tail = r"(?![A-Z0-9])" if prefix else r"(?![A-Z0-9_])"
        pat = re.compile(rf"(?<![A-Z0-9]){re.escape(q.upper())}{tail}")
        return [f for f in ggufs if pat.search(f.rsplit("/", 1)[-1].upper())]

    want = (tag or DEFAULT_GGUF_TAG).upper()
    hits = named(want, prefix=False)
    if not hits and (tag is None or "_" not in want):  # "q4", or no tag: Q4_K_M first, then another Q4
        q = "Q4" if tag is None else want
        hits = named(f"{q}_K_M", prefix=False) or named(q, prefix=True)
    if not hits and tag is None:
        hits = ggufs[:1]
    if not hits:
        quants = sorted({m.group(0) for f in ggufs if (m := re.search(r"(?:UD-)?(?:I?Q\d\w*|BF16|F16|F32|MXFP4\w*)",
                                                                         f.rsplit("/", 1)[-1].upper()))})
        raise HubError(f"{repo} has no GGUF file for :{want}; it has {', '.join(quants) or ', '.join(ggufs[:5])}")
    first = hits[0]
    m = SPLIT_NAME.match(first.rsplit("/", 1)[-1])
    if m is None:
        return [first]
    folder = first.rsplit("/", 1)[0] + "/" if "/" in first else ""
    shards = sorted(f for f in ggufs if f.startswith(folder) and (s := SPLIT_NAME.match(f.rsplit("/", 1)[-1]))
                    and s["prefix"] == m["prefix"] and s["total"] == m["total"])
    if len(shards) != int(m["total"]):
        raise HubError(f"{repo}: {first} is one of {int(m['total'])} shards but {len(shards)} are listed")
    return shards


def _remote_gguf(client: _Client, url: str, where: str) -> GGUFHeader:
    from sparkops.planner.gguf import MAX_HEADER_BYTES, GGUFError, parse_header

    data, size = b"", GGUF_FIRST
    while True:
        more, _ = client.get(url, first=len(data), last=size - 1)
        data += more
        try:
            return parse_header(data)
        except GGUFError as exc:
            if "truncated" not in str(exc) or len(data) < size or size >= MAX_HEADER_BYTES:
                raise HubError(f"{where}: {exc}") from None
            size = min(size * 4, MAX_HEADER_BYTES)


def fetch_gguf(repo: str, tag: str | None, access: HubAccess, *, revision: str = "main") -> tuple[GGUFHeader, str]:
    """The header of a Hub GGUF model (every shard's tensors in one header) and its source
    ``hub:REPO/FILE@commit``; from this tool's cache when offline, raising HubOffline when it is not there."""
    from sparkops.planner.gguf import merge

    key = (access.endpoint, f"{repo}:{tag or ''}", revision)
    path = None if access.cache_dir is None else _cache_file(access, repo, f"{revision}.gguf.{(tag or 'default').lower()}")
    doc = _GGUF_SEEN.get(key)
    if doc is None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8")) if path is not None else None
        except (OSError, ValueError):
            doc = None
        if not isinstance(doc, dict):
            doc = None
        if doc is not None and not access.offline and _age_s_text(str(doc.get("fetched_at", ""))) >= CACHE_TTL_S:
            doc = None
    if doc is None:
        if access.offline:
            raise HubOffline(f"{repo} is not in this tool's Hub cache and the Hub is not read ({access.offline_why})",
                             access.offline_why)
        client = _Client(access, time.monotonic() + access.deadline_s)
        files, sha = _api_files(client, repo, revision)
        chosen = pick_gguf(files, tag, repo)
        pinned = sha or revision
        headers = [_remote_gguf(client, client.url(repo, pinned, f), f"{repo}/{f}") for f in chosen]
        doc = {"repo": repo, "files": chosen, "commit": sha, "fetched_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017
               "headers": [_gguf_doc(h) for h in headers]}
        if path is not None:
            _write_json(path, doc)
    _GGUF_SEEN[key] = doc
    try:
        merged = merge([_gguf_from_doc(h) for h in doc["headers"]])
        source = f"hub:{doc['repo']}/{doc['files'][0]}@{(doc.get('commit') or revision)[:12]}"
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise HubError(f"{repo}: this tool's cached GGUF header is unreadable ({exc}); delete {path}") from None
    return merged, source


_GGUF_SEEN: dict[tuple[str, str, str], dict[str, Any]] = {}


def _gguf_doc(h: GGUFHeader) -> dict[str, Any]:
    return {"version": h.version, "metadata": h.metadata, "array_lengths": h.array_lengths, "header_bytes": h.header_bytes,
            "tensors": [[t.name, list(t.shape), t.ggml_type, t.offset] for t in h.tensors]}


def _gguf_from_doc(d: dict[str, Any]) -> GGUFHeader:
    from sparkops.planner.gguf import GGUFHeader, GGUFTensor

    return GGUFHeader(version=int(d["version"]), metadata=dict(d["metadata"]),
                      tensors=[GGUFTensor(name=str(n), shape=tuple(int(x) for x in s), ggml_type=int(g), offset=int(o))
                               for n, s, g, o in d["tensors"]],
                      array_lengths={str(k): int(v) for k, v in d["array_lengths"].items()}, header_bytes=int(d["header_bytes"]))


def _age_s_text(stamp: str) -> float:
    try:
        return (datetime.now(timezone.utc) - datetime.fromisoformat(stamp)).total_seconds()  # noqa: UP017
    except ValueError:
        return float("inf")


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        tmp.replace(path)
    except (OSError, TypeError, ValueError):
        pass  # a cache that cannot be written costs the next run a fetch, nothing else
