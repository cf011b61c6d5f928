#!/usr/bin/env python3
"""HF DeBERTa-v2 under PyTorch (eager, torch.compile, disentangled-flash, FlashDeBERTa) and zerotrain, one
training step timed side by side.

Trains DebertaV2ForSequenceClassification (xlarge architecture, random init, 2 labels) with torch and the
zerotrain training step on the same config, then prints samples/s, step ms, peak GiB and zerotrain's ratios
to each torch run. The torch training loop follows shared/bench/torch_baseline.py: bf16/fp16 autocast
(GradScaler for fp16), fused AdamW (lr 2e-5), grad clip 1.0, random ids, full attention mask, median step
time after warmup; the model is built on the GPU it trains on (its random init runs there; each result
has the seconds its worker spent importing and building, import_s and build_s, before the first step).
`df` is HF eager with disentangled-flash's fused Triton attention (forward and backward, no L x L tensor
stored; `optimize_deberta_training(model.deberta, backend="triton")` before the optimizer), `compile-df`
the same under torch.compile; `fdb` is FlashDeBERTa 0.0.8's own DeBERTa-v2 model classes (knowledgator's
flash-style disentangled attention in Triton; no attention-probability dropout in its kernels), built as
shared/bench/torch_baseline.py --fdb builds it. Their wheels come from --wheel-dir (scripts/fetch_wheels.sh
puts disentangled_flash-1.1.1, flashdeberta-0.0.8 and einops in .whl/, git-ignored: carry it to the GPU
machine). The last lines check the performance goals (GOALS: the speed ratio to torch.compile per batch and
sequence length, and where stated a peak no higher than disentangled-flash's), each PASS, FAIL or n/a when
this run does not cover it.

--long-goals runs the long-document issue's shapes (40x128, 16x512, 4x2048, 1x8192, or the subset --shapes names) with zerotrain,
FlashDeBERTa, disentangled-flash and torch.compile (compile at 128 and 512 only: HF eager runs out of memory
at 4x2048 on 80 GB, and compile with it; compile runs last, so a call cut short keeps the rest) and checks
LONG_GOALS: 4x2048 and 1x8192 >= 1.5x FlashDeBERTa's samples/s at a peak below both torch packages';
16x512 and 40x128 >= 2x torch.compile's at a peak no higher than disentangled-flash's; and at 2048 and
8192 the estimator's planned device total (bench_train_step's estimate_gib.total) within 5 % of the measured
peak (peak_gib).

  python3 scripts/bench_vs_torch.py --zt-bin build/bin/bench_train_step               # bs 40, seq 128
  python3 scripts/bench_vs_torch.py --zt-bin build/bin/bench_train_step --batches 40,8,64 --impls eager,compile,df,zerotrain
  python3 scripts/bench_vs_torch.py --zt-bin build/bin/bench_train_step --seq 512 --batches 8,16
  python3 scripts/bench_vs_torch.py --impls zerotrain --layers 2 --json-out /tmp/zt.json
  python3 scripts/bench_vs_torch.py --zt-bin build/bin/bench_train_step --goals --json-out goals.json --resume
  python3 scripts/bench_vs_torch.py --zt-bin build/bin/bench_train_step --long-goals --steps 5 --json-out long.json

--goals runs every goal's shape (seq 128 bs 40/8/64, seq 512 bs 8/16) with compile, df and zerotrain: ~15
minutes, most of it torch.compile, longer than one device command may run. With --resume the same command
run again keeps the results already in --json-out (when the tree, GPU, library versions and settings match)
and runs the rest, so the whole table comes from one file of one commit on one GPU model. SIGTERM (an outer
`timeout`) ends the running job's process group too.

Every zerotrain and torch.compile (impl, batch, dtype, seq) runs in a subprocess of its own, with a fresh CUDA
context and its own peak; eager, df and fdb train all their shapes of a dtype in one worker process, one
after another (one model and optimizer, the peak reset before each shape: the same peak as a fresh process,
whose peak comes once the AdamW state exists; ~20 s of start, import and build saved a shape). Torch runs
re-invoke this file with the hidden --worker flag (--batch B --seq S, or --shapes B1xS1,B2xS2 printing a
JSON line per shape in order), zerotrain runs
  <zt-bin> --batch B --seq S --dtype bf16|fp16|fp32 --steps N --dropout P [--layers L]
whose last JSON line on stdout is the result (extra keys pass through to --json-out). A run that fails, runs
out of memory or passes --timeout-s (per shape of its process) is recorded with an "error" and the sweep goes
on; a shared process records its shapes' errors one by one and goes on with the next. Torch runs do
--steps timed steps after WARMUP steps (torch.compile compiles in step 0, reported as first_step_s); the
binary gets --steps unchanged and does its own warmup. Torch is imported only in workers, so
`--impls zerotrain` needs none. The bs40/seq128/bf16 shape runs first, and --json-out is rewritten after every run,
so a sweep cut short still leaves the verdict's numbers. The exit status is 0 whatever the verdict.
A torch.compile run takes a few minutes (compile included); split a full sweep (18 runs) across invocations
where one command's time is capped. --verdict-from prints the table and the goals again from the JSON such
runs wrote (nothing runs; no GPU needed), e.g. of a sweep cut short before its last lines:

  python3 scripts/bench_vs_torch.py --verdict-from vs_torch.json,vs_torch_bs8.json
"""
import argparse, json, os, shlex, shutil, signal, statistics, subprocess, sys, time

