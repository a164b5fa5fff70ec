"""The Hugging Face Hub reader (planner/hub.py) against a real HTTP server on this machine that answers as
the Hub's ``/{repo}/resolve/{revision}/{file}`` does: ``X-Repo-Commit`` on every answer, HTTP Range (206 with
Content-Range), 401 on a gated repository without a token, 404 for a missing file, and large files
redirected to another host (the Hub's CDN), which must never see the token.

CI has no route to huggingface.co, so this server is the Hub here; what the reader must match is the
local folder path (architecture.from_path) over the very same files."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.planner.test_architecture import TINY, _model_folder, _write_safetensors

from sparkops.planner import hub
from sparkops.planner.architecture import (
    ArchitectureError,
    from_config,
    from_path,
    parse_safetensors_header,
    read_safetensors_header,
    resolve,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_secret_token_value_42"


class FakeHub:
    """Files by (repo, name); every request recorded as (host, path, Range, Authorization)."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {}
        self.gated: set[str] = set()
        self.ignore_range = False
        self.redirect_to: str | None = None  # base URL of the CDN server for *.safetensors
        self.log: list[tuple[str, str, str | None, str | None]] = []

    def add_folder(self, repo: str, folder: Path) -> None:
        for f in folder.iterdir():
            self.files[(repo, f.name)] = f.read_bytes()


def _handler(state: FakeHub, cdn: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            state.log.append(("cdn" if cdn else "hub", self.path, self.headers.get("Range"), self.headers.get("Authorization")))
            api = re.fullmatch(r"/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)", self.path)
            if api:  # the Hub's model API: its file list and commit
                names = sorted(n for r, n in state.files if r == api["repo"])
                if not names:
                    return self._send(404, b'{"error":"Repository not found"}')
                return self._send(200, json.dumps({"id": api["repo"], "sha": COMMIT,
                                                   "siblings": [{"rfilename": n} for n in names]}).encode())
            m = re.fullmatch(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<name>.+)", self.path)
            if not m:
                return self._send(404, b"not found")
            repo, name = m["repo"], m["name"]
            if not cdn and repo in state.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, b"Access to model is restricted")
            body = state.files.get((repo, name))
            if body is None:
                return self._send(404, b"Entry not found")
            if not cdn and state.redirect_to and name.endswith(".safetensors"):
                self.send_response(302)
                self.send_header("Location", f"{state.redirect_to}{self.path}")
                self.send_header("X-Repo-Commit", COMMIT)
                self.end_headers()
                return None
            rng = self.headers.get("Range")
            if rng and not state.ignore_range:
                a, b = (int(x) for x in re.fullmatch(r"bytes=(\d+)-(\d+)", rng).groups())  # type: ignore[union-attr]
                part = body[a:b + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {a}-{a + len(part) - 1}/{len(body)}")
                return self._body(part)
            self.send_response(200)
            return self._body(body)

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self._body(body)

        def _body(self, body: bytes) -> None:
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeHub, str, str]]:
    state = FakeHub()
    main = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, cdn=False))
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, cdn=True))
    for s in (main, cdn):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    # two hosts: the Hub on 127.0.0.1, its "CDN" under the name localhost (another netloc)
    yield state, f"http://127.0.0.1:{main.server_port}", f"http://localhost:{cdn.server_port}"
    main.shutdown()
    cdn.shutdown()


@pytest.fixture
def fake(servers: tuple[FakeHub, str, str], tmp_path: Path) -> tuple[FakeHub, hub.HubAccess, str]:
    state, base, cdn = servers
    state.files.clear()
    state.gated.clear()
    state.log.clear()
    state.ignore_range = False
    state.redirect_to = None
    hub._SEEN.clear()
    hub._GGUF_SEEN.clear()
    access = hub.HubAccess(endpoint=base, cache_dir=tmp_path / "cache", timeout_s=5, deadline_s=20)
    return state, access, cdn


# --------------------------------------------------------------------------- the same answer as a local folder


