"""Property tests of this session's serving readers: a start-up log's compile state (serve.vllm_compile_state) and an
SGLang version string (serve.sglang_release) are read from whatever a user pastes: they never raise, and they answer
only from what the text holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sparkops.planner import serve

_LINES = st.lists(st.one_of(
    st.text(max_size=80),
    st.sampled_from(["Compiling a graph for compile range (1, 8192) takes 31.20 s",
                     "Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.61 s",
                     "torch.compile takes 3.10 s in total", "torch.compile took 45.2 s in total",
                     "Model loading took 15.27 GiB memory and 6.1 seconds (compilation: 0.9 s)",
                     "Cudagraph is disabled under eager mode", "(compilation: nan s)", "took 1e999 s in total"])),
    max_size=12)


@given(_LINES, st.one_of(st.none(), st.text(max_size=20), st.sampled_from(["0.17.0", "0.18.0", "0.28.0", "V0"])),
       st.booleans())
def test_compile_state_never_raises_and_names_the_line_it_read(lines, version, eager):
    r = serve.vllm_compile_state("\n".join(lines), version, eager)
    assert r.state in ("cold", "warm", "eager", "unknown")
    assert (r.state == "unknown") == (r.line == "") or r.line == "enforce_eager on the launch line"
    if r.line and r.line != "enforce_eager on the launch line":
        assert any(r.line == ln.strip() for ln in lines)  # the deciding line is the log's own


@given(st.one_of(st.none(), st.text(max_size=40)))
def test_an_sglang_version_string_never_raises(text):
    v = serve.sglang_release(text)
    assert v is None or (isinstance(v, tuple) and len(v) == 3)