XLARGE = dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
              intermediate_size=6144, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=0,
              relative_attention=True, max_relative_positions=-1, position_buckets=256,
              norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
              layer_norm_eps=1e-7, conv_kernel_size=3, conv_act="gelu", position_biased_input=False,
              pooler_hidden_size=1536, pooler_hidden_act="gelu", num_labels=2)
LABELS = {"eager": "torch-eager", "compile": "torch-compile", "df": "torch-eager+df",
          "compile-df": "torch-compile+df", "fdb": "torch-eager+fdb", "zerotrain": "zerotrain"}
WARMUP = {"eager": 3, "compile": 5, "df": 3, "compile-df": 5, "fdb": 3}  # untimed; compile's step 0 compiles
# The wheels (in --wheel-dir) each torch impl imports beyond torch and transformers.
WHEELS = {"df": ["disentangled_flash"], "compile-df": ["disentangled_flash"], "fdb": ["flashdeberta", "einops"]}
TARGET = dict(batch=40, dtype="bf16", seq=128)  # runs first: the headline pair
# The performance issue's goals (bf16): zerotrain's samples/s over torch.compile's at (seq, batch), and
# whether its peak must stay below HF eager + disentangled-flash's (the lowest-memory PyTorch).
GOALS = [dict(seq=128, batch=40, min_ratio=1.5, peak_below=["df"]), dict(seq=128, batch=8, min_ratio=3.0),
         dict(seq=128, batch=64, min_ratio=1.4), dict(seq=512, batch=8, min_ratio=1.5, peak_below=["df"]),
         dict(seq=512, batch=16, min_ratio=1.5, peak_below=["df"])]
# The long-document issue's goals (xlarge, bf16, dropout 0.1): zerotrain's samples/s over `versus`'s at
# (seq, batch), its peak strictly below each of peak_below's or at most each of peak_at_most's, and where
# estimate_within is set, the estimator's plan within that fraction of zerotrain's measured peak.
LONG_GOALS = [dict(seq=2048, batch=4, min_ratio=1.5, versus="fdb", peak_below=["fdb", "df"]),
              dict(seq=8192, batch=1, min_ratio=1.5, versus="fdb", peak_below=["fdb", "df"]),
              dict(seq=512, batch=16, min_ratio=2.0, peak_at_most=["df"]),
              dict(seq=128, batch=40, min_ratio=2.0, peak_at_most=["df"]),
              dict(seq=2048, batch=4, estimate_within=0.05), dict(seq=8192, batch=1, estimate_within=0.05)]
# Torch impls that train several shapes one after another in one worker process (one model, one optimizer;
# each shape's peak from a reset). Not torch.compile's: a second shape in a process makes dynamo recompile with
# symbolic sizes (automatic dynamic shapes), another program than a fresh process compiles, and its minutes of
# compiling dwarf the ~20 s a process costs.
SHARED_PROCESS = ("eager", "df", "fdb")
LONG_IMPLS = ["zerotrain", "fdb", "df", "compile"]
LONG_COMPILE_MAX_SEQ = 512  # HF eager (and compile) run out of memory at 4x2048 on 80 GB


# ---------------------------------------------------------------- worker side (torch imported here only)
def worker_info():
    import torch, transformers
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    return dict(gpu=gpu, torch=torch.__version__, transformers=transformers.__version__,
                cuda=torch.version.cuda)


def build_model(impl, cfg):
    """HF's DebertaV2ForSequenceClassification, or FlashDeBERTa's (fdb) built as torch_baseline.py --fdb does."""
    if impl == "fdb":
        from flashdeberta import FlashDebertaV2ForSequenceClassification
        from flashdeberta.model import DebertaV2Config as FdbConfig
        config = FdbConfig(**cfg, _attn_implementation="eager")
        config._attn_implementation_autoset = False
        return FlashDebertaV2ForSequenceClassification(config)
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification
    return DebertaV2ForSequenceClassification(DebertaV2Config(**cfg))


