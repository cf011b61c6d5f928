#!/usr/bin/env python3
"""Where a kernel's instructions and stalls go, by SASS opcode, from Nsight Compute's source page.

  ncu --import r.ncu-rep --page source --csv --print-source sass > source.csv   (gzip it or not)
  python3 scripts/ncu_source_summary.py source.csv[.gz] [--top 15] [--by-barrier]

Prints one line per opcode (the mnemonic without its predicate and modifiers: HMMA, LDS, RED, ...), the most
executed first: warp-level instructions executed, their share, the warp stall samples on them and their
share. --by-barrier: the kernel's code cut after each barrier (BAR, and EXIT), in address order, one line a
part with its stall samples (share), instructions executed, top three stall reasons (the stall_* columns) and
top five opcodes: a fused kernel's phases are what lies between its __syncthreads. The columns are found by
name ("Instructions Executed", "Warp Stall Sampling (All Samples)" or the nearest), so a newer ncu that
renames a column fails with the names it has, not with wrong figures.
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


def page_columns(rows):
    """The source page's SASS, instructions-executed and stall-samples columns by name; a page without one of
    them stops the script with the names it has."""
    names = list(rows[0].keys()) if rows else []
    source = find_column(names, "Source")
    executed = find_column(names, "Instructions Executed", "inst_executed")
    stalls = find_column(names, "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All",
                         "Stall Sampling")
    if source is None or executed is None or stalls is None:
        raise SystemExit(f"ncu_source_summary: no Source / Instructions Executed / stall sampling column among "
                         f"{names}")
    return source, executed, stalls


def by_opcode(rows, source, executed, stalls):
    """{opcode: (instructions executed, stall samples)} summed over rows (rows without an opcode left out)."""
    sums = {}
    for row in rows:
        op = opcode(row[source])
        if not op:
            continue
        e, s = sums.get(op, (0.0, 0.0))
        sums[op] = (e + number(row[executed]), s + number(row[stalls]))
    return sums


def summarize(rows, top):
    source, executed, stalls = page_columns(rows)
    by_op = by_opcode(rows, source, executed, stalls)
    total_e = sum(e for e, _ in by_op.values()) or 1.0
    total_s = sum(s for _, s in by_op.values()) or 1.0
    lines = [f"{'opcode':<10} {'executed':>14} {'share':>7} {'stall samples':>14} {'share':>7}"]
    for op, (e, s) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{op:<10} {e:>14.0f} {100 * e / total_e:>6.1f}% {s:>14.0f} {100 * s / total_s:>6.1f}%")
    lines.append(f"{'all':<10} {total_e:>14.0f} {'':>7} {total_s:>14.0f} ({len(by_op)} opcodes)")
    return lines


def by_barrier(rows):
    """One line a part of the code between barriers: first and last row index (address order), stall samples
    and their share, instructions executed (millions), top stall reasons and opcodes, the closing instruction."""
    source, executed, stalls = page_columns(rows)
    reasons = [n for n in rows[0].keys() if n.startswith("stall_") and "Not Issued" not in n]
    parts, current = [], []
    for index, row in enumerate(rows):
        current.append(index)
        if opcode(row[source]) in ("BAR", "EXIT"):
            parts.append(current)
            current = []
    if current:
        parts.append(current)
    total = sum(number(row[stalls]) for row in rows) or 1.0
    lines = [f"{'rows':<11} {'samples':>9} {'share':>6} {'inst (M)':>9}  top stalls; top opcodes (M); closed by"]
    for part in parts:
        samples = sum(number(rows[i][stalls]) for i in part)
        executed_sum = sum(number(rows[i][executed]) for i in part)
        why = {r: sum(number(rows[i][r]) for i in part) for r in reasons}
        ops = {op: e for op, (e, _) in by_opcode([rows[i] for i in part], source, executed, stalls).items()}
        top_why = ", ".join(f"{r[len('stall_'):]} {v:.0f}" for r, v in sorted(why.items(), key=lambda kv: -kv[1])[:3]
                            if v > 0)
        top_ops = ", ".join(f"{o} {v / 1e6:.1f}" for o, v in sorted(ops.items(), key=lambda kv: -kv[1])[:5])
        closing = rows[part[-1]][source].strip()
        lines.append(f"{part[0]:>5}-{part[-1]:<5} {samples:>9.0f} {100 * samples / total:>5.1f}% "
                     f"{executed_sum / 1e6:>9.1f}  {top_why}; {top_ops}; {closing[:32]}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source_csv")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--by-barrier", action="store_true", help="the code between barriers, a line a part")
    args = ap.parse_args()
    with open_text(args.source_csv) as f:
        text = f.read()
    # ncu may print "==PROF==" lines before the table: start at its header row.
    lines = text.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if "Source" in line and "Instructions Executed" in line), 0)
    rows = list(csv.DictReader(io.StringIO("".join(lines[header:]))))
    print("\n".join(by_barrier(rows) if args.by_barrier else summarize(rows, args.top)))


if __name__ == "__main__":
    sys.exit(main())
