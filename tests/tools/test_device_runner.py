#!/usr/bin/env python3
"""scripts/device/run.sh's argument handling and plan, without a GPU (--dry-run runs nothing): every task's
one configure-and-build step (Ninja, build-gpu/, the task's targets only, liburing always), the A/B's
alternation of variants, and the refusals (unknown task or option, bad arguments, no liburing) before any
build. Then the runner for real on a stand-in tree (a CMake project whose bench_train_step and test binary
are shell scripts; needs ninja): the A/B's summary, its bitwise verdict, the archive in $OUT, and no timing
after a failed GPU test; long --candidate on a stand-in pair of trees (the candidate built beside, its
tests, cores and steps in turn, parts done and left across two calls, a changed candidate's parts run again).

  test_device_runner.py <repo root>          # exit 0 and "device runner: all checks passed"
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
RUNNER = os.path.join(ROOT, "scripts", "device", "run.sh")
TASKS = os.path.join(ROOT, "scripts", "device", "tasks")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, deps, out, system_header="/nonexistent/liburing.h", extra_env=None):
    env = dict(os.environ, ZT_DEVICE_DEPS=deps, ZT_SYSTEM_URING_HEADER=system_header, OUT=out)
    env.update(extra_env or {})
    p = subprocess.run(["bash", RUNNER, *args], capture_output=True, text=True, env=env, cwd="/")
    return p.returncode, p.stdout, p.stderr


def build_lines(stdout):
    return [l[len("build: "):] for l in stdout.splitlines() if l.startswith("build: ")]


with tempfile.TemporaryDirectory() as tmp:
    deps = os.path.join(tmp, "deps")  # a carried .device-deps/ (the files need only exist for the plan)
    os.makedirs(os.path.join(deps, "liburing", "lib"))
    os.makedirs(os.path.join(deps, "liburing", "include"))
    open(os.path.join(deps, "liburing", "lib", "liburing.a"), "w").close()
    open(os.path.join(deps, "liburing", "include", "liburing.h"), "w").close()
    no_deps = os.path.join(tmp, "no-deps")
    out = os.path.join(tmp, "out")
    base = os.path.join(tmp, "base")  # an A/B base tree: a source tree is a folder with a CMakeLists.txt
    os.makedirs(base)
    open(os.path.join(base, "CMakeLists.txt"), "w").close()
    lib_flag = f"-DLIBURING_LIBRARY={deps}/liburing/lib/liburing.a"

    # Every task file: a dry run that plans one configure (Ninja, Release, build-gpu/, carried liburing) and
    # one build of its targets, and the usage text names it.
    # A task's patch (diagnostic code that never lands on main) still applies to this tree.
    patches = os.path.join(ROOT, "scripts", "device", "patches")
    for name in sorted(os.listdir(patches)) if os.path.isdir(patches) else []:
        with open(os.path.join(patches, name)) as f:
            r = subprocess.run(["patch", "-p1", "--dry-run", "--silent", "-d", ROOT], stdin=f, capture_output=True,
                               text=True)
        check(r.returncode == 0, f"scripts/device/patches/{name} applies to this tree ({r.stdout.strip()[-200:]})")

    tasks = sorted(f[:-3] for f in os.listdir(TASKS) if f.endswith(".sh"))
    check({"tests", "goals", "ab", "bench", "profile", "offload", "zero", "disk", "validate", "flash", "long",
           "flashncu"} <= set(tasks), f"the tasks are all there ({' '.join(tasks)})")
    rc, _, usage = run([], deps, out)
    check(rc == 2, f"no task: usage, exit 2 (rc {rc})")
    for task in tasks:
        args = [task, base] if task == "ab" else [task]
        rc, stdout, stderr = run(["--dry-run", *args], deps, out)
        lines = build_lines(stdout)
        configure = [l for l in lines if l.startswith("cmake -S")]
        make = [l for l in lines if l.startswith("cmake --build")]
        check(rc == 0, f"{task}: dry run exits 0 (rc {rc}: {stderr.strip()[-200:]})")
        check(bool(configure) and all(" -G Ninja" in l and "-DCMAKE_BUILD_TYPE=Release" in l and lib_flag in l
                                      and re.search(r"-B \S*build-gpu ", l) for l in configure),
              f"{task}: configures build-gpu/ with Ninja, Release and the carried liburing")
        check(len(configure) == len(make) == (2 if task == "ab" else 1), f"{task}: one configure and build per tree")
        check(re.search(rf"^\s+{task}\b", usage, re.M) is not None, f"{task}: named in the usage text")
        check(f"liburing: carried ({deps}/liburing)" in stdout, f"{task}: says where liburing comes from")
        check(not os.path.exists(out), f"{task}: a dry run writes nothing to $OUT")

    # Targets: only what the task needs; the tests task builds everything (ctest -L gpu needs every binary).
    rc, stdout, _ = run(["--dry-run", "tests"], deps, out)
    make = [l for l in build_lines(stdout) if l.startswith("cmake --build")]
    check(make and "--target" not in make[0], "tests: builds every target")
    check(re.search(r"^run: .*ctest --test-dir build-gpu -L gpu", stdout, re.M) is not None, "tests: runs ctest -L gpu")
    rc, stdout, _ = run(["--dry-run", "goals"], deps, out)
    make = [l for l in build_lines(stdout) if l.startswith("cmake --build")]
    check(make and make[0].endswith("--target bench_train_step"), "goals: builds bench_train_step only")
    check(re.search(r"bench_vs_torch\.py .*--goals.*--json-out \.goals/goals\.json --resume", stdout) is not None,
          "goals: bench_vs_torch.py --goals --resume into .goals/goals.json")
    check("GOALS_SWITCHES" not in stdout and "pick_switches" not in stdout, "goals: no switch selection")

    # long: the parts in order of value, each with its budget; torch.compile only with --with-compile.
    rc, stdout, _ = run(["--dry-run", "long"], deps, out)
    plan = stdout.splitlines()
    at = lambda pattern: next((i for i, l in enumerate(plan) if re.search(pattern, l)), -1)
    order = [at(r"test_long_training_determinism_gpu >"),
             at(r"bench_vs_torch\.py .*--long-goals --impls zerotrain,fdb,df --shapes 4x2048,1x8192 .*"
                r"--json-out \.long/long\.json --resume"),
             at(r"--seq 16384 .*--repeat_batch"),
             at(r"bench_attention_vs_df\.py .*--shapes 4x2048,1x8192"),
             at(r"--seq 8192 .*--gradient_checkpointing"),
             at(r"bench_vs_torch\.py .*--long-goals --impls zerotrain,fdb,df --shapes 16x512,40x128 .*--resume"),
             at(r"bench_attention_vs_df\.py .*--shapes 40x128,16x512"),
             at(r"--verdict-from \.long/long\.json --long-goals")]
    check(rc == 0 and -1 not in order and order == sorted(order),
          f"long: tests, the goals' side by side, 1x16384, their cores, checkpointing, the short shapes, the "
          f"verdicts, in that order ({order})")
    budgets = re.findall(r"^part (\w+): budget (\d+) s$", stdout, re.M)
    check([p for p, _ in budgets] == ["tests", "goals_side", "steps_16384", "goals_cores", "steps_checkpoint",
                                      "short_side", "short_cores"] and all(int(b) > 0 for _, b in budgets),
          f"long: every part says its budget ({budgets})")
    check("--impls compile" not in stdout and "candidate" not in stdout, "long: no compile, no candidate unless asked")
    rc, stdout, _ = run(["--dry-run", "long", "--with-compile"], deps, out)
    plan = stdout.splitlines()
    check(rc == 0 and at(r"bench_vs_torch\.py .*--long-goals --impls compile --shapes 16x512,40x128") >
          at(r"bench_attention_vs_df\.py .*--shapes 40x128,16x512") > 0, "long --with-compile: compile last")

    # long --candidate NAME.patch: the candidate is .candidates/NAME, made from this tree and the patch (on the
    # machine; the dry run says so), built beside as a tree is.
    patch_file = os.path.join(tmp, "fast.patch")
    open(patch_file, "w").close()
    rc, stdout, _ = run(["--dry-run", "long", "--candidate", patch_file, "--candidate-only"], deps, out)
    configure = [l for l in build_lines(stdout) if l.startswith("cmake -S")]
    check(rc == 0 and f"candidate: .candidates/fast = this tree's sources + {patch_file}" in stdout and
          len(configure) == 2 and configure[1].startswith("cmake -S .candidates/fast -B build-gpu-candidate "),
          f"long --candidate FILE.patch: planned as .candidates/fast, built beside ({configure})")

    # long --candidate: the candidate tree built into build-gpu-candidate/ with its own targets, its tests after
    # this tree's, its cores and 4x2048 step in turn with this tree's, after 1x16384.
    rc, stdout, _ = run(["--dry-run", "long", "--candidate", base, "--with-compile"], deps, out)
    plan = stdout.splitlines()
    make = [l for l in build_lines(stdout) if l.startswith("cmake --build")]
    configure = [l for l in build_lines(stdout) if l.startswith("cmake -S")]
    check(rc == 0 and len(make) == 2 and configure[1].startswith(f"cmake -S {base} -B build-gpu-candidate ")
          and re.fullmatch(r"cmake --build build-gpu-candidate -j\d+ --target test_flash_disentangled_attention_gpu "
                           r"bench_train_step zt_bench", make[1]) is not None,
          f"long --candidate: the candidate builds its three targets into build-gpu-candidate/ ({make})")
    cand_test = at(r"build-gpu-candidate/bin/test_flash_disentangled_attention_gpu > \S+/\w+_test_flash")
    cores = [l for l in plan if re.search(r"zt_bench --only flash", l)]
    check(at(r"build-gpu/bin/test_flash_disentangled_attention_gpu >") < cand_test <
          at(r"--shapes 4x2048,1x8192 .*--json-out") and cand_test > 0, "long --candidate: its tests after this tree's")
    check([("candidate" in l, re.search(r"--batch (\d+) --seq (\d+)", l).groups()) for l in cores] ==
          [(False, ("4", "2048")), (True, ("4", "2048")), (False, ("1", "8192")), (True, ("1", "8192"))],
          f"long --candidate: the cores at 4x2048 and 1x8192, this tree's and the candidate's in turn ({cores})")
    steps = [l for l in plan if re.search(r"bench_train_step .*--seq 2048 .*--batch 4 --steps 3", l)]
    check([("build-gpu-candidate/" in l) for l in steps] == [False, True, False, True],
          f"long --candidate: the 4x2048 step, two rounds of both in turn ({steps})")
    check(at(r"--seq 16384") < at(r"zt_bench --only flash") < at(r"bench_attention_vs_df\.py .*4x2048"),
          "long --candidate: its A/B after 1x16384, before the cores beside torch")
    # The A/B: base first, every variant in turn in each round, AB_TESTS built in this tree only and run first.
    rc, stdout, _ = run(["--dry-run", "ab", base, "fused|.|ZT_FUSED_ATTENTION=1|", "ov|.||--overlap_optimizer"],
                        deps, out, extra_env={"AB_BATCHES": "40 8", "AB_REPS": "2", "AB_TESTS": "test_gemm_gpu"})
    make = [l for l in build_lines(stdout) if l.startswith("cmake --build")]
    check(len(make) == 2 and make[0].endswith("--target bench_train_step test_gemm_gpu")
          and make[1].startswith(f"cmake --build {base}/build-gpu") and make[1].endswith("--target bench_train_step"),
          "ab: the base tree builds bench_train_step, this tree the named tests too")
    timed = [l for l in stdout.splitlines() if l.startswith("run: ") and "bench_train_step" in l and "--profile" not in l]

    def variant(line):
        return "base" if f"{base}/build-gpu" in line else ("fused" if "ZT_FUSED_ATTENTION=1" in line else
                                                           ("ov" if "--overlap_optimizer" in line else "new"))

    order = [(re.search(r"--batch (\d+)", l)[1], variant(l)) for l in timed]
    expected = [(bs, v) for bs in ("40", "8") for _ in range(2) for v in ("base", "fused", "ov")]
    check(order == expected, f"ab: variants alternate in each round ({order})")
    first_test = stdout.find("build-gpu/bin/test_gemm_gpu")
    check(0 <= first_test < stdout.find(timed[0]) if timed else False, "ab: the named GPU tests run before any timing")
    rc, stdout, _ = run(["--dry-run", "ab", base], deps, out)
    check(rc == 0 and {variant(l) for l in stdout.splitlines() if "--batch" in l} == {"base", "new"},
          "ab: without variants, the base tree against this tree")

    # Refusals: exit 2 with the reason, before any build.
    for args, why in [
        (["nosuch"], "unknown task 'nosuch'"),
        (["../tests"], "unknown task"),
        (["--bogus", "tests"], "unknown option --bogus"),
        (["tests", "extra"], "tests takes no arguments"),
        (["ab"], "ab needs a base tree"),
        (["ab", os.path.join(tmp, "missing")], "no source tree"),
        (["ab", base, "x|.|rm -rf|"], "'rm' is not ZT_NAME=value"),
        (["ab", base, "just-a-label"], "is not label|tree|env|flags"),
        (["ab", base, "base|.||"], "'base' given twice"),
        (["profile", "8by128"], "is not BATCHxSEQ"),
        (["zero", "--np", "0"], "zero takes [--np N]"),
        (["disk", "--fast"], "disk takes [--deepspeed]"),
        (["long", "--fast"], "long takes [--candidate DIR|FILE.patch [--candidate-only]] [--with-compile]"),
        (["long", "--candidate-only"], "--candidate-only needs --candidate DIR"),
        (["flashncu", "--candidate", ROOT], "flashncu: --candidate is this tree"),
        (["flashncu", "--quick"], "flashncu takes [--short] [--candidate DIR|FILE.patch]"),
        (["long", "--candidate"], "--candidate needs a source tree or a .patch"),
        (["long", "--candidate", os.path.join(tmp, "missing")], "--candidate: no source tree"),
        (["long", "--candidate", ROOT], "--candidate is this tree"),
        (["long", "--candidate", os.path.join(tmp, "missing.patch")], "--candidate: no patch at"),
    ]:
        for dry in ([], ["--dry-run"]):
            rc, stdout, stderr = run([*dry, *args], deps, out)
            check(rc == 2 and why in stderr and "build:" not in stdout and not os.path.exists(out),
                  f"{' '.join(dry + args)}: refused ({why}), nothing built (rc {rc})")

    # liburing always: without the carried one the system's (no flags: CMake finds it), without either no build.
    rc, stdout, _ = run(["--dry-run", "tests"], no_deps, out, system_header=os.path.join(deps, "liburing", "include", "liburing.h"))
    check(rc == 0 and "liburing: system" in stdout and "-DLIBURING" not in stdout, "liburing from the system")
    for dry in ([], ["--dry-run"]):
        rc, stdout, stderr = run([*dry, "tests"], no_deps, out)
        check(rc == 2 and "no liburing" in stderr and "build:" not in stdout and not os.path.exists(out),
              f"{' '.join(dry + ['tests'])}: refused without liburing (rc {rc})")


# summaries.py core-ab: the candidate's kernels against the base's, per kernel and summed (base over candidate).
with tempfile.TemporaryDirectory() as tmp:
    for name, fwd, bwd in (("base", 1764.0, 11288.0), ("candidate", 1760.0, 9030.4)):
        with open(os.path.join(tmp, name + ".json"), "w") as f:
            f.write('{"results": [{"name": "attention_forward_flash", "median_us": %s}, {"name": '
                    '"attention_backward_flash", "median_us": %s}, {"name": "gemm", "median_us": 1}]}' % (fwd, bwd))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "device", "summaries.py"), "core-ab", "4x2048",
                        os.path.join(tmp, "base.json"), os.path.join(tmp, "candidate.json")], capture_output=True, text=True)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and lines == [
        "core 4x2048 attention_backward_flash: base 11288.0 us, candidate 9030.4 us: 1.250x",
        "core 4x2048 attention_forward_flash: base 1764.0 us, candidate 1760.0 us: 1.002x",
        "core 4x2048 sum: base 13052.0 us, candidate 10790.4 us: 1.210x"], f"summaries.py core-ab: ratios ({lines})")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "device", "summaries.py"), "core-ab", "4x2048",
                        os.path.join(tmp, "base.json"), os.path.join(tmp, "none.json")], capture_output=True, text=True)
    check(p.returncode == 0 and "no ratio" in p.stdout and " sum:" not in p.stdout,
          "summaries.py core-ab: a missing candidate result gives no ratio")


# Each target a copy of its script that Ninja redoes only when the script is newer (as it does an object).
FAKE_CMAKE = """cmake_minimum_required(VERSION 3.16)
project(stand_in NONE)
foreach(t bench_train_step test_stand_in_gpu)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/bin/${t} DEPENDS ${CMAKE_SOURCE_DIR}/${t}.sh
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/bin
    COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/${t}.sh ${CMAKE_BINARY_DIR}/bin/${t})
  add_custom_target(${t} ALL DEPENDS ${CMAKE_BINARY_DIR}/bin/${t})
