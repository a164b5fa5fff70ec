"""Serve the collector over HTTP (prometheus-client's server), loopback unless told otherwise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from sparkops.exporter.collector import SparkCollector

DEFAULT_PORT = 9839
DEFAULT_ADDR = "127.0.0.1"


def registry(report_path: Path | None = None, *, gpu: bool = True, sampler: Any = None, **kw: Any) -> CollectorRegistry:
    """A registry holding only this tool's collector (no process/platform defaults)."""
    if sampler is None and gpu:
        from sparkops.monitor.sampler import Sampler

        sampler = Sampler(os.environ)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SparkCollector(sampler=sampler, report_path=report_path, **kw))
    return reg


def once(reg: CollectorRegistry) -> str:
    """One scrape's text exposition."""
    return generate_latest(reg).decode("utf-8")


def serve(reg: CollectorRegistry, port: int = DEFAULT_PORT, addr: str = DEFAULT_ADDR) -> tuple[Any, Any]:
    """Start serving /metrics in a daemon thread; returns (server, thread)."""
    return start_http_server(port, addr=addr, registry=reg)
