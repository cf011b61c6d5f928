#!/usr/bin/env python3
"""Issue 40's goals measured side by side on one GPU (scripts/device/run.sh plan runs it, one part per call
of this script, each under its own time budget; results accumulate in STATE between parts):

  calibrate  train_mrpc --calibrate: this machine's figures (CPU AdamW, norm pass, GEMM, HBM, PCIe, GPU AdamW)
             into FIGURES, which every --auto_plan below reads
  grid B S   global batch B at seq S: the plausible winners of the grid (stages 0-3 x offload none / cpu /
             both / a partial ratio x checkpointing x micro-batch x accumulation, the same global batch)
             measured once each without a cap; then per cap 12/16/24/40 GiB the fastest plan that fits
             against the auto plan (bench_train_step --auto_plan --estimate_only with FIGURES): its measured
             and predicted ms, the ratio to the fastest, the verdict (<= 1.05x, fits the cap, prediction
             within 10 %)
  partial    at each cap where no measured plan without offload fits: the best partial offload against the
             best full offload (from the grid); then, only with time left (>= 30 s), ratios 0.75/0.5/0.25 at
             the full offload's plan
  delayed    ZeRO-2 + offload --delayed_update at batch 40 against max(forward + backward, CPU update): the
             parts from its JSON where it prints them, else fwd+bwd = the ZeRO-2 step without offload less its
             optimizer segments (--profile) and the CPU update from bench_cpu_adam
  large      the 6.2 B DeBERTa-v2 shape (hidden 4096, 28 layers, ZeRO-3 + both offloads, batch 8) for 20 steps
             on a repeated batch, lr 1e-6 with 5 warm-up steps, dropout 0: the losses
  summary    the goals table from STATE

Fits under the cap. --gpu_memory_limit caps the RESERVED bytes (the allocator returns its cache and retries
before it reports an out-of-memory), which exceed the live peak by the size classes and the cache (seq 512
16x1 on the H100: live 23.58, reserved 25.23 GiB). So a plan fits a cap when it runs under
--gpu_memory_limit CAP: a live peak over the cap cannot; an uncapped reserved peak within the cap never meets
it (the uncapped measurement stands); in between the plan is run again under the cap, and that run's step
time is the one that counts (an out-of-memory = does not fit). This holds for the auto plan of each cap and
for the grid's plans, of which only the borderline ones that could still be the fastest are re-run: walking
the plans by uncapped time, the walk stops at the first no faster than the best that fits (a capped run is
never faster than the uncapped one). The table lines say which (uncapped / capped rerun / OOM / over).

Pruning (the grid holds every plausible winner of each cap; the planner's own tables, --estimate_only
--auto_plan, list every plan with its planned device bytes and predicted ms):
  - plans equal at world size 1 are one: stages 1 and 2 without offload are stage 0's memory and time; stage
    3 without offload only where it plans less memory than stage 0;
  - a plan is dropped where a fitting plan dominates it (never slower, the same micro-batch x accumulation):
    the same placement without checkpointing or at a lower stage; stage 3 with the parameters resident
    against both offloads; the optimizer on the device against any (full or partial) offload: at world size
    1 offload only buys memory (b512 on the H100: r0.25 128x4 766.6 ms against 719.6 without offload);
  - per cap each family (placement x checkpointing) offers its fastest fitting micro-batch if predicted
    within --margin (1.15) of the best: the model's pairwise ranking errors measured on the H100 span ~11 %
    (predicted/measured 0.86-0.97 at b128), so a plan predicted more than 15 % slower than the best cannot be
    the one the auto plan must be within 5 % of; of those the --per-cap fastest predicted and the fastest of
    each placement kind (no offload, full, partial) are measured, and of one kind the fastest with and
    without checkpointing where both are predicted within --twin-margin (1.06) of the best; where only
    offload fits, the fastest full and the fastest partial whatever their prediction (the partial goal
    compares them);
  - a plan at the edge of the cap (planned above 95 % of the budget) gets its family's next smaller
    micro-batch as a fallback, measured only where the edge plan does not run uncapped under the cap.
Steps: plans predicted over --long-step-ms (450; measured ~10 % above) run 1 warm-up + 3 timed steps, the
others --warmup + --steps (2 + 3).

Time. One bench_train_step run takes RUN_STARTUP_S + RUN_PIN_S_PER_GIB x its planned host GiB (pinning:
cudaHostAlloc) + its steps x the step: fitted to the 42 runs of the two H100 calls of 2026-12-06
(docs/bench/2026-12-06-h100-plan, the planner's host GiB, the measured steps): call 1 3.9 s + 0.60 s/GiB,
call 2 5.2 s + 0.94 s/GiB (a host that pinned ~1.5x slower), residuals within 2.2 s; the slower host's
figures are the expectation. A run's timeout is 1.5 x (start-up + pinning) + 5 s + its steps x an allowance
that is never below what a winner could need: twice its predicted step, or, where every cap the plan fits
already has a measured plan that fits it for sure (reserved peak within the cap), the slowest of those
caps' best steps (a plan slower than that wins no cap), and 3x its prediction where some cap has none yet.
Each part prints its expected seconds (the sum of its runs) and runs under min(1.25 x expected + 10 s, the
call's time left): a grid plan is started whenever the call's time holds its expected time (a part may
overrun its own budget by those plans, never the call's), extras (the partial ratio sweep) only within the
part's budget. `expect` prints every part's expected seconds and the call plan's (plan.sh's header).
Lines for the summary go to stdout as they land.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

CAPS_GIB = (12, 16, 24, 40)
BATCHES = ((40, 128), (128, 128), (512, 128), (16, 512))
def budget_gib(cap):
    """optim::oom_budget_bytes in GiB: the cap less 1 % of it, at least 256 MiB, at most 5 %."""
    return cap - min(0.05 * cap, max(0.25, 0.01 * cap))
LARGE_STARTUP_S, LARGE_STEP_S = 125.0, 2.3  # the 6.2 B run on one H200 (docs/bench/2026-12-03-h200-session*/big)
# One bench_train_step run's wall time (module docstring, "Time"): the slower H100 host's fit of 2026-12-06.
RUN_STARTUP_S, RUN_PIN_S_PER_GIB = 5.2, 0.94
TIMEOUT_FACTOR, TIMEOUT_SLACK_S = 1.5, 5.0
STEP_ALLOWANCE, STEP_ALLOWANCE_UNBOUNDED = 2.0, 3.0  # x the predicted step (module docstring, "Time")
PART_FACTOR, PART_SLACK_S = 1.25, 10.0
FULL_OFFLOAD_HOST_GIB = 14.87  # xlarge's planned host state with the whole optimizer offloaded (AdamW, f32)
ESTIMATES_S = 2.0  # a grid's four --estimate_only runs
# train_mrpc --calibrate (H100, session 21: 45-48 s; each of its 20 timed points holds 1.5 s of load and
# 0.4 s of timing for its sustained clock, app/plan/cuda/calibrate_gpu.cu).
CALIBRATE_S = 50.0
SWEEP_RATIOS = (0.75, 0.5, 0.25)
DELAYED_STEP_MS = 210.0  # ZeRO-2 + offload --delayed_update at batch 40 (call 1: 202.7 ms)
LARGE_EXPECTED_S = LARGE_STARTUP_S + 20 * LARGE_STEP_S
# The call's other costs (seconds): the plan task's build on a fresh H100 (call 2: 60 s, call 1: 36 s), warm
# ~1 s; DeepSpeed's CPU Adam compiled (call 2: 38 s); DeepSpeed's anchor (ds_plan_anchor.py's docstring:
# install + imports ~16, the engine with the model built on the GPU ~20, the global batches ~12, 4 caps x 3
# one-step probes ~18). Its budget holds an engine as slow as call 2's, built on the CPU (68.9 s, +49 s).
BUILD_FRESH_S, BUILD_WARM_S, DS_JIT_WAIT_S, DS_EXPECTED_S, SUMMARY_S = 60.0, 1.0, 40.0, 66.0, 1.0
DS_ENGINE_CONTINGENCY_S = 49.0


GRID_PARTS = {"g128": (128, 128), "g40": (40, 128), "g512": (512, 128), "g16x512": (16, 512)}
# Issue 40's goals: two back-to-back calls on one machine (plan.sh's header). The first (fresh: the build)
# holds every goal but DeepSpeed's anchor, so a second call that finds no machine loses only the anchor; the
# second (.ds carried: its CPU Adam compiled on the warm build) runs it. PLAN_BUDGET_S: CALL_FACTOR x expected
# (+ DS_ENGINE_CONTINGENCY_S with DeepSpeed), up to 10 s, at most the call's limit less the timeout's margin.
CALL_PLAN = (("calibrate,g128,g40,g512,g16x512,partial,delayed,summary", "fresh"), ("ds,summary", "ds_jit"))
CALL_SETUP_S = {"fresh": BUILD_FRESH_S, "ds_jit": BUILD_WARM_S + DS_JIT_WAIT_S}
CALL_FACTOR, CALL_LIMIT_S, CALL_MARGIN_S, GOALS_DEVICE_S = 1.2, 600, 30, 850  # the last: of a session's 1,800 s


def call_budget_s(expected_s, contingency_s=0.0):
    return min(int(-(-(CALL_FACTOR * expected_s + contingency_s) // 10) * 10), CALL_LIMIT_S - CALL_MARGIN_S)


def call_plan(parts):
    """CALL_PLAN's calls as (parts, setup, expected seconds, PLAN_BUDGET_S)."""
    calls = [(names, setup, CALL_SETUP_S[setup] + sum(parts[n] for n in names.split(","))) for names, setup in CALL_PLAN]
    return [(names, setup, e, call_budget_s(e, DS_ENGINE_CONTINGENCY_S if "ds" in names.split(",") else 0.0))
            for names, setup, e in calls]


