"""Secrets never enter a snapshot: keep only the environment the checks read, mask credentials.

A snapshot is meant to be attached to bug reports, so two filters run before anything is stored:
:func:`redact_env` keeps an allow-list of variables (and masks any whose *name* looks secret, e.g.
``NVIDIA_API_KEY``), and :func:`redact_text` masks credentials inside free text such as process
command lines and URLs. :func:`redact_argv` masks a command line argument by argument, before it is
joined, so that a secret with spaces in it (``--password 'my secret'``) is masked whole. All err on
the side of masking, but leave ordinary flags (``--tokenizer``, ``--max-num-batched-tokens``) alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TypeVar

from sparkops.core.modeling import BaseModel

_M = TypeVar("_M", bound=BaseModel)

MASK = "***"

# Variables the checks read, by exact name.
_KEEP_EXACT = frozenset(
    {
        "CUDA_VISIBLE_DEVICES", "CUDA_VERSION", "CUDA_HOME", "CUDA_PATH", "CUDA_DRIVER_VERSION",
        "CUDNN_VERSION", "CUBLAS_VERSION", "TRT_VERSION", "TRANSFORMER_ENGINE_VERSION",
        "PYTORCH_VERSION", "PYTORCH_BUILD_VERSION", "PYTORCH_BUILD_NUMBER", "PYTORCH_CUDA_ALLOC_CONF",
        "TORCH_CUDA_ARCH_LIST", "TRITON_PTXAS_PATH",
        "HF_HUB_ENABLE_HF_TRANSFER", "HF_XET_HIGH_PERFORMANCE", "HF_HOME", "HF_HUB_OFFLINE",
        "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "NNODES",
        "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "container", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
        "LD_LIBRARY_PATH", "PATH",
    }
)
# ... and by prefix (NVIDIA container/NGC variables, nvidia/cuda image NV_*, NCCL, uv, vLLM).
_KEEP_PREFIXES = ("NVIDIA_", "NV_", "NCCL_", "UV_", "VLLM_", "UNSLOTH_")

# A variable NAME that looks like it holds a secret. Over-matching only costs a masked value.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|KEY|AUTH|COOKIE|PRIVATE|SIGNATURE|SESSION|(^|_)PASS($|_)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True when a variable or flag name suggests its value is a credential."""
    return bool(_SECRET_NAME.search(name))


def _wanted(name: str) -> bool:
    return name in _KEEP_EXACT or name.startswith(_KEEP_PREFIXES)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables the checks need, secrets masked by name and credentials masked in values."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _wanted(name):
            continue
        value = value if isinstance(value, str) else str(value)
        out[name] = MASK if is_secret_name(name) else redact_text(value)
    return dict(sorted(out.items()))


# Credential patterns for free text. Order matters little: every replacement is a fixed point.
# A flag whose value is a credential: --api-key, --hf-token, --secret-key, --auth, --passwd ... The
# secret word must end the flag name, so --tokenizer and --auth-type are not secret flags.
_FLAG_NAMES = (r"(?:[A-Za-z0-9]+[-_])*(?:api[-_]?key|(?:secret|private|access)[-_]?key|token|password|passwd"
               r"|passphrase|secret|credentials?|auth)")
