"""Which serving engine a pasted launch line starts, read once for the workload parser and the planner.

A ``docker run ... vllm/vllm-openai:v0.34.0 --model X`` line says "serve with vLLM 0.34" as plainly as
``vllm serve X`` does; preflight's workload reader and ``plan --serve``'s command parser must agree
on that, so both call this (a copy had let preflight see a docker line as no workload at all).
"""

from __future__ import annotations

import re
import shlex

# vLLM's official image (``docker run ... vllm/vllm-openai:v0.10.1 --model X``): its entrypoint is the OpenAI server,
# so the arguments after the image are the engine's; its tag names the version whose accounting applies
VLLM_IMAGE = re.compile(r"^(?:[\w.-]+(?::\d+)?/)?vllm/vllm-openai(?::(?P<tag>[\w.+-]+))?(?:@sha256:[0-9a-f]+)?$")
_RELEASE_TAG = re.compile(r"^v?(?P<v>\d+\.\d+(?:\.\d+)?)(?:$|[-+.])")
# SGLang's image (``docker run ... lmsysorg/sglang:v0.5.4-cu130 python3 -m sglang.launch_server ...``): the command
# after it starts the server; its tag names the release (``v0.5.4.post1-cu129``); ``latest``, ``dev``, ``spark`` move
SGLANG_IMAGE = re.compile(r"^(?:[\w.-]+(?::\d+)?/)?lmsysorg/sglang(?::(?P<tag>[\w.+-]+))?(?:@sha256:[0-9a-f]+)?$")
_SGLANG_TAG = re.compile(r"^v?(?P<v>\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)(?:$|[-+])")  # v0.5.4-cu130, v0.5.3rc0


def image_version(token: str) -> str | None:
    """The vLLM version a ``vllm/vllm-openai:TAG`` image token names (``v0.10.1``, ``0.11.0-cu130`` -> 0.10.1,
    0.11.0); None for another token, no tag, or a moving tag (``latest``, ``nightly``: not a version)."""
    m = VLLM_IMAGE.match(token)
    if not m or not m.group("tag"):
        return None
    r = _RELEASE_TAG.match(m.group("tag"))
    return r.group("v") if r else None


def sglang_image_version(token: str) -> str | None:
    """The SGLang release a ``lmsysorg/sglang:TAG`` image token names (``v0.5.4-cu130`` -> 0.5.4,
    ``v0.5.4.post1-cu129-amd64`` -> 0.5.4.post1); None for another token, no tag, or a moving tag."""
    m = SGLANG_IMAGE.match(token)
    if not m or not m.group("tag"):
        return None
    r = _SGLANG_TAG.match(m.group("tag"))
    return r.group("v") if r else None


def detect_engine(tokens: list[str]) -> tuple[str | None, int]:
    """(engine, index of the first argument after the engine's command) in a split launch line; (None, 0) when
    no serving engine starts there. Engines: vllm, sglang, llama.cpp, ollama, trtllm."""
    for i, t in enumerate(tokens):
        base = t.rsplit("/", 1)[-1]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if VLLM_IMAGE.match(t) and not any(x.rsplit("/", 1)[-1] == "vllm" for x in tokens[i + 1:i + 2]):
            return "vllm", i + 1  # the image's entrypoint is the server: what follows is its arguments
        if base == "vllm" and nxt == "serve":
            return "vllm", i + 2
        if base in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
            return "vllm", i + 1
        if base in ("sglang.launch_server",) or (base == "sglang" and nxt in ("serve", "launch_server")):
            return "sglang", i + (1 if base != "sglang" else 2)
        if base in ("llama-server", "llama-cli", "llama-cpp-server", "server") and (base != "server" or i == 0):
            return "llama.cpp", i + 1
        if base == "ollama" and nxt in ("run", "serve", "pull"):
            return "ollama", i + 2
        if base == "trtllm-serve":
            return "trtllm", i + 1 + (nxt == "serve")
    return None, 0


def split_words(text: str) -> list[str]:
    """A pasted line's words as a shell splits them (backslash line continuations joined); never raises: an
    unbalanced quote falls back to splitting on whitespace."""
    try:
        return shlex.split(re.sub(r"\\\s*\n", " ", text), comments=False, posix=True)
    except ValueError:
        return text.split()


def is_launch_line(text: str) -> bool:
    """Does the text start a serving engine (a pasted `vllm serve ...`, `docker run ... vllm/vllm-openai ...`,
    `OLLAMA_NUM_PARALLEL=2 ollama run ...`), rather than mention one in a sentence ("grpo qwen2.5-7b with trl,
    rollouts from vllm serve")? The engine's command is the first thing after any VAR=value, a container runner's
    options or a python launcher."""
    tokens = [t for t in split_words(text) if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", t)]
    if not tokens or detect_engine(tokens)[0] is None:
        return False
    head = tokens[0].rsplit("/", 1)[-1].lower()
    return head in ("vllm", "python", "python3", "docker", "podman", "nerdctl", "sudo", "uv", "uvx", "llama-server",
                    "llama-cli", "ollama", "trtllm-serve", "sglang", "srun", "mpirun", "torchrun", "exec")


def engine_in_text(text: str) -> str | None:
    """The serving engine a free-text workload's launch line starts, if any; never raises (an unbalanced quote
    falls back to splitting on whitespace)."""
    return detect_engine(split_words(text))[0]
