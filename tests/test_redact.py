"""Secrets never reach a snapshot: the env allow-list and the free-text credential masks."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sparkops.facts.redact import MASK, redact_argv, redact_env, redact_text, redact_text_unguarded

ALNUM = string.ascii_letters + string.digits


# --------------------------------------------------------------------------- redact_env
def test_env_keeps_what_checks_read_and_drops_the_rest():
    env = {
        "CUDA_VISIBLE_DEVICES": "0",
        "NVIDIA_PYTORCH_VERSION": "25.09",
        "PYTORCH_VERSION": "2.9.0a0+50eac81",
        "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
        "WORLD_SIZE": "2",
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
        "container": "podman",
        "PATH": "/usr/local/cuda/bin:/usr/bin",
        "HOME": "/home/spark",
        "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
        "OPENAI_API_KEY": "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
        "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1",
        "LS_COLORS": "rs=0:di=01;34",
    }
    out = redact_env(env)
    assert out["CUDA_VISIBLE_DEVICES"] == "0"
    assert out["NVIDIA_PYTORCH_VERSION"] == "25.09"
    assert out["WORLD_SIZE"] == "2"
    assert out["container"] == "podman"
    assert out["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    for dropped in ("HOME", "HF_TOKEN", "OPENAI_API_KEY", "SSH_AUTH_SOCK", "LS_COLORS"):
        assert dropped not in out
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in repr(out)


@pytest.mark.parametrize("name", ["NVIDIA_API_KEY", "NGC_API_KEY_X", "VLLM_API_KEY", "UV_PUBLISH_TOKEN",
                                  "UV_INDEX_PRIVATE_PASSWORD", "NCCL_SECRET", "NV_CREDENTIALS"])
def test_env_masks_kept_variables_whose_name_looks_secret(name):
    out = redact_env({name: "s3cr3t-value-1234567890"})
    if name in out:  # NGC_API_KEY_X is not on the allow-list at all
        assert out[name] == MASK
    assert "s3cr3t-value" not in repr(out)


def test_env_masks_credentials_inside_kept_values():
    out = redact_env({"UV_INDEX_URL": "https://alice:pa55word@pypi.internal.example/simple",
                      "PATH": "/usr/bin"})
    assert out["UV_INDEX_URL"] == "https://***@pypi.internal.example/simple"
    assert "pa55word" not in out["UV_INDEX_URL"]


# --------------------------------------------------------------------------- redact_text
@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        ("vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.5 --api-key sk-abc123def456ghi789jkl012",
         "sk-abc123def456ghi789jkl012", "--gpu-memory-utilization 0.5"),
        ("vllm serve Qwen/Qwen3-8B --api-key=localtestkey --port 8000", "localtestkey", "--port 8000"),
        ("python -m sglang.launch_server --model-path x --api-key 'my key'", "'my", "--model-path x"),
        ("huggingface-cli download meta-llama/Llama-3.1-8B --token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
         "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "meta-llama/Llama-3.1-8B"),
        ("text-generation-launcher --model-id x --hf-token hf_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
         "hf_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "--model-id x"),
        ("git clone https://oauth2:glpat-Ab12Cd34@gitlab.example.com/team/repo.git", "glpat-Ab12Cd34",
         "gitlab.example.com/team/repo.git"),
        ("pip install -i https://user:hunter2@pypi.example.com/simple torch", "hunter2", "pypi.example.com/simple"),
        ("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc' https://api.x",
         "eyJhbGciOiJIUzI1NiJ9", "https://api.x"),
        ("gh auth login --with-token ghp_1234567890abcdefghijABCDEFGHIJ123456", "ghp_1234567890abcdefghij",
         "gh auth login"),
        ("GH_TOKEN=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz gh issue list",
         "github_pat_11ABCDEFG0123456789", "gh issue list"),
        ("docker login nvcr.io -u '$oauthtoken' -p nvapi-AbCdEfGhIjKlMnOpQrStUvWxYz-0123456789_abcdefgh",
         "nvapi-AbCdEfGhIjKlMnOpQrStUvWxYz", "docker login nvcr.io"),
        ("aws s3 cp s3://bucket/model . # AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "s3://bucket/model"),
        ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI", "export"),
        ("https://huggingface.co/api/models?token=abcdef123456&full=1", "abcdef123456", "full=1"),
        # lower-case NAME=value, extended flag names, quoted values with spaces
        ("python train.py hf_token=abc123 --epochs 1", "abc123", "--epochs 1"),
        ("wandb_api_key=abc python train.py", "=abc", "python train.py"),
        ("accelerate launch t.py --report_to wandb WANDB_API_KEY=Zz9yX8wV7u", "Zz9yX8wV7u", "--report_to wandb"),
        ("s3cmd --access-key AKIAxx0123 --secret-key wJalrXUtnFEMIK7 ls", "wJalrXUtnFEMIK7", "ls"),
        ("s3cmd --access-key AKIAxx0123 --secret-key wJalrXUtnFEMIK7 ls", "AKIAxx0123", "s3cmd"),
        ("signer --private-key=0xdeadbeefcafe --chain 1", "0xdeadbeefcafe", "--chain 1"),
        ("proxy --auth alice:s3cret --port 3128", "alice:s3cret", "--port 3128"),
        ("mysql --passwd hunter2 -h db", "hunter2", "-h db"),
        ("app --password 'my secret' --port 80", "secret", "--port 80"),
        ('app --db.password="two words" --port 80', "two words", "--port 80"),
        ("db.password: hunter2 user: bob", "hunter2", "user: bob"),
        ("export HF_TOKEN='abc def', then run", "abc def", "then run"),
        ("https://x.example/a?hf_token=abcdef123456&full=1", "abcdef123456", "full=1"),
    ],
)
def test_text_masks_realistic_credentials(text, secret, kept):
    out = redact_text(text)
    assert secret not in out
    assert kept in out
    assert MASK in out


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve Qwen/Qwen3-30B-A3B-FP8 --gpu-memory-utilization 0.85 --max-num-batched-tokens 8192",
        "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-static 0.8 --tokenizer-mode auto",
        "torchrun --nnodes 2 --nproc_per_node 1 train_fsdp.py --config fsdp.yaml",
        "see https://github.com/NVIDIA/dgx-spark-playbooks/issues/102 for details",
        "/usr/local/cuda/bin:/usr/bin:/home/spark/.local/bin",
        "vllm serve x --max-model-len 4096 --kv-cache-dtype fp8 --tokenizer meta-llama/Llama-3.1-8B-Instruct",
        "vllm serve x --tokenizer=meta-llama/Llama-3.1-8B-Instruct --max-tokens 512",
        "python gen.py max_tokens=512 num_key_value_heads=8 author=me keyboard=us",
        "python -m sglang.launch_server --model-path x --auth-type none --ssl-keyfile /etc/ssl/k.pem",
        "trl sft --model_name_or_path Qwen/Qwen2.5-7B --max_seq_length 2048 --packing",
    ],
)
def test_text_leaves_ordinary_command_lines_alone(text):
    assert redact_text(text) == text
    assert " ".join(redact_argv(text.split())) == text


# --------------------------------------------------------------------------- redact_argv
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["app", "--password", "my secret", "--port", "80"], ["app", "--password", MASK, "--port", "80"]),
        (["app", "--api-key=my key", "-p", "80"], ["app", f"--api-key={MASK}", "-p", "80"]),
        (["s3", "--secret-key", "a b c", "--access-key", "AK", "--private_key", "pk"],
         ["s3", "--secret-key", MASK, "--access-key", MASK, "--private_key", MASK]),
        (["env", "hf_token=abc def", "HF_TOKEN=x", "wandb_api_key=abc", "python", "t.py"],
         ["env", f"hf_token={MASK}", f"HF_TOKEN={MASK}", f"wandb_api_key={MASK}", "python", "t.py"]),
        (["proxy", "--auth", "alice:pw", "--passwd", "pw 2"], ["proxy", "--auth", MASK, "--passwd", MASK]),
        # a secret flag followed by another flag: nothing to mask, the next flag is kept
        (["gh", "auth", "login", "--with-token", "--hostname", "github.com"],
         ["gh", "auth", "login", "--with-token", "--hostname", "github.com"]),
        (["x", "--token", "--", "arg"], ["x", "--token", "--", "arg"]),
        # a secret that starts with a dash is still a value, not a flag
        (["x", "--password", "-x7!a"], ["x", "--password", MASK]),
        # other arguments still go through redact_text
        (["sh", "-c", "curl -H 'Authorization: Bearer abcdefghijkl' --password 'a b' https://h"],
         ["sh", "-c", f"curl -H 'Authorization: {MASK}' --password {MASK} https://h"]),
        (["vllm", "serve", "x", "--tokenizer", "meta-llama/Llama-3.1-8B", "--max-model-len", "4096"],
         ["vllm", "serve", "x", "--tokenizer", "meta-llama/Llama-3.1-8B", "--max-model-len", "4096"]),
        (["x", "--token="], ["x", "--token="]),
        ([], []),
    ],
)
def test_argv_masks_whole_arguments(argv, expected):
    assert redact_argv(argv) == expected


def test_argv_fixes_the_joined_space_leak():
    """Joining first turned ``--password 'my secret'`` into ``--password *** secret``."""
    argv = ["app", "--password", "my secret", "--port", "80"]
    assert "secret" not in redact_text(" ".join(redact_argv(argv)))


# --------------------------------------------------------------------------- properties
def _alnum(n_min: int, n_max: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=ALNUM, min_size=n_min, max_size=n_max)


# (secret strategy, template that embeds it). The template is what a real log/cmdline looks like.
SECRETS = st.one_of(
    st.tuples(_alnum(34, 40).map(lambda s: "hf_" + s), st.just("{s}")),
    st.tuples(_alnum(36, 40).map(lambda s: "ghp_" + s), st.just("{s}")),
    st.tuples(_alnum(36, 40).map(lambda s: "gho_" + s), st.just("{s}")),
    st.tuples(st.tuples(_alnum(22, 22), _alnum(59, 59)).map(lambda t: f"github_pat_{t[0]}_{t[1]}"),
              st.just("{s}")),
    st.tuples(st.text(alphabet=ALNUM + "-_", min_size=64, max_size=70).map(lambda s: "nvapi-" + s),
              st.just("{s}")),
    st.tuples(_alnum(20, 48).map(lambda s: "sk-" + s), st.just("{s}")),
    st.tuples(_alnum(20, 40).map(lambda s: "sk-proj-" + s), st.just("{s}")),
    st.tuples(st.text(alphabet=string.ascii_uppercase + string.digits, min_size=16, max_size=16)
              .map(lambda s: "AKIA" + s), st.just("{s}")),
    st.tuples(st.text(alphabet=ALNUM + "._-", min_size=12, max_size=60), st.just("Authorization: Bearer {s}")),
    st.tuples(st.text(alphabet=ALNUM + "._-", min_size=12, max_size=60), st.just("Bearer {s}")),
    st.tuples(st.text(alphabet=ALNUM + "!$%^*", min_size=6, max_size=30),
              st.sampled_from(["--api-key {s}", "--api-key={s}", "--token {s}", "--hf-token {s}",
                               "--hf_token={s}", "--password {s}", "--secret-key {s}", "--secret_key={s}",
                               "--access-key {s}", "--private-key {s}", "--Private-Key={s}", "--auth {s}",
                               "--passwd {s}", "--basic-auth={s}", "--client-secret {s}"])),
    # NAME=value / name: value, any case
    st.tuples(st.text(alphabet=ALNUM + "!$%^*", min_size=6, max_size=30),
              st.sampled_from(["hf_token={s}", "wandb_api_key={s}", "HF_TOKEN={s}", "Api_Key={s}", "key={s}",
                               "db.password={s}", "my_secret: {s}", "auth={s}", "GITHUB_TOKEN = {s}",
                               "aws_secret_access_key={s}", "smtp-passwd={s}", "credentials={s}"])),
    # quoted values with spaces in them
    st.tuples(st.tuples(_alnum(3, 12), st.text(alphabet=ALNUM + " !$%^*", min_size=1, max_size=20))
              .map(lambda t: f"{t[0]} {t[1]}"),
              st.sampled_from(["--password '{s}'", '--api-key "{s}"', "--secret-key='{s}'", "hf_token='{s}'",
                               'HF_TOKEN="{s}"', "wandb_api_key='{s}',"])),
    st.tuples(st.tuples(_alnum(3, 12), _alnum(8, 30)).map(lambda t: f"{t[0]}:{t[1]}"),
              st.sampled_from(["https://{s}@host.example/x", "http://{s}@10.0.0.5:8080/",
                               "git+https://{s}@github.com/org/repo.git"])),
)
SEPARATORS = st.sampled_from([" ", "\n", "\t", " ; ", ", ", " | ", "\n\n"])


@settings(max_examples=400, deadline=None)
@given(secret=SECRETS, before=st.text(max_size=60), after=st.text(max_size=60), sep1=SEPARATORS, sep2=SEPARATORS)
def test_a_secret_embedded_in_any_text_never_survives(secret, before, after, sep1, sep2):
    value, template = secret
    assume(value not in before and value not in after)  # the same string unprotected elsewhere is not a leak
    assume(value not in template)  # nor is a "secret" that spells part of the flag name
    text = before + sep1 + template.format(s=value) + sep2 + after
    out = redact_text(text)
    assert value not in out


SECRET_FLAGS = st.sampled_from(["--api-key", "--token", "--hf-token", "--hf_token", "--password", "--passwd",
                                 "--secret-key", "--access-key", "--private-key", "--auth", "-token", "--Secret_Key"])
SECRET_NAMES = st.sampled_from(["hf_token", "HF_TOKEN", "wandb_api_key", "key", "db.password", "auth", "GH_TOKEN"])
OTHER_ARGS = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(
    ["vllm", "serve", "--port", "8000", "--tokenizer", "meta-llama/x", "--max-model-len", "4096", "-p", "--"])),
    max_size=6)


@settings(max_examples=400, deadline=None)
@given(before=OTHER_ARGS, after=OTHER_ARGS, flag=SECRET_FLAGS, name=SECRET_NAMES,
       value=st.tuples(_alnum(6, 10), st.text(alphabet=ALNUM + " !$%^*'\"", max_size=20)).map("".join),
       shape=st.sampled_from(["flag value", "flag=value", "NAME=value"]))
def test_a_secret_argument_never_survives_redact_argv(before, after, flag, name, value, shape):
    others = " ".join([*before, flag, name, *after])
    # the value must not be readable from the other arguments either (before=['000000'] and the value
    # '000000 ' meet across the joining space: that text was never the secret's)
    assume(value not in others and value.strip() not in others)
    if shape == "flag value":
        secret = [flag, value]
    elif shape == "flag=value":
        secret = [f"{flag}={value}"]
    else:
        secret = [f"{name}={value}"]
    out = redact_argv(before + secret + after)
    assert len(out) == len(before + secret + after)
    assert value not in " ".join(out)
    assert value not in redact_text(" ".join(out))  # what the process probe stores


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=10))
def test_redact_argv_never_crashes_and_keeps_the_argument_count(argv):
    out = redact_argv(argv)
    assert len(out) == len(argv) and all(isinstance(a, str) for a in out)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_redact_text_never_crashes_and_is_idempotent(text):
    once = redact_text(text)
    assert isinstance(once, str)
    assert redact_text(once) == once


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=30), st.text(max_size=80), max_size=20))
def test_redact_env_never_crashes_and_only_keeps_allowed_names(env):
    out = redact_env(env)
    assert set(out) <= set(env)
    for name, value in out.items():
        assert isinstance(value, str)
        if any(w in name.upper() for w in ("TOKEN", "SECRET", "PASSWORD", "KEY")):
            assert value == MASK


# Pieces of the shapes the patterns look for, so generated text often meets (and nearly meets)
# each pattern's needs: the guarded pass must mask exactly what running every pattern masks.
_PIECES = ("https://", "user:pw@", "@host", "Authorization: ", "Bearer ", "basic ", "BASIC ", "--api-key ",
           "--token=", "-p", "-u ", "mysql ", "redis-cli -a ", "HF_TOKEN=", "hf_token: ", "?token=", "&key=",
           "hf_", "ghp_", "github_pat_", "nvapi-", "sk-", "AKIA", "xoxb-", "=", ":", "@", "-", "_", " ", "'",
           '"', "a" * 20, "Ab3" * 8, "0123456789abcdefghij", "AWS_SECRET_ACCESS_KEY=", "aws_session_token:",
           "db.password=", "--wandb-key ", "--proxy-user ", "ſ", "İ", "K", "\n")


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)), max_size=14))
def test_the_guarded_pass_masks_exactly_what_every_pattern_masks(pieces):
    text = "".join(pieces)
    assert redact_text(text) == redact_text_unguarded(text)


@pytest.mark.parametrize("text", ["Authorization: token abcdefgh12345", "x Bearer abcdefgh12345678",
                                  "baſic abcdefgh12345678", "BASIC dXNlcjpwYXNz12345678", "AUTHORİZATION: x", "curl -u bob:hunter2 https://h",
                                  "mysql -pHunter2 db", "redis-cli -a hunter2", "git@ssh.example:org/repo",
                                  "app --privatekey hunter2"])
def test_the_guarded_pass_on_case_and_non_ascii_corners(text):
    assert redact_text(text) == redact_text_unguarded(text)
