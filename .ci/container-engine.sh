#!/usr/bin/env bash
# A real container engine for the `engine` tests (tests/test_engine.py): podman's Docker API service
# (driven by the real `docker` CLI) and podman itself, a local registry on loopback, and small test
# images that stand for nvcr.io's PyTorch, Unsloth's image and a drifted bare-pip environment.
#
#   .ci/container-engine.sh start   install what is missing (apt, as root), start the registry and
#                                   the API service, build and push the test images (cached), write
#                                   $STATE/env for the tests; idempotent
#   .ci/container-engine.sh stop    stop what `start` started (images and registry data are kept)
#   .ci/container-engine.sh status  say what runs
#   .ci/container-engine.sh clean   stop, then delete the state directory (images, registry data)
#
# Everything lives under $SPARKOPS_ENGINE_DIR (default /var/tmp/spark-ops-engine): podman's
# storage (overlay where the kernel lets root mount one, else vfs, which copies every layer: a
# container start then costs seconds), its containers.conf / storage.conf / registries.conf (passed by CONTAINERS_* variables,
# so the host's own podman configuration is untouched), the registry's data, pid files and logs.
# The images are rebuilt only when this script changes (a stamp holds its hash).
# Needs: Debian/Ubuntu with apt (or podman, runc, mmdebstrap, docker-registry already installed),
# root, network to the Debian mirror for the first build only. No other registry is contacted:
# nvcr.io/nvidia and docker.io/unsloth are remapped to the local registry in registries.conf.
set -euo pipefail

STATE=${SPARKOPS_ENGINE_DIR:-/var/tmp/spark-ops-engine}
PORT=${SPARKOPS_REGISTRY_PORT:-5055}
REG=127.0.0.1:$PORT
SOCK=$STATE/podman.sock
SCRIPT_HASH=$(sha256sum "$0" | cut -c1-16)
SUITE=bookworm

log() { echo "container-engine: $*" >&2; }

podman_env() {
  export CONTAINERS_CONF=$STATE/containers.conf CONTAINERS_STORAGE_CONF=$STATE/storage.conf \
         CONTAINERS_REGISTRIES_CONF=$STATE/registries.conf
}
pm() { podman_env; podman "$@"; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v conmon >/dev/null || missing+=(conmon)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    log "missing ${missing[*]} and cannot install them (needs root and apt-get)"; return 1
  fi
  log "installing ${missing[*]} (+ uidmap, CNI plugins, iptables) with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >"$STATE/apt.log" 2>&1
  apt-get install -y -q --no-install-recommends "${missing[@]}" uidmap containernetworking-plugins iptables \
    catatonit >>"$STATE/apt.log" 2>&1 || { log "apt-get install failed: see $STATE/apt.log"; return 1; }
}

storage_driver() {  # overlay when a test mount works (fast container starts), else vfs
  if [ -n "${SPARKOPS_ENGINE_STORAGE:-}" ]; then echo "$SPARKOPS_ENGINE_STORAGE"; return; fi
  local d; d=$(mktemp -d)
  mkdir -p "$d/l" "$d/u" "$d/w" "$d/m"
  if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
    umount "$d/m"; echo overlay
  else
    echo vfs
  fi
  rm -rf "$d"
}

write_config() {
  DRIVER=$(storage_driver)
  mkdir -p "$STATE/storage-$DRIVER" "$STATE/run" "$STATE/registry" "$STATE/tmp"
  # crun fails on hybrid cgroups hosts; ulimits and the journald/systemd defaults do not exist in a
  # CI sandbox: runc, cgroupfs, a file events log, no default ulimits.
  cat >"$STATE/containers.conf" <<EOF
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$STATE/events.log"
tmp_dir = "$STATE/tmp"
EOF
  cat >"$STATE/storage.conf" <<EOF
[storage]
driver = "$DRIVER"
graphroot = "$STATE/storage-$DRIVER"
runroot = "$STATE/run"
EOF
  # The public names the tool uses (the matrix's nvcr.io/nvidia/pytorch and unsloth/unsloth) are
  # served by the local registry: `spark-ops setup pin unsloth --pull` runs unchanged.
  cat >"$STATE/registries.conf" <<EOF
unqualified-search-registries = ["docker.io"]
[[registry]]
location = "$REG"
insecure = true
[[registry]]
prefix = "nvcr.io/nvidia"
location = "$REG/nvidia"
insecure = true
[[registry]]
prefix = "docker.io/unsloth"
location = "$REG/unsloth"
insecure = true
EOF
  cat >"$STATE/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $STATE/registry
  delete:
    enabled: true
http:
  addr: $REG
EOF
}

start_registry() {
  alive "$STATE/registry.pid" && return 0
  docker-registry serve "$STATE/registry.yml" >"$STATE/registry.log" 2>&1 &
  echo $! >"$STATE/registry.pid"
  for _ in $(seq 50); do
    curl -fsS "http://$REG/v2/" >/dev/null 2>&1 && return 0
    alive "$STATE/registry.pid" || break
    sleep 0.2
  done
  log "the registry did not start on $REG: see $STATE/registry.log"; return 1
}