def partial_expected_s(ratio_sweep):
    """From the grid's measurements (~1 s); the sweep: SWEEP_RATIOS at one cap's full offload plan (~400 ms)."""
    sweep = sum(expected_run_s(r * FULL_OFFLOAD_HOST_GIB, 5, 400.0) for r in SWEEP_RATIOS) if ratio_sweep else 0.0
    return 1.0 + sweep


def delayed_expected_s(warmup):
    """One ZeRO-2 + offload run at batch 40 with the delayed update, warmup + 4 steps."""
    return expected_run_s(FULL_OFFLOAD_HOST_GIB, warmup + 4, DELAYED_STEP_MS)


def expected_run_s(host_gib, steps, step_ms):
    """The wall time one bench_train_step run is expected to take: start-up, pinning, its steps."""
    return RUN_STARTUP_S + RUN_PIN_S_PER_GIB * host_gib + steps * step_ms / 1e3


def run_timeout_s(host_gib, steps, allowed_step_ms):
    """The run's timeout: the start-up and pinning with a safety factor, its steps at the allowed step time."""
    return TIMEOUT_FACTOR * (RUN_STARTUP_S + RUN_PIN_S_PER_GIB * host_gib) + TIMEOUT_SLACK_S + \
        steps * allowed_step_ms / 1e3


def host_gib(p):
    """The plan's planned host bytes (the planner's candidates carry them; a plan built here, by its ratio)."""
    if "host_gib" in p:
        return p["host_gib"]
    return 0.0 if p["offload"] == "none" else FULL_OFFLOAD_HOST_GIB * p.get("offload_ratio", 1.0)


def step_allowance_ms(p, cap_bests):
    """The step time p's timeout allows: never below what a winner could need. cap_bests maps each cap p fits
    (planned) to the best measured step of a plan that fits it for sure, or None where none is measured yet."""
    pred = p.get("predicted_ms", 0.0)
    if not cap_bests or any(b is None for b in cap_bests.values()):
        return STEP_ALLOWANCE_UNBOUNDED * pred
    return max(STEP_ALLOWANCE * pred, max(cap_bests.values()))