@pytest.mark.parametrize("split", [False, True])
def test_a_hub_model_is_counted_as_the_same_local_folder(fake, tmp_path: Path, split: bool) -> None:
    state, access, _ = fake
    folder = _model_folder(tmp_path / "tiny", split=split)
    state.add_folder("acme/tiny-llama", folder)
    remote = resolve("acme/tiny-llama", env={}, hub=access)
    local = from_path(str(folder), env={})
    assert remote.source == f"hub:acme/tiny-llama@{COMMIT[:12]}"
    assert remote.stored_bytes == local.stored_bytes > 0
    assert remote.model_dump(exclude={"id", "name", "source"}) == local.model_dump(exclude={"id", "name", "source"})
    # only headers were read: every safetensors request is a range, and the config pinned the commit
    st_reqs = [r for r in state.log if r[1].endswith(".safetensors")]
    assert st_reqs and all(r[2] is not None for r in st_reqs)
    assert all(f"/resolve/{COMMIT}/" in r[1] for r in state.log[1:])


def test_a_header_longer_than_the_first_range_takes_a_second_request(fake, tmp_path: Path) -> None:
    state, access, _ = fake
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    tensors = {f"model.extra.{'x' * 200}.{n}.weight": ("BF16", (3, 5)) for n in range(600)}  # ~150 kB of header
    _write_safetensors(folder / "model.safetensors", tensors, {"BF16": 2})
    state.add_folder("acme/long", folder)
    m = hub.fetch_model("acme/long", access)
    assert m.weights is not None and m.weights.stored_bytes == 600 * 3 * 5 * 2 and m.weights.numel == 600 * 15
    ranges = [r[2] for r in state.log if r[1].endswith("model.safetensors")]
    n = struct.unpack("<Q", state.files[("acme/long", "model.safetensors")][:8])[0]
    assert n > hub.FIRST_RANGE and ranges == [f"bytes=0-{hub.FIRST_RANGE - 1}", f"bytes={hub.FIRST_RANGE}-{8 + n - 1}"]


def test_a_server_that_ignores_range_is_read_only_as_far_as_the_header(fake, tmp_path: Path) -> None:
    state, access, _ = fake
    state.ignore_range = True
    state.add_folder("acme/tiny", _model_folder(tmp_path / "tiny"))
    m = hub.fetch_model("acme/tiny", access)
    assert m.weights is not None and m.weights.files == 1
    assert m.weights.by_dtype == {"BF16": m.weights.stored_bytes}


# --------------------------------------------------------------------------- tokens, gates, redirects


def test_a_gated_model_needs_the_token_and_the_cdn_never_sees_it(fake, tmp_path: Path) -> None:
    state, access, cdn = fake
    state.add_folder("meta/gated", _model_folder(tmp_path / "g"))
    state.gated.add("meta/gated")
    state.redirect_to = cdn
    with pytest.raises(ArchitectureError, match="HF_TOKEN") as err:
        hub.fetch_model("meta/gated", access)
    assert "401" in str(err.value)
    m = hub.fetch_model("meta/gated", replace(access, token=TOKEN))
    assert m.weights is not None and m.weights.stored_bytes > 0
    hub_auth = {r[3] for r in state.log if r[0] == "hub" and r[1].endswith("config.json")}
    assert f"Bearer {TOKEN}" in hub_auth
    cdn_reqs = [r for r in state.log if r[0] == "cdn"]
    assert cdn_reqs and all(r[3] is None for r in cdn_reqs)  # redirected to another host: no token
    assert all(r[2] is not None for r in cdn_reqs)  # and still only the header's bytes
    assert TOKEN not in repr(replace(access, token=TOKEN))


