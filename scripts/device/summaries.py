#!/usr/bin/env python3
"""Digests of the device tasks' raw outputs (scripts/device/run.sh), one subcommand each:

  summaries.py step                      < one bench_train_step JSON line: its main fields on one line
  summaries.py ab-run                    < the same, for an A/B log line: step_ms, peak_gib, loss_last
  summaries.py ab LOG LABEL...           the A/B summary: mean step per variant, ratio to its reference
                                         (the first variant of the same flags), and whether its last
                                         losses are the reference's bit for bit
  summaries.py core-ab SHAPE BASE CAND   two zt_bench --json files of one shape: each attention kernel's
                                         median us in both and the base's over the candidate's (>1: faster)
  summaries.py side-complete JSON IMPLS SHAPES
                                         whether bench_vs_torch's JSON holds every impl at every BxS of the
                                         comma lists, measured or out of memory; names the rest (exit 1)
  summaries.py zero-memory JSONL         per-rank peak by category against the estimator's plan
  summaries.py mpirun DIR                each ZeRO stage's train_mrpc loss curve against stage 0's
  summaries.py disk DIR                  the disk tier's record: rates, steps, the floor (JSON)
"""
import json
import pathlib
import re
import sys
from statistics import mean


def step():
    r = json.loads(sys.stdin.read().strip().splitlines()[-1])
    keys = ("batch", "zero_stage", "world_size", "offload", "delayed_update", "overlap_update", "params",
            "first_step_s", "step_ms", "samples_per_s", "peak_gib", "peak_reserved_gib")
    estimate = r.get("estimate_gib", {})
    fields = {k: r[k] for k in keys if k in r}
    if r.get("delayed_update"):
        # The delayed update's floor: max(forward + backward, the CPU update), both measured in this run.
        fields["cpu_update_ms"] = r.get("cpu_update_ms")
        fields["forward_backward_ms"] = r.get("forward_backward_ms")
        floor = max(r.get("cpu_update_ms") or 0, r.get("forward_backward_ms") or 0)
        if floor > 0:
            fields["floor_ratio"] = round(r["step_ms"] / floor, 3)
    print(fields, "estimate", estimate.get("total"), "host", estimate.get("host"))


def ab_run():
    r = json.loads(sys.stdin.read().strip().splitlines()[-1])
    # repr keeps every bit of the float the JSON holds: equal text is an equal loss.
    print("step_ms", r["step_ms"], "peak_gib", r["peak_gib"], "loss_last", repr(r["losses"][-1]))


def ab(log, labels):
    runs, losses, flags = {}, {}, {}
    for line in open(log):
        m = re.match(r"variant (\S+): tree \S+ env .* flags (.*)$", line)
        if m:
            flags[m[1]] = m[2].strip()
            continue
        m = re.match(r"bs(\d+) (\S+) #\d+: (.*)", line)
        if not m:
            continue
        key = (int(m[1]), m[2])
        if m[3].startswith("FAILED"):
            runs.setdefault(key, [])
            losses.setdefault(key, set()).add("FAILED")
            continue
        fields = m[3].split()
        runs.setdefault(key, []).append(float(fields[fields.index("step_ms") + 1]))
        losses.setdefault(key, set()).add(fields[fields.index("loss_last") + 1])
    # Each variant's reference: the first variant that ran with the same flags (the base, for switches).
    reference = {label: next(l for l in labels if flags.get(l, "") == flags.get(label, "")) for label in labels}
    for bs in sorted({b for b, _ in runs}, reverse=True):
        for label in labels:
            ref = reference[label]
            ms, loss = runs.get((bs, label)) or [], losses.get((bs, label), set())
            ref_ms, ref_loss = runs.get((bs, ref)) or [], losses.get((bs, ref), set())
            if not ms:
                print(f"summary bs{bs} {label}: FAILED every run")
                continue
            ratio = f" ({mean(ms) / mean(ref_ms):.4f} of {ref})" if ref_ms and label != ref else ""
            if "FAILED" in loss:
                bits = "some runs FAILED"
            elif len(loss) != 1:
                bits = f"last loss differs between its own runs {sorted(loss)}"
            elif label == ref:
                bits = f"last loss {next(iter(loss))}"
            elif loss == ref_loss:
                bits = f"last loss {next(iter(loss))}, the same bits as {ref}"
            else:
                bits = f"last loss {next(iter(loss))} differs from {ref}'s {sorted(ref_loss)}"
            print(f"summary bs{bs} {label}: mean {mean(ms):.2f} ms over {len(ms)}{ratio}; {bits}")