def part_budget_s(expected_s, ceiling_s):
    return min(ceiling_s, PART_FACTOR * expected_s + PART_SLACK_S)


def say(*parts):
    print(*parts, flush=True)


class State:
    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}

    def save(self):
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


def plan_flags(p):
    """bench_train_step flags of a plan (a candidate's dict or a grid key's dict)."""
    flags = ["--batch", str(p["micro_batch"]), "--accumulation", str(p["accumulation"]),
             "--zero_stage", str(p["zero_stage"])]
    if p["offload"] != "none":
        flags += ["--offload", p["offload"], "--pin_memory"]
        if p.get("offload_ratio", 1.0) < 1.0:
            flags += ["--offload_ratio", str(p["offload_ratio"])]
    if p["gradient_checkpointing"]:
        flags.append("--gradient_checkpointing")
    return flags


def plan_key(p):
    ratio = p.get("offload_ratio", 1.0)
    return (f"s{p['zero_stage']} {p['offload']}{'' if ratio >= 1.0 else f' r{ratio:g}'} "
            f"{p['micro_batch']}x{p['accumulation']}{' ckpt' if p['gradient_checkpointing'] else ''}")


def family(p):
    """Plans that are the same at world size 1 share a family key (stage class, placement, checkpointing):
    stages 0-2 without offload (stages 1 and 2 plan no less memory than 0 and run the same step); with
    offload each stage is its own (stage 2 streams the gradients down: less memory than stage 1)."""
    stage = p["zero_stage"]
    if p["offload"] == "none":
        stage_class = "3" if stage == 3 else "0-2"
    else:
        stage_class = str(stage)
    return (stage_class, p["offload"], p.get("offload_ratio", 1.0), p["gradient_checkpointing"])


def placement_kind(p):
    if p["offload"] == "none":
        return "none"
    return "partial" if p.get("offload_ratio", 1.0) < 1.0 else "full"


def dominates(q, p):
    """q fits too and does the same work as p with less of it: p without checkpointing, or p's placement at a
    lower stage (stage 2's fold and stage 3's gathers are overhead at world size 1), or stage 3 with the
    parameters resident; p is then never the faster plan."""
    if (q["micro_batch"], q["accumulation"]) != (p["micro_batch"], p["accumulation"]):
        return False
    if q["offload"] == "none" and p["offload"] != "none" and q["zero_stage"] <= max(p["zero_stage"], 2):
        # The optimizer on the device does the same step without the offload's PCIe traffic and CPU update:
        # at world size 1 offload (full or partial) only buys memory (b512 on the H100: r0.25 128x4 766.6 ms
        # against 719.6 without offload, 64x8 801.3 against 757.9).
        return q["gradient_checkpointing"] <= p["gradient_checkpointing"]
    if q.get("offload_ratio", 1.0) != p.get("offload_ratio", 1.0):
        return False
    same_placement = q["offload"] == p["offload"]
    params_resident = q["offload"] == "optimizer" and p["offload"] == "both" and q["zero_stage"] == 3
    if not (same_placement or params_resident):
        return False
    return (q["gradient_checkpointing"] <= p["gradient_checkpointing"] and q["zero_stage"] <= p["zero_stage"] and
            family(q) != family(p))