# A NAME in NAME=value / name: value whose value is a credential, any case: hf_token, wandb_api_key,
# AWS_SECRET_ACCESS_KEY, db.password, auth. The secret word is a whole segment of the name
# (max_tokens, tokenizer and author are not), and "key" only counts as the last one (num_key_value_heads).
_SEG = r"[A-Za-z0-9]+"
_SECRET_WORD = r"(?:token|secret|password|passwd|passphrase|credentials?|auth|apikey)"
_SECRET_KEY_NAME = rf"(?:{_SEG}[_.-])*(?:{_SECRET_WORD}(?:[_.-]{_SEG})*|key)"
# A value: a quoted string (spaces and all, plus what sticks to its closing quote) or a run up to
# whitespace (or a quote, after NAME=). A mask is always followed by whitespace, a quote or the end,
# and a value that is exactly such a mask is left alone, so masking twice changes nothing.
_NOT_MASKED = r"(?!\*\*\*(?:[\s'\"]|$))"
_VALUE = r"""(?:'[^'\n]*'|"[^"\n]*")[^\s'"]*|[^\s'"]+"""
_FLAG_VALUE = r"""(?:'[^'\n]*'|"[^"\n]*")\S*|\S+"""
_SUBS: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:pass@host -> scheme://***@host (the authority is everything up to the last @)
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#@]*(?:@[^\s/?#@]*)*@"), r"\1" + MASK + "@"),
    # HTTP auth headers and bearer tokens
    (re.compile(r"(\bAuthorization\s*[:=]\s*)(?:(?:Bearer|Basic|token|Token)\s+)?[^\s'\"]+", re.I),
     r"\1" + MASK),
    (re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]{8,}", re.I), r"\1 " + MASK),
    # --api-key X, --api-key=X, --hf-token X, --token 'X Y', --password=X, --secret-key X ...
    # (after a space a leading "-" starts the next flag; after "=" it is part of the value)
    (re.compile(r"(?<![\w-])(--?" + _FLAG_NAMES + r")(=|[ \t]+(?!-))(?:" + _FLAG_VALUE + ")", re.I),
     r"\1\2" + MASK),
    # SOME_TOKEN=value, AWS_SECRET_ACCESS_KEY: value (upper-case env/config style names)
    (re.compile(r"\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)"
                r"[A-Z0-9_]*)(\s*[=:]\s*)" + _NOT_MASKED + "(?:" + _VALUE + ")"), r"\1\2" + MASK),
    # hf_token=value, wandb_api_key=value, db.password: value (any case, whole-segment names; a URL
    # query parameter is left to the rule below, which stops at the next "&")
    (re.compile(r"(?<![A-Za-z0-9_.?&])(" + _SECRET_KEY_NAME + r")(?![A-Za-z0-9])(\s*[=:]\s*)" + _NOT_MASKED
                + "(?:" + _VALUE + ")", re.I), r"\1\2" + MASK),
    (re.compile(r"\b(aws_secret_access_key|aws_access_key_id|aws_session_token)(\s*[=:]\s*)" + _NOT_MASKED
                + r"([^\s'\"]+)", re.I), r"\1\2" + MASK),
    # token=... in URL query strings
    (re.compile(r"([?&](?:access_token|token|api_key|apikey|key|password|sig|signature|" + _SECRET_KEY_NAME
                + r")=)[^&\s#]+", re.I), r"\1" + MASK),
    # vendor token shapes
    (re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}"), "hf_" + MASK),
    (re.compile(r"(?<![A-Za-z0-9])(gh[pousr])_[A-Za-z0-9]{20,}"), r"\1_" + MASK),
    (re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}"), "github_pat_" + MASK),
    (re.compile(r"(?<![A-Za-z0-9])nvapi-[A-Za-z0-9_\-]{20,}"), "nvapi-" + MASK),
    (re.compile(r"(?<![A-Za-z0-9\-])sk-[A-Za-z0-9_\-]{20,}"), "sk-" + MASK),
    (re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Z0-9])"), MASK),
    (re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9\-]{10,}"), "xox-" + MASK),
)


# ---- rules by shape (issue 17): what a secret looks like, not a list of the names it goes by
# A flag whose LAST name segment says secret: --wandb-key, --key, --db-pass, --auth-token,
# --client-secret, --hf-pat (not --tokenizer, --max-tokens, --auth-type, --key-value-heads).
_SECRET_SEG = r"(?:key|keys|apikey|token|secret|pass|password|passwd|passphrase|pwd|auth|credentials?|pat)"
_FLAG_BY_SHAPE = re.compile(r"(?<![\w-])(--?(?:[A-Za-z0-9]+[-_])*" + _SECRET_SEG + r")(=|[ \t]+(?!-))"
                            + _NOT_MASKED + r"(?:" + _FLAG_VALUE + ")", re.I)
