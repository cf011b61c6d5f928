#!/usr/bin/env python3
"""DeepSpeed's anchor for issue 40's plan goals (scripts/device/tasks/plan.sh runs it after installing the
.ds/ wheels; scripts/fetch_deepspeed.sh copies them): HF DebertaV2ForSequenceClassification with the xlarge
shapes (random init, 2 labels, bf16, seq 128), ZeRO-2 + offload_optimizer cpu (pinned), the configuration the
blog recommends, on one GPU, on ONE engine:

  global   the global batches 40, 128 and 512 as micro-batch min(B, --max-micro) x accumulation
           (engine.set_train_batch_size changes the accumulation; the micro-batch is what is fed): the
           median of --steps timed optimizer steps after one untimed where the micro-batch is new (512 =
           128 x 4 reuses 128's), the peaks allocated and reserved
  caps     per cap (ascending, torch.cuda.set_per_process_memory_fraction, which caps the caching
           allocator's reserved bytes): the largest micro-batch that runs one step, to within 8: a bounded
           search (at most --probes one-step runs a cap) that starts where the line through the global
           runs' reserved peaks (two micro-batches: bytes = a + b x batch, ZeRO-2 + offload's fixed bf16
           parameters and gradients plus the activations) crosses the cap, steps up or down by 8 from there
           and bisects once it has a batch that runs and one that does not; a cap's answer is the next
           cap's lower bound (3 probes bracket it within 8 where the line's guess is within 8; the line
           says which batch failed, so a wider bracket shows)

--jit-only: compile DeepSpeed's CPU Adam (TORCH_EXTENSIONS_DIR) and exit: the plan task runs it beside the
build, so that the timed part finds it compiled (~40 s on the H100 host otherwise).
Time on one H100 (the CPU Adam compiled; scripts/plan_goals.py's DS_EXPECTED_S): install + imports ~16 s, the
engine with the model built on the GPU ~20 s (pins the f32 state; with the model built on the CPU it took
68.9 s in call 2 of docs/bench/2026-12-06-h100-plan), the global batches ~12 s (the 512's steps ~3.5 s
each), the caps 4 x 3 probes of ~1.5 s: ~66 s.

Prints one line per result ("DS ...") and rewrites OUT/ds_plan_anchor.json after each.
--smoke: a tiny model on the CPU (gloo), to check the code paths without a GPU.
"""
import argparse
import gc
import json
import os
import pathlib
import statistics
import time

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--budget-s", type=float, default=150)
ap.add_argument("--batches", default="40,128,512")
ap.add_argument("--caps", default="12,16,24,40")
ap.add_argument("--max-micro", type=int, default=128)
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--torch-adam", action="store_true", help="torch's fused CPU AdamW instead of DeepSpeedCPUAdam")
ap.add_argument("--probes", type=int, default=3, help="one-step runs at most per cap")
ap.add_argument("--jit-only", action="store_true", help="compile DeepSpeed's CPU Adam and exit")
ap.add_argument("--smoke", action="store_true")
args = ap.parse_args()
t0 = time.time()
out = pathlib.Path(args.out)
out.mkdir(parents=True, exist_ok=True)
RES = {"config": vars(args), "global": {}, "caps": {}, "errors": {}}


def left():
    return args.budget_s - (time.time() - t0)


def dump():
    (out / "ds_plan_anchor.json").write_text(json.dumps(RES, indent=1))


def say(line):
    print("DS " + line, flush=True)


os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
import torch  # noqa: E402
import deepspeed  # noqa: E402

if args.jit_only:  # before transformers' import: the compile waits for nothing else
    from deepspeed.ops.op_builder import CPUAdamBuilder  # noqa: E402
    t = time.time()
    CPUAdamBuilder().load()
    print(f"DS CPU Adam compiled in {time.time() - t:.1f} s", flush=True)
    raise SystemExit(0)
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification  # noqa: E402

