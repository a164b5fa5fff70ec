"""One loader for every packaged YAML file, typed models for each: a misspelled key fails loading
with the file and the key named, every file validates against its model."""

from __future__ import annotations

from datetime import date
from importlib import resources
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sparkops import knowledge
from sparkops.knowledge import KnowledgeFileError, load_file, read
from sparkops.knowledge.thresholds import Thresholds

KNOWLEDGE_DIR = Path(str(resources.files("sparkops.knowledge")))


def _models() -> dict[str, tuple[type[BaseModel], str | None]]:
    """Each packaged file -> (its model, the top-level section it validates, if not the whole file)."""
    from sparkops.diagnose.rules import LearnedModel, SymptomKnowledge
    from sparkops.fleet.settings import FleetKnowledge
    from sparkops.planner.architecture import _CatalogFile
    from sparkops.planner.run import PlannerKnowledge
    from sparkops.planner.serve_engines import EnginesFile
    from sparkops.postmortem.run import XidFile

    return {
        "gotchas.yaml": (knowledge.GotchasFile, None),
        "thresholds.yaml": (knowledge.ThresholdsFile, None),
        "gpu_profiles.yaml": (knowledge.ProfilesFile, None),
        "stack_matrix.yaml": (knowledge.StackMatrix, "matrix"),
        "models.yaml": (_CatalogFile, None),
        "planner.yaml": (PlannerKnowledge, None),
        "fleet.yaml": (FleetKnowledge, None),
        "symptoms.yaml": (SymptomKnowledge, None),
        "diagnose_model.yaml": (LearnedModel, None),
        "xid.yaml": (XidFile, None),
        "engines.yaml": (EnginesFile, None),
    }


def test_every_packaged_yaml_file_has_a_model():
    assert {p.name for p in KNOWLEDGE_DIR.glob("*.yaml")} == set(_models())


@pytest.mark.parametrize("name", sorted(_models()))
def test_every_packaged_file_validates_against_its_model(name):
    model, section = _models()[name]
    if name == "engines.yaml":  # the planner reshapes the engines' free-form keys first
        from sparkops.planner.serve_engines import engines_knowledge

        got = engines_knowledge()
    else:
        got = load_file(name, model, section)
    assert isinstance(got, model)
    head = read(name) if section is None else read(name)[section]
    assert isinstance(head["version"], int) and isinstance(head["last_verified"], date)


def test_the_loader_reads_each_file_once():
    assert read("thresholds.yaml") is read("thresholds.yaml")
    assert load_file("fleet.yaml", _models()["fleet.yaml"][0]) is load_file("fleet.yaml", _models()["fleet.yaml"][0])


