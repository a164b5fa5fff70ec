"""The README's example outputs are generated from the code, never pasted by hand.

Each example sits between ``<!-- example: ARGS -->`` and ``<!-- /example -->``: ARGS are the
``spark-ops`` arguments that replay a recorded snapshot (``--facts tests/fixtures/facts/...``), the
block shows the command as a user types it (``--facts`` dropped) and its real output. The test in
``test_readme_examples.py`` fails when an example drifts; ``python tests/readme_examples.py``
rewrites them after a deliberate change.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BLOCK = re.compile(r"(<!-- example: (?P<args>.+?) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)
WIDTH = "110"  # the terminal width the examples are rendered at


def shown(args: list[str]) -> str:
    """The command as the user types it: the replayed snapshot is the machine, not an argument."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--facts":
            skip = True
            continue
        out.append(shlex.quote(a) if any(c in a for c in " '\"") else a)
    return "$ spark-ops " + " ".join(out)


def render(args_text: str) -> str:
    args = shlex.split(args_text)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "COLUMNS": WIDTH, "NO_COLOR": "1", "TERM": "dumb"}
        p = subprocess.run([sys.executable, "-m", "sparkops", *args, "--report", str(Path(tmp) / "r.json")],
                           capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    text = "\n".join(line.rstrip() for line in p.stdout.rstrip("\n").splitlines())
    return f"```\n{shown(args)}      # exit code {p.returncode}\n{text}\n```\n"


def regenerate(readme: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("args")) + m.group(4), readme)


def main() -> None:
    README.write_text(regenerate(README.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"rewrote the examples in {README}")


if __name__ == "__main__":
    main()