def core_ab(shape, base_path, candidate_path):
    def medians(path):
        try:
            doc = json.load(open(path))
        except (OSError, ValueError) as e:
            return {"error": str(e)}
        return {r["name"]: r.get("median_us") for r in doc.get("results", []) if r["name"].startswith("attention")}

    base, cand = medians(base_path), medians(candidate_path)
    total = {"base": 0.0, "candidate": 0.0}
    for name in sorted(set(base) | set(cand)):
        b, c = base.get(name), cand.get(name)
        if isinstance(b, (int, float)) and isinstance(c, (int, float)) and c > 0:
            print(f"core {shape} {name}: base {b:.1f} us, candidate {c:.1f} us: {b / c:.3f}x")
            total["base"] += b
            total["candidate"] += c
        else:
            print(f"core {shape} {name}: base {b}, candidate {c}: no ratio")
    if total["candidate"] > 0:
        print(f"core {shape} sum: base {total['base']:.1f} us, candidate {total['candidate']:.1f} us: "
              f"{total['base'] / total['candidate']:.3f}x")


def side_complete(path, impls, shapes):
    labels = {"zerotrain": "zerotrain", "fdb": "torch-eager+fdb", "df": "torch-eager+df", "compile": "torch-compile",
              "eager": "torch-eager", "compile-df": "torch-compile+df"}
    try:
        records = json.load(open(path)).get("results") or []
    except (OSError, ValueError) as e:
        print(f"no results: {e}")
        return 1
    got = {(r.get("impl"), r.get("batch"), r.get("seq")): r for r in records}
    missing = []
    for impl in impls.split(","):
        for shape in shapes.split(","):
            batch, seq = map(int, shape.split("x"))
            r = got.get((labels.get(impl, impl), batch, seq))
            if r is None:
                missing.append(f"{impl} {shape}: not run")
            elif r.get("error") not in (None, "OOM"):
                missing.append(f"{impl} {shape}: {r['error'][:120]}")
    for line in missing:
        print(line)
    return 1 if missing else 0


def zero_memory(path):
    print("world stage  step_ms  samples/s | per-rank peak GiB (measured / estimated) by category")
    for line in open(path):
        r = json.loads(line)
        if "ranks" not in r:
            print(r.get("world_size"), r.get("zero_stage"), "ERROR", str(r.get("error", ""))[:150])
            continue
        m = max(r["ranks"], key=lambda x: x["peak_gib"])
        e, c = r["estimate_gib"], m["peak_by_category_gib"]
        pairs = [("params", "parameters", "parameters"), ("grads", "gradients", "gradients"),
                 ("master", "master", "master"), ("adam", "optimizer", "optimizer"),
                 ("comm", "communication", "buffers"), ("act", "activations", "activations")]
        rows = " ".join(f"{name} {c[measured]:.3f}/{e[planned]:.3f}" for name, measured, planned in pairs)
        print(f'{r["world_size"]:>5} {r["zero_stage"]:>5} {r["step_ms"]:8.2f} {r["samples_per_s"]:9.1f} | '
              f'total {m["peak_gib"]:.3f}/{e["total"]:.3f} {rows} scratch {c["scratch"]:.3f} other {c["other"]:.3f}')