DEV = "cpu" if args.smoke else "cuda"
SEQ = 128
# DeBERTa-v2-xlarge's published shapes (the config zerotrain's deberta_v2_xlarge_config holds).
SHAPES = dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
              intermediate_size=6144, max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
              max_relative_positions=-1, position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
              pos_att_type=["p2c", "c2p"], layer_norm_eps=1e-7, conv_kernel_size=3, conv_act="gelu",
              position_biased_input=False, pooler_hidden_size=1536, num_labels=2)
if args.smoke:
    SHAPES.update(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=512, pooler_hidden_size=128)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def peak_gib():
    return round(torch.cuda.max_memory_allocated() / 2**30, 3) if DEV == "cuda" else 0.0


def peak_reserved_gib():
    return round(torch.cuda.max_memory_reserved() / 2**30, 3) if DEV == "cuda" else 0.0


def predicted_largest(points, cap):
    """The batch where the line through (micro-batch, reserved GiB) points crosses the cap, rounded down to a
    multiple of 8 (at least 8); None without two distinct micro-batches."""
    pts = sorted(dict(points).items())
    if len(pts) < 2:
        return None
    (m0, g0), (m1, g1) = pts[0], pts[-1]
    slope = (g1 - g0) / (m1 - m0)
    if slope <= 0:
        return None
    return max(8, int(m0 + (cap - g0) / slope) // 8 * 8)


def largest_under_cap(runs_one, lower, guess, probes):
    """The largest batch for which runs_one(batch) is True, to within 8 (to within 1 below 8), knowing that
    `lower` runs (0: none known), from `guess`: up by 8, 16, 32 ... until one fails, down to `lower` when the
    guess fails, then bisection; at most `probes` calls. Returns (the largest that ran, the smallest that
    failed or None)."""
    lo, hi, up = lower, None, 8
    bs = max(guess or lower + 8, lower + 1)
    for _ in range(probes):
        if runs_one(bs):
            lo = bs
        else:
            hi = bs
        if hi is not None and hi - lo <= (8 if hi > 16 else 1):
            break
        if hi is None:
            bs, up = lo + up, up * 2
        elif hi - lo > 16:
            bs = (lo + hi) // 2 // 8 * 8
            bs = bs if bs > lo else lo + 8
        else:
            bs = (lo + hi) // 2
    return lo, hi


def build_engine():
    opt = {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}
    if args.torch_adam:
        opt.update(torch_adam=True, fused=True)
    cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": opt},
           "zero_optimization": {"stage": 2, "contiguous_gradients": True, "overlap_comm": True,
                                 "reduce_bucket_size": int(2e8), "allgather_bucket_size": int(2e8),
                                 "offload_optimizer": {"device": "cpu", "pin_memory": True}},
           "steps_per_print": 10**9}
    deepspeed.init_distributed(dist_backend="gloo" if args.smoke else "nccl")
    torch.manual_seed(0)
    # Built on the device: the random init of 887 M parameters on the CPU made the engine take 68.9 s (call 2);
    # ds_nvme_anchor.py builds it so and has its ZeRO-2 + offload engine in 10-16 s.
    with torch.device(DEV):
        model = DebertaV2ForSequenceClassification(DebertaV2Config(**SHAPES))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    return engine


def batch_of(n):
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(5, SHAPES["vocab_size"], (n, SEQ), generator=g).to(DEV)
    return ids, torch.ones_like(ids), torch.randint(0, 2, (n,), generator=g).to(DEV)


def optimizer_step(engine, micro, accumulation):
    """One optimizer step of `accumulation` micro-batches of `micro`; its wall time in ms."""
    ids, mask, labels = batch_of(micro)
    sync()
    t = time.perf_counter()
    for _ in range(accumulation):
        loss = engine(input_ids=ids, attention_mask=mask, labels=labels).loss
        engine.backward(loss)
        engine.step()  # steps the optimizer at the accumulation boundary only
    sync()
    return (time.perf_counter() - t) * 1e3


def recover(engine):
    """After an out-of-memory step: drop what the failed step held, so the engine can go on."""
    try:
        engine.zero_grad()
    except Exception:
        pass
    gc.collect()
    if DEV == "cuda":
        torch.cuda.empty_cache()


