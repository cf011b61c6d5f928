#!/usr/bin/env python3
"""scripts/pick_switches.py's rule on made-up gpu_step_variants.sh logs and ctest outputs, and
scripts/gpu_goals.sh refusing a GOALS_SWITCHES word that is not ZT_NAME=value before it builds anything.

  test_pick_switches.py <repo root>          # exit 0 and "pick_switches: all checks passed"
"""
import os, subprocess, sys, tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "pick_switches.py")
failures = []


def check(cond, what):
    if not cond: failures.append(what)
    print(("ok   " if cond else "FAIL ") + what)


def runs(label, bs, *ms):
    return [f"bs{bs} {label} #{i + 1}: step_ms {m} peak_gib 13.8 loss_last 0.61" for i, m in enumerate(ms)]


VARIANTS = [
    "# zerotrain abc1234",
    "variant main: tree . env  flags ",
    "variant sums: tree . env ZT_ONE_PASS_SUMS=1 flags ",         # 1 % faster at bs 8, even at bs 40
    "variant both: tree . env ZT_ONE_PASS_SUMS=1 ZT_B=1 flags ",  # 2 % faster at bs 8, even at bs 40: chosen
    "variant slow40: tree . env ZT_C=1 flags ",                   # 3 % faster at bs 8, 1 % slower at bs 40
    "variant noise: tree . env ZT_D=1 flags ",                    # 0.2 % faster at bs 8: within the margin
    "variant flagged: tree . env  flags --overlap_optimizer",     # fastest, but a flag, not a switch
    "variant broken: tree . env ZT_E=1 flags ",                   # fast, but one run failed
    "variant other: tree .ab-base env ZT_F=1 flags ",             # another tree
]
TIMES = (runs("main", 40, 65.0, 65.2) + runs("sums", 40, 65.1, 65.1) + runs("both", 40, 65.0, 65.3)
         + runs("slow40", 40, 65.8, 65.8) + runs("noise", 40, 65.0, 65.0) + runs("flagged", 40, 60.0, 60.0)
         + runs("broken", 40, 64.0) + ["bs40 broken #2: FAILED out of memory"] + runs("other", 40, 60.0, 60.0)
         + runs("main", 8, 27.0, 27.0) + runs("sums", 8, 26.73, 26.73) + runs("both", 8, 26.46, 26.46)
         + runs("slow40", 8, 26.19, 26.19) + runs("noise", 8, 26.95, 26.95) + runs("flagged", 8, 20.0, 20.0)
         + runs("broken", 8, 20.0, 20.0) + runs("other", 8, 20.0, 20.0))
PASSED = "# zerotrain abc1234\n...\n100% tests passed, 0 tests failed out of 583\nTotal Test time (real) = 160 sec\n"
FAILED = ("# zerotrain abc1234\n99% tests passed, 2 tests failed out of 583\nThe following tests FAILED:\n"
          "\t827 - RanksOnOneGpu.ConcurrentRanksMatchSerialRunsBitwise (Failed) gpu\n"
          "\t1300 - pending_switches.golden (Failed) gpu\n")
CUT = "# zerotrain abc1234\n        Start  564: EmbeddingGpuBadIds.OutOfRangeIdWritesNanRow\n"


def pick(tmp, log_lines, ctest_text=None, *extra):
    log = os.path.join(tmp, "ab.log")
    with open(log, "w") as f: f.write("\n".join(log_lines) + "\n")
    args = [sys.executable, SCRIPT, log, *extra]
    if ctest_text is not None:
        ctest = os.path.join(tmp, "ctest_gpu.txt")
        with open(ctest, "w") as f: f.write(ctest_text)
        args += ["--ctest", ctest]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.strip(), p.stderr


with tempfile.TemporaryDirectory() as tmp:
    rc, out, err = pick(tmp, VARIANTS + TIMES, PASSED, "--tree", "abc1234")
    check(rc == 0 and out == "ZT_ONE_PASS_SUMS=1 ZT_B=1", f"the fastest qualifying variant's switches: {out!r} ({err[-400:]})")
    for label, why in (("slow40", "above"), ("noise", "not 0.5% below"), ("flagged", "flags"), ("broken", "FAILED"),
                       ("other", "another tree")):
        check(any(l.startswith(f"pick_switches: {label}: not taken") and why in l for l in err.splitlines()),
              f"{label} is not taken ({why})")
    rc, out, err = pick(tmp, VARIANTS + TIMES, PASSED, "--margin", "0.015")
    check(out == "ZT_C=1", f"a 1.5 % margin lets slow40 (+1.1 % at bs 40) in, the fastest at bs 8: {out!r}")
    rc, out, err = pick(tmp, VARIANTS + TIMES, PASSED, "--margin", "0.035")
    check(out == "" and "none qualifies" in err, f"a 3.5 % margin takes none: {out!r}")
    rc, out, err = pick(tmp, VARIANTS + TIMES, FAILED)
    check(rc == 0 and out == "" and "2 GPU tests failed" in err and "pending_switches.golden" in err,
          f"no switches when a GPU test failed: {out!r}")
    rc, out, err = pick(tmp, VARIANTS + TIMES, CUT)
    check(out == "" and "no ctest summary" in err, f"no switches when ctest was cut before its summary: {out!r}")
    rc, out, err = pick(tmp, VARIANTS + TIMES, PASSED, "--tree", "def5678")
    check(out == "" and "not def5678" in err, f"no switches from another tree's files: {out!r}")
    rc, out, err = pick(tmp, VARIANTS + TIMES, PASSED, "--batch", "16")
    check(out == "" and "no bs16 runs" in err, f"no switches without runs at --batch: {out!r}")
    rc, out, err = pick(tmp, TIMES, PASSED)
    check(out == "" and "names no variants" in err, f"a log without variant lines picks nothing: {out!r}")

    # gpu_goals.sh refuses a malformed GOALS_SWITCHES word before it builds (exit 2, nothing built).
    env = dict(os.environ, GOALS_SWITCHES="ZT_ONE_PASS_SUMS=1 rm", OUT=os.path.join(tmp, "out"))
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_goals.sh")], capture_output=True, text=True,
                       env=env, timeout=60)
    check(p.returncode == 2 and "'rm' is not ZT_NAME=value" in p.stdout, f"gpu_goals.sh refuses 'rm' (rc {p.returncode})")
    check(not os.path.exists(os.path.join(tmp, "out", "build.log")), "... before any build")

if failures:
    print(f"pick_switches: {len(failures)} checks failed")
    sys.exit(1)
print("pick_switches: all checks passed")
