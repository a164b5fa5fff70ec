"""Two-node fleet snapshots, derived from the recorded single-node scenarios of ``tests/build_fixtures.py``.

- ``fleet_gb10_spark_a``: ``gb10_ngc_2509_healthy`` as the head node ``spark-a`` of a two-Spark job
  launched by torchrun (WORLD_SIZE=2, LOCAL_WORLD_SIZE=1 in its environment), NCCL_VERSION set as
  NGC images set it.
- ``fleet_gb10_spark_b_drift``: the second node ``spark-b`` of the same job, drifted: the NGC 25.10
  image (its torch build from the dated stack matrix), driver 580.95.05 (the GB10 driver of the
  recorded counters in gb10-readings §2.3), a different NCCL. Everything else is node A's, so every
  difference the fleet reports is one of these.

The NCCL_VERSION values are illustrative (two versions that differ), not read from the images.
Run ``python tests/fleet/build_fleet_fixtures.py`` to rewrite the JSON; ``test_fleet_fixtures``
fails when the committed files and this generator drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import build_fixtures as bf  # noqa: E402
from sparkops.facts.model import Facts  # noqa: E402

NGC_2510_TORCH = "2.9.0a0+145a3a7bda.nv25.10"  # stack_matrix.yaml ngc_tags["25.10"]
LAUNCH_ENV = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_PORT": "29500", "MASTER_ADDR": "spark-a"}


def fleet_gb10_spark_a() -> Facts:
    base = bf.build("gb10_ngc_2509_healthy")
    env = {**base.host.env, **LAUNCH_ENV, "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0",
           "NCCL_VERSION": "2.27.7"}
    return bf.patch(base, {"host.hostname": "spark-a", "host.env": env})


def fleet_gb10_spark_b_drift() -> Facts:
    base = bf.build("gb10_ngc_2509_healthy")
    env = {**base.host.env, **LAUNCH_ENV, "RANK": "1", "LOCAL_RANK": "0", "GROUP_RANK": "1",
           "NCCL_VERSION": "2.28.3"}
    container = bf._ngc_container("25.10").model_dump()
    target = base.target.model_dump()
    target["distributions"]["torch"] = NGC_2510_TORCH
    target["torch"].update(version=NGC_2510_TORCH, local_tag="145a3a7bda.nv25.10", git_version="")
    target["live"]["version"] = NGC_2510_TORCH
    return bf.patch(base, {"host.hostname": "spark-b", "host.env": env, "host.container": container,
                           "gpu.driver_version": "580.95.05", "target": target})


SCENARIOS = {"fleet_gb10_spark_a": fleet_gb10_spark_a, "fleet_gb10_spark_b_drift": fleet_gb10_spark_b_drift}


def fixture_text(name: str) -> str:
    return json.dumps(json.loads(SCENARIOS[name]().model_dump_json()), indent=1, sort_keys=True) + "\n"


def main() -> None:
    for name in SCENARIOS:
        path = bf.FACTS_DIR / f"{name}.json"
        path.write_text(fixture_text(name), encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