def is_oom(e):
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def main():
    t = time.time()
    engine = build_engine()
    RES["engine_init_s"] = round(time.time() - t, 1)
    RES["optimizer"] = type(getattr(engine, "optimizer", None)).__name__
    say(f"engine ready in {RES['engine_init_s']} s ({RES['optimizer']})")
    dump()
    warmed = set()
    for b in (int(x) for x in args.batches.split(",")):
        if left() < 20:
            RES["global"][b] = "skipped: time budget"
            continue
        micro = min(b, 8 if args.smoke else args.max_micro)
        while b % micro:
            micro -= 1
        acc = b // micro
        engine.set_train_batch_size(acc)  # configured micro-batch 1: the accumulation becomes `acc`
        if DEV == "cuda":
            torch.cuda.empty_cache()  # the reserved peak is this batch's, not the cache of the one before
            torch.cuda.reset_peak_memory_stats()
        try:
            if micro not in warmed:  # a new micro-batch shape: one untimed step (allocations, kernels)
                optimizer_step(engine, micro, acc)
                warmed.add(micro)
            times = [optimizer_step(engine, micro, acc) for _ in range(args.steps)]
            RES["global"][b] = dict(micro=micro, accumulation=acc, step_ms=round(statistics.median(times), 1),
                                    steps_ms=[round(x, 1) for x in times], peak_gib=peak_gib(),
                                    peak_reserved_gib=peak_reserved_gib())
            say(f"ZeRO-2 + offload global batch {b} ({micro} x {acc}): {RES['global'][b]['step_ms']} ms, "
                f"peak {RES['global'][b]['peak_gib']} GiB")
        except Exception as e:
            RES["global"][b] = {"error": ("OOM: " if is_oom(e) else "") + str(e)[:300]}
            say(f"ZeRO-2 + offload global batch {b}: FAILED {str(e)[:200]}")
            recover(engine)
        dump()
    engine.set_train_batch_size(1)
    points = [(r["micro"], r["peak_reserved_gib"]) for r in RES["global"].values() if isinstance(r, dict) and
              "peak_reserved_gib" in r]
    lower = 0
    total = torch.cuda.get_device_properties(0).total_memory if DEV == "cuda" else 0
    for cap in (int(x) for x in args.caps.split(",")):
        if left() < 15:
            RES["caps"][cap] = "skipped: time budget"
            continue
        if DEV == "cuda":
            recover(engine)
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap * 2**30 / total), 0)
        runs = {}

        def runs_one(bs):
            if left() < 8:
                runs[bs] = {"error": "skipped: time budget"}
                return False
            if DEV == "cuda":
                torch.cuda.reset_peak_memory_stats()
            try:
                ms = optimizer_step(engine, bs, 1)
                runs[bs] = dict(step_ms=round(ms, 1), peak_gib=peak_gib(), peak_reserved_gib=peak_reserved_gib())
                return True
            except Exception as e:
                runs[bs] = {"error": ("OOM: " if is_oom(e) else "") + str(e)[:200]}
                recover(engine)
                return False

        guess = predicted_largest(points, cap) if DEV == "cuda" else 8
        largest, failed = largest_under_cap(runs_one, lower, guess, args.probes)
        lower = largest
        RES["caps"][cap] = dict(largest_batch=largest, smallest_failed=failed, guess=guess, runs=runs)
        say(f"largest ZeRO-2 + offload batch under {cap} GiB: {largest} (fails at {failed}; line's guess {guess}; "
            f"{runs.get(largest, {}).get('step_ms')} ms for the one step; {len(runs)} probes)")
        dump()
    if DEV == "cuda":
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
    RES["wall_s"] = round(time.time() - t0, 1)
    dump()


try:
    main()
except Exception as e:
    RES["errors"]["main"] = repr(e)[:1000]
    dump()
    say(f"FAILED {repr(e)[:300]}")
    raise
