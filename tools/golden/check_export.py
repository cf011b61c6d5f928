#!/usr/bin/env python3
"""Checks that convert_hf export writes what HF loads: strict keys, and the same logits as our forward.

For each case it runs (with the built convert_hf):
  convert_hf import <fixture dir> <tmp>/model.h5 [--num_labels N]
  convert_hf export <tmp>/model.h5 <tmp>/hf
  convert_hf forward <tmp>/model.h5 logits.h5(inputs) <tmp>/ours.h5
then loads <tmp>/hf with DebertaV2ForSequenceClassification.from_pretrained(output_loading_info=True), asserts
no missing / unexpected / mismatched keys, that every exported tensor equals what the model holds, and that HF's
logits on the fixture batch match ours (f32 tolerance: atol 1e-5 + rtol 1e-4). The 2-label case checks the
re-initialised head (HF cannot predict our RNG, so only the export → HF path can check those logits).

Usage: python3 tools/golden/check_export.py [--convert_hf build/bin/convert_hf] [--fixtures DIR]
Exit status 0 when every case passes.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
from safetensors.torch import load_file
from transformers import DebertaV2ForSequenceClassification

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CASES = [("safetensors_f32", None), ("torch_f16", None), ("torch_f32", 2), ("safetensors_extras", 2)]


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("FAILED: %s\n%s" % (" ".join(cmd), result.stderr))


def check_case(convert_hf, fixtures, name, num_labels, tmp):
    model_file = os.path.join(tmp, name + ".h5")
    hf_dir = os.path.join(tmp, name + "_hf")
    ours = os.path.join(tmp, name + "_ours.h5")
    inputs = os.path.join(fixtures, "logits.h5")
    cmd = [convert_hf, "import", os.path.join(fixtures, name), model_file]
    if num_labels is not None:
        cmd += ["--num_labels", str(num_labels)]
    run(cmd)
    run([convert_hf, "export", model_file, hf_dir])
    run([convert_hf, "forward", model_file, inputs, ours])

    model, info = DebertaV2ForSequenceClassification.from_pretrained(hf_dir, output_loading_info=True,
                                                                      dtype=torch.float32)
    assert {"missing_keys", "unexpected_keys", "mismatched_keys"} <= set(info), info.keys()
    problems = {k: v for k, v in info.items() if v}
    assert not problems, "%s: HF loading reported %s" % (name, problems)
    exported = load_file(os.path.join(hf_dir, "model.safetensors"))
    state = model.state_dict()
    assert set(exported) == set(state), "%s: key sets differ" % name
    for key, tensor in exported.items():
        assert tensor.dtype == torch.float32 and torch.equal(tensor, state[key]), "%s: %s differs" % (name, key)

    with h5py.File(inputs, "r") as f:
        ids = torch.from_numpy(f["input_ids"][:])
        mask = torch.from_numpy(f["attention_mask"][:])
    with torch.no_grad():
        hf_logits = model.eval()(input_ids=ids, attention_mask=mask).logits.numpy()
    with h5py.File(ours, "r") as f:
        our_logits = f["logits"][:]
    err = np.abs(hf_logits - our_logits)
    ok = np.all(err <= 1e-5 + 1e-4 * np.abs(hf_logits))
    print("%-20s labels=%d keys=%d strict-load ok, max |HF - ours| = %.3g %s" %
          (name, hf_logits.shape[1], len(exported), err.max(), "ok" if ok else "MISMATCH"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--convert_hf", default=os.path.join(REPO_ROOT, "build", "bin", "convert_hf"))
    ap.add_argument("--fixtures", default=os.path.join(REPO_ROOT, "tests", "fixtures", "hf_tiny_mnli"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [check_case(args.convert_hf, args.fixtures, name, labels, tmp) for name, labels in CASES]
    if not all(results):
        sys.exit("check_export: logits mismatch")
    print("check_export: all %d cases passed" % len(results))


if __name__ == "__main__":
    main()