class Runner:
    def __init__(self, args):
        self.args = args
        self.bin = pathlib.Path(args.bin)
        self.work = pathlib.Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.state = State(self.work / "plan_goals_state.json")
        self.ceiling = time.time() + args.budget_s  # the call's time: no run outlives it
        self.deadline = self.ceiling  # the part's budget (start_part)

    def left(self):
        """The part's time left."""
        return self.deadline - time.time()

    def call_left(self):
        return self.ceiling - time.time()

    def start_part(self, name, expected_s, detail=""):
        """Prints the part's expected seconds and sets its budget from them (module docstring, "Time")."""
        budget = part_budget_s(expected_s, self.call_left())
        self.deadline = time.time() + budget
        self.state.data.setdefault("expected_s", {})[name] = round(expected_s, 1)
        self.state.save()
        say(f"{name}: expected {expected_s:.0f} s{detail}, budget {budget:.0f} s ({self.call_left():.0f} s left "
            f"in the call)")

    def bench(self, flags, timeout=None, label=""):
        """One bench_train_step run; its JSON dict, or {"error": ...}."""
        timeout = min(timeout or self.args.step_timeout_s, max(5.0, self.call_left()))
        cmd = [str(self.bin / "bench_train_step"), "--dtype", "bf16", *flags]
        with open(self.work / "commands.txt", "a") as log:
            log.write(" ".join(cmd) + "\n")
        t = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timeout {timeout:.0f} s", "wall_s": round(time.time() - t, 1)}
        with open(self.work / "bench_stderr.txt", "a") as err:
            err.write(f"== {label} {' '.join(flags)}\n{r.stderr[-4000:]}\n")
        lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
        if r.returncode != 0 or not lines:
            tail = " ".join(l for l in r.stderr.strip().splitlines()[-2:])[:300]
            oom = is_oom_text(r.stderr)
            return {"error": ("OOM: " if oom else "") + tail, "wall_s": round(time.time() - t, 1)}
        out = json.loads(lines[-1])
        out["wall_s"] = round(time.time() - t, 1)
        out["stderr_tail"] = r.stderr[-3000:]
        return out

    def quick_flags(self):
        return ["--layers", "2"] if self.args.quick else []

    def estimate(self, batch, seq, cap):
        flags = ["--estimate_only", "--auto_plan", "--batch", str(batch), "--seq", str(seq),
                 "--gpu_memory_limit", f"{cap}GiB", *self.quick_flags()]
        if self.args.figures and pathlib.Path(self.args.figures).exists():
            flags += ["--machine_figures", self.args.figures]
        r = self.bench(flags, timeout=60, label="estimate")
        return r

    def step_counts(self, p):
        """(warm-up, timed) steps for plan p: a long step (predicted over --long-step-ms) needs fewer to settle
        (its first step already allocated everything; the median of 3 is what counts), a short one keeps
        --warmup/--steps."""
        if p.get("predicted_ms", 0) > self.args.long_step_ms:
            return 1, min(3, self.args.steps)
        return self.args.warmup, self.args.steps

    def measure(self, p, seq, label, cap=None, allowed_step_ms=None, extra=False):
        """Times plan p once per (plan, seq), without a cap, or under --gpu_memory_limit CAP GiB (the cap on
        reserved bytes: the allocator returns its cache and retries before it fails); cached in the state.
        Its timeout allows allowed_step_ms a step (default: STEP_ALLOWANCE x its prediction); it starts only
        where the call's time (an extra: the part's) holds its expected time."""
        cache = self.state.data.setdefault("measured", {})
        key = measured_key(p, seq, cap)
        if key in cache:
            return cache[key]
        warmup, steps = self.step_counts(p)
        host = host_gib(p)
        expected = expected_run_s(host, warmup + steps, p.get("predicted_ms", 0.0))
        if (self.left() if extra else self.call_left()) < expected:
            return {"error": f"skipped: time budget (expected {expected:.0f} s)"}
        allowed = allowed_step_ms or STEP_ALLOWANCE * p.get("predicted_ms", 0.0)
        timeout = run_timeout_s(host, warmup + steps, allowed)
        flags = [*plan_flags(p), "--seq", str(seq), "--warmup", str(warmup), "--steps", str(steps),
                 *self.quick_flags()]
        if cap is not None:
            flags += ["--gpu_memory_limit", f"{cap}GiB"]
        r = self.bench(flags, timeout=timeout, label=label)
        keep = {k: r[k] for k in ("step_ms", "peak_gib", "peak_reserved_gib", "first_step_s", "wall_s", "error",
                                  "overlap_update") if k in r}
        keep["estimate_gib"] = r.get("estimate_gib", {}).get("total")
        if keep.get("error", "").startswith("skipped"):
            return keep  # not measured: not cached, a later call may have the time
        cache[key] = keep
        self.state.save()
        keep["expected_s"], keep["timeout_s"] = round(expected, 1), round(timeout, 1)
        if "error" in keep:
            say(f"  {label} {key}: FAILED {keep['error'][:200]} ({keep.get('wall_s')} s, expected {expected:.1f})")
        else:
            say(f"  {label} {key}: {keep['step_ms']} ms, peak {keep['peak_gib']} GiB "
                f"(reserved {keep.get('peak_reserved_gib')}, planned {keep['estimate_gib']}), {keep['wall_s']} s "
                f"(expected {expected:.1f}, timeout {timeout:.0f})")
        return keep

    def under_cap(self, p, seq, cap, label):
        """How plan p runs under the cap (fit_under_cap), re-running it capped when its uncapped reserved peak
        is over the cap but its live peak is not."""
        m = self.measure(p, seq, label)
        # A run under the cap is never faster than without it; the allocator's retries may slow it.
        return fit_under_cap(m, cap, lambda: self.measure(dict(p, predicted_ms=m["step_ms"]), seq,
                                                          f"{label} capped@{cap}", cap=cap))

    # ------------------------------------------------------------------------------------------------------
    def calibrate(self):
        """The figures every --auto_plan reads (train_mrpc --calibrate)."""
        self.start_part("calibrate", CALIBRATE_S)
        path = pathlib.Path(self.args.figures)
        t = time.time()  # bounded by the call's time, not the part's: every --auto_plan reads the figures
        r = subprocess.run([str(self.bin / "train_mrpc"), "--calibrate", "--machine_figures", str(path)],
                           capture_output=True, text=True, timeout=max(10.0, self.call_left()))
        (self.work / "calibrate.txt").write_text(r.stdout + r.stderr)
        if r.returncode != 0 or not path.exists():
            say(f"calibrate: FAILED exit {r.returncode}: {(r.stdout + r.stderr).strip()[-300:]}")
            return
        for line in r.stdout.splitlines():
            say(line)
        say(f"calibrate: {time.time() - t:.1f} s; figures {json.dumps(json.loads(path.read_text()))}")

    def select_grid(self, batch, seq):
        """The plans to measure for (batch, seq) and each cap's auto plan, from the planner's tables."""
        chosen, selected, fallbacks = {}, {}, {}
        for cap in self.caps():
            e = self.estimate(batch, seq, cap)
            if "error" in e:
                say(f"  estimate b{batch} s{seq} cap {cap} GiB: {e['error'][:300]}")
                chosen[cap] = None
                continue
            chosen[cap] = e["plan"]
            fitting = [c for c in e["candidates"] if c["fits"] and c.get("executable", True)]
            if not fitting:
                continue
            best = fitting[0]["predicted_ms"]
            offload_only = not any(placement_kind(c) == "none" for c in fitting)
            by_family = {}
            for c in fitting:  # ranked fastest first: the first of a family is its fastest fitting plan
                by_family.setdefault(family(c), []).append(c)
            no_offload_s0 = {c["micro_batch"]: c["device_gib"] for c in fitting if family(c)[0] == "0-2"}
            cap_picks, edge_fallback = [], {}
            for fam, members in by_family.items():
                top = members[0]
                if fam[0] == "3" and fam[1] == "none" and no_offload_s0.get(top["micro_batch"], 1e9) <= \
                        top["device_gib"]:
                    continue  # stage 3 without offload plans no less than stage 0: the same plan, slower
                if top["predicted_ms"] > self.args.margin * best and not offload_only:
                    continue
                budget = budget_gib(cap)
                if top["device_gib"] > 0.95 * budget:  # at the edge: the next smaller micro-batch as its fallback
                    smaller = [m for m in members if m["micro_batch"] < top["micro_batch"]]
                    if smaller:
                        edge_fallback[id(top)] = max(smaller, key=lambda m: m["micro_batch"])
                cap_picks.append(top)
            cap_picks = [p for p in cap_picks if not any(dominates(q, p) for q in fitting)]
            cap_picks.sort(key=lambda p: p["predicted_ms"])
            # The fastest few, and the fastest of each placement kind (no offload, full, partial) within the
            # margin: the model may rank kinds wrongly, rarely two members of one kind. Of one kind, the
            # fastest with checkpointing and the fastest without where both are within --twin-margin of the
            # best: the model's error by micro-batch size decides there (H100, cap 12 x b512: full offload
            # 128x4 with checkpointing predicted 996 ms, measured 1083; 32x16 without, 1020 and 1001).
            keep = [p for p in cap_picks if p["predicted_ms"] <= self.args.margin * best][:self.args.per_cap]
            # Where only offload fits, the fastest full and partial offload whatever their prediction: the
            # partial goal compares them.
            for kind in ("none", "full", "partial"):
                members = [p for p in cap_picks if placement_kind(p) == kind]
                first = next((p for p in members if offload_only or p["predicted_ms"] <= self.args.margin * best),
                             None)
                if first is None:
                    continue
                twin = next((p for p in members if p["gradient_checkpointing"] != first["gradient_checkpointing"]
                             and p["predicted_ms"] <= self.args.twin_margin * best), None)
                for p in (first, twin):
                    if p is not None and p not in keep:
                        keep.append(p)
            for p in keep:
                equivalent = (family(p), p["micro_batch"])
                selected.setdefault(equivalent, p)  # the first (the planner's pick on a tie) stands
                if id(p) in edge_fallback:
                    f = edge_fallback[id(p)]
                    fallbacks.setdefault((family(f), f["micro_batch"]), (f, []))[1].append((cap, p))
        plans = list(selected.values())
        for equivalent, (f, tops) in fallbacks.items():
            if equivalent not in selected:  # measured only where its plan at the edge fails under a cap (grid)
                plans.append(dict(f, fallback_for=tops))
        return chosen, plans

    def caps(self):
        return [int(c) for c in self.args.caps.split(",")]

    def cap_bests(self, p, results):
        """Per cap that plan p fits as planned: the best step of a measured plan that fits it for sure (its
        reserved peak within the cap), or None (step_allowance_ms)."""
        bests = {}
        for cap in self.caps():
            if p["device_gib"] > budget_gib(cap):
                continue
            sure = [m["step_ms"] for _, m in results if "error" not in m and
                    m.get("peak_reserved_gib", m["peak_gib"]) <= cap]
            bests[cap] = min(sure) if sure else None
        return bests

    def expected_plan_s(self, plans):
        return {plan_key(p): expected_run_s(host_gib(p), sum(self.step_counts(p)), p["predicted_ms"]) for p in plans}

    def grid(self, batch, seq):
        chosen, plans = self.select_grid(batch, seq)
        plans.sort(key=lambda p: p["predicted_ms"])
        expected = self.expected_plan_s(plans)
        fallback_s = sum(expected[plan_key(p)] for p in plans if "fallback_for" in p)
        self.start_part(f"grid global batch {batch} seq {seq}", grid_expected_s(plans, self.step_counts),
                        f" ({len(plans)} plans; fallbacks {fallback_s:.0f} s more where needed)")
        say(f"  {len(plans)} plans: " + "; ".join(f"{plan_key(p)} ({p['predicted_ms']:.0f} ms, "
                                                  f"{expected[plan_key(p)]:.0f} s"
                                                  f"{', fallback' if 'fallback_for' in p else ''})" for p in plans))
        results = []

        def timed(p):
            allowed = step_allowance_ms(p, self.cap_bests(p, results))
            return self.measure(p, seq, f"b{batch}", allowed_step_ms=allowed)

        for p in (p for p in plans if "fallback_for" not in p):
            results.append((p, timed(p)))
        for p in (p for p in plans if "fallback_for" in p):
            # The next smaller micro-batch of a plan at the edge of a cap: needed only where that plan does not
            # run under the cap with its uncapped time (a capped rerun may be slower, an OOM leaves its family
            # without a plan).
            edge = [(cap, top) for cap, top in p["fallback_for"] if
                    self.under_cap(top, seq, cap, f"b{batch}")["how"] != "uncapped"]
            if edge:
                say(f"  {plan_key(p)}: the fallback of {', '.join(f'{plan_key(t)} at {c} GiB' for c, t in edge)}")
                results.append((p, timed(p)))
        rows = self.state.data.setdefault("table", {})
        for cap in self.caps():
            auto = chosen.get(cap)
            label = f"b{batch}"
            fastest, _ = fastest_under_cap(results, cap, lambda p, m: self.under_cap(p, seq, cap, label))
            row = {"cap": cap, "batch": batch, "seq": seq}
            if auto is not None:
                f = self.under_cap(auto, seq, cap, f"b{batch} auto@{cap}")
                row.update(auto=plan_key(auto), predicted_ms=auto["predicted_ms"], auto_ms=f.get("step_ms"),
                           auto_peak=f.get("peak_gib"), auto_reserved=f.get("reserved_gib"), auto_how=f["how"],
                           auto_error=f.get("error"))
                # The auto plan is a plan of the grid too: where it fits and beats the grid's fastest, it is.
                if f["how"] in FITS and (fastest is None or f["step_ms"] < fastest[1]["step_ms"]):
                    fastest = (auto, f)
            if fastest:
                row.update(fastest=plan_key(fastest[0]), fastest_ms=fastest[1]["step_ms"],
                           fastest_peak=fastest[1]["peak_gib"], fastest_reserved=fastest[1]["reserved_gib"],
                           fastest_how=fastest[1]["how"])
            rows[f"{batch}x{seq}@{cap}"] = row
            self.state.save()
            say("TABLE " + table_line(row))

    def partial(self):
        """Where only offload fits (the measured grid says so): the best measured partial offload against the
        best measured full offload; then, time left, the ratios 0.75/0.5/0.25 at the full offload's plan."""
        help_text = subprocess.run([str(self.bin / "bench_train_step"), "--help"], capture_output=True,
                                   text=True).stdout
        if "offload_ratio" not in help_text:
            say("partial: skipped: bench_train_step has no --offload_ratio (the partial offload branch is not in)")
            return
        self.start_part("partial", partial_expected_s(self.args.ratio_sweep),
                        " (from the grid" + (", the ratio sweep at one cap)" if self.args.ratio_sweep else ")"))
        measured = self.state.data.get("measured", {})
        found = False
        for batch, seq in ((128, 128), (40, 128), (512, 128), (16, 512)):
            for cap in self.caps():
                fits = {k: v for k, v in measured.items() if k.startswith(f"seq{seq} ") and "@" not in k and
                        _global(k) == batch and _fits_measured(measured, k, cap)}
                fits = {k: dict(v, step_ms=_fits_measured(measured, k, cap)) for k, v in fits.items()}
                if not fits or any(" none " in k for k in fits):
                    continue
                full = {k: v for k, v in fits.items() if " r0." not in k}
                part = {k: v for k, v in fits.items() if " r0." in k}
                if not full or not part:
                    continue
                kf = min(full, key=lambda k: full[k]["step_ms"])
                kp = min(part, key=lambda k: part[k]["step_ms"])
                f_ms, p_ms = full[kf]["step_ms"], part[kp]["step_ms"]
                found = True
                self.state.data.setdefault("partial", {})[f"{batch}x{seq}@{cap}"] = dict(
                    full=kf, full_ms=f_ms, partial=kp, partial_ms=p_ms)
                self.state.save()
                say(f"PARTIAL b{batch} s{seq} cap {cap} GiB: best partial {kp[len(f'seq{seq} '):]} {p_ms} ms vs full "
                    f"offload {kf[len(f'seq{seq} '):]} {f_ms} ms: {f_ms / p_ms:.2f}x "
                    f"({'faster' if p_ms < f_ms else 'NOT faster'}, {100 * (f_ms - p_ms) / f_ms:.0f} % less time)")
                m = re.match(r"seq\d+ s(\d) (\w+) (\d+)x(\d+)( ckpt)?$", kf)
                if not m or not self.args.ratio_sweep or len(self.state.data["partial"]) > 1:
                    continue
                for ratio in SWEEP_RATIOS:  # the ratio alone changed, at the full offload's plan
                    p = {"zero_stage": int(m[1]), "offload": m[2], "offload_ratio": ratio,
                         "micro_batch": int(m[3]), "accumulation": int(m[4]), "gradient_checkpointing": bool(m[5]),
                         "predicted_ms": f_ms}
                    r = self.measure(p, seq, f"partial@{cap}", extra=True)
                    if "error" not in r:
                        say(f"PARTIAL ratio {ratio} at {kf[len(f'seq{seq} '):]}: {r['step_ms']} ms vs {f_ms} ms, "
                            f"peak {r['peak_gib']} GiB, reserved {r.get('peak_reserved_gib')} "
                            f"({'fits' if r.get('peak_reserved_gib', r['peak_gib']) <= cap else 'not shown to fit'})")
        if not found:
            say("partial: no measured cap where full and partial offload fit and no offload does not")

    def delayed(self):
        self.start_part("delayed", delayed_expected_s(self.args.warmup))
        base = ["--batch", "40", "--zero_stage", "2", "--seq", "128", "--warmup", str(self.args.warmup),
                "--steps", "4", *self.quick_flags()]
        timeout = run_timeout_s(FULL_OFFLOAD_HOST_GIB, self.args.warmup + 4, STEP_ALLOWANCE * DELAYED_STEP_MS)
        d = self.bench([*base, "--offload", "optimizer", "--pin_memory", "--delayed_update", "--profile"],
                       timeout=timeout, label="delayed")
        if "error" in d:
            say(f"delayed: FAILED {d['error'][:300]}")
            return
        # The step's parts where bench_train_step prints them (any nesting): forward + backward, the CPU update.
        fwd_bwd = _find_number(d, ("forward", "backward"))
        cpu = _find_number(d, ("cpu", "update")) or _find_number(d, ("cpu", "adam"))
        source = "its JSON"
        if fwd_bwd is None or cpu is None:
            source = "the ZeRO-2 step less its optimizer segments, bench_cpu_adam"
            s = self.bench([*base, "--profile"], timeout=run_timeout_s(0.0, self.args.warmup + 4, 200.0),
                           label="delayed base")
            if "error" in s:
                say(f"delayed: the ZeRO-2 step FAILED {s['error'][:200]}")
                return
            optimizer = sum(float(m[2]) for m in re.finditer(r"^(optimizer\S*)\s+\S+\s+(\S+)", s["stderr_tail"],
                                                             re.M))
            fwd_bwd = s["step_ms"] - optimizer
            r = subprocess.run([str(self.bin / "bench_cpu_adam"), "--params", str(d["params"]), "--reps", "3"],
                               capture_output=True, text=True, timeout=max(10.0, self.left()))
            adam = _last_json(r.stdout)
            cpu = adam["adamw_seconds_median"] * 1e3 if "adamw_seconds_median" in adam else None
            (self.work / "bench_cpu_adam.json").write_text(r.stdout)
        floor = max(fwd_bwd or 0, cpu or 0)
        ratio = d["step_ms"] / floor if floor else float("nan")
        self.state.data["delayed"] = dict(step_ms=d["step_ms"], fwd_bwd_ms=fwd_bwd, cpu_update_ms=cpu,
                                          ratio=ratio, source=source)
        self.state.save()
        say(f"DELAYED bs40: step {d['step_ms']} ms vs max(fwd+bwd {fwd_bwd and round(fwd_bwd, 1)}, CPU update "
            f"{cpu and round(cpu, 1)}) = {ratio:.2f}x ({'PASS' if ratio <= 1.15 else 'FAIL'} <= 1.15x; parts from "
            f"{source})")

    def large(self):
        # 20 steps where the budget holds them: the run prints its losses only at its end, so a run cut by the
        # budget would show none. Its start-up (pinning 104.5 GiB, the host init) took 125-160 s on the H200,
        # a step 2.13 s; fewer steps (not under 12) where the budget is short of that.
        self.start_part("large", LARGE_EXPECTED_S)
        steps = 6 if self.args.quick else max(12, min(20, int((self.left() - LARGE_STARTUP_S) / LARGE_STEP_S)))
        flags = ["--hidden", "4096", "--layers", "4" if self.args.quick else "28", "--zero_stage", "3",
                 "--offload", "both", "--pin_memory", "--batch", "8", "--seq", "128", "--repeat_batch",
                 "--lr", "1e-6", "--lr_warmup", "5", "--dropout", "0", "--warmup", "0", "--steps", str(steps)]
        r = self.bench(flags, timeout=max(20.0, self.left() - 5), label="large")
        if "error" in r:
            say(f"large: FAILED {r['error'][:300]} ({r.get('wall_s')} s)")
            return
        losses = [round(x, 4) for x in r["losses"]]
        self.state.data["large"] = dict(params=r["params"], losses=losses, step_ms=r["step_ms"],
                                        peak_gib=r["peak_gib"], wall_s=r["wall_s"])
        self.state.save()
        falls = losses[-1] < 0.5 * losses[0] and min(losses[-5:]) < losses[0]
        say(f"LARGE {r['params']} parameters: losses {losses}; step {r['step_ms']} ms, peak {r['peak_gib']} GiB, "
            f"{r['wall_s']} s ({'falls' if falls else 'DOES NOT FALL'})")

    def expect(self):
        """Every part's expected seconds (the grids from the planner's selection with --figures) and the call
        plan's: the lines plan.sh's header quotes."""
        parts = {"calibrate": CALIBRATE_S, "partial": partial_expected_s(self.args.ratio_sweep),
                 "delayed": delayed_expected_s(self.args.warmup), "ds": DS_EXPECTED_S, "large": LARGE_EXPECTED_S,
                 "summary": SUMMARY_S}
        for name, (batch, seq) in GRID_PARTS.items():
            _, plans = self.select_grid(batch, seq)
            parts[name] = grid_expected_s(plans, self.step_counts)
            say(f"EXPECT {name}: {parts[name]:.0f} s: " + "; ".join(
                f"{plan_key(p)} {expected_run_s(host_gib(p), sum(self.step_counts(p)), p['predicted_ms']):.1f}"
                + (" (fallback)" if "fallback_for" in p else "") for p in plans))
        calls = call_plan(parts)
        total_budget = sum(budget + CALL_MARGIN_S for *_, budget in calls)
        for i, (names, setup, expected, budget) in enumerate(calls, 1):
            say(f"EXPECT call {i}: PLAN_BUDGET_S={budget} --parts {names}: expected {expected:.0f} s ({setup} "
                f"{CALL_SETUP_S[setup]:.0f}, " + ", ".join(f"{n} {parts[n]:.0f}" for n in names.split(",")) +
                f"); timeout_s {budget + CALL_MARGIN_S}")
        say(f"EXPECT goals: {len(CALL_PLAN)} calls, {total_budget} s of device time at most "
            f"({'fits' if total_budget <= GOALS_DEVICE_S else 'OVER'} {GOALS_DEVICE_S}); large alone: PLAN_BUDGET_S="
            f"{call_budget_s(BUILD_WARM_S + LARGE_EXPECTED_S)}")
        return parts, total_budget

    def summary(self):
        for key, row in self.state.data.get("table", {}).items():
            say("TABLE " + table_line(row))