start_service() {
  if alive "$STATE/service.pid" && [ -S "$SOCK" ]; then return 0; fi
  rm -f "$SOCK"
  podman_env
  # --time 0: no idle exit
  setsid podman system service --time 0 "unix://$SOCK" >"$STATE/service.log" 2>&1 </dev/null &
  echo $! >"$STATE/service.pid"
  for _ in $(seq 100); do
    [ -S "$SOCK" ] && DOCKER_HOST=unix://$SOCK docker version >/dev/null 2>&1 && return 0
    alive "$STATE/service.pid" || break
    sleep 0.2
  done
  log "the podman API service did not come up on $SOCK: see $STATE/service.log"; return 1
}

# ------------------------------------------------------------------ images
TORCH_NGC=2.9.0a0+50eac811a6.nv25.09

# dist NAME VERSION SITE: a distribution's dist-info (what importlib.metadata reads)
dist() {
  local d="$3/$(echo "$1" | tr - _)-$2.dist-info"
  mkdir -p "$d"
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$1" "$2" >"$d/METADATA"
  : >"$d/RECORD"
}

# torch_standin SITE VERSION CUDA INIT: a torch package whose version.py says VERSION / CUDA; INIT
# is the body of torch/__init__.py (a CPU-only torch by default: no GPU here)
torch_standin() {
  local site=$1 ver=$2 cuda=$3 init=${4:-}
  mkdir -p "$site/torch"
  printf "__version__ = '%s'\ncuda = '%s'\ngit_version = 'standin'\nhip = None\n" "$ver" "$cuda" \
    >"$site/torch/version.py"
  cat >"$site/torch/__init__.py" <<EOF
# spark-ops test stand-in for torch $ver (CUDA $cuda): imports, sees no GPU
$init
from torch import version
__version__ = version.__version__
class cuda:
    @staticmethod
    def is_available(): return False
    @staticmethod
    def device_count(): return 0
    @staticmethod
    def get_arch_list(): return ['sm_80', 'sm_90', 'sm_100', 'sm_120']
EOF
  dist torch "$ver" "$site"
}

build_image() {  # NAME CONTEXT: build CONTEXT/Containerfile as localhost/spark-ops-test/NAME:1
  pm build -q --pull=never -t "localhost/spark-ops-test/$1:1" "$2" >/dev/null
}

