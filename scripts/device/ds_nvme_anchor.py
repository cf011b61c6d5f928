#!/usr/bin/env python3
"""DeepSpeed's NVMe offload beside the disk tier (issue 15), on the GPU machine. Run it through
scripts/device/ds_nvme_anchor.sh (installs the DeepSpeed wheels of .ds/ first and sets the environment).

Phases, each guarded (a failure is recorded with its reason and the next phase runs), DIR/ds_nvme_anchor.json
rewritten after every one:
  build  JIT builds in child processes, side by side: DeepSpeed's async_io op (libaio from --libaio: the static
         archive carried by scripts/device_deps.sh, linked with its version script) and cpu_adam (the CPU Adam
         of every offload run). The exact failure (the build's last lines) lands in the JSON.
  aio    The op by itself: one aio_handle (the `aio` block below), 1 GiB pinned written then read with O_DIRECT
         (sync_pwrite / sync_pread), read back checked: DeepSpeed's disk rates beside bench_disk's.
  z2     ZeRO-2, offload_optimizer nvme. DeepSpeed 0.19.8's ZeRO-1/2 optimizer (runtime/zero/stage_1_and_2.py)
         has no swapper: any offload_optimizer device but none sets cpu_offload, so "nvme" runs as CPU offload
         and writes no file (the swap folder's size, 0, shows it).
  z3     ZeRO-3 with the same offload_optimizer block (parameters stay on the GPU): the optimizer state (fp32
         master, m, v) is swapped in and out every step (ZeRO-Infinity's PartitionedOptimizerSwapper).
  z3p    ZeRO-3 with offload_param nvme as well, only if time is left.
cuDNN: once the async_io op is loaded, the process's first cuDNN convolution crashes it (SIGSEGV; the H200,
sessions 3-5: every z2/z3 run died at its first forward, in DeBERTa's encoder conv). A probe there showed the op
alone does it (torch, deepspeed, cpu_adam loaded: the conv runs; async_io loaded: SIGSEGV), also with libaio's
symbols kept private to the op. So cuDNN is off unless --cudnn (torch.backends.cudnn.enabled, in the JSON's
meta): every phase then runs, the conv on PyTorch's own kernel, a small share of the step.
Model: HF DebertaV2ForSequenceClassification, DeBERTa-v2-xlarge shapes (those of .ds/ds_anchor.py), random init,
2 labels, batch 40, seq 128, bf16, AdamW(lr 2e-5, wd 0.01), clip 1.0. Per run: step ms (median of the measured
steps), the forward / backward / engine.step split, DeepSpeed's own optimizer timers (wall_clock_breakdown:
optimizer_step, optimizer_swap_in_state, optimizer_swap_out_state), peak GPU GiB, host RSS, the swap folder's
size after init and after the steps.

    python3 scripts/device/ds_nvme_anchor.py --out DIR --nvme-dir /tmp/zt-nvme/deepspeed --libaio .device-deps/libaio
"""
import argparse
import glob
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback

T0 = time.time()
SEQ = 128
BATCH = 40
GIB = 2 ** 30
# DebertaV2Config of DeBERTa-v2-xlarge(-mnli), as .ds/ds_anchor.py builds it (that script parses its arguments at
# import, so the dict is repeated here): 886,957,058 parameters with 2 labels.
XLARGE = dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
              intermediate_size=6144, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=0,
              relative_attention=True, max_relative_positions=-1, position_buckets=256,
              norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
              layer_norm_eps=1e-7, conv_kernel_size=3, conv_act="gelu", position_biased_input=False,
              pooler_hidden_size=1536, pooler_hidden_act="gelu", pooler_dropout=0.0,
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, initializer_range=0.02, num_labels=2)
N_PARAMS = 886_957_058
# The `aio` block of every run (DeepSpeed 0.19.8 names the thread count intra_op_parallelism; the older key
# thread_count is not read any more).
AIO = {"block_size": 1 << 20, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
       "overlap_events": True}

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True, help="folder of ds_nvme_anchor.json")
ap.add_argument("--nvme-dir", required=True,
                help="DeepSpeed's nvme_path, a folder of its own: removed with its contents before and after each run")
