"""``spark-ops fix G3``: heavy imports inside the command."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands.contract import OutputFormat, Result, chosen, emit, format_option

if TYPE_CHECKING:
    from sparkops.fix.g3 import FixResult


class FixOutcome(Result["FixResult"]):
    """G3's fix, done or shown: table or JSON; exit 0 done or dry run, 1 refused or declined, 3 the write failed."""

    model: FixResult

    schema = "fix"

    def exit_code(self) -> int:
        return self.model.exit_code

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.fix.g3 import render

        return render(self.model)


FormatOpt = format_option(*FixOutcome.formats)


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
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    ) -> int:
        """Act on G3, with consent: drop the page cache (sync; 3 > /proc/sys/vm/drop_caches) or, with --compact,
        compact memory. Only with --apply, as root, on the host: refused inside a container and while a
        training or serving process runs (unless --force); asks first unless --yes; prints MemFree,
        MemAvailable, the page cache and free large blocks before and after. Exit 0 done or dry run,
        1 refused or declined, 3 the write failed."""
        from sparkops.fix import g3

        if gotcha.strip().upper() not in ("G3", "3"):
            raise typer.BadParameter(f"{gotcha!r}: only G3 has an automatic fix", param_hint="GOTCHA")
        interactive = sys.stdin.isatty() and chosen(fmt, as_json) is not OutputFormat.json
        from sparkops.knowledge import load

        res = g3.fix_g3("compact" if compact else "drop-caches", apply=apply, yes=yes, force=force, kb=load(),
                        confirm=(lambda q: typer.confirm(q, default=False)) if interactive else None)
        return emit(FixOutcome(res), fmt, as_json)