def grid_expected_s(plans, step_counts):
    """A grid part's expected seconds: its estimates and its plans other than the fallbacks."""
    return ESTIMATES_S + sum(expected_run_s(host_gib(p), sum(step_counts(p)), p["predicted_ms"]) for p in plans
                             if "fallback_for" not in p)


def is_oom_text(text):
    """A run that failed for want of device memory (the allocator's "out of device memory", CUDA's, or the
    planner refusing a plan over the cap)."""
    t = text.lower()
    return "out of device memory" in t or "out of memory" in t or "exceeds the" in t


def measured_key(p, seq, cap=None):
    return f"seq{seq} {plan_key(p)}" + ("" if cap is None else f" @{cap}GiB")


FITS = ("uncapped", "capped rerun")


def fit_under_cap(m, cap, rerun):
    """Whether a plan runs under --gpu_memory_limit CAP GiB, which caps RESERVED bytes, and its step time there.
    m is its uncapped measurement; rerun() measures it under the cap. A live peak over the cap cannot fit;
    an uncapped reserved peak within the cap means the cap never binds (the uncapped measurement stands);
    in between the allocator would have to return its cache, so only a run under the cap tells (its time
    is the one that counts; an out-of-memory = does not fit). Returns {how, step_ms, peak_gib, reserved_gib}:
    how is uncapped / capped rerun (both fit) or over (live peak), OOM, failed, unverified (no time)."""
    if "error" in m:
        return {"how": "failed", "error": m["error"]}
    reserved = m.get("peak_reserved_gib", m["peak_gib"])
    if m["peak_gib"] > cap:
        return {"how": "over", "peak_gib": m["peak_gib"], "reserved_gib": reserved}
    if reserved <= cap:
        return {"how": "uncapped", "step_ms": m["step_ms"], "peak_gib": m["peak_gib"], "reserved_gib": reserved}
    c = rerun()
    if "error" in c:
        how = ("OOM" if c["error"].startswith("OOM") else
               "unverified" if c["error"].startswith("skipped") else "failed")
        return {"how": how, "error": c["error"], "peak_gib": m["peak_gib"], "reserved_gib": reserved}
    return {"how": "capped rerun", "step_ms": c["step_ms"], "peak_gib": c["peak_gib"],
            "reserved_gib": c.get("peak_reserved_gib", c["peak_gib"]), "uncapped_ms": m["step_ms"]}


