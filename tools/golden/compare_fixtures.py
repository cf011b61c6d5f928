#!/usr/bin/env python3
"""Compares two sets of golden HDF5 fixtures dataset by dataset (e.g. a regeneration under another
transformers/torch version against the committed files) and prints the worst differences.

Usage: python3 tools/golden/compare_fixtures.py <dir_a> <dir_b> [file.h5 ...]
Exit status 1 when a dataset is missing, changes shape, or an integer dataset differs.
"""

import os
import sys

import h5py
import numpy as np


def datasets(f):
    out = {}
    f.visititems(lambda name, obj: out.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else None)
    return out


def compare_file(path_a, path_b):
    ok = True
    worst = []
    with h5py.File(path_a, "r") as fa, h5py.File(path_b, "r") as fb:
        da, db = datasets(fa), datasets(fb)
        for name in sorted(set(da) | set(db)):
            if name not in da or name not in db:
                print(f"  {name}: only in {'a' if name in da else 'b'}")
                ok = False
                continue
            a, b = np.asarray(da[name][()]), np.asarray(db[name][()])
            if a.shape != b.shape:
                print(f"  {name}: shape {a.shape} vs {b.shape}")
                ok = False
            elif np.issubdtype(a.dtype, np.integer):
                if not np.array_equal(a, b):
                    print(f"  {name}: integer data differs")
                    ok = False
            else:
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
                scale = np.maximum(np.abs(a.astype(np.float64)).max(initial=0.0), 1e-30)
                worst.append((float(diff.max(initial=0.0)) / scale, float(diff.max(initial=0.0)), name))
    worst.sort(reverse=True)
    for rel, absolute, name in worst[:5]:
        print(f"  {name}: max |a-b| {absolute:.3e} ({rel:.3e} of max |a|)")
    return ok


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    dir_a, dir_b = sys.argv[1], sys.argv[2]
    files = sys.argv[3:] or sorted(n for n in os.listdir(dir_b) if n.startswith("deberta_") and n.endswith(".h5"))
    ok = True
    for name in files:
        print(name)
        ok &= compare_file(os.path.join(dir_a, name), os.path.join(dir_b, name))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
