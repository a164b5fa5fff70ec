"""``spark-ops fleet`` outside a launcher, and without torch: exit 3 with a message that says what to do."""

from __future__ import annotations

import os
import subprocess
import sys

LAUNCH = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29599"}


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in (*LAUNCH, "LOCAL_RANK", "TORCHELASTIC_RUN_ID")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def test_without_the_launcher_variables_it_says_how_to_launch():
    res = _run("from sparkops.cli import main; main(['fleet'])", {})
    assert res.returncode == 3
    assert "not launched by torch.distributed: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set" in res.stderr
    assert "torchrun --nnodes 2 --nproc-per-node 1" in res.stderr and "Traceback" not in res.stderr


def test_without_torch_it_says_so():
    # torch made unimportable in this interpreter, whether or not it is installed here
    res = _run("import sys; sys.modules['torch'] = None\nfrom sparkops.cli import main; main(['fleet'])", LAUNCH)
    assert res.returncode == 3
    assert "cannot import torch" in res.stderr and "spark-ops fleet runs inside the training environment" in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_options_are_usage_errors_before_anything_starts():
    for args, hint in ((["fleet", "--backend", "mpi"], "--backend"), (["fleet", "--join-timeout", "0"], "--join-timeout"),
                       (["fleet", "--test-fake-facts", "one=x.json"], "--test-fake-facts")):
        res = _run(f"import sys; sys.modules['torch'] = None\nfrom sparkops.cli import main; main({args!r})", LAUNCH)
        assert res.returncode == 3, args
        assert hint in res.stderr and "torch" not in res.stderr, res.stderr


def test_help_lists_the_options_and_hides_the_test_ones():
    res = _run("from sparkops.cli import main; main(['fleet', '--help'])", {})
    assert res.returncode == 0
    for opt in ("--backend", "--join-timeout", "--collective-timeout", "--no-bandwidth", "--report", "--json",
                "--quick", "--container", "--workload"):
        assert opt in res.stdout, opt
    assert "--test-" not in res.stdout