def worker_trainer(args):
    """The model, optimizer and loop of torch_baseline.train_steps for one (impl, dtype), built once; returns
    train(batch, seq) -> the result dict of that shape, called for one shape after another in this process."""
    t_import = time.perf_counter()
    import torch, transformers
    t_build = time.perf_counter()
    dev = args.worker_device
    cuda = dev == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(0)
    cfg = dict(XLARGE)
    if args.layers: cfg["num_hidden_layers"] = args.layers
    cfg["hidden_dropout_prob"] = cfg["attention_probs_dropout_prob"] = cfg["pooler_dropout"] = args.dropout
    # Built where it trains: the random init of ~887 M parameters runs on that device (on the CPU, torch's
    # normal_ is one thread: ~10 s a run, spent before any timing, in each of a sweep's torch runs).
    with torch.device(dev):
        model = build_model(args.worker, cfg).train()
    nparam = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0, fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    scaler = torch.amp.GradScaler(dev, enabled=(dtype == torch.float16))
    if args.worker in ("df", "compile-df"):  # fused attention modules swapped in before the optimizer exists
        from disentangled_flash import optimize_deberta_training
        optimize_deberta_training(model.deberta, backend="triton")

    fwd = torch.compile(model) if args.worker in ("compile", "compile-df") else model
    sync()
    setup = dict(import_s=round(t_build - t_import, 2), build_s=round(time.perf_counter() - t_build, 2))

    def train(batch, seq):
        # A shape after another in this process: a failed shape's gradients and cached blocks go first. The
        # peak counts from here, with the weights (and after the first shape the AdamW state) already held:
        # what a fresh process holds from its first optimizer step on, where its peak is.
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(5, 128000, (batch, seq), device=dev)
        mask = torch.ones_like(ids)
        labels = torch.randint(0, 2, (batch,), device=dev)
        sync()
        warmup = WARMUP[args.worker]
        times = []
        window = None
        for i in range(warmup + args.steps):
            each = not args.back_to_back or i < warmup  # --back-to-back: one sync around the timed window
            if each or i == warmup: sync()
            t = time.perf_counter()
            if i == warmup: window = t
            with torch.autocast(dev, dtype=dtype, enabled=(dtype != torch.float32)):
                loss = fwd(input_ids=ids, attention_mask=mask, labels=labels).loss
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)
            if each: sync()
            times.append(time.perf_counter() - t)
        step = statistics.median(times[warmup:])
        if args.back_to_back:
            sync(); step = (time.perf_counter() - window) / args.steps
        flops = 6 * (nparam - XLARGE["vocab_size"] * XLARGE["hidden_size"]) * batch * seq
        peak = torch.cuda.max_memory_allocated() if cuda else 0
        return dict(impl=LABELS[args.worker], dtype=args.dtype, batch=batch, seq=seq, params=nparam,
                    first_step_s=round(times[0], 3), step_ms=round(step * 1e3, 2),
                    samples_per_s=round(batch / step, 1), approx_tflops=round(flops / step / 1e12, 1),
                    peak_gib=round(peak / 2**30, 2), warmup_steps=warmup, timed_steps=args.steps,
                    final_loss=round(loss.item(), 4), torch=torch.__version__,
                    transformers=transformers.__version__, **setup)

    return train


def error_line(e):
    """One JSON line for a failed run (the traceback to stderr)."""
    import traceback
    traceback.print_exc()
    text = f"{type(e).__name__}: {e}"
    oom = type(e).__name__ == "OutOfMemoryError" or "out of memory" in text.lower()
    return json.dumps(dict(error="OOM" if oom else text.strip().splitlines()[0][:300]))


def worker_main(args, shapes):
    """One JSON line per (batch, seq) of shapes, in order, whatever happened."""
    if args.worker == "info":
        try:
            print(json.dumps(worker_info()), flush=True)
            return 0
        except Exception as e:
            print(error_line(e), flush=True)
            return 1
    try:
        train = worker_trainer(args)
    except Exception as e:
        line = error_line(e)
        for _ in shapes: print(line, flush=True)
        return 1
    status = 0
    for batch, seq in shapes:
        try:
            line = json.dumps(train(batch, seq))
        except Exception as e:
            line, status = error_line(e), 1
        print(line, flush=True)
    return status