ap.add_argument("--libaio", required=True, help="folder with include/libaio.h, lib/libaio.a, libaio.map")
ap.add_argument("--parts", default="aio,z3,z3p,z2", help="comma list of aio,z2,z3,z3p, run in this order")
ap.add_argument("--budget-s", type=float, default=270.0, help="soft wall-time budget of the whole script")
ap.add_argument("--build-timeout-s", type=float, default=150.0)
ap.add_argument("--aio-mib", type=int, default=1024, help="size of the aio phase's file")
ap.add_argument("--z3-steps", type=int, default=2, help="measured ZeRO-3 steps (after 1 warm-up step)")
ap.add_argument("--z2-steps", type=int, default=5, help="measured ZeRO-2 steps (after 2 warm-up steps)")
ap.add_argument("--sub-group-size", type=float, default=None,
                help="zero_optimization.sub_group_size (DeepSpeed's default 1e9 when not given)")
ap.add_argument("--pipeline", action="store_true", help="offload_optimizer pipeline_read/pipeline_write true")
ap.add_argument("--no-breakdown", action="store_true", help="wall_clock_breakdown false (no DeepSpeed timers)")
ap.add_argument("--cudnn", action="store_true",
                help="leave cuDNN on (off by default: with DeepSpeed's async_io op loaded, the first cuDNN "
                     "convolution of the process crashes it, SIGSEGV on the H200, and DeBERTa's encoder has one)")
ap.add_argument("--threads", type=int, default=os.cpu_count() or 16)
ap.add_argument("--build-child", choices=["async_io", "cpu_adam"], help=argparse.SUPPRESS)
args = ap.parse_args()
LIBAIO = os.path.abspath(args.libaio)
OUT_PATH = os.path.join(args.out, "ds_nvme_anchor.json")
PARTS = [p.strip() for p in args.parts.split(",") if p.strip()]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29513", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1"),
             ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(k, v)

RES = {"meta": {"argv": sys.argv, "batch": BATCH, "seq": SEQ, "aio": AIO, "libaio": LIBAIO,
                "nvme_dir": args.nvme_dir},
       "errors": {}, "timing_s": {}, "build": {}, "aio": {}, "z3": {}, "z2": {}, "z3p": {}}


def el():
    return time.time() - T0


def left():
    return args.budget_s - el()


def log(*a):
    print(f"[ds_nvme {el():6.1f}s]", *a, flush=True)


def r3(x, n=3):
    return round(float(x), n)


def dump():
    if args.build_child:
        return
    try:
        RES["meta"]["elapsed_s"] = r3(el(), 1)
        os.makedirs(args.out, exist_ok=True)
        with open(OUT_PATH + ".tmp", "w") as f:
            json.dump(RES, f, indent=1, default=str)
        os.replace(OUT_PATH + ".tmp", OUT_PATH)
    except Exception as e:  # bookkeeping must not end the run
        print("dump failed:", repr(e), flush=True)


def err(key):
    s = traceback.format_exc()
    RES["errors"][key] = s[-3000:]
    log(f"ERROR in {key}: {s.strip().splitlines()[-1][:300]}")
    dump()


def short(e):
    return (type(e).__name__ + ": " + str(e)).replace("\n", " ")[:400]


