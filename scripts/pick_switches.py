#!/usr/bin/env python3
"""Which ZT_* switches the goals should run with, from a gpu_step_variants.sh log (and the GPU tests' ctest
output of the same tree): the machine goes back 30 s after a device call, too soon to read an A/B and type
the next command, so the call after the A/B is fixed in advance (`GOALS_SWITCHES=auto scripts/gpu_goals.sh`)
and this script makes the choice by a stated rule.

  python3 scripts/pick_switches.py .ab-last/ab.log [--ctest .ab-last/ctest_gpu.txt] [--tree DESCRIBE]
                                   [--batch 8] [--margin 0.005]

Prints one line: the chosen variant's environment words (e.g. `ZT_ONE_PASS_SUMS=1 ZT_SMALL_SUM_CHUNKS=1`), or
nothing when the first variant (the baseline, main) stays; the reasons go to stderr. The rule:
  - only variants of the baseline's tree that set nothing but ZT_* switches (no flags: bench_vs_torch's
    zerotrain runs take switches from the environment), with no FAILED run;
  - none at all when the ctest output lists a failed GPU test, or says nothing of how many passed (the
    switches' code would not have passed its tests: the goals then run the code that ran before), or when
    either file was written for another tree than --tree (their first `# zerotrain <git describe>` line);
  - at --batch (the goal that needs the speed, bs 8) the variant's mean step at least --margin below the
    baseline's; at every other batch of the log no more than --margin above it;
  - of those, the fastest at --batch.
"""
import argparse, re, sys
from statistics import mean

RUN = re.compile(r"bs(\d+) (.+) #\d+: (.*)$")
VARIANT = re.compile(r"variant (.+?): tree (\S+) env (.*?) flags ?(.*)$")
SWITCH = re.compile(r"ZT_[A-Z0-9_]+=\S*$")


def tree_of(path):
    """The `# zerotrain <git describe>` line gpu_step_variants.sh and gpu_tests.sh write first, or None."""
    for line in open(path):
        if line.startswith("# zerotrain "): return line.split(None, 2)[2].strip()
    return None


def parse_log(path):
    """(variants in order as {label: (tree, env words, flags)}, {(batch, label): [step ms]}, {label} failed)."""
    variants, steps, failed = {}, {}, set()
    for line in open(path):
        line = line.rstrip("\n")
        m = VARIANT.match(line)
        if m:
            variants[m[1]] = (m[2], m[3].split(), m[4].strip())
            continue
        m = RUN.match(line)
        if not m: continue
        bs, label, rest = int(m[1]), m[2], m[3]
        got = re.match(r"step_ms ([\d.]+)", rest)
        if got: steps.setdefault((bs, label), []).append(float(got[1]))
        elif rest.startswith("FAILED"): failed.add(label)
    return variants, steps, failed


def failed_tests(path):
    """None when the ctest output says all passed; else the reason (the failed tests, or no summary)."""
    text = open(path).read()
    summary = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", text)
    if not summary: return f"{path} has no ctest summary"
    if int(summary[2]) == 0: return None
    names = re.findall(r"^\s*\d+ - (\S+) \(", text.split("The following tests FAILED", 1)[-1], re.M)
    return f"{summary[2]} GPU tests failed ({', '.join(names) or 'names not listed'})"


def pick(args):
    variants, steps, failed = parse_log(args.log)
    if not variants:
        print(f"pick_switches: {args.log} names no variants (a gpu_step_variants.sh log of this tree?)", file=sys.stderr)
        return None
    labels = list(variants)
    base = labels[0]
    why_none = failed_tests(args.ctest) if args.ctest else None
    for path in filter(None, (args.log, args.ctest)):
        if args.tree and tree_of(path) != args.tree:
            why_none = why_none or f"{path} was written for tree {tree_of(path)}, not {args.tree}"
    if why_none:
        print(f"pick_switches: no switches: {why_none}", file=sys.stderr)
        return None
    batches = sorted({b for b, _ in steps})
    if args.batch not in batches:
        print(f"pick_switches: no switches: the log has no bs{args.batch} runs (batches {batches})", file=sys.stderr)
        return None
    base_ms = {b: mean(steps[(b, base)]) for b in batches if (b, base) in steps}
    if set(base_ms) != set(batches):
        print(f"pick_switches: no switches: the baseline {base} lacks runs at some batch", file=sys.stderr)
        return None
    winners = []
    for label in labels[1:]:
        tree, env, flags = variants[label]
        ms = {b: mean(steps[(b, label)]) for b in batches if (b, label) in steps}
        reasons = []
        if tree != variants[base][0]: reasons.append(f"another tree ({tree})")
        if flags: reasons.append(f"flags ({flags})")
        if not env or not all(SWITCH.match(w) for w in env): reasons.append(f"env words not all ZT_* switches ({' '.join(env)})")
        if label in failed: reasons.append("a run FAILED")
        if set(ms) != set(batches): reasons.append("runs missing at some batch")
        for b in batches:
            if b not in ms: continue
            ratio = ms[b] / base_ms[b]
            if b == args.batch and ratio > 1 - args.margin:
                reasons.append(f"bs{b} {ms[b]:.2f} ms is not {args.margin:.1%} below {base}'s {base_ms[b]:.2f}")
            elif b != args.batch and ratio > 1 + args.margin:
                reasons.append(f"bs{b} {ms[b]:.2f} ms is more than {args.margin:.1%} above {base}'s {base_ms[b]:.2f}")
        if reasons:
            print(f"pick_switches: {label}: not taken: {'; '.join(reasons)}", file=sys.stderr)
        else:
            print(f"pick_switches: {label}: qualifies, bs{args.batch} {ms[args.batch]:.2f} against "
                  f"{base_ms[args.batch]:.2f} ms", file=sys.stderr)
            winners.append((ms[args.batch], label))
    if not winners:
        print(f"pick_switches: none qualifies: the goals run {base} as it is", file=sys.stderr)
        return None
    best = min(winners)[1]
    print(f"pick_switches: chosen: {best}", file=sys.stderr)
    return variants[best][1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="gpu_step_variants.sh's ab.log (it also keeps a copy in .ab-last/)")
    p.add_argument("--ctest", default="", help="the same tree's `ctest -L gpu` output (no switches if any failed)")
    p.add_argument("--tree", default="", help="the tree (git describe --always --dirty) both files must be of")
    p.add_argument("--batch", type=int, default=8, help="the batch whose speed decides (default 8)")
    p.add_argument("--margin", type=float, default=0.005,
                   help="fraction faster at --batch, and at most slower elsewhere (default 0.005)")
    args = p.parse_args()
    env = pick(args)
    if env: print(" ".join(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