# ---------------------------------------------------------------- driver side
def run_child(cmd, timeout_s, env=None):
    """Runs cmd in its own process group; returns (stdout, stderr, returncode, timed_out)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout_s)
        return out, err, p.returncode, False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # also ends inductor's compile workers
        out, err = p.communicate()
        return out, err, p.returncode, True
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        raise


def last_json(text):
    for line in reversed(text.splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict): return obj
    return None


def wheel_site(wheel_dir, package):
    """A directory holding `package` (its newest wheel in wheel_dir unpacked once: pure Python), or None."""
    wheels = sorted(f for f in os.listdir(wheel_dir) if f.startswith(package + "-")
                    and f.endswith(".whl")) if os.path.isdir(wheel_dir) else []
    if not wheels: return None
    site = os.path.join("/tmp", "zt-wheel-site", wheels[-1][:-4])
    if not os.path.isdir(os.path.join(site, package)):
        import zipfile
        zipfile.ZipFile(os.path.join(wheel_dir, wheels[-1])).extractall(site)
    return site


def wheel_sites(args):
    """{impl: [site, ...]} for the torch impls of this run that need wheels; exits naming a missing one."""
    sites = {}
    for impl in args.impls:
        for package in WHEELS.get(impl, []):
            site = wheel_site(args.wheel_dir, package)
            if site is None:
                sys.exit(f"--impls {impl} needs {package}-*.whl in {args.wheel_dir} (scripts/fetch_wheels.sh "
                         "downloads it; carry .whl to the GPU machine)")
            sites.setdefault(impl, []).append(site)
    return sites


def child_env(args, impl):
    env = dict(os.environ)
    if args.wheel_sites.get(impl):
        env["PYTHONPATH"] = os.pathsep.join(args.wheel_sites[impl] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def child_cmd(args, impl, dtype, shapes):
    """The command of one child: zerotrain's binary or a torch worker at shapes [(batch, seq)] (several only
    for SHARED_PROCESS impls)."""
    (batch, seq), = shapes if len(shapes) == 1 else [(None, None)]
    where = ["--batch", str(batch), "--seq", str(seq)] if batch else \
        ["--shapes", ",".join(f"{b}x{q}" for b, q in shapes)]
    common = where + ["--dtype", dtype, "--steps", str(args.steps), "--dropout", str(args.dropout)] + \
        (["--layers", str(args.layers)] if args.layers else [])
    if impl == "zerotrain":
        return [args.zt_bin] + common + (["--back_to_back"] if args.back_to_back else []) + shlex.split(args.zt_args)
    if args.back_to_back: common.append("--back-to-back")
    return [sys.executable, os.path.abspath(__file__), "--worker", impl] + common


def measure(args, impl, dtype, shapes):
    """Runs one child (child_cmd) and returns a record per (batch, seq) of shapes: the child's JSON lines in
    order when it ran several, its last JSON line when one."""
    cmd = child_cmd(args, impl, dtype, shapes)
    recs = [dict(impl=LABELS[impl], batch=batch, dtype=dtype, seq=seq) for batch, seq in shapes]
    t0 = time.time()
    try:
        out, err, rc, timed_out = run_child(cmd, args.timeout_s * len(shapes), child_env(args, impl))
    except OSError as e:  # binary missing or not executable
        return [dict(rec, error=f"cannot run {cmd[0]}: {e.strerror}") for rec in recs]
    wall = round(time.time() - t0, 1)
    if len(shapes) == 1:
        lines = [last_json(out) or {}]
    else:
        lines = [obj for obj in map(last_json, out.splitlines()) if obj is not None]
    for n, rec in enumerate(recs):
        batch, seq = rec["batch"], rec["seq"]
        rec["wall_s"] = wall
        if len(shapes) > 1: rec["shapes_in_process"] = len(shapes)
        got = lines[n] if n < len(lines) else {}
        for key in ("batch", "seq"):  # a binary that ignored a flag measured something else
            if key in got and got[key] != rec[key]:
                got.setdefault("error", f"reported {key}={got[key]}, asked for {rec[key]}")
                got[f"reported_{key}"] = got[key]
        if got.get("dtype", dtype) != dtype:  # a warning only: the binary may spell it differently
            got.setdefault("warning", f"reported dtype {got['dtype']}")
        rec.update({k: v for k, v in got.items() if k not in ("impl", "batch", "seq", "dtype")})
        if timed_out and "samples_per_s" not in rec:
            rec["error"] = f"timeout after {args.timeout_s * len(shapes)}s"
        elif "error" not in rec and not isinstance(rec.get("samples_per_s"), (int, float)):
            tail = [l for l in err.strip().splitlines() if l.strip()]
            if "out of memory" in err.lower(): rec["error"] = "OOM"
            elif rc < 0: rec["error"] = f"killed by signal {-rc}"
            else: rec["error"] = f"exit {rc}: " + (tail[-1][:300] if tail else "no JSON result on stdout")
        elif rc != 0 and "error" not in rec:
            rec["warning"] = f"exit {rc} after printing its result"
        if "error" in rec and err.strip():
            lines_ = [f"# stderr tail of {rec['impl']} bs{batch} seq{seq} {dtype}:"] + err.strip().splitlines()[-15:]
            print("\n  | ".join(lines_), file=sys.stderr, flush=True)
    return recs


def processes(jobs):
    """The child processes of jobs [(impl, batch, dtype, seq)], in order: [(impl, dtype, [(batch, seq), ...])].
    A SHARED_PROCESS impl runs all its shapes of a dtype in one process, where its first job stood (each
    process pays ~20 s of start, torch import and model build before its first step); the others one shape
    a process."""
    runs, shared = [], {}
    for impl, batch, dtype, seq in jobs:
        if impl in SHARED_PROCESS and (impl, dtype) in shared:
            shared[(impl, dtype)].append((batch, seq))
            continue
        runs.append((impl, dtype, [(batch, seq)]))
        if impl in SHARED_PROCESS: shared[(impl, dtype)] = runs[-1][2]
    return runs


def ratio(num, den, key):
    a, b = (num or {}).get(key), (den or {}).get(key)
    ok = lambda r: r and "error" not in r and isinstance(r.get(key), (int, float))
    return a / b if ok(num) and ok(den) and b > 0 else None


def speed_ratio(num, den):
    """num's samples/s over den's from batch / step_ms: samples_per_s is rounded to 0.1, which at 1 x 8192
    (1.4 against 0.9) made 1.48x read 1.56x."""
    ok = lambda r: r and "error" not in r and all(isinstance(r.get(k), (int, float)) and r[k] > 0
                                                 for k in ("batch", "step_ms"))
    return (num["batch"] / num["step_ms"]) / (den["batch"] / den["step_ms"]) if ok(num) and ok(den) else None


def fmt(x, spec, suffix=""):
    return "-" if x is None else format(x, spec) + suffix


def table(args, results):
    """One row per shape (seq, batch) and dtype: per impl samples/s, step ms, peak GiB; then zerotrain's ratios.
    results: {(impl, batch, dtype, seq): record}."""
    head = ["seq", "batch", "dtype"]
    for impl in args.impls: head += [f"{impl} samples/s", "step ms", "GiB"]
    others = [i for i in ("compile", "fdb", "df", "eager") if i in args.impls and "zerotrain" in args.impls]
    for o in others: head += [f"zt/{o} samples/s", "peak"]
    rows, errors = [], []
    for dtype in args.dtypes:
        for seq, batch in sorted(args.shapes):
            row = [str(seq), str(batch), dtype]
            for impl in args.impls:
                r = results.get((impl, batch, dtype, seq))
                if r is None: row += ["not run", "-", "-"]
                elif "error" in r:
                    row += [r["error"][:20], "-", "-"]
                    errors.append(f"{LABELS[impl]} bs{batch} seq{seq} {dtype}: {r['error']}")
                else: row += [fmt(r.get("samples_per_s"), ".1f"), fmt(r.get("step_ms"), ".1f"),
                              fmt(r.get("peak_gib"), ".2f")]
                if r and "warning" in r:
                    errors.append(f"{LABELS[impl]} bs{batch} seq{seq} {dtype}: warning: {r['warning']}")
            zt = results.get(("zerotrain", batch, dtype, seq))
            for o in others:
                other = results.get((o, batch, dtype, seq))
                row += [fmt(speed_ratio(zt, other), ".2f", "x"),
                        fmt(ratio(zt, other, "peak_gib"), ".2f", "x")]
            rows.append(row)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    for r in [head] + rows: print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    for e in errors: print(f"note: {e}")


def goal_name(g):
    if "estimate_within" in g:
        return (f"GOAL bs{g['batch']}/seq{g['seq']}/bf16: estimator's plan within "
                f"{g['estimate_within']:.0%} of the measured peak")
    versus = g.get("versus", "compile")
    name = f"GOAL bs{g['batch']}/seq{g['seq']}/bf16: >= {g['min_ratio']}x {LABELS[versus]}"
    if g.get("peak_below"): name += ", peak below " + " and ".join(LABELS[i] for i in g["peak_below"])
    if g.get("peak_at_most"): name += ", peak at most " + " and ".join(LABELS[i] for i in g["peak_at_most"])
    return name


def goal_verdict(g, got):
    """(result, text, speed ratio) of one goal from its impls' records (each present and error-free)."""
    zt = got["zerotrain"]
    if "estimate_within" in g:
        plan, peak = (zt.get("estimate_gib") or {}).get("total"), zt.get("peak_gib")
        if not isinstance(plan, (int, float)) or not isinstance(peak, (int, float)) or peak <= 0:
            return "FAIL", "no estimate_gib.total or peak_gib in zerotrain's result", None
        off = plan / peak - 1
        return ("PASS" if abs(off) <= g["estimate_within"] else "FAIL"), \
            f"plan {plan:.2f} vs peak {peak:.2f} GiB ({off:+.1%})", None
    sp = speed_ratio(zt, got[g.get("versus", "compile")])
    ok = sp is not None and sp >= g["min_ratio"]
    text = f"{fmt(sp, '.3f')}x"
    zp = zt.get("peak_gib")
    for key, better in (("peak_below", lambda a, b: a < b), ("peak_at_most", lambda a, b: a <= b)):
        for other in g.get(key, []):
            op = got[other].get("peak_gib")
            ok = ok and zp is not None and op is not None and better(zp, op)
            text += f", peak {fmt(zp, '.2f')} vs {LABELS[other]} {fmt(op, '.2f')} GiB"
    return ("PASS" if ok else "FAIL"), text, sp