def patch_async_io_builder():
    """Points DeepSpeed's async_io op at the carried libaio: its header folder among the include paths; the static
    archive and its version script on the link line (-laio is DeepSpeed's own flag). is_compatible()'s probe
    (has_function('io_submit', ('aio',)), an executable) reads CFLAGS/LDFLAGS, set by ds_nvme_anchor.sh."""
    import deepspeed.ops.op_builder as ob
    from deepspeed.ops.op_builder import async_io as aio_mod
    include, lib, vmap = (os.path.join(LIBAIO, "include"), os.path.join(LIBAIO, "lib"),
                          os.path.join(LIBAIO, "libaio.map"))
    for f in (os.path.join(include, "libaio.h"), os.path.join(lib, "libaio.a"), vmap):
        if not os.path.isfile(f):
            raise FileNotFoundError(f"{f} missing: run scripts/device_deps.sh here and carry .device-deps")
    classes = {aio_mod.AsyncIOBuilder}
    acc_cls = getattr(ob, "AsyncIOBuilder", None)
    if isinstance(acc_cls, type):
        classes.add(acc_cls)
    for cls in classes:
        if getattr(cls, "_zt_patched", False):
            continue
        orig_include, orig_ldflags = cls.include_paths, cls.extra_ldflags

        def include_paths(self, _orig=orig_include):
            return list(_orig(self)) + [include]

        def extra_ldflags(self, _orig=orig_ldflags):
            return [f"-L{lib}"] + list(_orig(self)) + [f"-Wl,--version-script={vmap}"]

        cls.include_paths, cls.extra_ldflags, cls._zt_patched = include_paths, extra_ldflags, True
    return [c.__module__ + "." + c.__name__ for c in classes]


# ------------------------------------------------------------------ child: one JIT build, then exit
if args.build_child:
    t = time.time()
    try:
        try:
            import setuptools  # noqa: F401  # makes `distutils` (has_function's import) resolve on Python 3.12
        except ImportError:
            pass
        if args.build_child == "async_io":
            patch_async_io_builder()
            from deepspeed.ops.op_builder import AsyncIOBuilder
            b = AsyncIOBuilder()
            print("ASYNC_IO_LDFLAGS=" + json.dumps(b.strip_empty_entries(b.extra_ldflags())), flush=True)
            print("ASYNC_IO_COMPATIBLE=%s" % b.is_compatible(verbose=True), flush=True)
            b.load(verbose=True)
        else:
            from deepspeed.ops.op_builder import CPUAdamBuilder
            CPUAdamBuilder().load(verbose=False)
        print("BUILD_S=%.1f" % (time.time() - t), flush=True)
        sys.stdout.flush()
        os._exit(0)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

# ------------------------------------------------------------------ imports, each guarded
torch = deepspeed = None
try:
    import torch
    RES["meta"].update(torch=torch.__version__, torch_cuda=torch.version.cuda)
except Exception:
    err("import_torch")
    dump()
    sys.exit(1)
try:
    import transformers
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification
    transformers.logging.set_verbosity_error()
    RES["meta"]["transformers"] = transformers.__version__
except Exception:
    err("import_transformers")
try:
    import deepspeed
    import logging
    from deepspeed.utils import logger as ds_logger
    ds_logger.setLevel(logging.WARNING)
    RES["meta"].update(deepspeed=deepspeed.__version__, deepspeed_file=deepspeed.__file__)
except Exception:
    err("import_deepspeed")
try:
    import setuptools  # noqa: F401  # provides `distutils` on Python 3.12
    import distutils.ccompiler  # noqa: F401  # has_function (the libaio probe) needs it: setuptools' shim on 3.12
    RES["meta"]["distutils"] = "ok"
except Exception as e:
    RES["meta"]["distutils"] = short(e)
try:
    torch.cuda.set_device(0)
    pr = torch.cuda.get_device_properties(0)
    RES["meta"].update(gpu=pr.name, gpu_total_gib=r3(pr.total_memory / GIB, 2), host_cpus=os.cpu_count())
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.enabled = args.cudnn
    RES["meta"]["cudnn_enabled"] = torch.backends.cudnn.enabled
    RES["meta"]["torch_threads"] = torch.get_num_threads()
except Exception:
    err("cuda")
