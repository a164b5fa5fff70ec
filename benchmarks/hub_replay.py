"""Real checkpoints through the Hub reader: every model folder found on this machine (a Hugging Face cache
or any folder with config.json and safetensors) is served over HTTP as the Hub's ``resolve`` endpoint
answers (Range -> 206, ``X-Repo-Commit``), read by ``planner.hub`` as a Hub id would be, and compared with
the local folder reader (``architecture.from_path``) over the same files. Records the bytes the reader
pulled against the checkpoint's size and the wall time, with the machine.

Not the real Hub (neither this sandbox nor the device machine reaches huggingface.co): what it shows is
that real headers, real shard indexes and real multi-GB files read by range give the same architecture
and exact stored bytes as reading them from disk, and how little is transferred.

    python benchmarks/hub_replay.py [--roots DIR ...] [--out DIR] [--label NAME] [--max-models N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sparkops.planner import hub  # noqa: E402
from sparkops.planner.architecture import ArchitectureError, from_path  # noqa: E402

COMMIT = "f" * 40


def model_folders(roots: list[Path], limit: int) -> list[Path]:
    """Folders holding config.json and at least one .safetensors file (HF cache snapshots included)."""
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        for cfg in sorted(root.rglob("config.json")):
            d = cfg.parent
            if d not in found and any(d.glob("*.safetensors")):
                found.append(d)
            if len(found) >= limit:
                return found
    return found


class Served:
    """Folders by repo id; bytes sent per repo."""

    def __init__(self) -> None:
        self.repos: dict[str, Path] = {}
        self.sent: dict[str, int] = {}
        self.requests: dict[str, int] = {}
        self.lock = threading.Lock()


def handler(state: Served) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *_a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            m = re.fullmatch(r"/(?P<repo>[^/]+/[^/]+)/resolve/[^/]+/(?P<name>.+)", self.path)
            folder = state.repos.get(m["repo"]) if m else None
            f = (folder / m["name"]) if (folder is not None and m) else None
            if f is None or not f.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = f.stat().st_size
            rng = self.headers.get("Range")
            a, b = 0, size - 1
            if rng:
                mm = re.fullmatch(r"bytes=(\d+)-(\d+)", rng)
                a, b = int(mm[1]), min(int(mm[2]), size - 1)  # type: ignore[index]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
            else:
                self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", str(b - a + 1))
            self.end_headers()
            with f.open("rb") as fh:
                fh.seek(a)
                left = b - a + 1
                while left > 0:
                    chunk = fh.read(min(1 << 20, left))
                    if not chunk:
                        break
                    try:
                        self.wfile.write(chunk)
                    except (BrokenPipeError, ConnectionResetError):
                        break
                    left -= len(chunk)
                    with state.lock:
                        state.sent[m["repo"]] = state.sent.get(m["repo"], 0) + len(chunk)
            with state.lock:
                state.requests[m["repo"]] = state.requests.get(m["repo"], 0) + 1

    return H


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    ap.add_argument("--roots", nargs="*", type=Path, default=[home / "hub", Path("/models"), Path("/data")])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--label", default=platform.node() or "machine")
    ap.add_argument("--max-models", type=int, default=12)
    args = ap.parse_args()

    folders = model_folders(args.roots, args.max_models)
    state = Served()
    for n, d in enumerate(folders):
        state.repos[f"local/m{n}"] = d
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    access = hub.HubAccess(endpoint=f"http://127.0.0.1:{srv.server_port}", cache_dir=None, timeout_s=30, deadline_s=120)

    rows = []
    for n, d in enumerate(folders):
        repo = f"local/m{n}"
        size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
        shards = len(list(d.glob("*.safetensors")))
        try:
            local = from_path(str(d), env={})
        except ArchitectureError as exc:
            rows.append((d, shards, size, None, None, None, f"local reader refuses: {exc}"[:120]))
            continue
        t0 = time.perf_counter()
        try:
            remote = hub.fetch_model(repo, access)
        except ArchitectureError as exc:
            rows.append((d, shards, size, None, None, None, f"hub reader: {exc}"[:120]))
            continue
        wall = time.perf_counter() - t0
        same = remote.weights is not None and remote.weights.stored_bytes == local.stored_bytes
        rows.append((d, shards, size, state.sent.get(repo, 0), wall, same,
                     f"stored {local.stored_bytes:,} B; {state.requests.get(repo, 0)} requests"))
    srv.shutdown()

    stamp = datetime.now(timezone.utc)  # noqa: UP017
    lines = [f"# The Hub reader over real checkpoints, served locally as the Hub answers ({args.label}, "
             f"{stamp:%Y-%m-%d %H:%M} UTC)", "",
             f"- machine: {platform.machine()}, {os.cpu_count()} CPUs; Python {platform.python_version()}",
             f"- command: `python benchmarks/hub_replay.py --label {args.label}`; roots: "
             + ", ".join(str(r) for r in args.roots),
             "- not the real Hub: a local HTTP server answering /{repo}/resolve/{rev}/{file} with Range and X-Repo-Commit;"
             " 'same' = the Hub reader's exact stored bytes equal the local folder reader's", "",
             "| folder | shards | checkpoint bytes | bytes read | share | wall s | same | note |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for d, shards, size, sent, wall, same, note in rows:
        share = f"{sent / size:.2e}" if sent and size else "-"
        lines.append(f"| {d.name if 'snapshots' not in d.parts else d.parts[d.parts.index('snapshots') - 1]} | {shards} | "
                     f"{size:,} | {sent if sent is not None else '-':,} | {share} | "
                     f"{'-' if wall is None else f'{wall:.3f}'} | {same if same is not None else '-'} | {note} |"
                     if sent is not None else
                     f"| {d.name} | {shards} | {size:,} | - | - | - | - | {note} |")
    if not rows:
        lines.append("| (no model folder with config.json and safetensors found under the roots) | | | | | | | |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"hub-replay-{args.label}-{stamp:%Y%m%d}.md").write_text(text, encoding="utf-8")
    print(json.dumps({"models": len(rows), "same": sum(1 for r in rows if r[5])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
