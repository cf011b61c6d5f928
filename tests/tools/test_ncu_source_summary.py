#!/usr/bin/env python3
"""scripts/ncu_source_summary.py on a made-up source page: opcodes without predicates and modifiers, sums and
shares per opcode, the most executed first, a gzipped file read alike, a page without the columns refused, and
--by-barrier's parts (cut after each BAR and EXIT) with their samples, shares, stall reasons and opcodes."""
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

    # --by-barrier: two parts (the BAR closes the first), the second's stalls by reason.
    phased = os.path.join(tmp, "phased.csv")
    with open(phased, "w") as f:
        f.write('"Address","Source","Instructions Executed","Warp Stall Sampling (All Samples)","stall_short_sb",'
                '"stall_long_sb","stall_short_sb (Not Issued)"\n'
                '"0x10","LDG.E R2, [R4.64]","1,000,000","300","0","300","0"\n'
                '"0x20","BAR.SYNC.DEFER_BLOCKING 0x0","500,000","100","0","0","0"\n'
                '"0x30","LDS R6, [R7]","2,000,000","450","400","50","9"\n'
                '"0x40","@!P0 LDS R8, [R7+0x4]","1,000,000","150","150","0","9"\n'
                '"0x50","EXIT","500,000","0","0","0","0"\n')
    p = subprocess.run([sys.executable, SCRIPT, phased, "--by-barrier"], capture_output=True, text=True)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 3, f"a header and two parts ({p.stdout}{p.stderr})")
    check(len(lines) == 3 and lines[1].split()[:4] == ["0-1", "400", "40.0%", "1.5"] and "long_sb 300" in lines[1],
          f"the first part: rows 0-1, 400 samples of 1000, 1.5 M instructions, its load stalls ({lines[1:2]})")
    check(len(lines) == 3 and lines[2].split()[:4] == ["2-4", "600", "60.0%", "3.5"] and
          "short_sb 550, long_sb 50" in lines[2] and "LDS 3.0" in lines[2] and "Not Issued" not in lines[2],
          f"the second: its stalls by reason (issued samples only), LDS predicated or not ({lines[2:3]})")

if failures:
    print(f"ncu source summary: {len(failures)} checks failed")
    sys.exit(1)
print("ncu source summary: all checks passed")