for k in ("CFLAGS", "LDFLAGS", "TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS"):
    RES["meta"][k] = os.environ.get(k)
dump()
log("imports done:", json.dumps({k: RES["meta"].get(k) for k in ("torch", "transformers", "deepspeed", "gpu")}))

OPS = {"async_io": False, "cpu_adam": False}


# ------------------------------------------------------------------ build: the two ops in child processes
def phase_build():
    B = RES["build"]
    procs = {}
    for op in ("async_io", "cpu_adam"):
        path = os.path.join(args.out, f"build_{op}.log")
        fh = open(path, "w")
        procs[op] = (subprocess.Popen([sys.executable, os.path.abspath(__file__), "--out", args.out,
                                       "--nvme-dir", args.nvme_dir, "--libaio", LIBAIO, "--build-child", op],
                                      stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True), fh, path)
    log("building async_io and cpu_adam in child processes")
    for op, (p, fh, path) in procs.items():
        r = {}
        try:
            p.wait(timeout=max(10.0, args.build_timeout_s - (time.time() - T_BUILD)))
            r["rc"] = p.returncode
        except subprocess.TimeoutExpired:
            # The whole group (ninja and the compilers too), then torch's build lock: a lock left behind makes the
            # next load of the op wait for ever.
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            for lock in glob.glob(os.path.join(os.environ.get("TORCH_EXTENSIONS_DIR", "/tmp/tx"), op + "*", "lock")):
                os.remove(lock)
            r["rc"] = "timeout after %.0f s" % args.build_timeout_s
        fh.close()
        r["wall_s"] = r3(time.time() - T_BUILD, 1)
        text = open(path, errors="replace").read()
        for line in text.splitlines():
            if line.startswith("BUILD_S="):
                r["build_s"] = float(line.split("=", 1)[1])
            elif line.startswith("ASYNC_IO_LDFLAGS="):
                r["ldflags"] = json.loads(line.split("=", 1)[1])
            elif line.startswith("ASYNC_IO_COMPATIBLE="):
                r["is_compatible"] = line.split("=", 1)[1]
        if r["rc"] != 0:
            r["log_tail"] = text[-4000:]
            r["status"] = "failed"
        else:
            r["status"] = "ok"
            OPS[op] = True
        B[op] = r
        log(f"build {op}: {r['status']} (rc {r['rc']}, {r['wall_s']} s)")
        dump()
    if OPS["async_io"]:  # the parent loads the op the child built (same flags: no rebuild)
        try:
            B["patched"] = patch_async_io_builder()
            from deepspeed.ops.op_builder import AsyncIOBuilder
            t = time.time()
            AsyncIOBuilder().load(verbose=False)
            B["async_io_load_s"] = r3(time.time() - t, 1)
        except Exception:
            OPS["async_io"] = False
            B["async_io"]["status"] = "built in the child, load in the parent failed"
            err("build_async_io_load")


# ------------------------------------------------------------------ aio: the op alone, 1 GiB out and back
def phase_aio():
    A = RES["aio"]
    from deepspeed.ops.op_builder import AsyncIOBuilder
    op = AsyncIOBuilder().load(verbose=False)
    h = op.aio_handle(AIO["block_size"], AIO["queue_depth"], AIO["single_submit"], AIO["overlap_events"],
                      AIO["intra_op_parallelism"])
    os.makedirs(args.nvme_dir, exist_ok=True)
    path = os.path.join(args.nvme_dir, "aio_probe.bin")
    n = args.aio_mib << 20
    buf = torch.empty(n, dtype=torch.uint8).pin_memory()
    buf.view(torch.int32).random_()  # random bytes: a misplaced block shows in the read-back check
    back = torch.zeros(n, dtype=torch.uint8).pin_memory()
    try:
        t = time.perf_counter()
        wrote = h.sync_pwrite(buf, path)
        tw = time.perf_counter() - t
        t = time.perf_counter()
        read = h.sync_pread(back, path)
        tr = time.perf_counter() - t
        same = bool(torch.equal(buf, back))
        A.update(bytes=n, write_s=r3(tw, 3), read_s=r3(tr, 3), write_gbps=r3(n / tw / 1e9), read_gbps=r3(n / tr / 1e9),
                 write_ops=wrote, read_ops=read, read_back_equal=same, alignment=h.get_alignment())
        log(f"aio {args.aio_mib} MiB: write {A['write_gbps']} GB/s, read {A['read_gbps']} GB/s, equal {same}")
    finally:
        del buf, back
        if os.path.exists(path):
            os.remove(path)


