#!/usr/bin/env python3
"""Issue 40's goals table re-judged without a GPU: the auto plan that machine figures pick for each cell of a
recorded plan run (scripts/plan_goals.py's state: every plan measured, each cell's fastest), looked up in what
that run measured.

    python3 scripts/plan_offline.py --bin build-cpu/bin --figures FIGURES.json \
        --state docs/bench/2026-12-06-h100-session19/call2_plan_goals_state.json [--layer US NS]

Per cell: the pick (bench_train_step --estimate_only --auto_plan, the cell's cap), its prediction, its
measured step (the capped rerun where the run made one), the ratio to the cell's fastest and the
prediction's error; 'not measured' where the run did not time that plan. --layer replaces the figures'
per-layer fixed cost (us) and per-token cost (ns) to ask what a calibration measuring them would pick.
Exit status 1 when a cell's pick was not measured or is over --limit (default 1.05) x the fastest.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from plan_goals import measured_key, plan_key  # the labels the recorded run measured its plans under


def pick(bin_dir, figures, batch, seq, cap):
    r = subprocess.run([str(pathlib.Path(bin_dir) / "bench_train_step"), "--dtype", "bf16", "--estimate_only",
                        "--auto_plan", "--batch", str(batch), "--seq", str(seq), "--gpu_memory_limit",
                        f"{cap}GiB", "--machine_figures", str(figures)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"plan_offline: bench_train_step failed: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)["plan"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the folder with bench_train_step")
    ap.add_argument("--figures", required=True, help="machine figures (train_mrpc --calibrate)")
    ap.add_argument("--state", required=True, help="plan_goals.py's state file of the run to judge against")
    ap.add_argument("--layer", nargs=2, type=float, metavar=("US", "NS"),
                    help="replace the per-layer fixed (us) and per-token (ns) costs")
    ap.add_argument("--limit", type=float, default=1.05)
    args = ap.parse_args()
    figures = json.loads(pathlib.Path(args.figures).read_text())
    if args.layer:
        figures = dict(figures, layer_fixed_us=args.layer[0], layer_token_ns=args.layer[1])
    state = json.loads(pathlib.Path(args.state).read_text())
    measured = state["measured"]
    ok, errors = True, []
    with tempfile.TemporaryDirectory() as work:
        path = pathlib.Path(work) / "figures.json"
        path.write_text(json.dumps(figures))
        for name, cell in state["table"].items():
            p = pick(args.bin, path, cell["batch"], cell["seq"], cell["cap"])
            seq, cap = cell["seq"], cell["cap"]
            m = measured.get(measured_key(p, seq, cap)) or measured.get(measured_key(p, seq))
            if m is None or not cell.get("fastest_ms"):
                ok = False
                print(f"{name:12s} pick {plan_key(p):32s} predicted {p['predicted_ms']:8.1f} ms: not measured")
                continue
            ratio = m["step_ms"] / cell["fastest_ms"]
            error = (p["predicted_ms"] - m["step_ms"]) / m["step_ms"] * 100
            errors.append(error)
            ok = ok and ratio <= args.limit
            print(f"{name:12s} pick {plan_key(p):32s} predicted {p['predicted_ms']:8.1f} ms, measured "
                  f"{m['step_ms']:8.1f}: {ratio:.3f}x the fastest ({cell['fastest']}), error {error:+.1f} %")
    if errors:
        print(f"errors {min(errors):+.1f} .. {max(errors):+.1f} %")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
