#!/usr/bin/env python3
"""scripts/plan_goals.py without a GPU: the grid it would measure for issue 40's batches (from the CPU build's
bench_train_step --estimate_only --auto_plan), the merging of plans equal at world size 1, the verdicts of the
goals table, and the partial part skipping where --offload_ratio is refused.

    test_plan_goals.py BIN_DIR     (BIN_DIR holds bench_train_step)
"""
import argparse
import contextlib
import io
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import plan_goals as pg  # noqa: E402


def runner(bin_dir, work, caps="12,16,24,40"):
    return pg.Runner(argparse.Namespace(bin=bin_dir, work=work, figures="", budget_s=120, caps=caps, margin=1.15,
                                        per_cap=3, warmup=2, steps=3, step_timeout_s=60, quick=False))


def plan(stage, offload, micro, acc, ckpt=False, ratio=1.0):
    return {"zero_stage": stage, "offload": offload, "offload_ratio": ratio, "micro_batch": micro,
            "accumulation": acc, "gradient_checkpointing": ckpt}


def check_grid(bin_dir, work):
    for batch, seq in pg.BATCHES:
        chosen, plans = runner(bin_dir, work).select_grid(batch, seq)
        keys = [pg.plan_key(p) for p in plans]
        assert plans, f"b{batch} s{seq}: an empty grid"
        # Every plan computes the global batch; none is measured twice under another stage's name.
        assert all(p["micro_batch"] * p["accumulation"] == batch for p in plans), keys
        classes = [(pg.family(p), p["micro_batch"]) for p in plans]
        assert len(set(classes)) == len(classes), f"b{batch}: plans equal at world size 1 twice: {keys}"
        assert not any(p["zero_stage"] in (1, 2) and p["offload"] == "none" for p in plans), keys
        assert not any(pg.dominates(q, p) for p in plans for q in plans if q is not p and
                       q["device_gib"] <= p["device_gib"]), keys
        for cap, auto in chosen.items():
            assert auto is not None, f"b{batch} s{seq} cap {cap}: no auto plan"
            # The auto plan is a plausible winner: in the grid, or equal at world size 1 to a plan in it.
            assert (pg.family(auto), auto["micro_batch"]) in classes, f"cap {cap}: {pg.plan_key(auto)} not in {keys}"
            fitting = [p for p in plans if p["device_gib"] <= cap * (1 - pg.HEADROOM)]
            assert fitting, f"b{batch} s{seq} cap {cap}: nothing in the grid fits"


def check_dominance():
    assert pg.dominates(plan(1, "optimizer", 64, 2), plan(3, "optimizer", 64, 2))
    assert pg.dominates(plan(0, "none", 64, 2), plan(0, "none", 64, 2, ckpt=True))
    assert pg.dominates(plan(3, "optimizer", 64, 2), plan(3, "both", 64, 2))
    assert not pg.dominates(plan(3, "optimizer", 64, 2), plan(1, "optimizer", 64, 2))
    assert not pg.dominates(plan(0, "none", 64, 2, ckpt=True), plan(0, "none", 64, 2))
    assert not pg.dominates(plan(0, "none", 32, 4), plan(0, "none", 64, 2, ckpt=True))  # other micro-batches
    assert not pg.dominates(plan(0, "none", 64, 2), plan(1, "optimizer", 64, 2))  # other placements
    assert pg.dominates(plan(1, "optimizer", 64, 2), plan(2, "optimizer", 64, 2))
    assert not pg.dominates(plan(1, "optimizer", 64, 2, ratio=0.5), plan(1, "optimizer", 64, 2))
    assert pg.family(plan(1, "optimizer", 8, 1)) != pg.family(plan(2, "optimizer", 8, 1))  # stage 2 streams
    assert pg.family(plan(0, "none", 8, 1)) == pg.family(plan(2, "none", 8, 1))
    assert pg.family(plan(3, "none", 8, 1)) != pg.family(plan(0, "none", 8, 1))
    assert pg.family(plan(2, "optimizer", 8, 1, ratio=0.5)) != pg.family(plan(2, "optimizer", 8, 1))


def check_verdicts():
    row = {"cap": 24, "batch": 128, "seq": 128, "auto": "s0 none 64x2", "predicted_ms": 190.0, "auto_ms": 200.0,
           "auto_peak": 20.0, "fastest": "s0 none 64x2", "fastest_ms": 195.0, "fastest_peak": 20.0}
    assert "| PASS pred-ok" in pg.table_line(row), pg.table_line(row)
    assert "| FAIL" in pg.table_line(dict(row, auto_ms=210.0)), "1.08x the fastest passed"
    assert "| FAIL" in pg.table_line(dict(row, auto_peak=24.5)), "a peak over the cap passed"
    assert "pred-off" in pg.table_line(dict(row, predicted_ms=170.0)), "15 % off counted as within 10 %"
    assert "auto FAILED" in pg.table_line(dict(row, auto_ms=None, auto_error="OOM: x"))


def check_partial_skip(bin_dir, work):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runner(bin_dir, work).partial()
    import subprocess
    has_ratio = "offload_ratio" in subprocess.run([f"{bin_dir}/bench_train_step", "--help"], capture_output=True,
                                                  text=True).stdout
    assert has_ratio or "partial: skipped" in out.getvalue(), out.getvalue()


def main():
    bin_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as work:
        check_dominance()
        check_verdicts()
        check_grid(bin_dir, work)
        check_partial_skip(bin_dir, work)
    print("plan_goals: ok")


if __name__ == "__main__":
    main()