endforeach()
"""
# The step's time is the batch; the last loss moves with ZT_FUSED_ATTENTION (a variant that changes the bits).
FAKE_BENCH = """#!/usr/bin/env bash
b=8; for ((i=1;i<=$#;i++)); do [[ ${!i} == --batch ]] && { j=$((i+1)); b=${!j}; }; done
loss=0.6500866413116455; [[ -n ${ZT_FUSED_ATTENTION:-} ]] && loss=0.6500866413116456
echo "{\\"step_ms\\": $b.25, \\"peak_gib\\": 1.5, \\"losses\\": [1.0, $loss]}"
"""


def stand_in_tree(path, test_status):
    import shutil
    os.makedirs(os.path.join(path, "scripts"))
    shutil.copytree(os.path.join(ROOT, "scripts", "device"), os.path.join(path, "scripts", "device"))
    files = {"CMakeLists.txt": FAKE_CMAKE, "bench_train_step.sh": FAKE_BENCH,
             "test_stand_in_gpu.sh": f"#!/usr/bin/env bash\necho '[  PASSED  ] 1 test.'\nexit {test_status}\n"}
    for name, text in files.items():
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(path, name), 0o755)


import shutil
if shutil.which("ninja") is None or shutil.which("cmake") is None:
    print("skipped: the real run on a stand-in tree (no ninja or cmake here)")
else:
    with tempfile.TemporaryDirectory() as tmp:
        tree, out = os.path.join(tmp, "tree"), os.path.join(tmp, "out")
        stand_in_tree(tree, 0)
        shutil.copytree(tree, os.path.join(tree, "base"), ignore=shutil.ignore_patterns("scripts"))
        header = os.path.join(tmp, "liburing.h")  # a system liburing, as far as the runner's check goes
        open(header, "w").close()
        env = dict(os.environ, OUT=out, ZT_SYSTEM_URING_HEADER=header, ZT_DEVICE_WORK=os.path.join(tmp, "work"), ZT_DEVICE_DEPS=os.path.join(tmp, "none"),
                   AB_BATCHES="40 8", AB_REPS="2", AB_TESTS="test_stand_in_gpu")
        runner = os.path.join(tree, "scripts", "device", "run.sh")
        p = subprocess.run(["bash", runner, "ab", "base", "same|.||", "fused|.|ZT_FUSED_ATTENTION=1|",
                            "base-off|base||--offload optimizer", "new-off|.||--offload optimizer"],
                           capture_output=True, text=True, env=env, cwd=tmp)
        summary = open(os.path.join(out, "summary.txt")).read() if os.path.exists(os.path.join(out, "summary.txt")) else ""
        check(p.returncode == 1, f"ab, real run: exit 1 when a variant's bits differ (rc {p.returncode}: {p.stderr[-300:]})")
        check("summary bs40 same: mean 40.25 ms over 2 (1.0000 of base); last loss 0.6500866413116455, the same bits"
              in summary, "ab, real run: means, ratio and the same bits for an exact variant")
        check("summary bs8 fused: mean 8.25 ms over 2 (1.0000 of base); last loss 0.6500866413116456 differs" in summary,
              "ab, real run: a last loss one ulp away is reported as different")
        check("summary bs40 new-off: mean 40.25 ms over 2 (1.0000 of base-off); last loss 0.6500866413116455, the same "
              "bits as base-off" in summary and "summary bs40 base-off: mean 40.25 ms over 2; last loss" in summary,
              "ab, real run: a variant with flags is compared with the first variant of the same flags")
        held = sorted(os.listdir(out)) if os.path.isdir(out) else []
        check(held == ["ab.tgz", "summary.txt"], f"ab, real run: $OUT holds {held}")
        listing = subprocess.run(["tar", "tzf", os.path.join(out, "ab.tgz")], capture_output=True, text=True).stdout
        check("ab/ab.log" in listing and "ab/profile_bs8_fused.txt" in listing, "ab, real run: the log and profiles packed")

        failing, out2 = os.path.join(tmp, "failing"), os.path.join(tmp, "out2")
        stand_in_tree(failing, 1)
        env.update(OUT=out2)
        p = subprocess.run(["bash", os.path.join(failing, "scripts", "device", "run.sh"), "ab", "."],
                           capture_output=True, text=True, env=env, cwd=tmp)
        summary = open(os.path.join(out2, "summary.txt")).read() if os.path.exists(os.path.join(out2, "summary.txt")) else ""
        check(p.returncode == 1 and "test_stand_in_gpu exit 1" in summary and "a GPU test failed: nothing timed" in summary
              and "summary bs" not in summary, "ab, real run: a failed GPU test (its output says PASSED) stops the timing")

# long --candidate for real on a stand-in tree: every target a script (the candidate's zt_bench reports a faster
# backward), no torch wheels here, so the side-by-side and core parts fail and stay to do; the others finish.
LONG_TARGETS = ["test_flash_disentangled_attention_gpu", "test_deberta_golden_gpu", "test_deberta_mixed_precision_gpu",
                "test_long_training_determinism_gpu", "bench_train_step", "zt_bench"]
FAKE_ZT_BENCH = """#!/usr/bin/env bash
for ((i=1;i<=$#;i++)); do j=$((i+1)); [[ ${!i} == --json ]] && out=${!j}; done
us=BACKWARD_US
echo "{\\"results\\": [{\\"name\\": \\"attention_forward_flash\\", \\"median_us\\": 300}, {\\"name\\": \\"attention_backward_flash\\", \\"median_us\\": $us}]}" >"$out"
"""


def long_stand_in(path, backward_us):
    os.makedirs(path)
    with open(os.path.join(path, "CMakeLists.txt"), "w") as f:
        f.write(FAKE_CMAKE.replace("bench_train_step test_stand_in_gpu", " ".join(LONG_TARGETS)))
    files = {"bench_train_step.sh": FAKE_BENCH, "zt_bench.sh": FAKE_ZT_BENCH.replace("BACKWARD_US", str(backward_us))}
    for t in LONG_TARGETS[:4]:
        files[t + ".sh"] = "#!/usr/bin/env bash\necho '[  PASSED  ] 1 test.'\necho 'L 2048: the same losses'\n"
    for name, text in files.items():
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(path, name), 0o755)


if shutil.which("ninja") is not None and shutil.which("cmake") is not None:
    with tempfile.TemporaryDirectory() as tmp:
        tree, cand, out = os.path.join(tmp, "tree"), os.path.join(tmp, "cand"), os.path.join(tmp, "out")
        long_stand_in(tree, 1000)
        long_stand_in(cand, 800)
        shutil.copytree(os.path.join(ROOT, "scripts"), os.path.join(tree, "scripts"))
        header = os.path.join(tmp, "liburing.h")
        open(header, "w").close()
        env = dict(os.environ, OUT=out, ZT_SYSTEM_URING_HEADER=header, ZT_DEVICE_WORK=os.path.join(tmp, "work"),
                   ZT_DEVICE_DEPS=os.path.join(tmp, "none"), LONG_BUDGET_S="300")
        runner = os.path.join(tree, "scripts", "device", "run.sh")
        p = subprocess.run(["bash", runner, "long", "--candidate", "../cand"], capture_output=True, text=True,
                           env=env, cwd=tree)
        summary = open(os.path.join(out, "summary.txt")).read() if os.path.exists(os.path.join(out, "summary.txt")) else ""
        check(p.returncode == 1 and os.path.isfile(os.path.join(tree, "build-gpu-candidate", "bin", "zt_bench")),
              f"long --candidate, real run: the candidate built into build-gpu-candidate/ (rc {p.returncode}: {p.stderr[-300:]})")
        check("cand_test_flash_disentangled_attention_gpu exit 0" in summary, "long --candidate, real run: its tests ran")
        check("core 4x2048 attention_backward_flash: base 1000.0 us, candidate 800.0 us: 1.250x" in summary
              and "core 1x8192 sum: base 1300.0 us, candidate 1100.0 us: 1.182x" in summary,
              "long --candidate, real run: the cores' ratios at 4x2048 and 1x8192")
        check("summary bs4 candidate: mean 4.25 ms over 2 (1.0000 of main)" in summary,
              "long --candidate, real run: the 4x2048 step of both, two rounds")
        markers = sorted(f[:-5] for f in os.listdir(os.path.join(tree, ".long")) if f.endswith(".done"))
        done = [re.sub(r"-[0-9a-f]{12}$", "", m) for m in markers]
        check(done == ["candidate_ab", "candidate_tests", "steps_16384", "steps_checkpoint", "tests"] and
              all(re.search(r"-[0-9a-f]{12}$", m) for m in markers if m.startswith("candidate")),
              f"long --candidate, real run: the parts that ran are done, the candidate's by its sources' content, "
              f"the torch ones (no wheels) are not ({markers})")
        p = subprocess.run(["bash", runner, "long", "--candidate", "../cand"], capture_output=True, text=True,
                           env=dict(env, LONG_BUDGET_S="100"), cwd=tree)
        again = open(os.path.join(out, "summary.txt")).read()[len(summary):]
        check("tests: done in an earlier call" in again and "cand_test_flash" not in again and
              re.search(r"goals_side: (100|9\d) s left, fewer than its budget of 150 s", again) is not None,
              "long --candidate, a second call: done parts skipped, a part over the budget left to the next call")
        # Another candidate in the same build folder, its files older than the first one's objects (as
        # `git archive` leaves them): rebuilt all the same, and its parts run though the first one's are done
        # (this tree's stay done). Then one at another path: configured again.
        cand_bench = os.path.join(cand, "zt_bench.sh")
        with open(cand_bench, "w") as f:
            f.write(FAKE_ZT_BENCH.replace("BACKWARD_US", "500"))
        os.utime(cand_bench, (1e9, 1e9))
        before = len(open(os.path.join(out, "summary.txt")).read())
        p = subprocess.run(["bash", runner, "long", "--candidate", "../cand"], capture_output=True, text=True,
                           env=env, cwd=tree)
        summary = open(os.path.join(out, "summary.txt")).read()[before:]
        check("core 4x2048 attention_backward_flash: base 1000.0 us, candidate 500.0 us: 2.000x" in summary and
              "cand_test_flash_disentangled_attention_gpu exit 0" in summary and
              "tests: done in an earlier call" in summary,
              f"long --candidate, a changed candidate with older files: rebuilt, its parts run again with its own "
              f"figures, this tree's left done ({summary[-600:]})")
        shutil.copytree(cand, os.path.join(tmp, "cand2"))
        shutil.rmtree(os.path.join(tree, ".long"))
        before = len(open(os.path.join(out, "summary.txt")).read())
        p = subprocess.run(["bash", runner, "long", "--candidate", "../cand2"], capture_output=True, text=True,
                           env=env, cwd=tree)
        summary = open(os.path.join(out, "summary.txt")).read()[before:]
        check("built ../cand2" in summary and "candidate 500.0 us: 2.000x" in summary,
              "long --candidate at another path: its build folder configured again, not refused by CMake")
        shutil.rmtree(os.path.join(tree, ".long"))
        before = len(open(os.path.join(out, "summary.txt")).read())
        p = subprocess.run(["bash", runner, "long", "--candidate", "../cand2", "--candidate-only"],
                           capture_output=True, text=True, env=env, cwd=tree)
        summary = open(os.path.join(out, "summary.txt")).read()[before:]
        check(p.returncode == 0 and "built . (bench_train_step zt_bench;" in summary and "candidate_tests: exit 0" in summary
              and "candidate_ab: exit 0" in summary and "\ntests:" not in summary and "steps_16384" not in summary,
              f"long --candidate-only: this tree's A/B targets, the candidate's parts alone ({summary[-400:]})")
        with open(os.path.join(cand, "CMakeLists.txt"), "a") as f:
            f.write("not_cmake(\n")  # a candidate that does not configure: the goals are measured all the same
        shutil.rmtree(os.path.join(tree, ".long"))
        shutil.rmtree(os.path.join(tree, "build-gpu-candidate"))
        before = len(open(os.path.join(out, "summary.txt")).read())
        p = subprocess.run(["bash", runner, "long", "--candidate", "../cand"], capture_output=True, text=True,
                           env=env, cwd=tree)
        summary = open(os.path.join(out, "summary.txt")).read()[before:]
        check(p.returncode == 1 and "build of ../cand failed" in summary and "its parts left out" in summary
              and "1x16384 losses finite and falling" in summary and "candidate_ab" not in summary,
              "long --candidate that does not build: its parts left out, the rest run")
        # A candidate as a patch against this tree (git diff's a/ b/ form): .candidates/NAME made from this
        # tree's files with it applied, then built and timed as a tree is; a patch that does not apply refused.
        import difflib
        with open(os.path.join(tree, "zt_bench.sh")) as f:
            before_lines = f.read().splitlines(keepends=True)
        after_lines = [l.replace("us=1000", "us=700") for l in before_lines]
        with open(os.path.join(tmp, "faster.patch"), "w") as f:
            f.writelines(difflib.unified_diff(before_lines, after_lines, "a/zt_bench.sh", "b/zt_bench.sh"))
        shutil.rmtree(os.path.join(tree, ".long"))
        before = len(open(os.path.join(out, "summary.txt")).read())
        p = subprocess.run(["bash", runner, "long", "--candidate", "../faster.patch", "--candidate-only"],
                           capture_output=True, text=True, env=env, cwd=tree)
        summary = open(os.path.join(out, "summary.txt")).read()[before:]
        made = os.path.join(tree, ".candidates", "faster")
        check(p.returncode == 0 and "base 1000.0 us, candidate 700.0 us: 1.429x" in summary and
              os.path.isfile(os.path.join(made, "CMakeLists.txt")) and not os.path.exists(os.path.join(made, ".long")),
              f"long --candidate FILE.patch, real run: .candidates/faster from this tree and the patch, timed "
              f"({p.stderr[-300:]} {summary[-300:]})")
        with open(os.path.join(tmp, "stale.patch"), "w") as f:
            f.writelines(difflib.unified_diff([l.replace("us=1000", "us=5") for l in before_lines], after_lines,
                                              "a/zt_bench.sh", "b/zt_bench.sh"))
        p = subprocess.run(["bash", runner, "long", "--candidate", "../stale.patch"], capture_output=True, text=True,
                           env=env, cwd=tree)
        check(p.returncode == 2 and "../stale.patch does not apply to this tree" in p.stderr,
              f"long --candidate FILE.patch that does not apply: refused (rc {p.returncode}: {p.stderr[-300:]})")

if failures:
    print(f"device runner: {len(failures)} checks failed")
    sys.exit(1)
print("device runner: all checks passed")