def _with_text(monkeypatch, tmp_path, name: str, text: str) -> None:
    """The package's knowledge directory, with one file replaced (the loader's caches cleared)."""
    d = tmp_path / "knowledge"
    d.mkdir(exist_ok=True)
    for p in KNOWLEDGE_DIR.glob("*.yaml"):
        (d / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    (d / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(knowledge, "_text", lambda n: (d / n).read_text(encoding="utf-8"))
    for fn in (knowledge.read, knowledge.load_file, knowledge.load):
        fn.cache_clear()


@pytest.fixture
def patched(monkeypatch, tmp_path):
    yield lambda name, text: _with_text(monkeypatch, tmp_path, name, text)
    for fn in (knowledge.read, knowledge.load_file, knowledge.load):
        fn.cache_clear()


def test_a_misspelled_threshold_key_names_the_file_and_the_key(patched):
    text = (KNOWLEDGE_DIR / "thresholds.yaml").read_text(encoding="utf-8")
    assert "    page_cache_warn_gb: 8.0" in text
    patched("thresholds.yaml", text.replace("    page_cache_warn_gb: 8.0", "    page_cache_warn_gib: 8.0"))
    with pytest.raises(KnowledgeFileError) as exc:
        knowledge.load()
    msg = str(exc.value)
    assert "knowledge/thresholds.yaml" in msg
    assert "thresholds.g3.page_cache_warn_gib: Extra inputs are not permitted" in msg
    assert "thresholds.g3.page_cache_warn_gb: Field required" in msg


def test_a_misspelled_key_in_a_feature_file_names_the_file_and_the_key(patched):
    text = (KNOWLEDGE_DIR / "xid.yaml").read_text(encoding="utf-8")
    patched("xid.yaml", text.replace("  13: {kind: application,", "  13: {knd: application,"))
    from sparkops.postmortem.run import XidFile

    with pytest.raises(KnowledgeFileError, match=r"knowledge/xid\.yaml: xids\.13\.knd: Extra inputs"):
        load_file("xid.yaml", XidFile)


def test_a_matrix_section_error_is_named_under_its_section(patched):
    text = (KNOWLEDGE_DIR / "stack_matrix.yaml").read_text(encoding="utf-8")
    patched("stack_matrix.yaml", text.replace("  refresh_horizon_days:", "  refresh_horizon_dayz:"))
    with pytest.raises(KnowledgeFileError, match=r"knowledge/stack_matrix\.yaml: matrix\.refresh_horizon_dayz"):
        knowledge.load()


@pytest.mark.parametrize("header,why", [
    ("version: one\nlast_verified: 2026-07-14\n", "`version` missing or not an int"),
    ("last_verified: 2026-07-14\n", "`version` missing or not an int"),
    ("version: 1\nlast_verified: July\n", "`last_verified` missing or not a date"),
    ("version: 1\n", "`last_verified` missing or not a date"),
])
def test_the_header_is_checked_for_every_file(patched, header, why):
    body = (KNOWLEDGE_DIR / "fleet.yaml").read_text(encoding="utf-8")
    kept = "\n".join(line for line in body.splitlines() if not line.startswith(("version:", "last_verified:")))
    patched("fleet.yaml", header + kept)
    with pytest.raises(KnowledgeFileError, match=f"knowledge/fleet.yaml: {why}"):
        read("fleet.yaml")


def test_a_file_that_is_not_a_mapping_is_refused(patched):
    patched("xid.yaml", "- just\n- a list\n")
    with pytest.raises(KnowledgeFileError, match="not a mapping"):
        read("xid.yaml")


def test_with_thresholds_validates_like_loading():
    kb = knowledge.load()
    kb2 = kb.with_thresholds("g4", hot_c=70.0)
    assert kb2.thresholds.g4.hot_c == 70.0 and kb.thresholds.g4.hot_c == 85.0
    assert kb2.thresholds.g3 is kb.thresholds.g3
    with pytest.raises(ValueError):
        kb.with_thresholds("g4", hot_cc=70.0)
    with pytest.raises(AttributeError):
        kb.with_thresholds("g44", hot_c=70.0)


def test_sections_are_frozen():
    kb = knowledge.load()
    with pytest.raises(ValueError):
        kb.thresholds.g3.os_reserve_gb = 1.0  # type: ignore[misc]


_SECTIONS = sorted(Thresholds.model_fields)


@settings(max_examples=40, deadline=None)
@given(section=st.sampled_from(_SECTIONS), key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20))
def test_any_unknown_key_in_any_section_fails_naming_it(section, key):
    """Property: adding a key the model does not know to any section fails, naming section and key."""
    raw = yaml.safe_load((KNOWLEDGE_DIR / "thresholds.yaml").read_text(encoding="utf-8"))
    sec_model = Thresholds.model_fields[section].annotation
    if key in sec_model.model_fields:
        return
    raw["thresholds"][section][key] = 1
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as exc:
        knowledge.ThresholdsFile.model_validate(raw)
    msg = knowledge.validation_message("thresholds.yaml", exc.value)
    assert f"knowledge/thresholds.yaml: thresholds.{section}.{key}: Extra inputs are not permitted" in msg


def test_the_probes_take_the_knowledge_passed_in_and_never_load_their_own(monkeypatch, tmp_path):
    """Every probe runs with ``CollectOptions(kb=...)`` while every way a probe could load the packaged
    knowledge itself raises: no record may carry that error, and the passed-in numbers are the ones used."""
    import sys

    from sparkops import probes
    from sparkops.probes import configs, processes

    kb = knowledge.load().with_thresholds("g10", max_files=1)  # the config scan must stop after one file

    def boom():
        raise AssertionError("a probe loaded its own knowledge")

    monkeypatch.setattr(knowledge, "load", boom)
    for mod in (configs, processes):
        monkeypatch.setattr(mod, "load_kb", boom)
    for i in range(3):
        (tmp_path / f"c{i}.yaml").write_text("tensor_parallel_size: 2\n", encoding="utf-8")
    opts = probes.CollectOptions(depth="quick", python=sys.executable, offline=True, budget_s=30.0,
                                 counter_window_s=0.0, config_paths=(tmp_path,), cache_dir=tmp_path / "cache",
                                 env={"PATH": "/nonexistent", "SPARKOPS_NO_NVML": "1"}, kb=kb)
    facts = probes.collect(opts)
    assert set(facts.probes) == set(probes.PROBES)
    for name, rec in facts.probes.items():
        assert "loaded its own knowledge" not in rec.reason, name
    assert facts.configs.scanned and facts.configs.files_read == 1 and facts.configs.truncated


def test_postmortem_fix_texts_are_data_and_every_cause_has_one(patched):
    from sparkops.postmortem import classify
    from sparkops.postmortem.run import XidFile, cause_fixes

    assert set(cause_fixes()) == classify.FIX_KEYS
    text = (KNOWLEDGE_DIR / "xid.yaml").read_text(encoding="utf-8")
    assert "\n  panic: " in text
    patched("xid.yaml", text.replace("\n  panic: ", "\n  panik: "))
    with pytest.raises(KnowledgeFileError, match=r"knowledge/xid\.yaml: fixes: .*missing \['panic'\], unknown \['panik'\]"):
        load_file("xid.yaml", XidFile)


def _nested_models(annotation: object) -> list[type[BaseModel]]:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _nested_models(arg)]


@pytest.mark.parametrize("name", sorted(_models()))
def test_every_model_reachable_from_a_file_refuses_unknown_keys(name):
    """A misspelled key anywhere in any file fails loading: every model under the file's forbids extras."""
    seen: set[type[BaseModel]] = set()
    todo = [_models()[name][0]]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        assert m.model_config.get("extra") == "forbid", f"{name}: {m.__name__} accepts unknown keys"
        for field in m.model_fields.values():
            todo += _nested_models(field.annotation)
    assert len(seen) >= 1