def test_the_token_is_read_as_huggingface_hub_reads_it(tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("hf_from_file\n")
    assert hub.access_from_env({"HF_HOME": str(tmp_path / "hf")}).token == "hf_from_file"
    assert hub.access_from_env({"HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "hf_env"}).token == "hf_env"
    assert hub.access_from_env({"HOME": str(tmp_path / "none")}).token is None
    a = hub.access_from_env({"HF_ENDPOINT": "https://hf-mirror.com/", "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": "/x"})
    assert (a.endpoint, a.offline, a.offline_why, a.cache_dir) == (
        "https://hf-mirror.com", True, "HF_HUB_OFFLINE is set", Path("/x/dgx-spark-ops/hub"))
    assert hub.access_from_env({}, offline=True).offline_why == "--offline given"


# --------------------------------------------------------------------------- missing things, offline, cache


def test_no_index_means_one_file_and_no_safetensors_means_the_config_alone(fake, tmp_path: Path) -> None:
    state, access, _ = fake
    state.files[("acme/cfg-only", "config.json")] = json.dumps(TINY).encode()
    arch = resolve("acme/cfg-only", env={}, hub=access)
    assert arch.stored_bytes is None and arch.params_total == from_config(TINY).params_total
    assert any("no safetensors files on the Hub" in n for n in arch.approximate)
    names = [r[1].rsplit("/", 1)[1] for r in state.log]
    assert names == ["config.json", "model.safetensors.index.json", "model.safetensors"]


def test_config_given_as_a_hub_id_is_read_from_the_hub_too(fake, tmp_path: Path) -> None:
    from sparkops.facts.workload import Workload
    from sparkops.planner import serve
    from sparkops.planner.plan import arch_for

    state, access, _ = fake
    state.add_folder("acme/tiny-llama", _model_folder(tmp_path / "t"))
    arch, _ = arch_for(Workload(), config="acme/tiny-llama", env={}, hub=access)
    assert arch.source == f"hub:acme/tiny-llama@{COMMIT[:12]}" and arch.stored_bytes
    assert serve.resolve_shape(None, config="acme/tiny-llama", env={}, hub=access).source == arch.source
    with pytest.raises(ArchitectureError, match="neither a file, a folder nor an HF id in the local cache"):
        arch_for(Workload(), config="acme/tiny-llama", env={})  # without access: as before


def test_a_missing_model_says_so(fake) -> None:
    _, access, _ = fake
    with pytest.raises(ArchitectureError, match="not on the Hub: /acme/nothing/resolve/main/config.json"):
        resolve("acme/nothing", env={}, hub=access)


def test_an_index_naming_a_missing_shard_is_an_error(fake, tmp_path: Path) -> None:
    state, access, _ = fake
    state.add_folder("acme/broken", _model_folder(tmp_path / "b", split=True))
    del state.files[("acme/broken", "model-00002-of-00002.safetensors")]
    with pytest.raises(ArchitectureError, match="model-00002-of-00002.safetensors"):
        hub.fetch_model("acme/broken", access)


def test_the_cache_answers_again_and_offline(fake, tmp_path: Path) -> None:
    state, access, _ = fake
    state.add_folder("acme/tiny", _model_folder(tmp_path / "t"))
    first = hub.fetch_model("acme/tiny", access)
    n = len(state.log)
    assert hub.fetch_model("acme/tiny", access) is first  # this process read it already
    hub._SEEN.clear()  # a later process: the disk cache
    again = hub.fetch_model("acme/tiny", access)
    offline = hub.fetch_model("acme/tiny", replace(access, offline=True, offline_why="--offline given"))
    assert len(state.log) == n  # neither touched the server
    assert again.from_cache and offline.from_cache and not first.from_cache
    assert (again.config, again.weights, again.commit) == (first.config, first.weights, first.commit)
    arch = resolve("acme/tiny", env={}, hub=replace(access, offline=True, offline_why="--offline given"))
    assert any("read from the Hub's cache of" in n for n in arch.approximate)


def test_offline_without_a_cache_is_the_usual_unknown_model(fake) -> None:
    state, access, _ = fake
    off = replace(access, offline=True, offline_why="--offline given")
    with pytest.raises(ArchitectureError, match=r"unknown model 'acme/tiny'.*the Hugging Face Hub was not read \(--offline given\)"):
        resolve("acme/tiny", env={}, hub=off)
    assert state.log == []


def test_an_unreachable_endpoint_is_an_error_not_a_hang(tmp_path: Path) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    access = hub.HubAccess(endpoint=f"http://127.0.0.1:{port}", cache_dir=tmp_path, timeout_s=2, deadline_s=4)
    with pytest.raises(ArchitectureError, match="the Hub is unreachable"):
        hub.fetch_model("acme/tiny", access)
    with pytest.raises(ArchitectureError, match="the Hub is unreachable") as err:  # a mirror URL with a password
        hub.fetch_model("acme/tiny", replace(access, endpoint=f"http://me:pw@127.0.0.1:{port}"))
    assert "pw" not in str(err.value) and "me:" not in str(err.value)


@pytest.mark.parametrize("name", ["acme/tiny", "Qwen/Qwen3.6-27B", "a/b"])
def test_hub_ids(name: str) -> None:
    assert hub.is_hub_id(name)


@pytest.mark.parametrize("name", ["tiny", "/abs/path", "a/b/c", "../x", "a/..", "https://huggingface.co/a/b", "a b/c"])
def test_not_hub_ids(name: str) -> None:
    assert not hub.is_hub_id(name)


def test_without_access_the_planner_never_reads_the_hub(fake) -> None:
    state, _, _ = fake
    with pytest.raises(ArchitectureError, match="unknown model 'acme/tiny'"):
        resolve("acme/tiny", env={})
    assert state.log == []


def test_serving_reads_context_hybrid_and_vision_from_the_hub_config(fake, tmp_path: Path) -> None:
    from sparkops.planner import serve

    state, access, _ = fake
    folder = _model_folder(tmp_path / "m")
    state.add_folder("acme/tiny-llama", folder)
    state.files[("acme/tiny-llama", "config.json")] = json.dumps({**TINY, "max_position_embeddings": 4096}).encode()
    s = serve.resolve_shape("acme/tiny-llama", hub=access)
    assert (s.context_train, s.gdn, s.params_vision, s.source) == (4096, None, 0, f"hub:acme/tiny-llama@{COMMIT[:12]}")
    # a Qwen3.5-style multimodal hybrid: the text model nested in text_config, a vision tower beside it
    qwen35 = {"model_type": "qwen3_5", "tie_word_embeddings": False,
              "text_config": {**TINY, "model_type": "qwen3_5_text", "num_hidden_layers": 4, "full_attention_interval": 2,
                              "layer_types": ["linear_attention", "full_attention"] * 2,
                              "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 4,
                              "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4, "max_position_embeddings": 8192},
              "vision_config": {"hidden_size": 8, "intermediate_size": 16, "depth": 2, "patch_size": 4,
                                "out_hidden_size": 8, "num_position_embeddings": 16}}
    state.files[("acme/tiny-35", "config.json")] = json.dumps(qwen35).encode()
    h = serve.resolve_shape("acme/tiny-35", hub=access)
    assert (h.context_train, h.attn_layers, h.linear_layers) == (8192, 2, 2)
    assert h.gdn == (2, 4, 4, 4, 4) and h.params_vision == serve.vision_params(qwen35["vision_config"]) > 0
    assert h.vision is not None and h.vision.hidden == 8 and h.mtp_layers == 0
    mtp = {**qwen35, "text_config": {**qwen35["text_config"], "mtp_num_hidden_layers": 1}}
    state.files[("acme/tiny-35-mtp", "config.json")] = json.dumps(mtp).encode()
    t = serve.resolve_shape("acme/tiny-35-mtp", hub=access)
    assert t.mtp_layers == 1 and t.mtp_layer_params == serve.mtp_layer_params(mtp["text_config"]) > 0


def test_a_speculative_drafter_on_the_hub_is_counted_with_its_stored_bytes_and_kv_layers(fake, tmp_path: Path) -> None:
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import spec_from_text

    state, access, _ = fake
    # an EAGLE-3 head's config.json as such heads are published (one Llama decoder layer, its own draft vocabulary)
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "vocab_size": 151936, "draft_vocab_size": 32000, "tie_word_embeddings": False}
    folder = tmp_path / "head"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(head))
    stored = 2 * _write_safetensors(folder / "model.safetensors", {"midlayer.self_attn.q_proj.weight": ("BF16", (4096, 8192)),
                                                                    "lm_head.weight": ("BF16", (32000, 4096))},
                                    {"BF16": 1})  # data written at 1 byte each: the header says BF16, 2 bytes
    state.add_folder("acme/Qwen3-8B-eagle3", folder)
    line = ("vllm serve Qwen/Qwen3-8B --max-model-len 8192 --speculative-config "
            """'{"method": "eagle3", "model": "acme/Qwen3-8B-eagle3", "num_speculative_tokens": 3}'""")
    spec = spec_from_text(line)
    d = serve.hub_drafter(spec, access)
    assert d is not None and (d.layers, d.kv_heads, d.head_dim, d.stored_bytes) == (1, 8, 128, stored)
    shape = serve.resolve_shape(spec.model)
    m = serve.machine_from_target("dgx-spark", 4.3)
    with_head = serve.plan_serve(shape, spec, m, drafter=d)
    without = serve.plan_serve(shape, spec, m)  # the catalog does not know the head: named, not counted
    assert with_head.weights_gib == pytest.approx(without.weights_gib + stored / 2**30, abs=0.011)
    assert with_head.kv.bytes_per_token == pytest.approx(without.kv.bytes_per_token + 2 * 8 * 128 * 2)
    assert any("safetensors headers" in n and "acme/Qwen3-8B-eagle3" in n for n in with_head.notes)
    spec_u = next(u for u in with_head.uncertainties if u.term == "speculative")
    assert "weights and KV layers too" in spec_u.assumed
    assert "weights and KV layers too" not in next(u for u in without.uncertainties if u.term == "speculative").assumed
    off = replace(access, offline=True, offline_why="--offline given")
    hub._SEEN.clear()
    assert serve.hub_drafter(spec, replace(off, cache_dir=tmp_path / "empty")) is None  # offline, not cached: as before


# Mistral-Small-3.2-24B's config.json, the fields the counts read (its vision_config as published; text 5120 wide)
MISTRAL3_VISION = {"model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                   "num_attention_heads": 16, "head_dim": 64, "patch_size": 14, "num_channels": 3, "image_size": 1540,
                   "hidden_act": "silu"}


def test_a_pixtral_tower_from_a_hub_config_is_the_catalog_s_published_count(fake) -> None:
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import engines_knowledge

    state, access, _ = fake
    entry = next(e for e in engines_knowledge().models if e.id == "mistral-small-3.2-24b")
    cfg = {"model_type": "mistral3", "spatial_merge_size": 2, "multimodal_projector_bias": False,
           "text_config": dict(entry.config), "vision_config": MISTRAL3_VISION}
    assert serve.pixtral_params(MISTRAL3_VISION, cfg) == entry.vision["params"] == 438_958_080
    state.files[("acme/mistral3-x", "config.json")] = json.dumps(cfg).encode()
    s = serve.resolve_shape("acme/mistral3-x", hub=access)
    assert s.params_vision == 438_958_080 and s.vision is None  # no Qwen3-VL dims: the profile pass stays a note
    with_bias = serve.pixtral_params(MISTRAL3_VISION, {**cfg, "multimodal_projector_bias": True})
    assert with_bias == 438_958_080 + 2 * 5120


def _serving_entries_with_config() -> list:
    from sparkops.planner.serve_engines import engines_knowledge

    return [e for e in engines_knowledge().models if e.config]


@pytest.mark.parametrize("entry", _serving_entries_with_config(), ids=lambda e: e.id)
def test_a_serving_catalog_config_read_from_the_hub_gives_the_catalog_s_shape(fake, entry) -> None:
    """Every config the serving catalog keeps (hybrids, Gemma 4, MiniMax, multimodal Qwen3.x), served as the Hub
    would serve it (the vision tower nested in vision_config): the Hub path counts the same model."""
    from sparkops.planner import serve

    state, access, _ = fake
    cfg = {**entry.config, **({"vision_config": dict(entry.vision)} if entry.vision else {})}
    state.files[(f"acme/{entry.id}-x", "config.json")] = json.dumps(cfg).encode()
    a = serve.resolve_shape(entry.id)
    b = serve.resolve_shape(f"acme/{entry.id}-x", hub=access)
    assert b.source.startswith("hub:")
    fields = ("layers", "attn_layers", "sliding_layers", "sliding_window", "kv_heads", "head_dim", "hidden", "experts",
              "top_k", "expert_intermediate", "vocab", "gdn", "linear_layers", "ssm_state_bytes", "mla_dim",
              "params_expert", "context_train", "mtp_layers", "mtp_layer_params")
    assert {f: getattr(b, f) for f in fields} == {f: getattr(a, f) for f in fields}
    # a family the training planner counts (qwen3) is counted by it on the Hub path, norms included: within 0.01 %
    assert b.params_total == pytest.approx(a.params_total, rel=1e-4)
    assert b.params_linear == pytest.approx(a.params_linear, rel=1e-4)
    if entry.vision and "depth" in entry.vision:  # a Qwen3-VL tower is counted from its config; others carry a count
        assert (b.params_vision, b.vision) == (a.params_vision, a.vision)


# --------------------------------------------------------------------------- GGUF repositories (llama.cpp -hf, Ollama hf.co/)


def _tiny_gguf(file_type: int, gtype: int, *, vocab: int = 1000, tokens: int = 0) -> tuple[bytes, int]:
    """A llama GGUF header (tensors typed ``gtype``) and its exact tensor bytes."""
    from sparkops.planner.gguf import GGML_TYPES, write_header

    meta: dict[str, Any] = {"general.architecture": "llama", "general.name": "tiny", "general.file_type": file_type,
                            "llama.block_count": 2, "llama.embedding_length": 256, "llama.attention.head_count": 4,
                            "llama.attention.head_count_kv": 2, "llama.context_length": 4096}
    if tokens:
        meta["tokenizer.ggml.tokens"] = [f"token-{i:07d}-{'x' * 40}" for i in range(tokens)]  # a long vocabulary
    tensors = [("token_embd.weight", (256, vocab), gtype), ("output.weight", (256, vocab), gtype)]
    for i in range(2):
        tensors += [(f"blk.{i}.attn_q.weight", (256, 256), gtype), (f"blk.{i}.ffn_up.weight", (256, 512), gtype)]
    _, block, size = GGML_TYPES[gtype]
    nbytes = sum(-(-(a * b) // block) * size for _, (a, b), _ in tensors)
    return write_header(meta, tensors), nbytes


def test_a_gguf_repo_is_sized_from_the_header_of_the_tag_asked_for(fake) -> None:
    from sparkops.planner import serve

    state, access, _ = fake
    q4, q4_bytes = _tiny_gguf(15, 12)
    q8, q8_bytes = _tiny_gguf(7, 8)
    repo = "bartowski/acme_Tiny-GGUF"
    state.files |= {(repo, "acme_Tiny-Q4_K_M.gguf"): q4 + b"\0" * 4096, (repo, "acme_Tiny-Q8_0.gguf"): q8,
                    (repo, "mmproj-acme_Tiny-Q8_0.gguf"): q8, (repo, "README.md"): b"# tiny"}
    s = serve.resolve_shape(f"{repo}:Q8_0", hub=access)
    assert (s.gguf_type, s.gguf_bytes, s.layers, s.context_train) == ("Q8_0", q8_bytes, 2, 4096)
    assert s.source == f"gguf:hub:{repo}/acme_Tiny-Q8_0.gguf@{COMMIT[:12]}"
    d = serve.resolve_shape(f"hf.co/{repo}", hub=access)  # no tag: llama.cpp's and Ollama's default, Q4_K_M
    assert (d.gguf_type, d.gguf_bytes) == ("Q4_K_M", q4_bytes)
    assert all(r[2] is not None for r in state.log if r[1].endswith(".gguf"))  # headers only
    with pytest.raises(ArchitectureError, match=r"no GGUF file for :Q2_K; it has Q4_K_M, Q8_0"):
        serve.resolve_shape(f"{repo}:Q2_K", hub=access)


def test_a_split_gguf_counts_every_shard_and_a_long_vocabulary_takes_more_reads(fake) -> None:
    from sparkops.planner import hub as hubmod
    from sparkops.planner import serve

    state, access, _ = fake
    one, b1 = _tiny_gguf(15, 12, tokens=60_000)  # ~3.6 MB of tokenizer: over the first 2 MiB read
    two, b2 = _tiny_gguf(15, 12, vocab=10)
    repo = "acme/Big-GGUF"
    state.files |= {(repo, "Q4_K_M/Big-Q4_K_M-00001-of-00002.gguf"): one,
                    (repo, "Q4_K_M/Big-Q4_K_M-00002-of-00002.gguf"): two}
    s = serve.resolve_shape(f"{repo}:Q4_K_M", hub=access)
    assert s.gguf_bytes == b1 + b2 and len(one) > hubmod.GGUF_FIRST
    first_shard = [r[2] for r in state.log if r[1].endswith("00001-of-00002.gguf")]
    assert first_shard[0] == f"bytes=0-{hubmod.GGUF_FIRST - 1}" and len(first_shard) == 2


def test_a_gguf_repo_offline_falls_back_to_the_catalog_estimate(fake) -> None:
    from sparkops.planner import serve

    state, access, _ = fake
    off = replace(access, offline=True, offline_why="--offline given")
    s = serve.resolve_shape("unsloth/Qwen3-8B-GGUF:Q4_K_M", hub=off)  # llama.cpp -hf, without the Hub
    assert s.gguf_bytes is None and "hub" not in s.source and state.log == []


def test_a_corrupt_cache_is_not_an_answer(fake) -> None:
    state, access, _ = fake
    (access.cache_dir / "acme--tiny").mkdir(parents=True)
    (access.cache_dir / "acme--tiny" / "main.json").write_text("[1, 2]")
    (access.cache_dir / "acme--tiny" / "main.gguf.default.json").write_text('"not a dict"')
    off = replace(access, offline=True, offline_why="--offline given")
    with pytest.raises(hub.HubOffline):
        hub.fetch_model("acme/tiny", off)
    with pytest.raises(hub.HubOffline):
        hub.fetch_gguf("acme/tiny", None, off)


@pytest.mark.parametrize(("files", "tag", "picked"), [
    (["a-Q4_K_M.gguf", "a-Q4_K_S.gguf"], "q4_k_m", ["a-Q4_K_M.gguf"]),
    (["a-UD-Q4_K_XL.gguf", "a-Q4_K_M.gguf"], "UD-Q4_K_XL", ["a-UD-Q4_K_XL.gguf"]),
    (["model.gguf"], None, ["model.gguf"]),  # no Q4 at all, no tag: the first GGUF
    (["a-Q4_0.gguf", "a-Q4_K_M.gguf", "a-Q8_0.gguf"], "q4", ["a-Q4_K_M.gguf"]),  # llama.cpp: Q4_K_M first
    (["a-Q4_0.gguf", "a-Q8_0.gguf"], None, ["a-Q4_0.gguf"]),  # no tag, no Q4_K_M: another Q4
    (["a-Q5_K_S.gguf", "a-Q8_0.gguf"], None, ["a-Q5_K_S.gguf"]),  # no tag, no Q4: the first GGUF
    (["x/a-Q8_0-00002-of-00002.gguf", "x/a-Q8_0-00001-of-00002.gguf", "a-Q4_K_M.gguf"], "Q8_0",
     ["x/a-Q8_0-00001-of-00002.gguf", "x/a-Q8_0-00002-of-00002.gguf"]),
    (["a-IQ4_XS.gguf", "a-Q4_K_M.gguf", "mmproj-a-F16.gguf"], "F16", None),  # a projector is never the model
])
def test_pick_gguf(files: list[str], tag: str | None, picked: list[str] | None) -> None:
    if picked is None:
        with pytest.raises(ArchitectureError, match="no GGUF file for :F16"):
            hub.pick_gguf(files, tag, "r/r")
    else:
        assert hub.pick_gguf(files, tag, "r/r") == picked


# --------------------------------------------------------------------------- property: remote header == local header


_names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
_tensors = st.dictionaries(_names.filter(lambda s: s != "__metadata__"),
                           st.tuples(st.sampled_from(["BF16", "F32", "F8_E4M3", "U8", "I64"]),
                                     st.lists(st.integers(0, 7), max_size=3).map(tuple)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensors=_tensors, first=st.integers(8, 400))
def test_a_remote_header_reads_as_the_local_file(servers, tmp_path_factory, tensors, first) -> None:
    state, base, _ = servers
    state.ignore_range = False
    state.redirect_to = None
    folder = tmp_path_factory.mktemp("prop")
    f = folder / "model.safetensors"
    _write_safetensors(f, tensors, {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I64": 8})
    state.files[("prop/x", "model.safetensors")] = f.read_bytes()
    access = hub.HubAccess(endpoint=base, cache_dir=None, timeout_s=5, deadline_s=20)
    client = hub._Client(access, deadline=__import__("time").monotonic() + 20)
    old = hub.FIRST_RANGE
    hub.FIRST_RANGE = first  # small first ranges force the second request
    try:
        got = hub.remote_header(client, client.url("prop/x", "main", "model.safetensors"), "prop/x")
    finally:
        hub.FIRST_RANGE = old
    assert got == read_safetensors_header(f)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_parse_header_raises_only_its_own_error(blob: bytes) -> None:
    try:
        out = parse_safetensors_header(blob, "x")
    except ArchitectureError:
        return
    assert isinstance(out, dict)


# --------------------------------------------------------------------------- through the CLI


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True, env=env, timeout=120)


def test_plan_and_serve_read_a_hub_model_and_offline_refuses(fake, tmp_path: Path) -> None:
    state, access, _ = fake
    cfg = {**TINY, "max_position_embeddings": 4096}
    folder = _model_folder(tmp_path / "m")
    (folder / "config.json").write_text(json.dumps(cfg))
    state.add_folder("acme/tiny-llama", folder)
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env |= {"HF_ENDPOINT": access.endpoint, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    p = _cli(["plan", "--model", "acme/tiny-llama", "--budget-gb", "100", "--json"], env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert f"hub:acme/tiny-llama@{COMMIT[:12]}" in json.dumps(out)
    s = _cli(["plan", "--serve", "--model", "acme/tiny-llama", "--budget-gb", "100", "--json"], env)
    assert s.returncode in (0, 1), s.stderr  # fits or tight (vLLM takes 0.9 of the 100 GB given)
    assert json.loads(s.stdout)["model"]["source"] == f"hub:acme/tiny-llama@{COMMIT[:12]}"
    t = _cli(["plan", "--serve", "--model", "acme/tiny-llama", "--budget-gb", "100"], env)  # the table says it too
    assert f"read from the Hub: acme/tiny-llama@{COMMIT[:12]}) on vllm" in t.stdout.splitlines()[0]
    env2 = {**env, "XDG_CACHE_HOME": str(tmp_path / "empty")}
    q = _cli(["plan", "--model", "acme/tiny-llama", "--budget-gb", "100", "--offline"], env2)
    assert q.returncode != 0 and "the Hugging Face Hub was not read (--offline given)" in q.stderr + q.stdout