def goals(args, results, goal_list=None):
    """One line per goal of goal_list (GOALS, or LONG_GOALS with --long-goals): PASS, FAIL, or n/a where this
    run does not measure it."""
    if goal_list is None: goal_list = LONG_GOALS if args.long_goals else GOALS
    lines, summary = [], []
    for g in goal_list:
        name = goal_name(g)
        needed = {"zerotrain"} if "estimate_within" in g else \
            {"zerotrain", g.get("versus", "compile")} | set(g.get("peak_below", [])) | set(g.get("peak_at_most", []))
        if (g["seq"], g["batch"]) not in args.shapes or args.layers not in (0, 24) \
                or "bf16" not in args.dtypes or not needed <= set(args.impls):
            lines.append(f"{name}: n/a (not in this run)"); summary.append(dict(goal=name, result="n/a")); continue
        got = {i: results.get((i, g["batch"], "bf16", g["seq"])) for i in needed}
        missing = [LABELS[i] + (": " + r["error"] if r else ": not run") for i, r in got.items()
                   if r is None or "error" in r]
        if missing:
            zt_failed = got["zerotrain"] is not None and "error" in got["zerotrain"]  # not run yet: n/a
            res = "FAIL" if zt_failed else "n/a"
            lines.append(f"{name}: {res} ({'; '.join(missing)})"); summary.append(dict(goal=name, result=res))
            continue
        res, text, sp = goal_verdict(g, got)
        lines.append(f"{name}: {text}: {res}")
        summary.append(dict(goal=name, result=res, samples_ratio=sp))
    return dict(goals=summary, line="\n".join(lines))