def mpirun(folder):
    def losses(stage):
        try:
            lines = [json.loads(l) for l in open(f"{folder}/run{stage}/metrics.jsonl") if l.strip()]
        except OSError:
            return []
        return [e["train/loss"] for e in lines if e.get("type") == "step"]

    ref = losses(0)
    for stage in 1, 2, 3:
        cur = losses(stage)
        if not ref or len(cur) != len(ref):
            print(f"stage {stage}: {len(cur)} logged steps vs stage 0's {len(ref)}")
            continue
        worst = max(abs(a - b) / abs(b) for a, b in zip(cur, ref))
        print(f"stage {stage} vs stage 0: {len(cur)} steps, largest relative loss difference {worst:.2e}")


def disk(folder):
    out = pathlib.Path(folder)

    def load(name):
        if not (out / name).exists():
            return {}
        text = (out / name).read_text().strip()
        try:  # one JSON document, or JSON lines of which the last is the result
            return json.loads(text)
        except ValueError:
            pass
        try:
            return json.loads(text.splitlines()[-1])
        except (ValueError, IndexError) as e:  # a failed stage: say so, keep the rest
            return {"error": f"{name}: {e}"}

    def dd_rate(name):
        text = (out / name).read_text() if (out / name).exists() else ""
        m = re.findall(r"copied, [\d.]+ s, ([\d.]+ [kMG]?B/s)", text)
        return m[-1] if m else text.strip()[-200:]

    bench = load("bench_disk.json")
    runs = bench.get("runs", [])
    best_read = max((r["read_gbps"] for r in runs), default=0)
    best_write = max((r["write_gbps"] for r in runs), default=0)
    adam = load("bench_cpu_adam.json")
    params, adam_s = adam.get("params", 0), adam.get("adamw_seconds_median", 0)
    # The state (master, m, v: 12 bytes per parameter) is read and written once per step.
    disk_s = 12 * params / 1e9 / best_read + 12 * params / 1e9 / best_write if best_read and best_write else None
    floor_s = max(disk_s or 0, adam_s)
    steps = {name: load(f"{name}.json") for name in
             ("step_offload_host", "step_offload_nvme", "step_offload_nvme_zero3", "step_offload_nvme_sub_groups")}
    summary = {"dd_write": dd_rate("dd_write.txt.err"), "dd_read": dd_rate("dd_read.txt.err"),
               "bench_disk_best_write_gbps": best_write, "bench_disk_best_read_gbps": best_read,
               "cpu_adamw_s": adam_s, "params": params, "disk_s_for_state": disk_s, "floor_s": floor_s}
    summary.update({f"step_ms_{name[5:]}": r.get("step_ms") for name, r in steps.items()})
    host, nvme = steps["step_offload_host"], steps["step_offload_nvme"]
    if host.get("step_ms") and nvme.get("step_ms") and floor_s:
        # The disk tier adds the swap traffic to the host-offload step; its optimizer part against the floor.
        summary["nvme_optimizer_s_vs_floor"] = round(((nvme["step_ms"] - host["step_ms"]) / 1e3 + adam_s) / floor_s, 3)
    for name, r in [("bench_disk", bench), ("bench_cpu_adam", adam), *steps.items()]:
        if "error" in r:
            summary[f"{name}_error"] = r["error"]
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    what, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if what == "step":
        step()
    elif what == "ab-run":
        ab_run()
    elif what == "ab" and len(args) >= 2:
        ab(args[0], args[1:])
    elif what == "core-ab" and len(args) == 3:
        core_ab(*args)
    elif what == "side-complete" and len(args) == 3:
        sys.exit(side_complete(*args))
    elif what == "zero-memory" and len(args) == 1:
        zero_memory(args[0])
    elif what == "mpirun" and len(args) == 1:
        mpirun(args[0])
    elif what == "disk" and len(args) == 1:
        disk(args[0])
    else:
        sys.exit(__doc__)
