#!/usr/bin/env python3
"""Per-layer disentangled attention, forward and backward: zerotrain's kernels against disentangled-flash's
and FlashDeBERTa's.

Issue 16 asks for the attention forward + backward per layer to beat disentangled-flash's Triton training
kernels at the same shapes (seq 128 and 512, bf16, dropout on), side by side in one run; the long-document
issue adds FlashDeBERTa's kernels and 4x2048, 1x8192. Every side times the attention core alone — given Q, K, V [B, N, L, d], the projected relative tables and the [B, L] mask, the
context (forward) and the gradients of Q, K, V and both tables (backward); the projections around it are
ordinary GEMMs on both sides and not part of it:

  zerotrain  `zt_bench --only attention --batch B --seq L --json ...` (past 1024 tokens `--only flash`: the
             stored attention stops there): rows attention_forward/_backward (stored probabilities) and
             attention_forward_flash/_backward_flash, each call timed alone by CUDA events after an L2 flush,
             median of --reps calls. "zt" is the core the model runs at that length (automatic: stored up to
             1024 tokens, flash past it); the flash rows are shown beside it.
  df         disentangled-flash 1.1.1's TritonTrainingDisentangledSelfAttention (built from the xlarge
             DebertaV2Config, bf16, training mode, attention dropout 0.1): its autograd function
             `training_attention` on the module's own inputs (QKV projected and split into heads, the
             position plan, the active table rows projected and padded — the steps of the module's forward,
             which calls it the same way), forward and backward timed the same way (L2 flushed, CUDA events,
             median). This reaches into the module's private helpers, pinned to 1.1.1: a newer wheel may
             need this script updated, and says so by failing with the traceback.
  fdb        FlashDeBERTa 0.0.8's `flash_attention_with_disentangled` (what its FlashDisentangledSelfAttention
             calls with a full mask): Q, K, V [B, N, L, d] and the projected tables [1, N, 2*256, d] for
             c2p and p2c, buckets 256 over 512 positions; its c2p/p2c score GEMMs run inside, as in its
             training. Its kernels have no attention-probability dropout (the module drops nothing there).

On the GPU machine (the wheels from scripts/fetch_wheels.sh in .whl/, carried):
  python3 scripts/bench_attention_vs_df.py --zt-bench build-gpu/bin/zt_bench --shapes 40x128,8x512,16x512
  python3 scripts/bench_attention_vs_df.py --zt-bench build-gpu/bin/zt_bench --shapes 40x128,16x512,4x2048,1x8192

Prints one table (us per layer), a GOAL line per shape (zerotrain's forward + backward below df's) and a
CORE line per shape (zerotrain's against FlashDeBERTa's). Exit 1 when a side failed at a shape.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_torch import WHEELS, wheel_site  # noqa: E402

HIDDEN, HEADS, BUCKETS, MAX_POSITIONS, DROPOUT = 1536, 24, 256, 512, 0.1  # DeBERTa-v2-xlarge


STORED_MAX_SEQ = 1024  # kernels::kStoredAttentionMaxLength: past it zerotrain runs (and zt_bench times) flash only


def sites(wheel_dir, impl):
    """The unpacked wheels `impl` imports, for its worker's PYTHONPATH."""
    out = []
    for package in WHEELS[impl]:
        site = wheel_site(wheel_dir, package)
        if site is None:
            sys.exit(f"no {package}-*.whl in {wheel_dir} (scripts/fetch_wheels.sh puts it in .whl/)")
        out.append(site)
    return out


def time_core(forward, leaves, reps):
    """Median forward and backward microseconds of `forward()` over `leaves`: L2 flushed, CUDA events."""
    import torch
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    grad = torch.randn_like(forward())
    fwd_us, bwd_us = [], []
    for i in range(3 + reps):  # 3 warm-up calls (autotuning, if any, happens there)
        for t in leaves:
            t.grad = None
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = forward()
        end.record()
        flush.zero_()
        start_b, end_b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_b.record()
        out.backward(grad)
        end_b.record()
        torch.cuda.synchronize()
        if i >= 3:
            fwd_us.append(start.elapsed_time(end) * 1e3)
            bwd_us.append(start_b.elapsed_time(end_b) * 1e3)
    return {"forward_us": statistics.median(fwd_us), "backward_us": statistics.median(bwd_us)}