def fastest_under_cap(results, cap, check):
    """The fastest of the measured (plan, uncapped measurement) pairs that fits the cap (fit_under_cap via
    check(plan, m)), and the (plan, fit) pairs checked. Walks the plans by uncapped step time and stops at
    the first whose uncapped time is no faster than the best fitting one found: a run under a cap is never
    faster than the same run without it, so only borderline plans that could still win are re-run."""
    ranked = sorted(((p, m) for p, m in results if "error" not in m), key=lambda pm: pm[1]["step_ms"])
    best, checked = None, []
    for p, m in ranked:
        if best is not None and m["step_ms"] >= best[1]["step_ms"]:
            break
        if m["peak_gib"] > cap:
            continue
        f = check(p, m)
        checked.append((p, f))
        if f["how"] in FITS and (best is None or f["step_ms"] < best[1]["step_ms"]):
            best = (p, f)
    return best, checked


def _fits_measured(measured, key, cap):
    """The step time that counts for the uncapped measurement `key` under the cap (fit_under_cap, with the
    capped rerun from the cache: one not run does not count), or None where it does not fit."""
    f = fit_under_cap(measured[key], cap, lambda: measured.get(f"{key} @{cap}GiB", {"error": "skipped: not run"}))
    return f["step_ms"] if f["how"] in FITS else None


