#!/usr/bin/env python3
"""scripts/ncu_source_summary.py on a made-up source page: opcodes without predicates and modifiers, sums and
shares per opcode, the most executed first, a gzipped file read alike, and a page without the columns refused."""
import gzip
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ncu_source_summary.py")
PAGE = """==PROF== Connected to process
"Address","Source","Instructions Executed","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"
"0x10","HMMA.16816.F32.BF16 R4, R8, R12, R4","6,000","300","200"
"0x20","@!P0 RED.E.ADD.F32.FTZ.RN.STRONG.GPU [R2.64], R5","2,000","600","500"
"0x30","LDS.64 R6, [R7+0x10]","1,000","50","40"
"0x40","@P1 HMMA.16816.F32.BF16 R16, R8, R12, R16","1,000","50","10"
"0x50","","0","0","0"
"""
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(path):
    return subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    plain = os.path.join(tmp, "source.csv")
    with open(plain, "w") as f:
        f.write(PAGE)
    p = run(plain)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 5, f"one line per opcode, a header and a total ({p.stdout}{p.stderr})")
    check(lines[1].split() == ["HMMA", "7000", "70.0%", "350", "35.0%"],
          f"HMMA: both predicated and plain lines, thousands separators read ({lines[1:2]})")
    check(lines[2].split() == ["RED", "2000", "20.0%", "600", "60.0%"], f"RED second, its stall share ({lines[2:3]})")
    check(lines[3].split()[0] == "LDS" and lines[4].split()[:3] == ["all", "10000", "1000"], "LDS last, then the total")
    packed = os.path.join(tmp, "source.csv.gz")
    with gzip.open(packed, "wt") as f:
        f.write(PAGE)
    check(run(packed).stdout == p.stdout, "a gzipped page gives the same lines")
    other = os.path.join(tmp, "other.csv")
    with open(other, "w") as f:
        f.write('"Address","Source","Instructions Executed"\n"0x10","NOP","1"\n')
    p = run(other)
    check(p.returncode != 0 and "stall sampling" in p.stderr, f"a page without stall samples refused ({p.stderr.strip()})")

if failures:
    print(f"ncu source summary: {len(failures)} checks failed")
    sys.exit(1)
print("ncu source summary: all checks passed")
