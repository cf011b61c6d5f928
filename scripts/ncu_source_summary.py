#!/usr/bin/env python3
"""Where a kernel's instructions and stalls go, by SASS opcode, from Nsight Compute's source page.

  ncu --import r.ncu-rep --page source --csv --print-source sass > source.csv   (gzip it or not)
  python3 scripts/ncu_source_summary.py source.csv[.gz] [--top 15]

Prints one line per opcode (the mnemonic without its predicate and modifiers: HMMA, LDS, RED, ...), the most
executed first: warp-level instructions executed, their share, the warp stall samples on them and their
share. The columns are found by name ("Instructions Executed", "Warp Stall Sampling (All Samples)" or the
nearest), so a newer ncu that renames a column fails with the names it has, not with wrong figures.
"""
import argparse
import csv
import gzip
import io
import re
import sys


def open_text(path):
    return io.TextIOWrapper(gzip.open(path), encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def find_column(names, *candidates):
    for c in candidates:
        for n in names:
            if n.strip().lower() == c.lower():
                return n
    for c in candidates:
        for n in names:
            if c.lower() in n.lower():
                return n
    return None


def number(text):
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def opcode(sass):
    """HMMA from '@!P0 HMMA.16816.F32.BF16 R0, ...'; '' for a line that is not an instruction."""
    words = sass.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return re.split(r"[.\s]", words[0])[0] if words else ""


def summarize(rows, top):
    names = list(rows[0].keys()) if rows else []
    source = find_column(names, "Source")
    executed = find_column(names, "Instructions Executed", "inst_executed")
    stalls = find_column(names, "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All",
                         "Stall Sampling")
    if source is None or executed is None or stalls is None:
        raise SystemExit(f"ncu_source_summary: no Source / Instructions Executed / stall sampling column among "
                         f"{names}")
    by_op = {}
    for row in rows:
        op = opcode(row[source])
        if not op:
            continue
        e, s = by_op.get(op, (0.0, 0.0))
        by_op[op] = (e + number(row[executed]), s + number(row[stalls]))
    total_e = sum(e for e, _ in by_op.values()) or 1.0
    total_s = sum(s for _, s in by_op.values()) or 1.0
    lines = [f"{'opcode':<10} {'executed':>14} {'share':>7} {'stall samples':>14} {'share':>7}"]
    for op, (e, s) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{op:<10} {e:>14.0f} {100 * e / total_e:>6.1f}% {s:>14.0f} {100 * s / total_s:>6.1f}%")
    lines.append(f"{'all':<10} {total_e:>14.0f} {'':>7} {total_s:>14.0f} ({len(by_op)} opcodes)")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source_csv")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    with open_text(args.source_csv) as f:
        text = f.read()
    # ncu may print "==PROF==" lines before the table: start at its header row.
    lines = text.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if "Source" in line and "Instructions Executed" in line), 0)
    rows = list(csv.DictReader(io.StringIO("".join(lines[header:]))))
    print("\n".join(summarize(rows, args.top)))


if __name__ == "__main__":
    sys.exit(main())