def _global(key):
    m = re.search(r"(\d+)x(\d+)", key)
    return int(m[1]) * int(m[2]) if m else 0


def _last_json(text):
    """The JSON object a tool printed last (one line or pretty-printed)."""
    start = text.rfind("\n{")
    start = 0 if start < 0 else start + 1
    try:
        return json.loads(text[start:])
    except ValueError:
        return {}


def _find_number(obj, words):
    """The first number in a nested JSON whose key path mentions every word (ms; a path ending _s is seconds)."""
    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                yield from walk(v, path + [str(k)])
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            yield "/".join(path).lower(), o
    for path, v in walk(obj, []):
        if all(w in path for w in words) and "gib" not in path:
            return float(v) * (1e3 if path.endswith("_s") else 1)
    return None


def table_line(row):
    """One goals line: the auto plan (measured ms, predicted, peak, how it fits the cap), the grid's fastest
    fitting plan, the ratio and the verdict. A row from before the fit protocol (no auto_how) is judged by its
    live peak."""
    auto_ms, fast_ms, pred = row.get("auto_ms"), row.get("fastest_ms"), row.get("predicted_ms")
    ratio = auto_ms / fast_ms if auto_ms and fast_ms else None
    error = (pred - auto_ms) / auto_ms * 100 if auto_ms and pred else None
    how = row.get("auto_how")
    auto_fits = how in FITS if how is not None else row.get("auto_peak", 1e9) <= row["cap"]
    verdict = "n/a"
    if how is not None and not auto_fits:
        verdict = f"FAIL auto does not fit ({how}" + (f": {str(row.get('auto_error'))[:60]}" if row.get(
            "auto_error") else "") + ")"
    elif ratio is not None:
        ok = ratio <= 1.05 and auto_fits
        verdict = ("PASS" if ok else "FAIL") + (" pred-ok" if error is not None and abs(error) <= 10 else " pred-off")
    elif row.get("auto_error"):
        verdict = "auto FAILED: " + str(row["auto_error"])[:80]
    elif "fastest" not in row:
        verdict = "nothing measured fits"
    return (f"cap {row['cap']:>2} GiB b{row['batch']} s{row['seq']}: auto {row.get('auto')} "
            f"{_r(auto_ms)} ms (pred {_r(pred)}, err {_r(error)} %, peak {_r(row.get('auto_peak'))}, reserved "
            f"{_r(row.get('auto_reserved'))}, {how or 'live peak only'}) | fastest {row.get('fastest')} "
            f"{_r(fast_ms)} ms "
            f"(peak {_r(row.get('fastest_peak'))}, reserved {_r(row.get('fastest_reserved'))}, "
            f"{row.get('fastest_how', 'live peak only')}) | ratio {_r(ratio, 3)} | {verdict}")


