"""Shared test plumbing: fixture paths, the GPU marker, snapshot loading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return bool(shutil.which("nvidia-smi")) and False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU/driver here (GPU tests run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def load_facts_fixture(name: str):
    """A replayable snapshot from tests/fixtures/facts/<name>.json."""
    from sparkops.facts.model import Facts

    return Facts.model_validate(json.loads((FIXTURES / "facts" / f"{name}.json").read_text()))