# -u/--user user:password (curl, wget --user, httpie -a); the user name stays.
_USER_PASS_FLAG = re.compile(r"(?<![\w-])(-u|-a|--user|--auth|--proxy-user)([ \t]+|=)([^\s:'\"]+):" + _NOT_MASKED
                             + r"(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)")
# -pPASS glued to -p, for the clients where -p means password (mysql family, sshpass, redis-cli -a X)
_CLIENT_P = re.compile(r"(\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|sshpass)\b[^\n|;&]*?\s-p)"
                       + _NOT_MASKED + r"(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)")
_REDIS_A = re.compile(r"(\bredis-cli\b[^\n|;&]*?\s-a[ \t]+)" + _NOT_MASKED + r"[^\s'\"]+")
# user:password@host without a scheme (git remotes, proxies in env values)
_BARE_USERINFO = re.compile(r"(?<![\w/@:.-])([A-Za-z0-9._%+-]+):(?!\*\*\*@)[^\s@/:'\"]+@(?=[A-Za-z0-9.-]+)")
# NAME=value where the value looks random: >= 20 characters of letters, digits and token
# punctuation, with upper case, lower case and digits all present (hex digests, paths, versions
# and UUIDs have at most two of those classes and are left alone).
_HIGH_ENTROPY = re.compile(r"(?<![\w.-])([A-Za-z_][A-Za-z0-9_.-]*=)(?!\*\*\*)([A-Za-z0-9+/_\-]{20,}={0,2})(?![A-Za-z0-9+/_=-])")


def _entropy_mask(m: re.Match[str]) -> str:
    value = m.group(2)
    classes = sum(bool(re.search(c, value)) for c in ("[a-z]", "[A-Z]", "[0-9]"))
    return m.group(1) + MASK if classes == 3 and _bits_per_char(value) >= 3.5 else m.group(0)


def _bits_per_char(value: str) -> float:
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_SHAPES: tuple[tuple[re.Pattern[str], object], ...] = (
    (_FLAG_BY_SHAPE, r"\1\2" + MASK),
    (_USER_PASS_FLAG, r"\1\2\3:" + MASK),
    (_CLIENT_P, r"\1" + MASK),
    (_REDIS_A, r"\1" + MASK),
    (_BARE_USERINFO, r"\1:" + MASK + "@"),
    (_HIGH_ENTROPY, _entropy_mask),
)


# What each pattern of _SUBS + _SHAPES (same order) cannot match without: strings every match of
# it contains, as written, or lower-cased for the patterns with re.I (on ASCII text only: re.I also
# folds a few non-ASCII letters, e.g. U+017F to "s", so other text runs those patterns unguarded).
# A replacement only keeps matched text or adds "***" and a space, so a string absent before the
# passes is absent after any of them. A pattern whose needs are absent cannot match and is not
# run: a path or a version string meets two or three of the 21 patterns, not all of them
# (tests/test_redact.py checks the guarded pass against the unguarded one on generated text).
_Needs = tuple[tuple[str, ...], tuple[str, ...]]  # (all of these in the text, one of these in its lower case)
_NEEDS: tuple[_Needs, ...] = (
    (("://", "@"), ()),  # scheme://user:pass@host
    ((), ("authorization",)),
    ((), ("bearer", "basic")),
    (("-",), ()),  # --api-key X
    ((), ("=", ":")),  # SOME_TOKEN=value
    ((), ("=", ":")),  # hf_token=value
    ((), ("=", ":")),  # aws_secret_access_key=...
    (("=",), ("?", "&")),  # ?token=...
    (("hf_",), ()),
    (("gh", "_"), ()),
    (("github_pat_",), ()),
    (("nvapi-",), ()),
    (("sk-",), ()),
    ((), ()),  # AKIA... (any of eight prefixes; cheap enough to always run)
    (("xox", "-"), ()),
    (("-",), ()),  # _FLAG_BY_SHAPE
    (("-",), ()),  # _USER_PASS_FLAG
    (("-p",), ()),  # _CLIENT_P
    (("redis-cli",), ()),  # _REDIS_A
    ((":", "@"), ()),  # _BARE_USERINFO
    (("=",), ()),  # _HIGH_ENTROPY
)


