#!/usr/bin/env python3
"""Per-kernel device times of one training step, from Nsight Compute's CSV.

The step profile (bench_train_step --profile) says which segment of the step costs what; this says which
kernel inside it, and which cuBLAS kernel a GEMM landed on (an `align1` CUTLASS kernel instead of an
`nvjet_sm90` one is the sign of an unaligned dimension or leading dimension). On the GPU machine:

  ncu --clock-control none --metrics gpu__time_duration.sum --csv \\
      build-gpu/bin/bench_train_step --batch 40 --seq 128 --dtype bf16 --steps 1 --layers 1 > ncu.csv
  python3 scripts/ncu_kernel_times.py ncu.csv [--min-us 5]

bench_train_step runs warmup steps before the timed ones, every step launching the same kernels after some
one-time launches (initialization), so the last step is the shortest tail of launches that repeats the
launches just before it and holds more than one kernel (the optimizer's kernels end each step). Prints the kernels
of that step in launch order with their times, then the total. ncu serializes kernels, so the times are each
kernel alone on the GPU (no overlap), at unlocked clocks.
"""
import argparse
import csv
import sys


def read_kernel_times(path):
    """(kernel name, microseconds) per launch, in launch order."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header_at is None:
        sys.exit(f"{path}: no ncu CSV header (a line starting with \"ID\") found")
    rows = list(csv.reader(lines[header_at:]))
    header = rows[0]
    try:
        name_at, value_at, unit_at = (header.index(k) for k in ("Kernel Name", "Metric Value", "Metric Unit"))
        metric_at = header.index("Metric Name")
    except ValueError as e:
        sys.exit(f"{path}: unexpected ncu CSV columns ({e})")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    times = []
    for row in rows[1:]:
        if len(row) != len(header) or row[metric_at] != "gpu__time_duration.sum":
            continue
        unit = row[unit_at]
        if unit not in scale:
            sys.exit(f"{path}: unknown time unit {unit!r}")
        times.append((row[name_at], float(row[value_at].replace(",", "")) * scale[unit]))
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="ncu --csv output with the gpu__time_duration.sum metric")
    p.add_argument("--min-us", type=float, default=0.0, help="list only kernels at least this long")
    p.add_argument("--name-width", type=int, default=110)
    args = p.parse_args()
    times = read_kernel_times(args.csv)
    names = [name for name, _ in times]
    # A window of one kernel name repeats trivially when a step ends in several launches of one kernel (the
    # multi-tensor AdamW's chunks): the step is the shortest repeating tail with more than one name in it.
    period = next((n for n in range(1, len(names) // 2 + 1)
                   if names[-n:] == names[-2 * n:-n] and len(set(names[-n:])) > 1), None)
    if period is None:
        sys.exit(f"{len(times)} kernel launches: no repeating step at the end (profile at least 2 steps)")
    step = times[-period:]
    for name, us in step:
        if us >= args.min_us:
            print(f"{us:10.1f} us  {name[:args.name_width]}")
    print(f"{sum(us for _, us in step):10.1f} us  total of {len(step)} kernels (one step, serialized)")


if __name__ == "__main__":
    main()
