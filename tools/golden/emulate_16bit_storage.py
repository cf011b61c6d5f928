#!/usr/bin/env python3
"""How far a model that stores in 16 bits lands from an f32 golden fixture, emulated in HF: every parameter,
every leaf module's output and the gradient flowing back into it rounded to bf16 or f16, f32 arithmetic
between (as zerotrain's GPU path: 16-bit storage, f32 accumulation; f16's backward under a loss scale of
1024). Prints, per dtype, the loss and logits relative errors, the global gradient norm's relative error and
the worst per-tensor gradient cosines: the basis of the mixed-precision GPU test's limits for a fixture
(tests/model/test_deberta_mixed_precision_gpu.cpp).

  .venv-golden/bin/python tools/golden/emulate_16bit_storage.py [--case long]
"""
import argparse
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as fixtures  # noqa: E402

F16_LOSS_SCALE = 1024.0


def emulate(case, dtype):
    file_name, config, ids, mask, labels, _, *rest = case
    grad_scale = rest[0] if rest else 1.0
    scale = F16_LOSS_SCALE if dtype == torch.float16 else 1.0
    to16 = lambda t: t.to(dtype).to(torch.float32)
    model = fixtures.build_model(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(to16(p))

    def store_in_16_bits(module, inputs, output):
        if not isinstance(output, torch.Tensor) or output.dtype != torch.float32:
            return None
        output = to16(output)
        if output.requires_grad:  # the gradient of a stored activation is stored in 16 bits too (scaled)
            output.register_hook(lambda g: to16(g * scale) / scale)
        return output

    for module in model.modules():
        if not list(module.children()):
            module.register_forward_hook(store_in_16_bits)
    out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                labels=torch.from_numpy(labels))
    (out.loss * grad_scale).backward()
    with h5py.File(os.path.join(fixtures.REPO_ROOT, "tests", "fixtures", file_name)) as f:
        ref_logits, ref_loss = f["logits"][()], float(f["loss"][()])
        cosines, got_sq, ref_sq = [], 0.0, 0.0
        for name, p in model.named_parameters():
            got = p.grad.numpy().ravel().astype(np.float64)
            if name in f["grad"]:
                ref = f["grad"][name][()].ravel().astype(np.float64)
            else:  # a large tensor: its sampled elements
                got = got[f["grad_sample"][name]["index"][()]]
                ref = f["grad_sample"][name]["value"][()].astype(np.float64)
            got_sq, ref_sq = got_sq + got @ got, ref_sq + ref @ ref
            if ref @ ref > 0:
                cosines.append((got @ ref / np.sqrt((got @ got) * (ref @ ref)), name))
    logits = out.logits.detach().numpy()
    print(f"{file_name} {str(dtype).split('.')[-1]}: loss rel {abs(out.loss.item() - ref_loss) / ref_loss:.3g}, "
          f"logits rel {np.linalg.norm(logits - ref_logits) / np.linalg.norm(ref_logits):.3g}, "
          f"grad norm rel {abs(np.sqrt(got_sq) - np.sqrt(ref_sq)) / np.sqrt(ref_sq):.3g}")
    for cosine, name in sorted(cosines)[:5]:
        print(f"  cosine {cosine:.5f}  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="long", help="tiny, tiny_padded, xlarge_layout or long (its fixture built)")
    args = parser.parse_args()
    cases = {"tiny": fixtures.case_tiny, "tiny_padded": lambda: fixtures.case_tiny_padded(True),
             "xlarge_layout": fixtures.case_xlarge_layout, "long": fixtures.case_long}
    for dtype in (torch.bfloat16, torch.float16):
        emulate(cases[args.case](), dtype)


if __name__ == "__main__":
    main()