# ------------------------------------------------------------------ the training runs
TIMER_LOG = []


def record_ds_timers():
    """DeepSpeed prints its optimizer timers through SynchronizedWallClockTimer.log (and resets them); keep a copy
    of every logged group (ms) before it does."""
    from deepspeed.utils.timer import SynchronizedWallClockTimer
    orig = SynchronizedWallClockTimer.log
    if getattr(orig, "_zt", False):
        return

    def log_and_keep(self, names, normalizer=1.0, reset=True, *a, **kw):
        try:
            TIMER_LOG.append({n: r3(self.timers[n].elapsed(reset=False) / normalizer, 1) for n in names
                              if n in self.timers})
        except Exception:
            pass
        return orig(self, names, normalizer, reset, *a, **kw)

    log_and_keep._zt = True
    SynchronizedWallClockTimer.log = log_and_keep


def folder_bytes(path):
    """(apparent bytes, allocated bytes) of the files under path."""
    size = alloc = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
                size += st.st_size
                alloc += st.st_blocks * 512
            except OSError:
                pass
    return size, alloc


def ds_config(stage, param_nvme=False):
    oo = {"device": "nvme", "nvme_path": args.nvme_dir, "pin_memory": True, "buffer_count": 4}
    if args.pipeline:
        oo.update(pipeline_read=True, pipeline_write=True)
    zo = {"stage": stage, "contiguous_gradients": True, "overlap_comm": True, "reduce_bucket_size": int(2e8),
          "offload_optimizer": oo}
    if stage == 2:
        zo.update(allgather_partitions=True, allgather_bucket_size=int(2e8), reduce_scatter=True)
    if args.sub_group_size:
        zo["sub_group_size"] = int(args.sub_group_size)
    if param_nvme:
        # buffer_size must hold the largest parameter: the embeddings, 128100 x 1536 = 196.8 M elements.
        zo["offload_param"] = {"device": "nvme", "nvme_path": args.nvme_dir, "pin_memory": True,
                               "buffer_count": 5, "buffer_size": int(2e8)}
    return {"train_batch_size": BATCH, "train_micro_batch_size_per_gpu": BATCH, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8,
                                                      "weight_decay": 0.01}},
            "zero_optimization": zo, "aio": dict(AIO), "steps_per_print": 10 ** 9,
            "wall_clock_breakdown": not args.no_breakdown}


DIST = {"ok": False}


def gpu_mem():
    return dict(max_alloc_gib=r3(torch.cuda.max_memory_allocated() / GIB),
                max_reserved_gib=r3(torch.cuda.max_memory_reserved() / GIB))


def host_mem():
    d = {"ru_maxrss_gib": r3(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 2)}
    try:
        import psutil
        d["rss_gib"] = r3(psutil.Process().memory_info().rss / GIB, 2)
    except Exception:
        pass
    return d


