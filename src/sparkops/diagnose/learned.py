"""The learned decision layer of ``diagnose`` (issue 18): which of the rules' candidates to answer, or none.

The hand-written rules (symptoms.yaml) find candidate gotchas and score them; this module reads each candidate the
way the labelled reports taught it to, and chooses among "G1".."G10" and "none" with a conditional logit (a linear
model per candidate, softmax over the candidates), weights from ``knowledge/diagnose_model.yaml``. Pure Python, no
numpy, deterministic; it never raises on odd input (a missing feature counts 0).

What is learned (``benchmarks/diagnose_learn.py`` retrains it under grouped cross-validation by source and rewrites the
weights file): the weight of every feature below, one prior per gotcha, and the answer bar (the probability under
which a gotcha is not answered, chosen inside the training folds). What is not learned: the features themselves,
the rules that make the candidates, and the number families each gotcha cares about (data in the weights file).

Features of a gotcha candidate (shared weights): its rules score (log) and share of all scores, whether it is the
rules' top and by how much, where its evidence stands (failure lines, quotes, setup lines), whether it rests on topic
words only or on a context rule, whether a match for it was negated ("no OOM"), whether the text holds a measured
number of the kind the gotcha is about (tok/s, MHz/W/degrees, GiB), how many evidence lines. Features of "none": how
much of the text reports a failure, and whether it reads like advice, a success report or a question.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sparkops.diagnose.reading import CONTEXT, FAILURE, QUOTED, negated

NONE = "none"

CANDIDATE_FEATURES = ("log_score", "share", "is_top", "margin", "kept", "failure_evidence", "ev_failure", "ev_quoted",
                      "ev_context", "topic_only", "ruled", "negated", "numbers", "n_evidence", "anchored")
NONE_FEATURES = ("bias", "failure_reported", "failure_lines", "failure_share", "advice", "success", "question",
                 "context_share", "quoted_share", "length", "trace", "first_person", "headings")

_NUMBERS = {  # a measured number of a kind a gotcha is about
    "speed": re.compile(r"\d\s*(tok(en)?s?/s|tokens? per second|t/s|tps)\b|\bms ?/ ?(token|step)\b", re.IGNORECASE),
    "thermal": re.compile(r"\d\s*(mhz|°c|ºc|degrees|w\b|watts?\b)|\d{2,3} ?c\b", re.IGNORECASE),
    "memory": re.compile(r"\d\s*(gib|gb|mib)\b", re.IGNORECASE),
    "bandwidth": re.compile(r"\d\s*(gb/s|gbps|gb/sec|gbit)", re.IGNORECASE),
}
_ADVICE = re.compile(r"\b(you (should|can|must|need|may|will)|we recommend|recommended|never (set|use|run)|"
                     r"always (set|use|run)|tip:|guide|how to|step \d|quick take|tl;dr|learning objectives|"
                     r"best practices?|checklist|reference|explain\w*)\b", re.IGNORECASE)
_SUCCESS = re.compile(r"\b(works?( fine| well| great)?|worked|stable|successfully|succeeded|no issues?|without (any )?"
                      r"(issues?|problems?)|runs? (fine|well|beautifully)|thanks?|merged|lgtm|verified|passes)\b",
                      re.IGNORECASE)
_TRACE = re.compile(r"^\s*(Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|\w*(Error|Exception):|"
                    r"ERROR\b|E\d{4} |\[rank\d+\]|NVRM: |\(EngineCore|\(APIServer|RuntimeError\b)")
_FIRST_PERSON = re.compile(r"\b(I (get|got|see|saw|hit|tried|ran|am getting|have|can't|cannot)|I'm (getting|seeing|trying)|"
                           r"we (get|got|see|saw|hit|tried|ran)|my (spark|gx10|machine|unit|box|node|server|setup))\b",
                           re.IGNORECASE)
_HEADING = re.compile(r"^\s*(#{1,4} |\d+\. [A-Z]|[A-Z][\w ,'’-]{3,60}$)")
# the report is about this platform at all (a GB10 / DGX Spark or its family): a confident answer needs it named
_PLATFORM = re.compile(r"\b(gb10|dgx[ -]?spark|spark|sm_?12[01]a?|gx10|ascent|grace[ -]?blackwell|aarch64|arm64|"
                       r"sbsa|unified memory|compute capability 12|capability \(?12|12\.1\b|thor)", re.IGNORECASE)
# NVIDIA's own DGX Spark instructions (G8 is "following an official playbook verbatim fails"): the playbooks repository,
# build.nvidia.com / docs.nvidia.com, a playbook, or official / NVIDIA's guide, instructions, docs, tutorial, recipe
_OFFICIAL = re.compile(r"dgx-spark-playbooks|build\.nvidia\.com|docs\.nvidia\.com|nvidia\.com/\S*spark|\bplaybooks?\b|"
                       r"\bofficial\b[^.\n]{0,40}\b(guide|instructions|docs|documentation|tutorial|recipe)|"
                       r"\bnvidia'?s?\b[^.\n]{0,30}\b(guide|instructions|docs|documentation|tutorial|recipe)", re.IGNORECASE)
# --- round 18z: a multi-node failure that is the setup's own, not tensor parallel's (G10 vs none) -------------------
# Written from gotchas.md G10 (TP across the ConnectX-7 link hangs, times out in a collective or runs slower than one
# Spark) and the labelling rule ("a multi-node NCCL failure the reporter traced to their own cabling/kernel/config is
# none"); not from any labelled case's words. Two readings, each one yes/no over the whole report:
#  - setup_fault: the job spans nodes, and a line that reports the failure or tells what resolved / caused it names a
#    rendezvous or network-configuration item (socket interface, an IP/address, GID index, MTU, firewall/port, SSH,
#    hostname/DNS, Ray/gloo rendezvous, cabling/flow control/packet loss), not denied ("ruled out", "healthy",
#    "not the network") and not on a line about a collective (whose hang or time is G10's own symptom);
#  - tp_failure: some line shows a failure specific to tensor parallelism across nodes: a collective (all-reduce,
#    all-gather, reduce-scatter, broadcast, a collective op / NCCL watchdog) that hangs, times out or takes measured
#    time, or TP / a cross-node run that is slower than it should be.
_MULTI_NODE = re.compile(
    r"\b(two|2|three|four|eight|[2-8]|both|dual|multiple|several|second)\s?[x×-]?\s?(NVIDIA )?(DGX )?Sparks?\b|"
    r"\bmulti-?(node|Spark)\b|\b(two|three|four|eight|[2-8]|both|multiple|several) (nodes|machines|boxes|hosts)\b|"
    r"--nnodes[ =]+[2-9]|\bnnodes\s*[=:]\s*[2-9]|num_machines\s*[=:]\s*[2-9]|\b(head|worker|peer) node\b|"
    r"\bnode[_-]rank\b|\bWORLD_SIZE\b|\bacross (the )?(nodes|Sparks|boxes|machines|hosts)\b|ConnectX-?7|\bCX-?7\b|"
    r"\bRoCE\b", re.IGNORECASE)
_SETUP_ITEM = re.compile(
    r"\b(NCCL|GLOO|TP|UCX)_SOCKET_IFNAME\b|\bMASTER_(ADDR|PORT)\b|\b[A-Z]+_HOST_IP\b|\b(NCCL_)?IB_GID_INDEX\b|"
    r"\bGID( index)?\b|\bMTU\b|\bjumbo frames?\b|\b(network|socket|wrong|ConnectX(-?7)?|RoCE|Wi-?Fi|ethernet) "
    r"(interface|NIC|port|address)\b|\binterface name\b|\bWi-?Fi\b|\bIP (address|addr)\b|\b(wrong|local|loopback|"
    r"public|private|host|bind|advertised) (IP|address)\b|\baddress already in use\b|\bconnection refused\b|"
    r"\bno route to host\b|\b(host|address|port) (is )?unreachable\b|\bfirewall\b|\bufw\b|\biptables\b|\bssh\b|"
    r"\bpasswordless\b|\bauthorized_keys\b|\bknown_hosts\b|\bhostnames?\b|/etc/hosts\b|\bDNS\b|\brendezvous\b|"
    r"\bgloo\b|\bGCS\b|\bray (start|cluster|head)\b|\bpacket (loss|drops?)\b|\b(PFC|ECN)\b|\bflow control\b|"
    r"\bcabl(e|es|ed|ing)\b|\blink (is |was )?(down|flapping|flaps|negotiated)\b", re.IGNORECASE)
_COLLECTIVE = re.compile(r"all[-_ ]?reduce|all[-_ ]?gather|reduce[-_ ]?scatter|\bcollectives?\b|\bbroadcast\b|"
                         r"\bbusbw\b|\balgbw\b", re.IGNORECASE)
_CLEARED = re.compile(r"\bruled out\b|\bverified\b|\bhealthy\b|\b(is|was|are|were)(n't| not) the (cause|problem|"
                      r"issue|culprit|bottleneck)\b|\bnot (the )?(network|link|fabric|interconnect)\b|\bworks? fine\b|"
                      r"\b0 (packet )?loss\b|\bno (packet )?loss\b", re.IGNORECASE)
_RESOLVED = re.compile(r"\b(fix(ed|es)|solv(ed|es)|resolv(ed|es)|the fix|work-?around|works? (now|again)|did the trick|"
                       r"got it working|root cause|caused by|the cause|turned out|traced (it )?to)\b", re.IGNORECASE)
_TP_FAILURE = re.compile(
    r"(all[-_ ]?reduce|all[-_ ]?gather|reduce[-_ ]?scatter|\bcollectives?\b|\bbroadcast\b|ProcessGroupNCCL|"
    r"\bwatchdog\b)\w*[^\n]{0,80}\b(hangs?|hung|hanging|stuck|deadlock\w*|time ?out|timed out|spin\w*|never "
    r"(returns?|completes?|finish\w*)|\d+(\.\d+)? ?(us|µs|ms)\b)|"
    r"\b(hangs?|hung|hanging|stuck|deadlock\w*|time ?out|timed out|spin\w*|waits?|waiting)\b[^\n]{0,80}"
    r"(all[-_ ]?reduce|all[-_ ]?gather|reduce[-_ ]?scatter|\bcollectives?\b|\bbroadcast\b)|"
    r"\b(TP ?=? ?[2-9]|TP[2-9]|tensor[- ]parallel\w*|two (nodes|Sparks)|dual[- ]Spark|multi-?node|across (the )?"
    r"(nodes|Sparks|boxes))\b[^\n]{0,120}\b(slow(er|ly|s|down)?|no faster|half the speed|worse than|loses? to|"
    r"behind|beaten by)\b|"
    r"\b(slow(er|ly|s|down)?|no faster|half the speed|worse than|loses? to|behind|beaten by)\b[^\n]{0,120}\b(TP ?=? ?"
    r"[2-9]|TP[2-9]|tensor[- ]parallel\w*|two (nodes|Sparks)|dual[- ]Spark|multi-?node|across (the )?(nodes|Sparks|"
    r"boxes))\b", re.IGNORECASE)


def setup_fault(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """The job spans nodes and a failure line, or a line telling what resolved or caused it, names a rendezvous /
    network-configuration item (not denied, not on a line about a collective): the setup's own fault (round 18z)."""
    if not any(_MULTI_NODE.search(ln) for ln in lines):
        return False
    for ln, r in zip(lines, roles, strict=False):
        if r == QUOTED or not (r == FAILURE or _RESOLVED.search(ln)):
            continue
        if _COLLECTIVE.search(ln) or _CLEARED.search(ln):
            continue
        if any(not negated(ln, m.start()) for m in _SETUP_ITEM.finditer(ln)):
            return True
    return False