def fdb_worker(batch, seq, reps):
    """Median forward and backward microseconds of FlashDeBERTa's attention core at [batch, seq]."""
    import math
    import torch
    from flashdeberta.ops.flash_attention import flash_attention_with_disentangled

    torch.manual_seed(0)
    head = HIDDEN // HEADS
    new = lambda *shape: (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.5).requires_grad_(True)
    leaves = [new(batch, HEADS, seq, head) for _ in range(3)] + [new(1, HEADS, 2 * BUCKETS, head) for _ in range(2)]
    q, k, v, pos_key, pos_query = leaves
    return time_core(lambda: flash_attention_with_disentangled(
        q, k, v, None, pos_key, pos_query, False, 1.0 / math.sqrt(head * 3), BUCKETS, MAX_POSITIONS), leaves, reps)


def df_worker(batch, seq, reps):
    """Median forward and backward microseconds of df's training attention core at [batch, seq]."""
    import math
    import torch
    from transformers import DebertaV2Config
    from disentangled_flash import TritonTrainingDisentangledSelfAttention
    from disentangled_flash.position import pad_position_table
    from disentangled_flash.training._kernels import training_attention

    torch.manual_seed(0)
    device = torch.device("cuda")
    config = DebertaV2Config(hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=4 * HIDDEN,
                             relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=BUCKETS,
                             max_relative_positions=-1, max_position_embeddings=MAX_POSITIONS,
                             share_att_key=True, attention_probs_dropout_prob=DROPOUT, hidden_dropout_prob=DROPOUT)
    attn = TritonTrainingDisentangledSelfAttention(config).to(device=device, dtype=torch.bfloat16).train()
    x = torch.randn(batch, seq, HIDDEN, device=device, dtype=torch.bfloat16)
    rel = torch.randn(2 * BUCKETS, HIDDEN, device=device, dtype=torch.bfloat16)
    with torch.no_grad():  # the module's forward, up to its training_attention call
        mask, has_padding = attn._normalize_mask(torch.ones(batch, seq, device=device, dtype=torch.long), batch, seq)
        q, k, v = (attn._reshape_heads(t, batch, seq) for t in attn._project_qkv(x))
        plan = attn.position_plan_cache.compact(seq, device)
        pos_key, pos_query = attn._project_active_positions(rel, plan.active_slots)
        pos_key, pos_query = pad_position_table(pos_key), pad_position_table(pos_query)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, pos_key, pos_query)]
    options = {"hidden_states": x, "sequence_length": seq, "batch_heads": batch * HEADS,
               "active_slots": int(plan.active_slots.numel()), "has_c2p": True, "has_p2c": True,
               "layout": "padded", "uses_padding_mask": has_padding, "has_dropout": True}

    def forward():
        return attn._launch_with_profile_fallback(
            lambda fc, dqc, dkvc: training_attention(
                *leaves, plan.delta_to_local, mask, score_scale=1.0 / math.sqrt(attn.attention_head_size * 3),
                has_padding=has_padding, strict_fp32=attn.fp32_precision == "strict", forward_config=fc,
                dq_config=dqc, dkv_config=dkvc, autotune_candidates=attn.tuning.candidates, dropout_p=DROPOUT,
                gradient_band=plan.gradient_band),
            options)

    return time_core(forward, leaves, reps)


def zt_rows(zt_bench, batch, seq, reps):
    only = "flash" if seq > STORED_MAX_SEQ else "attention"
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run = subprocess.run([zt_bench, "--only", only, "--batch", str(batch), "--seq", str(seq),
                              "--reps", str(reps), "--json", f.name], capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"zt_bench exit {run.returncode}: {run.stderr[-800:]}")
        doc = json.load(open(f.name))
    return {r["name"]: r.get("median_us") for r in doc["results"] if r["name"].startswith("attention")}


