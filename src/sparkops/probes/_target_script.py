"""Runs INSIDE the user's training interpreter; prints one marked JSON line. Stdlib only.

    python _target_script.py quick '["flash-attn", ...]'   static facts, never imports torch
    python _target_script.py live                         imports torch, asks CUDA what it sees

The tool never imports torch itself (it is not a dependency, and a bad torch can segfault): it
runs this file in a child of the *target* interpreter and reads the line that starts with
``RESULT_MARKER``. Anything else torch prints is ignored. ``live`` also prints ``STAGE_MARKER``
lines before each risky step, so a child that dies on a signal or hangs still tells where.
Keep this file importable and runnable on old Pythons (3.7+): no annotations, no new syntax.
"""

import contextlib
import json
import os
import re
import sys
import time

RESULT_MARKER = "@@sparkops-result@@"
STAGE_MARKER = "@@sparkops-stage@@"
MAX_VERSION_PY_CHARS = 65536


def _drop_own_dir_from_path():
    """``python path/to/_target_script.py`` puts this folder first on sys.path; it holds modules
    named like common ones (``gpu``, ``memory``, ``host``) that must not shadow the user's.
    Fed on stdin (``python -``, inside a container) there is no such folder: nothing to drop."""
    script = globals().get("__file__")
    if not script or not os.path.isfile(script):
        return
    here = os.path.dirname(os.path.abspath(script))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]


def emit(payload):
    """The one result line; a leading newline so a half-written line from torch cannot glue on."""
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


def stage(name):
    sys.stdout.write("\n" + STAGE_MARKER + name + "\n")
    sys.stdout.flush()


def _err(exc):
    return (type(exc).__name__ + ": " + str(exc))[:2000]


# --------------------------------------------------------------------------- quick
def canonical(name):
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def env_kind(prefix, base_prefix, pyvenv_cfg_text, conda_meta, conda_prefix, real_prefix):
    """venv / uv / conda / system from what the interpreter reports about itself."""
    if prefix != base_prefix or real_prefix:
        if pyvenv_cfg_text and re.search(r"(?m)^\s*uv\s*=", pyvenv_cfg_text):
            return "uv"
        return "venv"
    if conda_meta or (conda_prefix and os.path.abspath(conda_prefix) == os.path.abspath(prefix)):
        return "conda"
    return "system"


def _read_text(path, limit):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def _headers(text):
    """Name and Version from a METADATA/PKG-INFO header block, without the slow email parser."""
    name = version = None
    for line in (text or "").splitlines():
        if not line.strip():
            break
        if line.startswith("Name:") and name is None:
            name = line[5:].strip()
        elif line.startswith("Version:") and version is None:
            version = line[8:].strip()
    return name, version


def _so_files(dist):
    """Shared objects a distribution installed. RECORD is scanned as text: ``dist.files`` builds a
    path object per entry, which for torch (tens of thousands of files) costs a third of a second."""
    try:
        record = dist.read_text("RECORD")
    except Exception:
        record = None
    if record:
        out = []
        for line in record.splitlines():
            rel = line.split(",", 1)[0]
            if ".so" not in rel:
                continue
            base = rel.rsplit("/", 1)[-1]
            if base.endswith(".so") or ".so." in base:
                with contextlib.suppress(Exception):
                    out.append(str(dist.locate_file(rel)))
        return out
    try:
        files = dist.files
    except Exception:
        return None
    if files is None:
        return None
    out = []
    for f in files:
        s = str(f)
        base = s.rsplit("/", 1)[-1]
        if base.endswith(".so") or ".so." in base:
            with contextlib.suppress(Exception):
                out.append(str(dist.locate_file(f)))
    return out


def _top_level_roots(dist, name):
    """Where a distribution without a RECORD keeps its code (egg installs, setup.py develop)."""
    names = []
    try:
        text = dist.read_text("top_level.txt")
    except Exception:
        text = None
    if text:
        names = [n.strip() for n in text.splitlines() if n.strip()]
    if not names:
        names = [canonical(name).replace("-", "_")]
    roots = []
    try:
        base = str(dist.locate_file(""))
    except Exception:
        return roots
    for n in names:
        p = os.path.join(base, n)
        if os.path.isdir(p):
            roots.append(p)
    return roots


def _distributions(interest):
    dists = {}
    ext = {}
    errors = []
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return None, ext, ["importlib.metadata unavailable on this Python"]
    try:
        found = list(metadata.distributions())
    except Exception as exc:
        return None, ext, [_err(exc)]
    for dist in found:
        try:
            text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
            name, version = _headers(text)
            if not name:
                continue
            key = canonical(name)
            if key in dists:  # first on sys.path wins, as for imports
                continue
            dists[key] = version or ""
            if key in interest:
                files = _so_files(dist)
                if files is None:
                    ext[key] = {"files": [], "roots": _top_level_roots(dist, name)}
                else:
                    ext[key] = {"files": files, "roots": []}
        except Exception as exc:
            errors.append(_err(exc))
    return dists, ext, errors[:20]