def tp_failure(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """Some line (not a quote) shows a failure specific to TP across nodes: a collective that hangs, times out or
    takes measured time, or a TP / cross-node run slower than it should be (round 18z)."""
    return any(r != QUOTED and _TP_FAILURE.search(ln) for ln, r in zip(lines, roles, strict=False))


# --- round 18ab: the labelling rule's own failing shape also counts as TP's failure (variant B') ---------------------
# Written from tests/diagnose/cases/README.md ("a cross-node TP hang with no diagnosis beyond 'one rank stuck in a
# collective' is labelled G10 ...: the failing shape is TP across the ConnectX link") and gotchas.md G10 ("a
# tensor-parallel launch across two Sparks hangs"), not from any labelled case's words. One yes/no over the report:
# it states tensor parallelism > 1 (a TP degree of 2 or more, or "tensor parallel" next to a multi-node phrase), the
# job spans nodes, and some line (not a quote, not negated) says the job hangs, never finishes starting, or its
# ranks / workers stop. A bare timeout is not read as a hang here (an SSH or download timeout is the setup's own).
_TP_DEGREE = re.compile(
    r"\bTP\s?[=:-]?\s?([2-9]|[1-9]\d)\b|\b(tp|tensor[-_ ]parallel(ism)?)[-_ ]?(size|degree)?\s*[=:]\s*([2-9]|[1-9]\d)\b|"
    r"--tensor-parallel-size[ =]+([2-9]|[1-9]\d)\b|(^|\s)--?tp(-size)?[ =]+([2-9]|[1-9]\d)\b|"
    r"\btensor_model_parallel_size\s*[=:]\s*([2-9]|[1-9]\d)\b", re.IGNORECASE)
_TP_WORD = re.compile(r"\btensor[-_ ]parallel(ism)?\b", re.IGNORECASE)
_HANG_WORD = re.compile(r"\b(hangs?|hung|hanging|stuck|freez(e|es|ing)|froze(n)?|deadlock\w*|wedged?|unresponsive|"
                        r"stops? responding|stopped responding|no (further )?progress)\b", re.IGNORECASE)
_NO_START = re.compile(
    r"\bnever (finish\w*|complet\w*|start\w*|becomes? ready|comes? up|gets? past|loads?|returns?|responds?)\b|"
    r"\b(does|did|do)(n't| not) (finish|complete|start|come up|get past|become ready|progress|respond)\b|"
    r"\b(ranks?|workers?|process(es)?|nodes?)( \d+)? (stop(s|ped)?|exit(s|ed)?|die[sd]?|went silent|drop(s|ped)? out)\b",
    re.IGNORECASE)


def tp_hang(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """The report states TP > 1 across nodes and the job hangs, never finishes starting or its ranks stop: the
    labelling rule's failing shape for G10 (round 18ab, variant B')."""
    live = [(ln, r) for ln, r in zip(lines, roles, strict=False) if r != QUOTED]
    if not any(_MULTI_NODE.search(ln) for ln, _r in live):
        return False
    if not any(_TP_DEGREE.search(ln) or (_TP_WORD.search(ln) and _MULTI_NODE.search(ln)) for ln, _r in live):
        return False
    for ln, r in live:
        if r == FAILURE and any(not negated(ln, m.start()) for m in _HANG_WORD.finditer(ln)):
            return True
        if any(not negated(ln, m.start()) for m in _NO_START.finditer(ln)):
            return True
    return False


# --- round 18ac: G1 only where a line shows a CUDA major-version mismatch (G1 vs a missing SM12x kernel) -------------
# Written from gotchas.md G1 (symptoms: a CUDA 12 runtime library missing or linked, an undefined CUDA function at
# import; Fail: torch built for CUDA 12 on a Spark, CPU-only torch on a GPU host, torch's CUDA newer than the driver
# supports, an extension needing a CUDA 12 library; Fix: the cu130 wheel index) and the labelling rules (G1 = "torch
# (or an extension) built for the wrong CUDA: cu128 / CPU-only (+cpu) wheels on a Spark, a loader that hard-codes
# libcudart.so.12"; "none" = "a prebuilt .so without an SM12x kernel"; "undefined symbol between builds is G9"), not
# from any labelled case's words. Two yes/no readings over the report's non-quoted lines:
#  - cuda_mismatch: some line shows the CUDA major version of a build disagreeing with the machine's (or torch with no
#    CUDA at all): a CUDA <= 12 runtime library soname, a cu11x/cu12x build tag / index / runtime wheel, a CUDA 11/12
#    toolkit, image or runtime named, torch.version.cuda (or "CUDA used to build PyTorch") 11/12.x or None, a +cpu
#    torch, "Torch not compiled with CUDA", a CPU-only torch/wheel/build, torch's CUDA library missing, the driver too
#    old for the runtime / PTX from a newer toolchain, an undefined symbol naming a CUDA C-API function (not a C++
#    mangled one: drift between builds is G9), torch's own supported capability range ending below 12.x, or a line that
#    says the fix was a CUDA 13 (cu13x) build; not negated;
#  - kernel_gap: a missing SM12x kernel without that: "no kernel image is available", a build / library / kernel not
#    compiled for (or not supporting) sm_12x, sm_120a-only cubins, no sm_121 / SM12x kernel.
_CUDA_MISMATCH = re.compile(
    r"\blib(cudart|cublas|cublasLt|nvrtc|cusparse|cufft|curand|cusolver|nvJitLink|cupti|cudnn)\.so\.1[0-2]\b|"
    r"(?<![\w.])cu1[0-2]\d(?!\w)|\bnvidia-[a-z-]+-cu1[0-2]\b|"
    r"\bCUDA[- ]?(toolkit |runtime |version:? |Version )?1[0-2]\.\d+\b|\bCUDA[- ]?1[0-2]\b(?![.\d])|"
    r"\bcuda[-:=]{1,2} ?1[0-2]\.\d|\bcuda1[0-2]\.\d|nvidia/cuda:1[0-2]\.|"
    r"torch\.version\.cuda[^\n]{0,30}?(\b1[0-2]\.\d+\b|\bNone\b)|CUDA used to build PyTorch: (1[0-2]\.\d|None)|"
    r"(?<![\w.+-])v?\d+\.\d+(\.\d+)?[\w.]*\+cpu\b|Torch not compiled with CUDA|"
    r"\b(torch|pytorch|wheels?|builds?)\b[^\n]{0,40}\bCPU[- ]only\b|\bCPU[- ]only\b[^\n]{0,20}\b(torch|pytorch|wheels?|builds?)\b|"
    r"libtorch_cuda\.so[^\n]{0,40}(cannot open|No such file)|"
    r"CUDA driver version is insufficient|driver on your system is too old|cudaErrorInsufficientDriver|"
    r"PTX was compiled with an unsupported toolchain|cudaErrorUnsupportedPtxVersion|"
    r"undefined symbol: _{0,2}(cuda[A-Z_]|cu[A-Z][a-z]|cublas|cudnn|nvrtc|cusparse|cufft|curand|nvJitLink)|"
    r"cuda capability supported by this version of PyTorch is\s{0,20}\(\d{1,2}\.\d\)\s{0,20}-\s{0,20}\((\d|1[01])\.\d\)",
    re.IGNORECASE)
_TO_CUDA13 = re.compile(r"\bcu13\d\b|\bCUDA[- ]?13\b", re.IGNORECASE)
_KERNEL_GAP = re.compile(
    r"no kernel image is available|cudaErrorNoKernelImageForDevice|"
    r"\b(not|never|wasn.t|isn.t) (been )?(compiled|built) (for|with) [^\n]{0,30}\b(sm_?12\d[af]?|SM12x|compute_12\d|12\.[01])\b|"
    r"\b(no|missing|without|lacks?|lacking)\b[^\n]{0,30}\b(sm_?12\d[af]?|SM ?12x|sm_12x|GB10|Blackwell)\b[^\n]{0,20}"
    r"\b(kernels?|cubins?|builds?|support|binar(y|ies)|images?|code)\b|"
    r"\bsm_?120a?\b[^\n]{0,20}\bonly\b|\bonly\b[^\n]{0,30}\bsm_?120a\b|"
    r"\b(sm_?12[01][af]?|SM ?12x|sm_12x)\b[^\n]{0,40}\b(is |are )?(not supported|unsupported|not compiled)\b|"
    r"\b(unsupported|unknown|invalid) (gpu |cuda )?(arch|architecture|compute capability)\b[^\n]{0,40}\b(sm_?12\d|12\.[01]|12\d)\b",
    re.IGNORECASE)


def cuda_mismatch(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """Some non-quoted line shows a CUDA major-version mismatch (a CUDA 11/12 build, library or toolkit; torch with no
    CUDA; a driver older than the runtime) or says the fix was a CUDA 13 build (round 18ac)."""
    for ln, r in zip(lines, roles, strict=False):
        if r == QUOTED:
            continue
        if any(not negated(ln, m.start()) for m in _CUDA_MISMATCH.finditer(ln)):
            return True
        if _RESOLVED.search(ln) and _TO_CUDA13.search(ln):
            return True
    return False


def kernel_gap(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """Some non-quoted line shows a missing SM12x kernel (no kernel image, not compiled for sm_12x, sm_120a only), not
    negated; read by itself (a variant pairs it with ``not cuda_mismatch``) (round 18ac)."""
    return any(r != QUOTED and any(not negated(ln, m.start()) for m in _KERNEL_GAP.finditer(ln))
               for ln, r in zip(lines, roles, strict=False))


# Round 18ac, variant (A'), added AFTER the count of the two readings above on the 293 training reports (which showed
# one G1 report answered right on dealing "" that states its mismatch in words, with no version): the labelling rule's
# own words for G1 ("built for the wrong CUDA") and gotchas.md's title ("CUDA ... ABI mismatch"), read as a mismatch.
_WRONG_CUDA = re.compile(
    r"\b(built|compiled|linked|made|installed) (for|against|with) (the |a )?wrong CUDA\b|"
    r"\bwrong CUDA (version|build|wheel|runtime|toolkit|major|ABI)\b|\bCUDA (version |major |ABI |runtime )?mismatch\b|"
    r"\bmismatch(ed|ing)? CUDA (version|build|runtime|ABI)s?\b", re.IGNORECASE)


def wrong_cuda(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """Some non-quoted line says the build is for the wrong CUDA / a CUDA (ABI) mismatch, in words, not negated
    (round 18ac, variant A')."""
    return any(r != QUOTED and any(not negated(ln, m.start()) for m in _WRONG_CUDA.finditer(ln))
               for ln, r in zip(lines, roles, strict=False))


# --- round 18ag: two more ways through the G1 gate, from the spec's and the labelling rule's own words ----------------
# Declared in benchmarks/results/diagnose-learn-cv-v30.md (after reading the lines of the three G1 reports round 18ae's
# gate lost in-sample, before any count). Each one yes/no over the report's non-quoted lines, a match not negated:
#  - no_cuda_torch (variant B): a line says the framework finds or uses no GPU (no GPU / accelerator / CUDA device
#    detected, torch.cuda.is_available() False, falls back to the CPU, no GPU acceleration) and the report shows the
#    GPU is there (a GB10 / DGX Spark / GX10 named, or an nvidia-smi row naming an NVIDIA GPU): the labelling rule's
#    "CPU-only wheels on a Spark", gotchas.md G1's Fail "CPU-only torch on a GPU host", the triage's "the host sees it";
#  - cuda13_needed (variant C): a line says the machine or job requires / needs CUDA 13 (cu13x), or that what made it
#    run / work was a CUDA 13 build: gotchas.md G1's Fix (the cu130 wheel index), the platform's CUDA 13.
_NO_GPU_USED = re.compile(
    r"\bno (CUDA[- ]capable |CUDA )?(GPUs?|accelerators?|CUDA devices?)\b"
    r"[^\n]{0,40}?\b(detected|found|available)\b|"
    r"\b(cannot|can't|can not|could not|couldn't|unable to|fails? to|failed to) (find|detect|see)\b[^\n]{0,20}?"
    r"\b(GPUs?|accelerators?|CUDA devices?)\b|"
    r"torch\.cuda\.is_available\(\)[^\n]{0,30}?\bFalse\b|"
    r"\b(falls?|fell|falling) back to (the )?CPU\b|"
    r"\b(does|do|did)(n't| not) (appear to |seem to )?(support|use) (the )?GPU( acceleration)?\b|"
    r"\b(runs?|running|ran) on (the )?CPU (instead|only)\b", re.IGNORECASE)
_GPU_THERE = re.compile(r"\b(GB10|DGX[ -]?Spark|GX10)\b|^\|\s+\d+\s+NVIDIA [A-Z]", re.IGNORECASE)
_NEEDS_CUDA13 = re.compile(r"\b(requires?|required|needs?|needed)\b[^\n]{0,40}?(\bcu13\d\b|\bCUDA[- ]?13\b)",
                           re.IGNORECASE)
_MADE_IT_RUN = re.compile(r"\b(made|make|got) it (to )?(run|work)(ing)?\b|\bhow I (made|got) it\b", re.IGNORECASE)


def no_cuda_torch(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """Some non-quoted line says the framework finds or uses no GPU, and the report shows the GPU is there (a GB10 /
    DGX Spark named, or an nvidia-smi row of an NVIDIA GPU): a torch with no CUDA on a GPU host (round 18ag, B)."""
    live = [ln for ln, r in zip(lines, roles, strict=False) if r != QUOTED]
    if not any(_GPU_THERE.search(ln) for ln in live):
        return False
    return any(any(not negated(ln, m.start()) for m in _NO_GPU_USED.finditer(ln)) for ln in live)


def cuda13_needed(lines: Sequence[str], roles: Sequence[str]) -> bool:
    """Some non-quoted line says the machine or job requires / needs CUDA 13 (cu13x), or that what made it run was a
    CUDA 13 build (round 18ag, C)."""
    for ln, r in zip(lines, roles, strict=False):
        if r == QUOTED:
            continue
        if any(not negated(ln, m.start()) for m in _NEEDS_CUDA13.finditer(ln)):
            return True
        if (_RESOLVED.search(ln) or _MADE_IT_RUN.search(ln)) and _TO_CUDA13.search(ln):
            return True
    return False


_QUESTION = re.compile(r"\?\s*$|\b(anyone|any idea|how (do|can) i|is (this|that|it) (normal|expected))\b",
                       re.IGNORECASE)


# The yes/no readings over the whole report (rounds 18z..18ag). The CV harness (benchmarks/diagnose_learn.py) reads all
# of them to try its variants; the shipped layer computes only what it uses: those a "none" feature weighs (WEIGHED,
# read on every call) and those a decision-time gate reads (GATES, read only when that gotcha would be answered).
READINGS: dict[str, Callable[[Sequence[str], Sequence[str]], bool]] = {
    "setup_fault": setup_fault, "tp_failure": tp_failure, "tp_hang": tp_hang,  # rounds 18z, 18ab (G10)
    "cuda_mismatch": cuda_mismatch, "kernel_gap": kernel_gap, "wrong_cuda": wrong_cuda,  # round 18ac (G1)
    "no_cuda_torch": no_cuda_torch, "cuda13_needed": cuda13_needed,  # round 18ag (G1)
}
WEIGHED = tuple(r for r in READINGS if r in NONE_FEATURES)  # none today: no shipped weight names a reading
# the shipped gates: a gotcha is answered only where one of its readings holds (diagnose ``_learned``); round 18ab's
# G10 gate (results diagnose-learn-cv-v27.md): a failure of tensor parallelism's own
# and round 18ag's G1 gate (variant B, diagnose-learn-cv-v30.md): a CUDA major-version mismatch, "the wrong CUDA" in
# words, or a torch that finds no GPU on a host whose GPU is there
GATES: dict[str, tuple[str, ...]] = {"G10": ("tp_failure", "tp_hang"),
                                     "G1": ("cuda_mismatch", "wrong_cuda", "no_cuda_torch")}
# what an abstention says when a gate holds a gotcha back: what no line showed, and what would have opened it
GATE_WHY: dict[str, tuple[str, str]] = {
    "G10": ("no line shows a failure of tensor parallelism's own",
            "a collective that hangs, times out or costs time, or a TP group across nodes that hangs"),
    "G1": ("no line shows a CUDA major-version mismatch",
           "a CUDA 12 library / wheel / toolkit on CUDA 13, a CPU-only torch or one that finds no GPU on a Spark, or a "
           "driver older than the runtime; a missing sm_12x kernel alone is a library gap, not G1"),
}


def gate_holds(gotcha: str, lines: Sequence[str], roles: Sequence[str]) -> bool:
    """Does one of the gotcha's gate readings hold (computed now, stopping at the first that does)? True for a
    gotcha without a gate."""
    gate = GATES.get(gotcha, ())
    return not gate or any(READINGS[r](lines, roles) for r in gate)


@dataclass(frozen=True)
class Candidate:
    """One gotcha the rules scored, as the learned layer sees it."""

    gotcha: str
    score: float
    evidence_roles: tuple[str, ...]  # the role of each evidence line (reading.py)
    failure_evidence: bool
    topic_only: bool  # its evidence is topic words only (damped by the rules)
    ruled: bool  # a context rule boosted or redirected evidence into it
    negated: bool  # a match for it was read as negated ("no OOM")
    kept: bool = True  # over the rules' own threshold (min_confidence)
    anchored: bool = False  # one of its failure patterns (not a topic word) stands on a line reporting the failure
    body_anchored: bool = False  # ... on a line other than the title of a longer report (matcher.py)
    text_only: bool = False  # no rule found it: the text layer alone speaks for it (its words resemble its reports)


def text_features(lines: Sequence[str], roles: Sequence[str],
                  readings: Iterable[str] | None = None) -> dict[str, float]:
    """Features of the whole input: what "none" reads, and which number families it holds; plus the yes/no
    ``readings`` named (READINGS keys; None: all, as the CV harness reads them; diagnose asks for WEIGHED only)."""
    n = max(len(lines), 1)
    fail = sum(r == FAILURE for r in roles)
    out = {"bias": 1.0, "failure_reported": float(fail > 0), "failure_lines": math.log1p(fail),
           "failure_share": fail / n, "context_share": sum(r == CONTEXT for r in roles) / n,
           "quoted_share": sum(r == QUOTED for r in roles) / n, "length": math.log1p(len(lines)) / 5.0}
    out["advice"] = min(sum(bool(_ADVICE.search(ln)) for ln in lines), 5) / 5.0
    out["success"] = min(sum(bool(_SUCCESS.search(ln)) for ln in lines), 5) / 5.0
    out["question"] = min(sum(bool(_QUESTION.search(ln)) for ln in lines), 5) / 5.0
    out["trace"] = min(sum(bool(_TRACE.search(ln)) for ln in lines), 5) / 5.0
    out["first_person"] = min(sum(bool(_FIRST_PERSON.search(ln)) for ln in lines), 5) / 5.0
    out["headings"] = sum(bool(_HEADING.match(ln)) for ln in lines) / n
    out["platform"] = float(any(_PLATFORM.search(ln) for ln in lines))
    out["official_docs"] = float(any(_OFFICIAL.search(ln) for ln in lines))
    for fam, rx in _NUMBERS.items():
        out["num." + fam] = float(any(rx.search(ln) for ln in lines))
    for name in READINGS if readings is None else readings:  # the yes/no readings asked for (default: all of them)
        out[name] = float(READINGS[name](lines, roles))
    return out


def candidate_features(cands: Sequence[Candidate], text: Mapping[str, float],
                       families: Mapping[str, Sequence[str]]) -> list[dict[str, float]]:
    """One feature dict per candidate, in the order given."""
    total = sum(max(c.score, 0.0) for c in cands) or 1.0
    ranked = sorted(cands, key=lambda c: -c.score)
    out = []
    for c in cands:
        others = [x.score for x in ranked if x is not c]
        best_other = max(others) if others else 0.0
        roles = c.evidence_roles or ("plain",)
        k = len(roles)
        out.append({
            "log_score": math.log1p(max(c.score, 0.0)),
            "share": max(c.score, 0.0) / total,
            "is_top": float(ranked[0] is c),
            "margin": math.log1p(max(c.score - best_other, 0.0)),
            "kept": float(c.kept),
            "failure_evidence": float(c.failure_evidence),
            "ev_failure": sum(r == FAILURE for r in roles) / k,
            "ev_quoted": sum(r == QUOTED for r in roles) / k,
            "ev_context": sum(r == CONTEXT for r in roles) / k,
            "topic_only": float(c.topic_only),
            "ruled": float(c.ruled),
            "negated": float(c.negated),
            "numbers": float(any(text.get("num." + f, 0.0) for f in families.get(c.gotcha, ()))),
            "n_evidence": math.log1p(len(c.evidence_roles)),
            "anchored": float(c.anchored),
        })
    return out


HIGH = 0.8  # "high confidence": what benchmarks/diagnose_learn.py scores the precision of
CEILING = 0.79  # the most a finding gets when the report does not show what a confident answer needs


def ceiling(c: Candidate, text: Mapping[str, float]) -> tuple[float, str | None]:
    """The most confidence the report itself allows for this candidate, and why (issue 18: no confident finding
    on a hard negative). A confident answer (p >= HIGH) needs what an expert would want to see before being sure:
    some line of the report says something went wrong; the gotcha's own failure stands in the body, not only in
    the title (an issue title is the reporter's claim, not yet the evidence); and the report is about this
    platform (a GB10 / DGX Spark or its family is named); for G8, NVIDIA's own instructions are named (a vendor's
    blog or a third-party guide going stale is not G8). Otherwise the finding stays, held under HIGH."""
    if c.text_only:
        return CEILING, "no rule matched it: only the report's words resemble its labelled reports"
    if not text.get("failure_reported", 1.0):
        return CEILING, "no line of the report says something went wrong"
    if c.anchored and not c.body_anchored:
        return CEILING, "its failure stands only in the title (the reporter's claim), not in the report's body"
    if not text.get("platform", 1.0):
        return CEILING, "the report names no GB10 / DGX Spark (or its family)"
    if c.gotcha == "G8" and not text.get("official_docs", 1.0):
        return CEILING, "it names none of NVIDIA's own DGX Spark instructions (a playbook, build.nvidia.com, NVIDIA's docs)"
    return 1.0, None


def utilities(cands: Sequence[Candidate], text: Mapping[str, float], weights: Mapping[str, float],
              priors: Mapping[str, float], families: Mapping[str, Sequence[str]],
              words: Mapping[str, float] | None = None) -> list[tuple[str, float]]:
    """(label, linear utility) for every candidate and for "none" (last). ``words``: the text layer's score per
    gotcha (text_scores), None without a text layer. A text-only candidate has no rule features: its utility is the
    text layer's alone."""
    out = []
    ruled = [c for c in cands if not c.text_only]
    for c, f in zip(ruled, candidate_features(ruled, text, families), strict=True):
        u = priors.get(c.gotcha, 0.0) + sum(weights.get("c." + k, 0.0) * v for k, v in f.items())
        u += weights.get("a." + c.gotcha, 0.0) * f["anchored"]  # per gotcha: what standing on the failure is worth
        if words is not None:
            u += weights.get("t.text", 0.0) * words.get(c.gotcha, 0.0)
        out.append((c.gotcha, u))
    for c in cands:
        if c.text_only:
            out.append((c.gotcha, weights.get("t.only", 0.0)
                        + weights.get("t.text", 0.0) * (words or {}).get(c.gotcha, 0.0)))
    out.append((NONE, sum(weights.get("n." + k, 0.0) * text.get(k, 0.0) for k in NONE_FEATURES)))
    return out


def probabilities(utils: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Softmax over the candidates and "none", best first (ties: the order given)."""
    top = max(u for _l, u in utils)
    ex = [(label, math.exp(max(u - top, -60.0))) for label, u in utils]
    z = sum(e for _l, e in ex)
    probs = [(label, e / z) for label, e in ex]
    return sorted(probs, key=lambda t: -t[1])


# --- the learned text layer (issue 18, fifth session) ---------------------------------------------------------------
# Words and word pairs of the report's failure and plain lines (reading.py's roles: not the setup lines, not quoted
# text), compared with each label's centroid of its labelled reports (tf-idf, cosine; fitted by
# benchmarks/diagnose_learn.py, shipped in knowledge/diagnose_model.yaml ``text``). It gives every candidate one more
# feature, ``t.text``: how much closer the words are to that gotcha's reports than to the "none" ones, and it may add
# a gotcha no rule found (a text-only candidate, never answered with high confidence). Only words used by reports of
# at least two source groups are kept, so one repository's wording cannot carry it.

_WORD = re.compile(r"[a-z_][a-z0-9_]+")
_TOKEN_LINE_CHARS = 400  # a failure line is read up to here (a minified blob is not a sentence)
_TOKEN_LINES = 200  # at most this many failure lines are read


def failure_tokens(lines: Sequence[str], roles: Sequence[str], read: Sequence[str] = (FAILURE,)) -> frozenset[str]:
    """The distinct lower-case words (two or more characters) and adjacent word pairs of the failure lines (or of
    the lines of the roles in ``read``)."""
    out: set[str] = set()
    seen = 0
    for ln, r in zip(lines, roles, strict=False):
        if r not in read:
            continue
        seen += 1
        if seen > _TOKEN_LINES:
            break
        ws = _WORD.findall(ln[:_TOKEN_LINE_CHARS].lower())
        out.update(ws)
        out.update(f"{a} {b}" for a, b in zip(ws, ws[1:], strict=False))
    return frozenset(out)


def text_similarity(tokens: frozenset[str] | set[str], idf: Mapping[str, float],
                    centroids: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Per label: the cosine between the report's unit tf-idf vector (binary words) and the label's centroid."""
    v = {t: idf[t] for t in tokens if t in idf}
    z = math.sqrt(sum(x * x for x in v.values())) or 1.0
    return {lab: sum(x * cent.get(t, 0.0) for t, x in v.items()) / z for lab, cent in centroids.items()}


def text_scores(lines: Sequence[str], roles: Sequence[str], read: Sequence[str], idf: Mapping[str, float],
                centroids: Mapping[str, Mapping[str, float]], scale: float) -> dict[str, float]:
    """Per gotcha: how much closer the report's words are to that gotcha's labelled reports than to the "none"
    ones (cosine to each label's centroid, difference times ``scale``): the text layer's one feature."""
    sims = text_similarity(failure_tokens(lines, roles, read), idf, centroids)
    base = sims.get(NONE, 0.0)
    return {g: scale * (v - base) for g, v in sims.items() if g != NONE}


def words_hold(cands: Sequence[Candidate], text: Mapping[str, float], weights: Mapping[str, float],
               priors: Mapping[str, float], families: Mapping[str, Sequence[str]]) -> dict[str, tuple[float, str]]:
    """The ceiling the text layer's words alone cannot lift: a gotcha whose probability without the words' feature
    stays under HIGH is held at CEILING (the words may promote an answer, they do not make it sure)."""
    ruled = [c for c in cands if not c.text_only]
    p = dict(probabilities(utilities(ruled, text, weights, priors, families))) if ruled else {}
    return {c.gotcha: (CEILING, "its confidence rests on the report's wording (the learned text layer), not on the "
                                "rules' evidence") for c in cands if p.get(c.gotcha, 0.0) < HIGH}


def text_candidates(cands: Sequence[Candidate], words: Mapping[str, float], at: float) -> list[Candidate]:
    """The gotchas no rule found whose text score is over ``at``, as text-only candidates (after the ruled ones)."""
    have = {c.gotcha for c in cands}
    return [Candidate(gotcha=g, score=0.0, evidence_roles=(), failure_evidence=False, topic_only=False, ruled=False,
                      negated=False, kept=False, text_only=True)
            for g, v in sorted(words.items(), key=lambda t: -t[1]) if g not in have and v > at]


def text_evidence(lines: Sequence[str], roles: Sequence[str], read: Sequence[str], idf: Mapping[str, float],
                  centroid: Mapping[str, float], most: int = 2) -> list[tuple[int, list[str]]]:
    """The lines (index, their strongest words) whose words weigh most toward one label's centroid, best first."""
    scored = []
    seen = 0
    for i, (ln, r) in enumerate(zip(lines, roles, strict=False)):
        if r not in read:
            continue
        seen += 1
        if seen > _TOKEN_LINES:
            break
        toks = failure_tokens([ln], [r], read)
        ws = sorted(((idf[t] * centroid[t], t) for t in toks if t in idf and t in centroid), reverse=True)
        if ws:
            scored.append((sum(w for w, _t in ws), i, [t for _w, t in ws[:3]]))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [(i, words) for _s, i, words in scored[:most]]