def run_engine(R, stage, warm, meas, cap_s, param_nvme=False):
    """One engine: build, `warm` + up to `meas` timed steps (stops after cap_s once one is measured)."""
    import gc
    if not DIST["ok"]:
        deepspeed.init_distributed(dist_backend="nccl")
        DIST["ok"] = True
    shutil.rmtree(args.nvme_dir, ignore_errors=True)
    os.makedirs(args.nvme_dir, exist_ok=True)
    R["disk_free_gib_before"] = r3(shutil.disk_usage(args.nvme_dir).free / GIB, 1)
    cfg = ds_config(stage, param_nvme)
    R["config"] = cfg
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    engine = None
    try:
        t = time.time()
        cfg_model = DebertaV2Config(**XLARGE)
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = DebertaV2ForSequenceClassification(cfg_model)
        model.train()
        R["params"] = sum(p.numel() for p in model.parameters())
        engine, _o, _d, _s = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        del model, _o, _d, _s
        torch.cuda.synchronize()
        R["init_s"] = r3(time.time() - t, 1)
        R["optimizer"] = type(engine.optimizer).__name__
        R["basic_optimizer"] = type(getattr(engine, "basic_optimizer", None)).__name__
        R["swapper"] = type(getattr(engine.optimizer, "optimizer_swapper", None)).__name__
        R["init_gpu"] = gpu_mem()
        R["swap_bytes_after_init"], R["swap_alloc_bytes_after_init"] = folder_bytes(args.nvme_dir)
        log(f"{stage=} engine in {R['init_s']} s: {R['optimizer']}/{R['basic_optimizer']}, swapper {R['swapper']}, "
            f"swap folder {R['swap_bytes_after_init'] / 1e9:.2f} GB")
        dump()
        g = torch.Generator().manual_seed(1234)
        ids = torch.randint(5, 128000, (BATCH, SEQ), generator=g).cuda()
        mask = torch.ones_like(ids)
        labels = torch.randint(0, 2, (BATCH,), generator=g).cuda()
        steps, phases, timers = [], [], []
        t_start = time.time()
        for i in range(warm + meas):
            del TIMER_LOG[:]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = engine(input_ids=ids, attention_mask=mask, labels=labels).loss
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            engine.backward(loss)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            engine.step()
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            steps.append(t3 - t0)
            phases.append((t1 - t0, t2 - t1, t3 - t2))
            merged = {}
            for group in TIMER_LOG:
                for k, v in group.items():
                    merged[k] = r3(merged.get(k, 0.0) + v, 1)
            timers.append(merged)
            log(f"  step {i} ({'warm' if i < warm else 'timed'}): {(t3 - t0) * 1e3:.0f} ms "
                f"(fwd {(t1 - t0) * 1e3:.0f}, bwd {(t2 - t1) * 1e3:.0f}, step {(t3 - t2) * 1e3:.0f}) "
                f"loss {loss.item():.4f} {json.dumps(merged)}")
            R.update(steps_ms=[r3(s * 1e3, 1) for s in steps], ds_timers_ms=timers)
            dump()
            if i + 1 > warm and time.time() - t_start > cap_s:
                R["stopped"] = f"time cap {cap_s:.0f} s"
                break
        timed = list(range(warm, len(steps))) or [len(steps) - 1]
        R["measured"] = len(steps) - warm
        R["step_ms"] = r3(statistics.median(steps[k] for k in timed) * 1e3, 1)
        R["phase_ms_fwd_bwd_step"] = [r3(statistics.median(phases[k][j] for k in timed) * 1e3, 1) for j in range(3)]
        R["samples_per_s"] = r3(BATCH / (R["step_ms"] / 1e3), 1)
        opt_keys = sorted({n for k in timed for n in timers[k]})
        R["ds_timers_ms_median"] = {n: r3(statistics.median(timers[k].get(n, 0.0) for k in timed), 1)
                                    for n in opt_keys}
        R.update(gpu_mem())
        R["host"] = host_mem()
        R["swap_bytes_after_steps"], R["swap_alloc_bytes_after_steps"] = folder_bytes(args.nvme_dir)
        R["swap_gb_after_steps"] = r3(R["swap_bytes_after_steps"] / 1e9, 2)
        log(f"{stage=}: {R['step_ms']} ms/step (fwd/bwd/step {R['phase_ms_fwd_bwd_step']}), "
            f"peak {R['max_alloc_gib']} GiB alloc / {R['max_reserved_gib']} reserved, "
            f"swap {R['swap_gb_after_steps']} GB, timers {json.dumps(R['ds_timers_ms_median'])}")
    finally:
        if engine is not None:
            try:
                engine.destroy()
            except Exception as e:
                log("engine.destroy failed:", short(e))
        engine = None
        gc.collect()
        torch.cuda.empty_cache()
        R["gpu_alloc_after_free_gib"] = r3(torch.cuda.memory_allocated() / GIB)
        shutil.rmtree(args.nvme_dir, ignore_errors=True)
        dump()


