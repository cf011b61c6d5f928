#!/usr/bin/env python3
"""Checks that a change left the code of existing CUDA kernels alone: every kernel of the named .cu files at a
base commit must have a kernel in the working tree with the same PTX body. docs/DESIGN.md's rule for unrun
GPU code (a new variant behind an off-by-default switch; the default instantiation compiles to the code that
ran) is checked here without a GPU.

  scripts/ptx_unchanged.py 975baa0 kernels/cuda/layernorm.cu kernels/cuda/gemm.cu
  scripts/ptx_unchanged.py --against 17438b9 e995939 kernels/cuda/gemm.cu     # two commits, no working tree

Bodies are compared after the parameter list (a kernel may gain a parameter its default path ignores), with
the kernel's own name, the anonymous-namespace hash, block labels and function-local shared variables'
mangled names normalized away. Exit status 1 when a base kernel's body is not found, naming it; 77 when a
commit is not in the clone."""
import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")


def ptx(nvcc: str, tree: Path, source: str, out: Path) -> str:
    cmd = [nvcc, "-DZT_WITH_CUDA=1", f"-I{tree}", "-isystem", "/usr/local/cuda/include", "-isystem",
           "/usr/include/eigen3", "-isystem", "/usr/include/hdf5/serial", "-O3", "-DNDEBUG", "-arch=sm_90a",
           "--expt-relaxed-constexpr", "-std=c++20", "-x", "cu", "-ptx", str(tree / source), "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"nvcc failed on {tree / source}:\n{result.stderr[-3000:]}")
    return out.read_text()


def renumber_registers(body: str) -> str:
    """Virtual registers numbered by first use, a class at a time, and their declarations dropped: NVVM's
    numbering moves when a kernel's parameter struct or a sibling instantiation changes, the code does not
    (ptxas allocates from the same sequence: the SASS is the same)."""
    numbers: dict = {}

    def number(m: re.Match) -> str:
        kind = m.group(1)
        table = numbers.setdefault(kind, {})
        return f"%{kind}{table.setdefault(m.group(2), len(table))}"

    body = "\n".join(line for line in body.split("\n") if not line.lstrip().startswith(".reg "))
    return re.sub(r"%(rd|rs|r|fd|f|p|h|hh)(\d+)\b", number, body)


def kernels(text: str) -> dict:
    found = {}
    for m in re.finditer(r"\.entry (\S+?)\((.*?)\n\}\n", text, re.S):
        name, body = m.group(1), m.group(0)
        body = body[body.index("\n{"):].replace(name, "KERNEL")
        body = ANON.sub("ANON", body)
        body = re.sub(r"\$L__BB\d+_", "$L__BB_", body)
        body = re.sub(r"_ZZ\w+?E(\d+)(\w+)", r"SHARED_\2", body)
        found[ANON.sub("ANON", name)] = renumber_registers(body)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the commit whose kernels must be unchanged")
    parser.add_argument("sources", nargs="+", help=".cu files, relative to the repository root")
    parser.add_argument("--against", help="a commit to check instead of the working tree")
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    args = parser.parse_args()
    status = 0
    with tempfile.TemporaryDirectory() as tmp:

        def checkout(commit: str, name: str) -> Path:
            tree = Path(tmp) / name
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True)
            if archive.returncode != 0:  # 77: the commit is not in this clone (a shallow one), ctest's skip
                print(f"git archive {commit}: {archive.stderr.decode().strip()}", file=sys.stderr)
                sys.exit(77)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            return tree

        base_tree = checkout(args.base, "base")
        new_tree = checkout(args.against, "against") if args.against else REPO
        for source in args.sources:
            old = kernels(ptx(args.nvcc, base_tree, source, Path(tmp) / "old.ptx"))
            new = kernels(ptx(args.nvcc, new_tree, source, Path(tmp) / "new.ptx"))
            bodies = set(new.values())
            missing = [name for name, body in old.items() if body not in bodies]
            where = args.against or "the working tree"
            print(f"{source}: {len(old) - len(missing)} of {len(old)} kernels of {args.base} unchanged in "
                  f"{where} ({len(new)} there)")
            for name in missing:
                print(f"  changed: {name}")
            status |= bool(missing)
    return status


if __name__ == "__main__":
    sys.exit(main())