def header(args):
    out, _, _, _ = run_child([sys.executable, os.path.abspath(__file__), "--worker", "info"], 300)
    info = last_json(out) or {}
    if "gpu" not in info:
        smi, _, rc, _ = run_child(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], 30) \
            if shutil.which("nvidia-smi") else ("", "", 1, False)
        info = dict(gpu=smi.strip().splitlines()[0] if rc == 0 and smi.strip() else "unknown",
                    torch="not importable", transformers="not importable")
    git = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "describe", "--always",
                          "--dirty"], capture_output=True, text=True).stdout.strip() or "unknown"
    info.update(command=shlex.join([sys.executable] + sys.argv), zerotrain_git=git)
    for k in ("gpu", "torch", "transformers", "cuda", "zerotrain_git", "command"):
        if k in info: print(f"# {k}: {info[k]}", flush=True)
    return info


def write_json(args, meta, records, final=None):
    if not args.json_out: return
    tmp = args.json_out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(meta=meta, results=records, verdict=final), f, indent=1)
    os.replace(tmp, args.json_out)


def results_of(path):
    """{(impl, batch, dtype, seq): record} and the meta of one --json-out file."""
    impl_of = {label: impl for impl, label in LABELS.items()}
    with open(path) as f:
        doc = json.load(f)
    results = {}
    for rec in doc.get("results") or []:
        impl = impl_of.get(rec.get("impl"))
        if impl is None or any(k not in rec for k in ("batch", "dtype", "seq")): continue
        results.setdefault((impl, rec["batch"], rec["dtype"], rec["seq"]), rec)
    return results, doc.get("meta") or {}