build_images() {
  local ctx=$STATE/build
  rm -rf "$ctx"; mkdir -p "$ctx"
  if ! pm image exists localhost/spark-ops-test/debian:$SUITE; then
    if [ ! -s "$STATE/rootfs-$SUITE.tar" ]; then  # kept: a rebuild needs no mirror
      log "building a Debian $SUITE rootfs with python3 (mmdebstrap)"
      mmdebstrap --quiet --variant=essential --include=python3 \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' "$SUITE" "$ctx/rootfs.tar" >"$STATE/mmdebstrap.log" 2>&1 \
        || { log "mmdebstrap failed: see $STATE/mmdebstrap.log"; return 1; }
      mv "$ctx/rootfs.tar" "$STATE/rootfs-$SUITE.tar"
    fi
    pm import -q --change 'CMD ["/bin/sh"]' "$STATE/rootfs-$SUITE.tar" "localhost/spark-ops-test/debian:$SUITE" >/dev/null
  fi
  local base=localhost/spark-ops-test/debian:$SUITE site
  log "building the test images"

  # NGC-like: NGC's torch build and CUDA 13.0, its env marker, flash-attn 2.7.4.post1 bundled
  site=$ctx/ngc/site; mkdir -p "$site"
  torch_standin "$site" "$TORCH_NGC" 13.0
  mkdir -p "$site/flash_attn"; echo "__version__ = '2.7.4.post1'" >"$site/flash_attn/__init__.py"
  dist flash-attn 2.7.4.post1 "$site"
  dist peft 0.19.1 "$site"; dist torchao 0.17.0 "$site"; dist transformers 5.13.1 "$site"
  printf 'FROM %s\nENV NVIDIA_PYTORCH_VERSION=25.09 PYTORCH_VERSION=%s\nCOPY site/ /usr/local/lib/python3.11/dist-packages/\nLABEL org.opencontainers.image.title=spark-ops-test-ngc\n' \
    "$base" "$TORCH_NGC" >"$ctx/ngc/Containerfile"
  build_image ngc "$ctx/ngc"

  # Unsloth-like: the matrix's stack, no flash-attn
  site=$ctx/unsloth/site; mkdir -p "$site"
  torch_standin "$site" 2.9.0+cu130 13.0
  for p in "unsloth 2026.7.2" "unsloth-zoo 2026.7.2" "peft 0.19.1" "torchao 0.17.0" "transformers 5.13.1" \
           "trl 1.8.0" "datasets 4.3.0" "bitsandbytes 0.49.2"; do dist $p "$site"; done
  printf 'FROM %s\nCOPY site/ /usr/local/lib/python3.11/dist-packages/\nLABEL org.opencontainers.image.title=spark-ops-test-unsloth\n' \
    "$base" >"$ctx/unsloth/Containerfile"
  build_image unsloth "$ctx/unsloth"

  # bare pip, drifted: a CUDA 12.8 torch, off-matrix transformers, torchao 0.13 beside peft 0.19.1
  site=$ctx/barepip/site; mkdir -p "$site"
  torch_standin "$site" 2.8.0+cu128 12.8
  for p in "peft 0.19.1" "torchao 0.13.0" "transformers 4.57.0" "trl 0.23.0" "bitsandbytes 0.47.0"; do
    dist $p "$site"; done
  printf 'FROM %s\nCOPY site/ /usr/local/lib/python3.11/dist-packages/\n' "$base" >"$ctx/barepip/Containerfile"
  build_image barepip "$ctx/barepip"

  # python segfaults on `import torch` (a broken extension module)
  site=$ctx/segv/site; mkdir -p "$site"
  torch_standin "$site" "$TORCH_NGC" 13.0 'import ctypes; ctypes.string_at(0)'
  printf 'FROM %s\nCOPY site/ /usr/local/lib/python3.11/dist-packages/\n' "$base" >"$ctx/segv/Containerfile"
  build_image segv "$ctx/segv"

  # `import torch` never returns (a wedged driver call)
  site=$ctx/hang/site; mkdir -p "$site"
  torch_standin "$site" "$TORCH_NGC" 13.0 'import time; time.sleep(100000)'
  printf 'FROM %s\nCOPY site/ /usr/local/lib/python3.11/dist-packages/\n' "$base" >"$ctx/hang/Containerfile"
  build_image hang "$ctx/hang"

  # no python at all (a runtime-only image)
  mkdir -p "$ctx/nopython"
  printf 'FROM %s\nRUN rm -f /usr/bin/python3* /usr/bin/python /usr/local/bin/python*\n' "$base" \
    >"$ctx/nopython/Containerfile"
  build_image nopython "$ctx/nopython"
  rm -rf "$ctx"
}

push_images() {
  # the stand-ins for the public names (the README's `setup pin ngc|unsloth --pull` pulls these)
  pm tag localhost/spark-ops-test/ngc:1 "$REG/nvidia/pytorch:25.09-py3"
  pm push -q --tls-verify=false "$REG/nvidia/pytorch:25.09-py3"
  pm tag localhost/spark-ops-test/unsloth:1 "$REG/unsloth/unsloth:dgxspark-latest"
  pm push -q --tls-verify=false "$REG/unsloth/unsloth:dgxspark-latest"
}

write_env() {
  cat >"$STATE/env" <<EOF
DOCKER_HOST=unix://$SOCK
CONTAINERS_CONF=$STATE/containers.conf
CONTAINERS_STORAGE_CONF=$STATE/storage.conf
CONTAINERS_REGISTRIES_CONF=$STATE/registries.conf
SPARKOPS_TEST_REGISTRY=$REG
SPARKOPS_ENGINE_DIR=$STATE
EOF
}

start() {
  mkdir -p "$STATE"
  install_tools
  write_config
  start_registry
  if [ "$(cat "$STATE/images.stamp" 2>/dev/null)" != "$SCRIPT_HASH-$DRIVER" ]; then
    build_images
    echo "$SCRIPT_HASH-$DRIVER" >"$STATE/images.stamp"
  fi
  start_service
  push_images
  write_env
  log "ready: DOCKER_HOST=unix://$SOCK ($DRIVER storage), registry $REG (environment in $STATE/env)"
}

stop_pid() {
  if alive "$1"; then
    local pid; pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

stop() {
  [ -d "$STATE" ] || return 0
  if [ -f "$STATE/storage.conf" ] && command -v podman >/dev/null; then
    # containers the tests left behind (a killed probe's), not the images
    pm rm -af >/dev/null 2>&1 || true
  fi
  stop_pid "$STATE/service.pid"
  stop_pid "$STATE/registry.pid"
  rm -f "$SOCK" "$STATE/env"
}

status() {
  alive "$STATE/registry.pid" && echo "registry: running on $REG" || echo "registry: stopped"
  alive "$STATE/service.pid" && echo "service: running on unix://$SOCK" || echo "service: stopped"
  [ -f "$STATE/images.stamp" ] && echo "images: built ($(cat "$STATE/images.stamp"))" || echo "images: not built"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  clean) stop; rm -rf "$STATE" ;;
  *) echo "usage: $0 start|stop|status|clean" >&2; exit 2 ;;
esac