def phase_z3():
    run_engine(RES["z3"], 3, 1, args.z3_steps, max(20.0, left() - 60))


def phase_z2():
    RES["z2"]["note"] = ("DeepSpeed 0.19.8 ZeRO-1/2 have no optimizer swapper: offload_optimizer device nvme runs "
                         "as CPU offload (stage_1_and_2.py sets cpu_offload for any device but none)")
    run_engine(RES["z2"], 2, 2, args.z2_steps, 30.0)


def phase_z3p():
    run_engine(RES["z3p"], 3, 1, 1, 10.0, param_nvme=True)


# Seconds a phase needs to be started (the estimate of its run at ~1.5 GB/s of disk).
NEEDS = {"aio": 15, "z3": 90, "z2": 40, "z3p": 110}
PHASES = {"aio": phase_aio, "z3": phase_z3, "z2": phase_z2, "z3p": phase_z3p}

if __name__ == "__main__":
    T_BUILD = time.time()
    try:
        phase_build()
    except Exception:
        err("build")
    RES["timing_s"]["build"] = r3(time.time() - T_BUILD, 1)
    dump()
    try:
        record_ds_timers()
    except Exception:
        err("record_ds_timers")
    for name in PARTS:
        if name not in PHASES:
            RES["errors"][name] = f"unknown part {name!r} (known: {', '.join(PHASES)})"
            continue
        if name in ("aio", "z3", "z3p") and not OPS["async_io"]:
            RES[name]["status"] = "skipped: the async_io op did not build (see build.async_io)"
            continue
        if name in ("z2", "z3", "z3p") and not OPS["cpu_adam"]:
            RES[name]["status"] = ("skipped: the cpu_adam op (the offload runs' optimizer) did not build "
                                   "(see build.cpu_adam)")
            continue
        if left() < NEEDS[name]:
            RES[name]["status"] = f"skipped: {left():.0f} s left of the budget, needs ~{NEEDS[name]} s"
            log(f"part {name}: {RES[name]['status']}")
            dump()
            continue
        t = time.time()
        log(f"---- part {name} (left {left():.0f} s)")
        try:
            PHASES[name]()
            RES[name].setdefault("status", "ok")
        except Exception as e:
            RES[name]["status"] = "OOM" if "out of memory" in str(e).lower() else "failed"
            RES[name]["error"] = short(e)
            err(name)
        RES["timing_s"][name] = r3(time.time() - t, 1)
        dump()
    summary = {k: {f: RES[k].get(f) for f in ("status", "step_ms", "phase_ms_fwd_bwd_step", "ds_timers_ms_median",
                                             "max_alloc_gib", "swap_gb_after_steps", "write_gbps", "read_gbps")
                   if RES[k].get(f) is not None} for k in ("aio", "z3", "z2", "z3p")}
    summary["build"] = {k: RES["build"].get(k, {}).get("status") for k in ("async_io", "cpu_adam")}
    RES["summary"] = summary
    dump()
    print("==== ds_nvme_anchor summary (elapsed %.1f s)" % el(), flush=True)
    print(json.dumps(summary), flush=True)
    sys.stdout.flush()
    os._exit(0)  # no process-group / interpreter teardown: NCCL and DeepSpeed atexit work can hang
