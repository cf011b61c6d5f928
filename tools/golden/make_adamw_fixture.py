#!/usr/bin/env python3
"""Golden data for optim/: torch.optim.AdamW + HF linear warmup schedule + clip_grad_norm_, for
tests/optim/test_adamw_torch_replay.cpp, plus HF get_scheduler values for tests/optim/test_lr_schedule.cpp.

Replay: three fp32 tensors (7, 33, 130 elements; the 7-element one is a "bias" in a param group with
weight_decay 0), torch.optim.AdamW(foreach=False, fused=False) with lr LR, betas (0.9, 0.999), eps EPS,
weight_decay WD, transformers.get_scheduler("linear", W warmup, T steps). Each of STEPS steps:
    grads = fixed per-step gradients (seeded torch.Generator, stored)
    pre-clip norm = clip_grad_norm_(params, MAX_NORM)
    optimizer.step(); scheduler.step()
The gradients are scaled per step so some steps clip and some do not, and the bias gradients are tiny
(~1e-7) so that eps matters in their update.

Layout:
  /replay/init/p<k>            float32 [n_k]        initial params
  /replay/grads/p<k>           float32 [STEPS, n_k] gradients given to step s (before clipping)
  /replay/params/p<k>          float32 [STEPS, n_k] params after step s
  /replay/exp_avg/p<k>         float32 [n_k]        m after the last step
  /replay/exp_avg_sq/p<k>      float32 [n_k]        v after the last step
  /replay/weight_decay         int64 [3]            1 where the tensor's group decays
  /replay/lr                   float64 [STEPS]      learning rate used by step s
  /replay/pre_clip_norm        float64 [STEPS]      total norm returned by clip_grad_norm_ before step s
  /schedules/<name>            float64 [SCHED_STEPS] get_scheduler(name, base lr 1, SCHED_W, SCHED_T) lr
                                                    at scheduler step 0..SCHED_STEPS-1
  root attrs: lr, eps, weight_decay, beta1, beta2, max_norm, warmup_steps, training_steps, steps,
              sched_warmup_steps, sched_training_steps, torch_version, transformers_version

Usage: python3 tools/golden/make_adamw_fixture.py [--out tests/fixtures/adamw_torch.h5]
Needs torch, transformers, h5py, numpy.
"""

import argparse
import os

import h5py
import numpy as np
import torch
import transformers
from transformers import get_scheduler

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = (7, 33, 130)
DECAYS = (False, True, True)  # tensor 0 plays a bias: no weight decay, as run_glue_no_trainer groups it
LR = 2e-2
EPS = 1e-6
WD = 0.05
BETAS = (0.9, 0.999)
MAX_NORM = 1.0
STEPS = 10
WARMUP = 3
# Per-step gradient scale: norms of ~13 * scale, so steps with scale 0.02 stay under MAX_NORM (no clipping).
GRAD_SCALES = (1.0, 0.02, 3.0, 0.05, 1.0, 0.5, 0.02, 2.0, 0.01, 1.0)
BIAS_GRAD_SCALE = 1e-7  # the bias gradients are comparable to eps, so eps's place in the formula matters

SCHED_NAMES = ("linear", "cosine", "constant", "constant_with_warmup")
SCHED_W = 4
SCHED_T = 20
SCHED_STEPS = 24  # past T, where linear clamps to 0 and cosine turns back up (HF clamps it at 0 only below)


def replay(gen):
    params = [torch.randn(n, generator=gen, dtype=torch.float32) for n in SIZES]
    init = [p.clone() for p in params]
    for p in params:
        p.requires_grad_(True)
    groups = [
        {"params": [p for p, d in zip(params, DECAYS) if d], "weight_decay": WD},
        {"params": [p for p, d in zip(params, DECAYS) if not d], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, foreach=False, fused=False)
    sched = get_scheduler("linear", opt, num_warmup_steps=WARMUP, num_training_steps=STEPS)

    grads = [[] for _ in SIZES]
    after = [[] for _ in SIZES]
    lrs, norms = [], []
    for step in range(STEPS):
        for k, p in enumerate(params):
            g = torch.randn(SIZES[k], generator=gen, dtype=torch.float32) * GRAD_SCALES[step]
            if not DECAYS[k]:
                g = g * BIAS_GRAD_SCALE
            grads[k].append(g.clone())
            p.grad = g
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, MAX_NORM)))
        lrs.append(opt.param_groups[0]["lr"])
        assert opt.param_groups[1]["lr"] == lrs[-1]
        opt.step()
        sched.step()
        for k, p in enumerate(params):
            after[k].append(p.detach().clone())
    clipped = sum(n > MAX_NORM for n in norms)
    assert 0 < clipped < STEPS, f"want both clipped and unclipped steps, got {clipped} of {STEPS} clipped"
    state = [opt.state[p] for p in params]
    return init, grads, after, lrs, norms, state


def schedule_values(name):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = get_scheduler(name, opt, num_warmup_steps=SCHED_W, num_training_steps=SCHED_T)
    values = []
    for _ in range(SCHED_STEPS):
        values.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return values


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "tests", "fixtures", "adamw_torch.h5"))
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(20240611)
    init, grads, after, lrs, norms, state = replay(gen)

    with h5py.File(args.out, "w") as f:
        r = f.create_group("replay")
        for k in range(len(SIZES)):
            r[f"init/p{k}"] = init[k].numpy()
            r[f"grads/p{k}"] = torch.stack(grads[k]).numpy()
            r[f"params/p{k}"] = torch.stack(after[k]).numpy()
            r[f"exp_avg/p{k}"] = state[k]["exp_avg"].numpy()
            r[f"exp_avg_sq/p{k}"] = state[k]["exp_avg_sq"].numpy()
        r["weight_decay"] = np.array([int(d) for d in DECAYS], dtype=np.int64)
        r["lr"] = np.array(lrs, dtype=np.float64)
        r["pre_clip_norm"] = np.array(norms, dtype=np.float64)
        for name in SCHED_NAMES:
            f[f"schedules/{name}"] = np.array(schedule_values(name), dtype=np.float64)
        f.attrs.update(
            lr=LR, eps=EPS, weight_decay=WD, beta1=BETAS[0], beta2=BETAS[1], max_norm=MAX_NORM,
            warmup_steps=WARMUP, training_steps=STEPS, steps=STEPS, sched_warmup_steps=SCHED_W,
            sched_training_steps=SCHED_T, torch_version=str(torch.__version__),
            transformers_version=str(transformers.__version__))
    print(f"wrote {args.out}: {STEPS} steps, norms {[round(n, 4) for n in norms]}, lrs {lrs}")


if __name__ == "__main__":
    main()