def verdict_from(args):
    """The table and the goals from --json-out files: each (impl, batch, dtype, seq) from the first file having
    it. Files of different sequence lengths join (the goals name theirs)."""
    results = {}
    for path in args.verdict_from:
        for key, rec in results_of(path)[0].items():
            results.setdefault(key, rec)
            if key[0] == "zerotrain" and rec.get("layers") not in (None, 24): args.layers = rec["layers"]
    if not results: sys.exit(f"--verdict-from: no results in {', '.join(args.verdict_from)}")
    args.impls = [i for i in LABELS if any(k[0] == i for k in results)]
    args.shapes = sorted({(k[3], k[1]) for k in results})
    args.dtypes = [d for d in ("bf16", "fp16", "fp32") if any(k[2] == d for k in results)]
    print(f"# verdict from {', '.join(args.verdict_from)}")
    table(args, results)
    print(goals(args, results)["line"], flush=True)
    return 0


def resumed(args, meta):
    """--resume: the error-free records of --json-out when it was written by the same zerotrain commit
    (`git describe --dirty`: uncommitted changes are not told apart), on the same GPU model, with the same
    torch and transformers, timing settings, binary and ZT_* switches; a sweep cut short goes on where it
    stopped."""
    if not args.resume or not os.path.exists(args.json_out): return {}
    results, old = results_of(args.json_out)
    for key in ("gpu", "torch", "transformers", "zerotrain_git", "settings"):
        if old.get(key) != meta.get(key):
            sys.exit(f"--resume: {args.json_out} has {key} {old.get(key)!r}, this run {meta.get(key)!r}: "
                     "start a new file (another --json-out, or remove this one)")
    return {k: r for k, r in results.items() if "error" not in r}


