#!/usr/bin/env python3
"""Per-layer disentangled attention, forward and backward: zerotrain's kernels against disentangled-flash's.

Issue 16 asks for the attention forward + backward per layer to beat disentangled-flash's Triton training
kernels at the same shapes (seq 128 and 512, bf16, dropout on), side by side in one run. Both sides time the
attention core alone — given Q, K, V [B, N, L, d], the projected relative tables and the [B, L] mask, the
context (forward) and the gradients of Q, K, V and both tables (backward); the projections around it are
ordinary GEMMs on both sides and not part of it:

  zerotrain  `zt_bench --only attention --batch B --seq L --json ...`: rows attention_forward and
             attention_backward (and the fused kernels' rows, off by default in training), each call timed
             alone by CUDA events after an L2 flush, median of --reps calls.
  df         disentangled-flash 1.1.1's TritonTrainingDisentangledSelfAttention (built from the xlarge
             DebertaV2Config, bf16, training mode, attention dropout 0.1): its autograd function
             `training_attention` on the module's own inputs (QKV projected and split into heads, the
             position plan, the active table rows projected and padded — the steps of the module's forward,
             which calls it the same way), forward and backward timed the same way (L2 flushed, CUDA events,
             median). This reaches into the module's private helpers, pinned to 1.1.1: a newer wheel may
             need this script updated, and says so by failing with the traceback.

On the GPU machine (the wheel from scripts/fetch_wheels.sh in .whl/, carried):
  python3 scripts/bench_attention_vs_df.py --zt-bench build-gpu/bin/zt_bench --shapes 40x128,8x512,16x512

Prints one table (us per layer) and a GOAL line per shape: zerotrain's forward + backward below df's.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, zipfile

HIDDEN, HEADS, BUCKETS, MAX_POSITIONS, DROPOUT = 1536, 24, 256, 512, 0.1  # DeBERTa-v2-xlarge


def df_site(wheel_dir):
    wheels = sorted(f for f in os.listdir(wheel_dir) if f.startswith("disentangled_flash-") and f.endswith(".whl"))
    if not wheels:
        sys.exit(f"no disentangled_flash-*.whl in {wheel_dir} (scripts/fetch_wheels.sh puts it in .whl/)")
    site = os.path.join(tempfile.gettempdir(), "zt-df-site", wheels[-1][:-4])
    if not os.path.isdir(os.path.join(site, "disentangled_flash")):
        with zipfile.ZipFile(os.path.join(wheel_dir, wheels[-1])) as z:
            z.extractall(site)
    return site


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

    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
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


def zt_rows(zt_bench, batch, seq, reps):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run = subprocess.run([zt_bench, "--only", "attention", "--batch", str(batch), "--seq", str(seq),
                              "--reps", str(reps), "--json", f.name], capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"zt_bench exit {run.returncode}: {run.stderr[-800:]}")
        doc = json.load(open(f.name))
    return {r["name"]: r.get("median_us") for r in doc["results"] if r["name"].startswith("attention")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zt-bench", default="build/bin/zt_bench")
    p.add_argument("--shapes", default="40x128,8x512,16x512", help="BxL pairs")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--df-wheel-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".whl"))
    p.add_argument("--worker", help=argparse.SUPPRESS)  # BxL: run df in this process, print JSON
    args = p.parse_args()
    if args.worker:
        batch, seq = map(int, args.worker.split("x"))
        print(json.dumps(df_worker(batch, seq, args.reps)))
        return 0
    env = dict(os.environ, PYTHONPATH=df_site(args.df_wheel_dir) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows, failed = [], False
    for shape in args.shapes.split(","):
        batch, seq = map(int, shape.split("x"))
        row = {"batch": batch, "seq": seq}
        try:
            row["zt"] = zt_rows(args.zt_bench, batch, seq, args.reps)
        except Exception as e:  # noqa: BLE001 - reported per shape
            row["zt_error"] = str(e)
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", shape, "--reps", str(args.reps)],
                             capture_output=True, text=True, env=env)
        if run.returncode == 0:
            row["df"] = json.loads(run.stdout.strip().splitlines()[-1])
        else:
            row["df_error"] = run.stderr[-1500:]
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\n{'shape':>8}  {'df fwd':>8} {'df bwd':>8} {'df sum':>8}  {'zt fwd':>8} {'zt bwd':>8} {'zt sum':>8}"
          f"  {'df/zt':>6}  {'flash fwd':>9} {'flash bwd':>9}   (us per layer, bf16, dropout {DROPOUT})")
    for row in rows:
        df, zt = row.get("df", {}), row.get("zt", {})
        df_sum = df["forward_us"] + df["backward_us"] if df else None
        zt_sum = zt["attention_forward"] + zt["attention_backward"] if zt.get("attention_forward") and zt.get("attention_backward") else None
        cell = lambda v: f"{v:8.1f}" if v else f"{'-':>8}"
        ratio = f"{df_sum / zt_sum:5.2f}x" if df_sum and zt_sum else "    -"
        print(f"{row['batch']:>3}x{row['seq']:<4}  {cell(df.get('forward_us'))} {cell(df.get('backward_us'))} {cell(df_sum)}"
              f"  {cell(zt.get('attention_forward'))} {cell(zt.get('attention_backward'))} {cell(zt_sum)}  {ratio}"
              f"  {cell(zt.get('attention_forward_flash')):>9} {cell(zt.get('attention_backward_flash')):>9}")
    for row in rows:
        df, zt = row.get("df"), row.get("zt", {})
        if not df or not zt.get("attention_forward") or not zt.get("attention_backward"):
            print(f"GOAL attention bs{row['batch']}/seq{row['seq']}: n/a ({row.get('df_error') or row.get('zt_error', 'missing')[:300]!r})")
            failed = True
            continue
        zt_sum = zt["attention_forward"] + zt["attention_backward"]
        df_sum = df["forward_us"] + df["backward_us"]
        verdict = "PASS" if zt_sum < df_sum else "FAIL"
        print(f"GOAL attention bs{row['batch']}/seq{row['seq']}: zerotrain fwd+bwd {zt_sum:.1f} us vs df {df_sum:.1f} us: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
