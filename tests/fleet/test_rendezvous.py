"""Launch environment parsing (pure) and the bounded waits over a real c10d store (needs torch)."""

from __future__ import annotations

import threading
import time

import pytest

from sparkops.core.errors import InputError
from sparkops.fleet import rendezvous
from sparkops.fleet.run import decide_backend

TORCHRUN_ENV = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1",
                "MASTER_ADDR": "spark-a", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "abc",
                "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}


def test_torchrun_environment_is_read():
    launch = rendezvous.parse_launch_env(TORCHRUN_ENV)
    assert (launch.rank, launch.world_size, launch.local_rank, launch.local_world_size, launch.node_rank) == (1, 2, 0, 1, 1)
    assert launch.launcher == "torchrun" and launch.agent_store and launch.run_id == "abc"


def test_plain_launcher_environment_is_read():
    launch = rendezvous.parse_launch_env({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                                          "MASTER_PORT": "29501", "NODE_RANK": "0"})
    assert launch.launcher == "env" and not launch.agent_store and launch.local_rank == 0 and launch.node_rank == 0


@pytest.mark.parametrize("drop", ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"])
def test_missing_variable_says_how_to_launch(drop):
    env = {k: v for k, v in TORCHRUN_ENV.items() if k != drop}
    with pytest.raises(InputError) as exc:
        rendezvous.parse_launch_env(env)
    assert drop in str(exc.value) and "torchrun --nnodes 2" in str(exc.value)


@pytest.mark.parametrize(("key", "value"), [("RANK", "2"), ("RANK", "x"), ("WORLD_SIZE", "0"), ("MASTER_PORT", "70000")])
def test_inconsistent_values_are_refused(key, value):
    with pytest.raises(InputError):
        rendezvous.parse_launch_env({**TORCHRUN_ENV, key: value})


def test_stage_order():
    keys = [rendezvous.stage_key(s) for s in ("", "joined", "collecting", "collected", "bandwidth 0", "bandwidth 3",
                                              "bandwidth 12", "done")]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert rendezvous.stage_key("nonsense") == (-1, 0)


def test_backend_decision():
    ok = {"nccl_ok": True}
    no = {"nccl_ok": False, "nccl_why": "torch sees no CUDA device"}
    assert decide_backend("auto", {0: ok, 1: ok}) == ("nccl", "")
    assert decide_backend("auto", {0: ok, 1: no}) == ("gloo", "")
    assert decide_backend("gloo", {0: ok}) == ("gloo", "")
    backend, err = decide_backend("nccl", {0: ok, 1: no})
    assert backend == "nccl" and "rank 1: torch sees no CUDA device" in err


# --------------------------------------------------------------------------- over a real store
@pytest.fixture
def store():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch without torch.distributed")
    return dist.PrefixStore("t/", dist.HashStore())


def test_wait_all_names_the_rank_that_never_wrote(store):
    coords = [rendezvous.Coordinator(store, r, 3, poll_s=0.01) for r in range(3)]
    coords[0].put("join/0", {"hostname": "a"})
    coords[2].put("join/2", {"hostname": "c"})
    t0 = time.monotonic()
    got, missing = coords[0].wait_all("join/", 0.3)
    assert time.monotonic() - t0 < 2
    assert missing == [1] and got == {0: {"hostname": "a"}, 2: {"hostname": "c"}}


def test_wait_key_returns_a_late_value_and_gives_up_on_an_absent_one(store):
    coord = rendezvous.Coordinator(store, 0, 2, poll_s=0.01)
    threading.Timer(0.1, lambda: coord.put("decision", {"go": True})).start()
    assert coord.wait_key("decision", 5) == {"go": True}
    assert coord.wait_key("never", 0.1) is None


def test_wait_stage_reports_who_is_behind(store):
    coords = [rendezvous.Coordinator(store, r, 3, poll_s=0.01) for r in range(3)]
    coords[0].stage("collected")
    coords[1].stage("bandwidth 2")
    coords[2].stage("collecting")
    assert coords[0].wait_stage("collected", 0.1) == [2]
    assert coords[0].stages() == {0: "collected", 1: "bandwidth 2", 2: "collecting"}
    coords[2].stage("collected")
    assert coords[0].wait_stage("collected", 1) == []