def _passes() -> tuple[tuple[re.Pattern[str], object, frozenset[str], frozenset[str]], ...]:
    # strict: a pattern added without its entry in _NEEDS fails at import, not silently
    return tuple((pattern, repl, frozenset(every), frozenset(anyof))
                 for (pattern, repl), (every, anyof) in zip((*_SUBS, *_SHAPES), _NEEDS, strict=True))


_PASSES = _passes()
_CASED_NEEDS = tuple(sorted({s for every, _ in _NEEDS for s in every}))
_LOWER_NEEDS = tuple(sorted({s for _, anyof in _NEEDS for s in anyof}))


def redact_text(text: str) -> str:
    """Mask credentials in free text (command lines, URLs, log lines)."""
    if not text:
        return text
    present = {s for s in _CASED_NEEDS if s in text}  # each need looked for once, not once per pattern
    lower = text.lower() if text.isascii() else None
    present_lower = {s for s in _LOWER_NEEDS if s in lower} if lower is not None else None
    for pattern, repl, every, anyof in _PASSES:
        if every <= present and (not anyof or present_lower is None or not anyof.isdisjoint(present_lower)):
            text = pattern.sub(repl, text)  # type: ignore[arg-type]
    return text


def redact_text_unguarded(text: str) -> str:
    """:func:`redact_text` running every pattern (the reference the guarded pass is tested against)."""
    if not text:
        return text
    for pattern, repl in (*_SUBS, *_SHAPES):
        text = pattern.sub(repl, text)  # type: ignore[arg-type]
    return text


def redact_obj(obj: object, _depth: int = 0) -> object:
    """The one pass over everything that leaves the tool: every string in a JSON-like structure
    (dict keys kept, values masked) goes through :func:`redact_text`. Idempotent."""
    if isinstance(obj, str):
        return redact_text(obj)
    if _depth > 100:
        return obj
    if isinstance(obj, dict):
        return {k: redact_obj(v, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(v, _depth + 1) for v in obj]
    return obj


# One argument of a command line: a secret flag (its value is the next argument or after "="),
# or NAME=value with a secret-looking NAME (``env HF_TOKEN=x``, ``hf_token=x`` style options).
_SECRET_FLAG = re.compile(r"--?" + _FLAG_NAMES, re.I)
_SECRET_ASSIGN_NAME = re.compile(_SECRET_KEY_NAME, re.I)
_LONG_OR_SHORT_FLAG = re.compile(r"--(?:[A-Za-z]|$)|-[A-Za-z]$")  # --port, -p, "--"; not "-x7!a"


def redact_argv(argv: list[str]) -> list[str]:
    """Mask credentials in a command line argument by argument, before it is joined.

    The argument after a secret flag (``--api-key``, ``--password``, ``--secret-key`` ...) is masked
    whole, spaces and all, unless it is itself a flag; ``--flag=value`` and ``NAME=value`` with a
    secret-looking name keep their name and lose the value. Every other argument goes through
    :func:`redact_text`.
    """
    out: list[str] = []
    value_follows = False
    for arg in argv:
        arg = arg if isinstance(arg, str) else str(arg)
        if value_follows and arg and not _LONG_OR_SHORT_FLAG.match(arg):
            out.append(MASK)
            value_follows = False
            continue
        value_follows = False
        name, eq, value = arg.partition("=")
        if arg.startswith("-") and _SECRET_FLAG.fullmatch(name):
            if eq:
                out.append(f"{name}={MASK}" if value else arg)
            else:
                out.append(arg)
                value_follows = True
            continue
        if eq and value and _SECRET_ASSIGN_NAME.fullmatch(name):
            out.append(f"{name}={MASK}")
            continue
        out.append(redact_text(arg))
    return out


def redact_model(model: _M) -> _M:
    """The model with every string through the one redaction pass (:func:`redact_obj`): what a
    check quoted from a config or a command line cannot carry a credential out."""
    return type(model).model_validate(redact_obj(model.model_dump(mode="json")))