def zt_core(row):
    """(forward, backward) microseconds of the core zerotrain's model runs at this length, or None."""
    zt = row.get("zt", {})
    suffix = "_flash" if row["seq"] > STORED_MAX_SEQ else ""
    f, b = zt.get("attention_forward" + suffix), zt.get("attention_backward" + suffix)
    return (f, b) if f and b else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zt-bench", default="build/bin/zt_bench")
    p.add_argument("--shapes", default="40x128,8x512,16x512", help="BxL pairs")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--impls", default="df,fdb", help="torch sides, of df,fdb")
    p.add_argument("--wheel-dir", "--df-wheel-dir", dest="wheel_dir",
                   default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".whl"))
    p.add_argument("--worker", help=argparse.SUPPRESS)  # BxL,...: --impls' one side at each shape, a JSON line each
    args = p.parse_args()
    impls = [i for i in args.impls.split(",") if i]
    if not impls or set(impls) - {"df", "fdb"}: p.error("--impls takes a subset of df,fdb")
    if args.worker:  # one JSON line per shape, in order (a failed shape's line holds its error)
        worker = df_worker if impls == ["df"] else fdb_worker
        status = 0
        for shape in args.worker.split(","):
            batch, seq = map(int, shape.split("x"))
            try:
                print(json.dumps(worker(batch, seq, args.reps)), flush=True)
            except Exception as e:  # noqa: BLE001 - reported per shape
                import traceback
                traceback.print_exc()
                print(json.dumps({"error": f"{type(e).__name__}: {e}"[:1500]}), flush=True)
                status = 1
        return status
    envs = {i: dict(os.environ, PYTHONPATH=os.pathsep.join(sites(args.wheel_dir, i) + [os.environ.get("PYTHONPATH", "")]))
            for i in impls}
    rows, failed = [], False
    shapes = args.shapes.split(",")
    for shape in shapes:
        batch, seq = map(int, shape.split("x"))
        row = {"batch": batch, "seq": seq}
        try:
            row["zt"] = zt_rows(args.zt_bench, batch, seq, args.reps)
        except Exception as e:  # noqa: BLE001 - reported per shape
            row["zt_error"] = str(e)
        rows.append(row)
    # Each torch side times every shape in one process: its start, torch import and module build once.
    for impl in impls:
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", ",".join(shapes), "--impls", impl,
                              "--reps", str(args.reps)], capture_output=True, text=True, env=envs[impl])
        got = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")]
        for n, row in enumerate(rows):
            if n < len(got) and "error" not in got[n]:
                row[impl] = got[n]
            else:
                row[impl + "_error"] = got[n]["error"] if n < len(got) else (run.stderr[-1500:] or f"exit {run.returncode}")
    for row in rows:
        print(json.dumps(row), flush=True)
    cell = lambda v: f"{v:8.1f}" if v else f"{'-':>8}"
    head = f"\n{'shape':>10}"
    for impl in impls: head += f"  {impl + ' fwd':>8} {impl + ' bwd':>8} {impl + ' sum':>8}"
    head += f"  {'zt fwd':>8} {'zt bwd':>8} {'zt sum':>8} {'zt core':>7}"
    for impl in impls: head += f"  {impl + '/zt':>7}"
    print(head + f"  {'flash fwd':>9} {'flash bwd':>9}   (us per layer, bf16, dropout {DROPOUT}; fdb: none)")
    for row in rows:
        line = f"{row['batch']:>4}x{row['seq']:<5}"
        sums = {}
        for impl in impls:
            r = row.get(impl, {})
            sums[impl] = r["forward_us"] + r["backward_us"] if r else None
            line += f"  {cell(r.get('forward_us'))} {cell(r.get('backward_us'))} {cell(sums[impl])}"
        core = zt_core(row)
        zt_sum = sum(core) if core else None
        path = "flash" if row["seq"] > STORED_MAX_SEQ else "stored"
        line += f"  {cell(core and core[0])} {cell(core and core[1])} {cell(zt_sum)} {path:>7}"
        for impl in impls:
            line += f"  {sums[impl] / zt_sum:6.2f}x" if sums[impl] and zt_sum else f"  {'-':>7}"
        zt = row.get("zt", {})
        print(line + f"  {cell(zt.get('attention_forward_flash')):>9} {cell(zt.get('attention_backward_flash')):>9}")
    for row in rows:
        core = zt_core(row)
        for impl, label in (("df", "GOAL attention"), ("fdb", "CORE vs FlashDeBERTa")):
            if impl not in impls: continue
            other = row.get(impl)
            if not other or not core:
                why = row.get(impl + "_error") or row.get("zt_error", "missing")
                print(f"{label} bs{row['batch']}/seq{row['seq']}: n/a ({why.strip().splitlines()[-1][:300]!r})")
                failed = True
                continue
            zt_sum, other_sum = sum(core), other["forward_us"] + other["backward_us"]
            verdict = ("PASS" if zt_sum < other_sum else "FAIL") if impl == "df" else f"{other_sum / zt_sum:.2f}x"
            print(f"{label} bs{row['batch']}/seq{row['seq']}: zerotrain fwd+bwd {zt_sum:.1f} us vs {impl} "
                  f"{other_sum:.1f} us: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
