"""The README's `plan --serve` examples are generated from the code, never pasted by hand.

Each sits between ``<!-- serve-example: ARGS -->`` and ``<!-- /serve-example -->`` (ARGS: the
``spark-ops`` arguments, shell-quoted). ``test_serve.py`` fails when one drifts;
``python tests/planner/serve_readme.py`` rewrites them after a deliberate change. (The general
mechanism in ``tests/readme_examples.py`` appends ``--report``, which ``plan`` does not take.)
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BLOCK = re.compile(r"(<!-- serve-example: (?P<args>.+?) -->\n)(?P<body>.*?)(<!-- /serve-example -->)", re.S)


def render(args_text: str) -> str:
    args = shlex.split(args_text)
    env = {**os.environ, "COLUMNS": "110", "NO_COLOR": "1", "TERM": "dumb"}
    p = subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=120)
    shown = "$ spark-ops " + " ".join(shlex.quote(a) for a in args)
    text = "\n".join(line.rstrip() for line in p.stdout.rstrip("\n").splitlines())
    return f"```\n{shown}      # exit code {p.returncode}\n{text}\n```\n"


def blocks(readme: str) -> list[tuple[str, str]]:
    return [(m.group("args"), m.group("body")) for m in BLOCK.finditer(readme)]


def regenerate(readme: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("args")) + m.group(4), readme)


if __name__ == "__main__":
    README.write_text(regenerate(README.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"rewrote the plan --serve examples in {README}")
