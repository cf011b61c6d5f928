#!/usr/bin/env python3
"""CPU AdamW side by side on one host: zerotrain's bench_cpu_adam against torch.optim.AdamW (fused and
foreach, CPU) and, when deepspeed is importable, DeepSpeedCPUAdam, all on one flat fp32 tensor of the same
size with the same thread count. Prints one JSON object: each optimizer's seconds per step and params/s,
the ratios ours / theirs, and the bandwidth figures bench_cpu_adam measured in its run.

  scripts/bench_cpu_adam_vs_torch.py --bench build/bin/bench_cpu_adam --params 887M --threads 16

Torch's numbers are for a step with no 16-bit copy; bench_cpu_adam runs with --copy none for the like-for-like
ratio and once with --copy bf16 (what the offload path does: the copy-back in the same pass).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time


def parse_count(text):
    units = {"K": 1e3, "M": 1e6, "G": 1e9}
    if text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def time_steps(step, reps):
    step()  # warm-up (state allocation)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_adamw(n, threads, reps, mode):
    import torch

    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.empty(n, dtype=torch.float32).uniform_(-1, 1))
    p.grad = torch.empty_like(p).uniform_(-1e-3, 1e-3)
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **{mode: True})
    return time_steps(opt.step, reps)


def deepspeed_cpu_adam(n, threads, reps):
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.empty(n, dtype=torch.float32).uniform_(-1, 1))
    p.grad = torch.empty_like(p).uniform_(-1e-3, 1e-3)
    opt = DeepSpeedCPUAdam([p], lr=1e-3, weight_decay=0.01, adamw_mode=True)
    return time_steps(opt.step, reps)


def ours(bench, n, threads, reps, copy):
    out = subprocess.run(
        [bench, "--params", str(n), "--threads", str(threads), "--reps", str(reps), "--copy", copy],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bin/bench_cpu_adam")
    ap.add_argument("--params", default="887M")
    ap.add_argument("--threads", type=int, default=0, help="0: all cores (os.cpu_count())")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import os

    n = parse_count(args.params)
    threads = args.threads or os.cpu_count()
    result = {"params": n, "threads": threads}
    ours_plain = ours(args.bench, n, threads, args.reps, "none")
    ours_bf16 = ours(args.bench, n, threads, args.reps, "bf16")
    result["zerotrain"] = ours_plain
    result["zerotrain_bf16_copy"] = ours_bf16
    theirs = {}
    for name, fn in [("torch_fused", lambda: torch_adamw(n, threads, args.reps, "fused")),
                     ("torch_foreach", lambda: torch_adamw(n, threads, args.reps, "foreach")),
                     ("deepspeed_cpu_adam", lambda: deepspeed_cpu_adam(n, threads, args.reps))]:
        try:
            seconds = fn()
        except ImportError as e:
            theirs[name] = {"skipped": str(e)}
            continue
        theirs[name] = {"seconds": seconds, "params_per_s": n / seconds,
                        "speedup_of_zerotrain": seconds / ours_plain["adamw_seconds_median"]}
    result["others"] = theirs
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
