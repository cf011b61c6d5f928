#!/usr/bin/env python3
"""Golden 50-step training run of the tiny DeBERTa-v2 config: HF model + torch.optim.AdamW, as
run_glue_no_trainer sets it up, on fixed deterministic batches. Writes deberta_tiny_train50.h5:

  attrs    config_json, transformers_version, torch_version, optimizer (JSON of the settings below), notes
  input_ids [S,B,L] i64, attention_mask [S,B,L] i64, labels [S,B] i64    the batch of every step
  loss [S] f32          loss of step s's batch before its update
  lr [S] f64            learning rate step s's update used
  grad_norm [S] f32     total L2 norm of the gradients before clipping (clip_grad_norm_'s return value)
  final_param/<HF name> every parameter after the last step (the initial values are the golden init)

Optimizer: AdamW lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 except on names containing "bias"
or "LayerNorm.weight"; linear decay to 0 over 50 steps, no warmup; grad-norm clip 1.0; every dropout 0.

Usage: python3 tools/golden/make_training_fixture.py [--out_dir tests/fixtures]
"""

import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mmf  # noqa: E402

STEPS, BATCH, LENGTH = 50, 4, 16
OPTIMIZER = {
    "lr": 1e-4,
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "weight_decay": 0.01,
    "no_decay": ["bias", "LayerNorm.weight"],
    "schedule": "linear",
    "warmup_steps": 0,
    "max_grad_norm": 1.0,
}


def batches():
    """Label 1 iff the first word token is in the lower half of the vocabulary: learnable, so loss falls."""
    rng = np.random.default_rng(2024)
    vocab = mmf.TINY_CONFIG["vocab_size"]
    ids = np.zeros((STEPS, BATCH, LENGTH), dtype=np.int64)
    mask = np.zeros_like(ids)
    for s in range(STEPS):
        lengths = rng.integers(5, LENGTH + 1, size=BATCH)
        lengths[0] = LENGTH  # every batch has one full row, as dynamic padding pads to the longest
        step_ids = mmf.token_ids(rng, BATCH, LENGTH, vocab)
        ids[s], mask[s] = mmf.pad_rows(step_ids, lengths)
    labels = (ids[:, :, 1] < 4 + (vocab - 4) // 2).astype(np.int64)
    return ids, mask, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out_dir", default=os.path.join(mmf.REPO_ROOT, "tests", "fixtures"))
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

    model = mmf.build_model(mmf.TINY_CONFIG)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(nd in name for nd in OPTIMIZER["no_decay"]) else decay).append(p)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": OPTIMIZER["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=OPTIMIZER["lr"], betas=tuple(OPTIMIZER["betas"]), eps=OPTIMIZER["eps"])
    scheduler = transformers.get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                                           num_training_steps=STEPS)

    ids, mask, labels = batches()
    losses = np.zeros(STEPS, dtype=np.float32)
    lrs = np.zeros(STEPS, dtype=np.float64)
    grad_norms = np.zeros(STEPS, dtype=np.float32)
    for s in range(STEPS):
        out = model(input_ids=torch.from_numpy(ids[s]), attention_mask=torch.from_numpy(mask[s]),
                    labels=torch.from_numpy(labels[s]))
        out.loss.backward()
        grad_norms[s] = torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIMIZER["max_grad_norm"]).item()
        lrs[s] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses[s] = out.loss.item()

    path = os.path.join(args.out_dir, "deberta_tiny_train50.h5")
    with h5py.File(path + ".tmp", "w") as f:
        mmf.set_ascii_attr(f, "config_json", model.config.to_json_string(use_diff=True))
        mmf.set_ascii_attr(f, "transformers_version", str(transformers.__version__))
        mmf.set_ascii_attr(f, "torch_version", str(torch.__version__))
        mmf.set_ascii_attr(f, "generator", "tools/golden/make_training_fixture.py")
        mmf.set_ascii_attr(f, "optimizer", json.dumps(OPTIMIZER))
        mmf.set_ascii_attr(f, "notes", f"{STEPS} steps of B={BATCH} L={LENGTH} (right-padded rows), "
                                       "label = first word id < 66; initial weights = golden init")
        f.create_dataset("input_ids", data=ids, compression="gzip")
        f.create_dataset("attention_mask", data=mask, compression="gzip")
        f.create_dataset("labels", data=labels)
        f.create_dataset("loss", data=losses)
        f.create_dataset("lr", data=lrs)
        f.create_dataset("grad_norm", data=grad_norms)
        for name, p in model.named_parameters():
            f.create_dataset(f"final_param/{name}", data=p.detach().numpy(), compression="gzip")
    os.replace(path + ".tmp", path)
    print(f"deberta_tiny_train50.h5: loss {losses[0]:.5f} -> {losses[-1]:.5f} (mean first 10 "
          f"{losses[:10].mean():.5f}, last 10 {losses[-10:].mean():.5f}), lr {lrs[0]:.2e} -> {lrs[-1]:.2e}, "
          f"grad norm {grad_norms[0]:.4f} -> {grad_norms[-1]:.4f}, {os.path.getsize(path) // 1024} KiB")


if __name__ == "__main__":
    main()