def _torch_files():
    """torch's folder and its version.py text, found without importing torch."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
    except Exception as exc:
        return None, None, _err(exc)
    if spec is None:
        return None, None, ""
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [os.path.dirname(spec.origin)]
    for loc in locations:
        text = _read_text(os.path.join(loc, "version.py"), MAX_VERSION_PY_CHARS)
        if text is not None:
            return loc, text, ""
    return (locations[0] if locations else None), None, "torch/version.py not found"


def quick(interest):
    import site
    import sysconfig

    prefix = sys.prefix
    base_prefix = getattr(sys, "base_prefix", prefix)
    cfg = _read_text(os.path.join(prefix, "pyvenv.cfg"), 8192)
    result = {
        "mode": "quick",
        "python_version": ".".join(str(p) for p in sys.version_info[:3]),
        "executable": sys.executable,
        "prefix": prefix,
        "base_prefix": base_prefix,
        "env_kind": env_kind(prefix, base_prefix, cfg, os.path.isdir(os.path.join(prefix, "conda-meta")),
                             os.environ.get("CONDA_PREFIX", ""), getattr(sys, "real_prefix", None)),
    }
    sites = []
    with contextlib.suppress(Exception):
        sites.extend(site.getsitepackages())
    try:
        purelib = sysconfig.get_paths().get("purelib")
        if purelib and purelib not in sites:
            sites.append(purelib)
        if site.ENABLE_USER_SITE:  # ~/.local/...: visible to the user's imports too
            sites.append(site.getusersitepackages())
    except Exception:
        pass
    result["site_packages"] = [p for p in sites if os.path.isdir(p)]
    dists, ext, errors = _distributions(set(interest))
    result["distributions"] = dists
    result["extension_sources"] = ext
    result["errors"] = errors
    torch_dir, version_py, torch_error = _torch_files()
    result["torch_dir"] = torch_dir
    result["torch_version_py"] = version_py
    result["torch_error"] = torch_error
    emit(result)


# --------------------------------------------------------------------------- live
def _safe(out, key, fn):
    """Run one CUDA query; record its failure in cuda_error instead of giving up on the rest."""
    try:
        out[key] = fn()
        return True
    except Exception as exc:
        if not out.get("cuda_error"):
            out["cuda_error"] = key + ": " + _err(exc)
        return False


SHARED_MEMORY_NAMES = ("GB10", "Thor", "GH200", "GB200", "GB300")


def _shares_host_memory(cuda, name):
    """An integrated or coherent-memory device, where CUDA's free memory is the host's."""
    try:
        if getattr(cuda.get_device_properties(0), "is_integrated", 0):
            return True
    except Exception:
        return True  # cannot tell: take the reading
    return any(n.lower() in (name or "").lower() for n in SHARED_MEMORY_NAMES)


def live():
    import warnings

    out = {"mode": "live", "import_ok": False, "python_version": ".".join(str(p) for p in sys.version_info[:3])}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stage("import torch")
        t0 = time.monotonic()
        try:
            import torch
        except BaseException as exc:  # SystemExit/KeyboardInterrupt from a broken torch too
            out["error"] = _err(exc)
            out["import_duration_s"] = round(time.monotonic() - t0, 3)
            out["warnings"] = [str(w.message)[:1000] for w in caught][:20]
            out["stage"] = "import torch"
            emit(out)
            return
        out["import_duration_s"] = round(time.monotonic() - t0, 3)
        out["import_ok"] = True
        out["version"] = str(getattr(torch, "__version__", ""))
        try:
            out["cuda"] = torch.version.cuda
        except Exception as exc:
            out["cuda_error"] = "torch.version.cuda: " + _err(exc)
        stage("cuda queries")
        cuda = getattr(torch, "cuda", None)
        if cuda is not None:
            _safe(out, "arch_list", lambda: list(cuda.get_arch_list()))
            if _safe(out, "cuda_available", lambda: bool(cuda.is_available())) and out["cuda_available"]:
                _safe(out, "device_count", lambda: int(cuda.device_count()))
                _safe(out, "device_name", lambda: str(cuda.get_device_name(0)))
                _safe(out, "capability", lambda: list(cuda.get_device_capability(0)))
                _safe(out, "total_memory_bytes", lambda: int(cuda.get_device_properties(0).total_memory))
                # cudaMemGetInfo creates a CUDA context (a few hundred ms). It is the G3 evidence on
                # a shared-memory device (free tracks MemFree there); on a discrete GPU NVML's free
                # memory is authoritative, so the context is not worth its cost.
                if _shares_host_memory(cuda, out.get("device_name", "")):
                    _safe(out, "mem_get_info_bytes", lambda: [int(x) for x in cuda.mem_get_info(0)])
        stage("sdp flags")
        b = getattr(getattr(torch, "backends", None), "cuda", None)
        for key in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled"):
            fn = getattr(b, key, None)
            if fn is not None:
                _safe(out, key, lambda fn=fn: bool(fn()))
        stage("import flash_attn")
        try:
            import importlib.util

            installed = importlib.util.find_spec("flash_attn") is not None
        except Exception:
            installed = True  # find_spec itself failed: let the import attempt tell
        if installed:
            try:
                import flash_attn  # noqa: F401

                out["flash_attn_import"] = True
            except BaseException as exc:
                out["flash_attn_import"] = False
                out["flash_attn_error"] = _err(exc)
        else:
            out["flash_attn_import"] = None
    out["warnings"] = [str(w.message)[:1000] for w in caught][:20]
    out["stage"] = "done"
    emit(out)


def main(argv):
    _drop_own_dir_from_path()
    mode = argv[1] if len(argv) > 1 else "live"
    try:
        if mode == "quick":
            interest = json.loads(argv[2]) if len(argv) > 2 else []
            quick(interest)
        else:
            live()
    except BaseException as exc:  # a failure of this script is reported, not a traceback
        emit({"mode": mode, "import_ok": False, "error": "probe script failed: " + _err(exc)})
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    # The result line is out and flushed. Skip the interpreter's teardown: with torch imported and a
    # CUDA context open it is pure cost to the user's wait (benchmarks/results/preflight-h200-s9-exit-*).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