def csv(kind):
    return lambda s: list(dict.fromkeys(kind(x.strip()) for x in s.split(",") if x.strip()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--zt-bin", default="build/tools/bench_train_step", help="zerotrain benchmark binary")
    p.add_argument("--batches", type=csv(int), default=[40], help="comma-separated batch sizes")
    p.add_argument("--dtypes", type=csv(str), default=["bf16"], help="comma-separated, of bf16,fp16,fp32")
    p.add_argument("--impls", type=csv(str), default=["eager", "compile", "zerotrain"],
                   help="comma-separated, of " + ",".join(LABELS))
    p.add_argument("--wheel-dir", "--df-wheel-dir", dest="wheel_dir",
                   default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".whl"),
                   help="where the disentangled_flash, flashdeberta and einops wheels are (scripts/fetch_wheels.sh)")
    p.add_argument("--steps", type=int, default=12, help="timed steps (torch adds warmup steps before)")
    p.add_argument("--seq", type=csv(int), default=[128], help="comma-separated sequence lengths (each with --batches)")
    p.add_argument("--shapes", type=csv(str), default=[],
                   help="comma-separated BATCHxSEQ (e.g. 40x128,8x512) instead of --batches x --seq")
    p.add_argument("--goals", action="store_true", help="the goals' shapes (" +
                   ",".join(f"{g['batch']}x{g['seq']}" for g in GOALS) + "), impls compile,df,zerotrain")
    p.add_argument("--long-goals", action="store_true", help="the long-document goals' shapes (" +
                   ",".join(sorted({f"{g['batch']}x{g['seq']}" for g in LONG_GOALS}, key=lambda t: int(t.split("x")[1])))
                   + "), impls " + ",".join(LONG_IMPLS) + f" (compile at seq <= {LONG_COMPILE_MAX_SEQ} only), "
                   "compile last; with --verdict-from: these goals")
    p.add_argument("--resume", action="store_true",
                   help="keep the error-free results already in --json-out (same tree, GPU and settings) and "
                        "run the rest: a sweep longer than one command's time limit, in one file")
    p.add_argument("--layers", type=int, default=0, help="override num_hidden_layers (24)")
    p.add_argument("--dropout", type=float, default=0.1, help="hidden, attention and pooler dropout")
    p.add_argument("--json-out", default="", help="write meta, every result and the verdict here")
    p.add_argument("--verdict-from", type=csv(str), default=[],
                   help="comma-separated --json-out files: print their table and goals, run nothing")
    p.add_argument("--back-to-back", action="store_true",
                   help="every implementation: no device sync between the timed steps, the window's mean "
                        "(what training runs; lets a step's tail overlap the next step's start)")
    p.add_argument("--zt-args", default="", help="extra flags for the zerotrain binary, e.g. --overlap_optimizer")
    p.add_argument("--timeout-s", type=int, default=480, help="limit for each run, seconds")
    p.add_argument("--worker", choices=["info", "eager", "compile", "df", "compile-df", "fdb"], help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=40, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="bf16", help=argparse.SUPPRESS)
    p.add_argument("--worker-device", default="cuda", help=argparse.SUPPRESS)  # "cpu" to test the loop
    args = p.parse_args()
    if args.worker:
        args.seq = args.seq[0]  # the driver passes one, or --shapes
        shapes = [tuple(int(v) for v in x.split("x")) for x in args.shapes] or [(args.batch, args.seq)]
        if len(shapes) > 1 and args.worker not in SHARED_PROCESS:
            p.error(f"--worker {args.worker} runs one shape a process")
        return worker_main(args, shapes)
    if args.verdict_from:
        if args.resume or args.goals or args.shapes: p.error("--verdict-from runs nothing: no --resume, --goals, --shapes")
        return verdict_from(args)
    if args.goals and args.long_goals: p.error("--goals and --long-goals: one or the other")
    if args.long_goals:
        long_shapes = sorted({f"{g['batch']}x{g['seq']}" for g in LONG_GOALS}, key=lambda t: int(t.split("x")[1]))
        if set(args.shapes) - set(long_shapes):
            p.error(f"--long-goals --shapes takes a subset of {','.join(long_shapes)}, got {','.join(args.shapes)}")
        args.shapes = args.shapes or long_shapes
        if args.impls == p.get_default("impls"): args.impls = list(LONG_IMPLS)
    if (args.goals or args.shapes) and (args.batches != p.get_default("batches") or args.seq != p.get_default("seq")):
        p.error("--goals, --long-goals and --shapes name the shapes: no --batches or --seq with them")
    if args.goals:
        if args.shapes: p.error("--goals and --shapes: one or the other")
        args.shapes = [f"{g['batch']}x{g['seq']}" for g in GOALS]
        if args.impls == p.get_default("impls"): args.impls = ["compile", "df", "zerotrain"]
    parts = [x.split("x") for x in args.shapes]
    if any(len(q) != 2 or not all(v.isdigit() and int(v) > 0 for v in q) for q in parts):
        p.error(f"--shapes takes BATCHxSEQ items, got {','.join(args.shapes)}")
    args.shapes = [(int(seq), int(b)) for b, seq in parts] or [(seq, b) for seq in args.seq for b in args.batches]
    if args.resume and not args.json_out: p.error("--resume needs --json-out")
    for name, got, allowed in (("--impls", args.impls, LABELS), ("--dtypes", args.dtypes, ("bf16", "fp16", "fp32"))):
        if not got or set(got) - set(allowed): p.error(f"{name} takes a comma-separated subset of {list(allowed)}")
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # children inherit it; NVLink multicast stays off
    # A job runs in a process group of its own (run_child); SIGTERM (an outer `timeout`) must end it too, or a
    # torch.compile worker goes on using the GPU beside whatever runs next.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"bench_vs_torch: stopped by signal {signum}"))
    args.wheel_sites = wheel_sites(args)

    meta = header(args)
    meta["settings"] = dict(steps=args.steps, dropout=args.dropout, layers=args.layers,
                            back_to_back=args.back_to_back, zt_args=args.zt_args,
                            zt_bin=os.path.realpath(args.zt_bin),
                            zt_switches={k: v for k, v in sorted(os.environ.items()) if k.startswith("ZT_")})
    jobs = [(impl, b, d, seq) for d in args.dtypes for seq, b in args.shapes for impl in args.impls]
    target = (TARGET["batch"], TARGET["dtype"], TARGET["seq"])
    jobs.sort(key=lambda j: j[1:] != target)  # stable: target first
    if args.long_goals:  # compile only where HF fits, and last: its minutes of compiling go where time is left
        skipped = sorted({(b, seq) for impl, b, _, seq in jobs if impl in ("eager", "compile") and seq > LONG_COMPILE_MAX_SEQ})
        jobs = [j for j in jobs if not (j[0] in ("eager", "compile") and j[3] > LONG_COMPILE_MAX_SEQ)]
        jobs.sort(key=lambda j: j[0] in ("eager", "compile"))
        for b, seq in skipped:
            print(f"# eager/compile not run at {b}x{seq}: HF eager runs out of memory there on 80 GB", flush=True)
    results = resumed(args, meta)
    records = list(results.values())
    if results: print(f"# --resume: {len(results)} results kept from {args.json_out}", flush=True)
    todo = [j for j in jobs if j not in results]
    runs = processes(todo)
    for n, (impl, dtype, shapes) in enumerate(runs, 1):
        print(f"# [{n}/{len(runs)}] {shlex.join(child_cmd(args, impl, dtype, shapes))}", flush=True)
        for rec in measure(args, impl, dtype, shapes):
            results[(impl, rec["batch"], dtype, rec["seq"])] = rec
            records.append(rec)
            print(json.dumps(rec), flush=True)
        write_json(args, meta, records)
    print()
    table(args, results)
    final = goals(args, results)
    print(final["line"], flush=True)
    write_json(args, meta, records, final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