def _r(x, digits=2):
    return None if x is None else round(x, digits)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=("calibrate", "grid", "partial", "delayed", "large", "summary", "expect"))
    ap.add_argument("shape", nargs="*", type=int, help="grid: global batch and seq")
    ap.add_argument("--bin", default="build-gpu/bin")
    ap.add_argument("--work", required=True, help="state and raw outputs")
    ap.add_argument("--figures", default="", help="the machine figures file (calibrate writes it)")
    ap.add_argument("--budget-s", type=float, default=120)
    ap.add_argument("--caps", default=",".join(map(str, CAPS_GIB)))
    ap.add_argument("--margin", type=float, default=1.15, help="families predicted within this of the best")
    ap.add_argument("--twin-margin", type=float, default=1.06,
                    help="a kind's fastest with and without checkpointing both measured within this of the best")
    ap.add_argument("--per-cap", type=int, default=2,
                    help="the fastest predicted picks kept per cap (besides each placement kind's fastest)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--step-timeout-s", type=float, default=90)
    ap.add_argument("--long-step-ms", type=float, default=450,
                    help="plans predicted slower than this run 1 warm-up + 3 timed steps (measured ~10 %% above)")
    ap.add_argument("--ratio-sweep", action="store_true",
                    help="partial: the ratios 0.75/0.5/0.25 at one cap's full offload plan, within the part's budget")
    ap.add_argument("--quick", action="store_true", help="a 2-layer model (the large part: 4 layers, 6 steps)")
    args = ap.parse_args()
    runner = Runner(args)
    if args.part == "grid":
        if len(args.shape) != 2:
            ap.error("grid takes the global batch and the sequence length")
        runner.grid(*args.shape)
    else:
        getattr(runner, args.part)()


if __name__ == "__main__":
    main()
