#!/usr/bin/env python3
"""A representative GPU job for `spark-ops watch` on a real GPU: phases of load the monitor must tell apart.

    python benchmarks/gpu_job.py [--seconds 180]

Phases (fractions of --seconds): 15 % idle (too little load to judge), 55 % back-to-back bf16
8192x8192 matmuls (full power), 20 % the same while device memory grows in 2 GiB steps (memory
column moves), 10 % idle again. Prints one progress line per phase and the achieved TFLOP/s; exits 0.
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--n", type=int, default=8192)
    args = ap.parse_args()
    import torch

    dev = torch.device("cuda")
    a = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.n, args.n, device=dev, dtype=torch.bfloat16)
    T = args.seconds
    print(f"phase idle {0.15 * T:.0f} s", flush=True)
    time.sleep(0.15 * T)

    def load(seconds: float, grow: bool) -> None:
        held = []
        end = time.monotonic() + seconds
        next_grow = time.monotonic()
        flops = 0.0
        t0 = time.monotonic()
        while time.monotonic() < end:
            for _ in range(20):
                torch.mm(a, b)
            torch.cuda.synchronize()
            flops += 20 * 2 * args.n**3
            if grow and time.monotonic() >= next_grow:
                held.append(torch.empty(2 * 2**30, dtype=torch.uint8, device=dev).fill_(1))
                next_grow += 3.0
        dt = time.monotonic() - t0
        print(f"  {flops / dt / 1e12:.0f} TFLOP/s over {dt:.0f} s; holding {len(held) * 2} GiB extra", flush=True)

    print(f"phase load {0.55 * T:.0f} s", flush=True)
    load(0.55 * T, grow=False)
    print(f"phase load + memory growth {0.20 * T:.0f} s", flush=True)
    load(0.20 * T, grow=True)
    torch.cuda.empty_cache()
    print(f"phase idle {0.10 * T:.0f} s", flush=True)
    time.sleep(0.10 * T)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
