"""``spark-ops fix G3``: registered on the main app; heavy imports inside the command."""

from __future__ import annotations

import sys
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("fix")
    def fix_cmd(
        gotcha: Annotated[str, typer.Argument(help="The gotcha to act on: G3 (the page cache / fragmentation).")],
        compact: Annotated[bool, typer.Option("--compact", help="Compact memory (/proc/sys/vm/compact_memory: "
                           "regroups free pages into large blocks, G3.fragmented) instead of dropping the page "
                           "cache.")] = False,
        apply: Annotated[bool, typer.Option("--apply", help="Do it (root, on the host). Without it: show what "
                         "would be done and the numbers now.")] = False,
        yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
        force: Annotated[bool, typer.Option("--force", help="Even while a training or serving process runs "
                         "(it will slow down while the cache refills).")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> int:
        """Act on G3, with consent: drop the page cache (sync; 3 > /proc/sys/vm/drop_caches) or, with --compact,
        compact memory. Only with --apply, as root, on the host: refused inside a container and while a
        training or serving process runs (unless --force); asks first unless --yes; prints MemFree,
        MemAvailable, the page cache and free large blocks before and after. Exit 0 done or dry run,
        1 refused or declined, 3 the write failed."""
        from sparkops.fix import g3

        if gotcha.strip().upper() not in ("G3", "3"):
            raise typer.BadParameter(f"{gotcha!r}: only G3 has an automatic fix", param_hint="GOTCHA")
        interactive = sys.stdin.isatty() and not as_json
        from sparkops.knowledge import load

        res = g3.fix_g3("compact" if compact else "drop-caches", apply=apply, yes=yes, force=force, kb=load(),
                        confirm=(lambda q: typer.confirm(q, default=False)) if interactive else None)
        sys.stdout.write(res.model_dump_json(indent=2) + "\n" if as_json else g3.render(res))
        return res.exit_code
