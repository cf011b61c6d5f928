#!/usr/bin/env python3
"""train_mrpc --with_tracking, read back with TensorBoard's own reader (issue 17's acceptance test).

A small CPU run is stopped after 5 steps (checkpoint at step 3) and resumed from step 3 to step 8, which is
what a run killed after step 5 does: it logged steps and an epoch line past its checkpoint. Checks
  - the event files' scalars (tags, steps, values) equal metrics.jsonl's lines, and metrics.jsonl
    holds every logged step and epoch once (the resume dropped what came after the checkpoint);
  - TensorBoard's EventAccumulator shows each step once: the resumed file's SessionLog START purges the
    first run's steps after the checkpoint;
  - the configuration is there as a text summary, the wall_clock_breakdown segments as scalars;
  - an event file cut inside its last record still loads, up to the last whole record.

usage: check_tensorboard_events.py TRAIN_MRPC WORK_DIR
Exits 77 (reported as skipped) when the tensorboard package is missing outside CI: scripts/setup.sh installs
it into .venv; in CI (CI set) a missing package is a failure.
"""
import json
import math
import os
import shutil
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
except ImportError as error:
    message = f"the tensorboard Python package is missing ({error}); scripts/setup.sh installs it into .venv"
    if os.environ.get("CI"):
        sys.exit("FAILED: " + message)
    print("SKIPPED: " + message)
    sys.exit(77)

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAILED: " + what)


def train(binary, out, *extra):
    args = [binary, "--device", "cpu", "--log_every", "2", "--checkpointing_steps", "3", "--with_tracking",
            "--wall_clock_breakdown", "--output_dir", out, *extra]
    result = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        print(result.stdout[-3000:])
        sys.exit(f"FAILED: {' '.join(args)} exited with {result.returncode}")
    return result.stdout


def load(run_dir):
    accumulator = EventAccumulator(run_dir, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def expected_scalars(metrics_lines):
    """tag -> [(step, value)] from metrics.jsonl: a step line's keys are tags, an epoch line's key K is epoch/K."""
    expected = {}
    for line in metrics_lines:
        prefix = "" if line["type"] == "step" else "epoch/"
        for key, value in line.items():
            if key in ("type", "step", "epoch"):
                continue
            expected.setdefault(prefix + key, []).append((line["step"], value))
    return expected


def compare(accumulator, metrics_lines, what):
    expected = expected_scalars(metrics_lines)
    tags = set(accumulator.Tags()["scalars"])
    check(tags == set(expected), f"{what}: event tags {sorted(tags)} != metrics.jsonl keys {sorted(expected)}")
    for tag, points in expected.items():
        if tag not in tags:
            continue
        events = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        check([s for s, _ in events] == [s for s, _ in points],
              f"{what}: {tag} steps {[s for s, _ in events]} != metrics.jsonl {[s for s, _ in points]}")
        for (step, got), (_, want) in zip(events, points):
            # simple_value is a float32
            check(math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6), f"{what}: {tag} step {step}: {got} != {want}")


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "run")
    run_dir = os.path.join(out, "runs", "glue_no_trainer")

    train(binary, out, "--max_train_steps", "5")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        first = [json.loads(line) for line in f]
    compare(load(run_dir), first, "first run")
    check([l["step"] for l in first if l["type"] == "step"] == [2, 4], f"first run step lines: {first}")

    log = train(binary, out, "--max_train_steps", "8", "--resume_from_checkpoint", os.path.join(out, "step_3.h5"))
    check("dropped 2 lines written after the checkpoint (step 3)" in log,
          "the resume should say that it dropped the step-4 and epoch lines of the first run")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    step_lines = [l["step"] for l in lines if l["type"] == "step"]
    check(step_lines == [2, 4, 6, 8], f"metrics.jsonl step lines after the resume: {step_lines}")
    check([l["step"] for l in lines if l["type"] == "epoch"] == [8], "one epoch line, at step 8, after the resume")
    event_files = sorted(os.listdir(run_dir))
    check(len(event_files) == 2, f"the resumed run adds a second event file to the run: {event_files}")
    accumulator = load(run_dir)
    compare(accumulator, lines, "after the resume")
    scalars = set(accumulator.Tags()["scalars"])
    for tag in ("train/loss", "train/learning_rate", "train/grad_norm", "train/samples_per_s", "time/forward_ms",
                "time/backward_ms", "time/optimizer_ms", "epoch/eval_accuracy", "epoch/eval_f1", "epoch/eval_loss"):
        check(tag in scalars, f"scalar {tag} is missing")
    texts = accumulator.Tensors("config") if "config" in accumulator.Tags()["tensors"] else []
    check(len(texts) >= 1 and b"learning_rate" in texts[-1].tensor_proto.string_val[0],
          "the configuration is logged as the text summary 'config'")

    # A run killed while writing: the last record of the last file cut short.
    cut_dir = os.path.join(work, "cut")
    shutil.copytree(run_dir, cut_dir)
    last = os.path.join(cut_dir, event_files[-1])
    whole = list(EventFileLoader(last).Load())
    size = os.path.getsize(last)
    with open(last, "r+b") as f:
        f.truncate(size - 5)
    cut = list(EventFileLoader(last).Load())
    check(len(cut) == len(whole) - 1, f"a file cut in its last record loads {len(cut)} of {len(whole)} events")
    cut_steps = [e.step for e in load(cut_dir).Scalars("train/loss")]
    check(cut_steps == [2, 4, 6, 8], f"the cut run still loads every complete train/loss point: {cut_steps}")

    print(f"tensorboard events: {len(failures)} checks failed" if failures else "tensorboard events: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
