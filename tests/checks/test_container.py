"""The container kind (checks/container.py): judged from the raw markers the host probe recorded."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import load_facts_fixture
from sparkops.checks import CHECKS, context
from sparkops.checks.container import classify
from sparkops.facts.model import ContainerFacts, Facts, migrate
from sparkops.facts.reading import NOT_COLLECTED, Unavailable, Why, known, missing
from sparkops.knowledge import load

FACTS = Path(__file__).parents[1] / "fixtures" / "facts"


def test_a_schema_1_container_keeps_its_recorded_kind_and_markers():
    raw = json.loads((FACTS / "gb10_ngc_2509_healthy.json").read_text())
    old = raw["host"]["container"]
    facts = load_facts_fixture("gb10_ngc_2509_healthy")
    c = classify(facts.host.container)
    assert (c.image_kind, c.image_hint, c.markers) == (old["image_kind"], old["image_hint"], old["markers"])
    assert facts.host.container.v1_class is not None and "image_kind" not in migrate(raw)["host"]["container"]


def test_the_same_container_recorded_raw_judges_alike():
    """The NGC fixture as schema 2 records it: the markers as read, the NGC variables, no verdict."""
    old = load_facts_fixture("gb10_ngc_2509_healthy")
    cont = old.host.container
    raw = cont.model_copy(update={"v1_class": None, "markers_read": True,
                                  "markers": [m for m in cont.markers if not m.startswith("env:NVIDIA_PYTORCH")]})
    new = old.model_copy(update={"host": old.host.model_copy(update={"container": raw})})
    c = classify(raw)
    assert c.image_kind == "ngc-pytorch" and c.markers == cont.markers
    for gid in ("G1", "G2", "G3", "G9"):
        a, b = (CHECKS[gid].check(context(f, load())) for f in (old, new))
        assert (a.status, a.code, a.notes) == (b.status, b.code, b.notes), gid
    # G9 names the image: the raw record says where it came from, the old one kept its tool's words
    assert "25.09" in CHECKS["G9"].check(context(new, load())).summary


def test_markers_that_could_not_be_read_are_unknown_with_the_reason():
    c = classify(ContainerFacts(markers_read=missing(Why.timeout, "host probe did not finish")))
    assert isinstance(c.image_kind, Unavailable) and c.image_kind.unavailable is Why.timeout
    assert not c.in_container
    fresh = classify(ContainerFacts())
    assert fresh.image_kind == NOT_COLLECTED


def test_a_v2_snapshot_round_trips_without_a_verdict():
    c = ContainerFacts(markers=["/run/.containerenv"], markers_read=True, image="docker.io/unsloth/unsloth:x")
    data = Facts(host={"container": c.model_dump()}).model_dump(mode="json")
    assert data["schema_version"] == 2 and "image_kind" not in data["host"]["container"]
    again = Facts.model_validate(data).host.container
    assert classify(again).image_kind == "unsloth" and again.v1_class is None


_NAMES = st.sampled_from(["NVIDIA_PYTORCH_VERSION", "NVIDIA_BUILD_ID", "NVIDIA_PRODUCT_NAME", "NVIDIA_TRITON_SERVER_VERSION",
                          "NVIDIA_VISIBLE_DEVICES", "NV_X"])
_VALUES = st.one_of(st.sampled_from(["25.09", "24.03", "1", "", "all", "25.1"]), st.text(max_size=12))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["/.dockerenv", "/run/.containerenv", "cgroup:docker", "mountinfo:overlay-root",
                                 "env:container=podman"]), max_size=3, unique=True),
       st.one_of(st.just(""), st.sampled_from(["nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io/nvidia/tritonserver:x",
                                               "docker.io/unsloth/unsloth:dgxspark-latest"]), st.text(max_size=20)),
       st.dictionaries(_NAMES, _VALUES, max_size=4),
       st.lists(st.sampled_from(["/workspace/unsloth", "/opt/unsloth"]), max_size=1),
       st.lists(st.sampled_from(["UNSLOTH_COMPILE_DISABLE"]), max_size=1))
def test_classify_never_raises_and_a_kind_needs_a_marker(markers, image, env, paths, unsloth_env):
    c = classify(ContainerFacts(markers=markers, markers_read=True, image=image, nvidia_env=env,
                                unsloth_paths=paths, unsloth_env=unsloth_env))
    assert c.image_kind in ("ngc-pytorch", "ngc-other", "unsloth", "other") or isinstance(c.image_kind, Unavailable)
    assert set(markers) <= set(c.markers) and len(c.image_hint) <= 200
    if known(c.image_kind) and c.image_kind != "other":
        assert c.markers or "nvcr.io/nvidia/" in image  # an image line comes with /run/.containerenv in life
    if not c.markers:
        assert not known(c.image_kind) or "nvcr.io/nvidia/" in image
