#!/usr/bin/env python3
"""Acceptance of convert_hf at full size (run on the GPU machine, where transformers is installed).

A random-init DeBERTa-v2-xlarge-mnli (3 labels, 887M parameters) is saved by HF as model.safetensors and as
pytorch_model.bin, each in fp32 and fp16. Every file is imported with convert_hf; our CPU forward on MRPC dev
pairs must give HF's logits (fp32 tolerance atol 1e-5 + rtol 1e-4; an fp16 file is compared with HF running the
same fp16-rounded weights in fp32). Then one imported model is exported back and loaded by HF strictly (no
missing / unexpected keys) and must give the same logits. Peak RSS of each import is reported (the file must
convert in about 1.2x its size).

Usage: python3 tools/golden/xlarge_convert_check.py --bin build/bin --work /tmp/xl [--rows 4] [--layers 24]
"""

import argparse
import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import sentencepiece as spm
import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

XLARGE_MNLI = dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
                   intermediate_size=6144, hidden_act="gelu", hidden_dropout_prob=0.1,
                   attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=0,
                   initializer_range=0.02, layer_norm_eps=1e-7, relative_attention=True, max_relative_positions=-1,
                   pad_token_id=0, position_biased_input=False, pos_att_type=["p2c", "c2p"], position_buckets=256,
                   norm_rel_ebd="layer_norm", share_att_key=True, conv_kernel_size=3, conv_act="gelu",
                   pooler_hidden_size=1536, pooler_dropout=0, pooler_hidden_act="gelu", num_labels=3,
                   id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                   label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})


def mrpc_batch(rows):
    """The first `rows` dev pairs, [CLS] A [SEP] B [SEP] with the shipped spm model, padded to the longest."""
    sp = spm.SentencePieceProcessor(model_file=os.path.join(REPO, "data/glue_mrpc/spm8k.model"))
    with open(os.path.join(REPO, "data/glue_mrpc/dev.tsv"), encoding="utf-8-sig") as f:
        lines = f.read().split("\n")[1:1 + rows]
    seqs = []
    for line in lines:
        fields = line.split("\t")
        a, b = sp.encode(fields[3]), sp.encode(fields[4])
        seqs.append([1] + a[:60] + [2] + b[:60] + [2])
    length = max(len(s) for s in seqs)
    ids = np.zeros((rows, length), np.int64)
    mask = np.zeros((rows, length), np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = 1
    return ids, mask


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Full fp32 on the GPU: cuDNN convolutions (the ConvLayer) default to TF32, which alone moves the logits of a
# random 24-layer model by ~1e-4.
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False


def hf_logits(model, ids, mask):
    model = model.to(DEVICE)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids).to(DEVICE), attention_mask=torch.from_numpy(mask).to(DEVICE))
    return out.logits.float().cpu().numpy()


def run(cmd):
    """Runs a command under /usr/bin/time; returns (seconds, its peak RSS in GiB)."""
    start = time.time()
    res = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, check=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    return time.time() - start, int(res.stderr.strip().splitlines()[-1]) / 2**20


def close(ours, ref):
    err = np.abs(ours - ref)
    ok = bool(np.all(err <= 1e-5 + 1e-4 * np.abs(ref)))
    return ok, float(err.max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin"))
    ap.add_argument("--work", default="/tmp/xlarge_convert")
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--layers", type=int, default=24)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    convert = os.path.join(args.bin, "convert_hf")
    cfg = dict(XLARGE_MNLI, num_hidden_layers=args.layers)
    torch.manual_seed(0)
    model = DebertaV2ForSequenceClassification(DebertaV2Config(**cfg)).eval()
    print(f"xlarge-mnli random init: {sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    ids, mask = mrpc_batch(args.rows)
    inputs = os.path.join(args.work, "inputs.h5")
    with h5py.File(inputs, "w") as f:
        f["input_ids"], f["attention_mask"] = ids, mask

    results, ok_all = [], True
    for dtype in ("f32", "f16"):
        saved = model if dtype == "f32" else model.half()
        # Reference: HF in fp32 on exactly the stored weights (fp16 ones upcast).
        ref_model = DebertaV2ForSequenceClassification(DebertaV2Config(**cfg)).eval()
        ref_model.load_state_dict({k: v.float() for k, v in saved.state_dict().items()})
        ref = hf_logits(ref_model, ids, mask)
        del ref_model
        for fmt, safe in (("safetensors", True), ("bin", False)):
            d = os.path.join(args.work, f"{fmt}_{dtype}")
            if safe:
                saved.save_pretrained(d)
            else:  # transformers 5 writes safetensors even when asked not to: save the torch zip format by hand
                os.makedirs(d, exist_ok=True)
                saved.config.save_pretrained(d)
                torch.save(saved.state_dict(), os.path.join(d, "pytorch_model.bin"))
            size = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)) / 2**30
            out = os.path.join(args.work, f"{fmt}_{dtype}.h5")
            secs, rss = run([convert, "import", d, out])
            logits_file = os.path.join(args.work, f"{fmt}_{dtype}_ours.h5")
            fwd_secs, _ = run([convert, "forward", out, inputs, logits_file])
            with h5py.File(logits_file) as f:
                ours = f["logits"][...]
            ok, err = close(ours, ref)
            ok_all &= ok
            results.append(dict(file=f"{fmt}_{dtype}", max_abs_logit=float(np.abs(ref).max()), gib=round(size, 2), import_s=round(secs, 1),
                                peak_rss_gib=round(rss, 2), rss_over_size=round(rss / size, 2), forward_s=round(fwd_secs, 1),
                                max_abs_err=err, ok=ok))
            print(json.dumps(results[-1]), flush=True)
            for n in os.listdir(d):  # free disk for the next format
                os.remove(os.path.join(d, n))
        model = model.float()

    # Export: our f32 import back to HF, strict load, same logits as our forward.
    src = os.path.join(args.work, "safetensors_f32.h5")
    hf_dir = os.path.join(args.work, "exported")
    run([convert, "export", src, hf_dir])
    back, info = DebertaV2ForSequenceClassification.from_pretrained(hf_dir, output_loading_info=True,
                                                                    dtype=torch.float32)
    strict = not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    with h5py.File(os.path.join(args.work, "safetensors_f32_ours.h5")) as f:
        ours = f["logits"][...]
    ok, err = close(ours, hf_logits(back.eval(), ids, mask))
    ok_all &= ok and strict
    print(json.dumps(dict(export="safetensors_f32 -> HF", strict_load=strict, loading_info={k: len(v) for k, v in info.items()},
                          max_abs_err=err, ok=ok and strict)), flush=True)
    print("PASS" if ok_all else "FAIL")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
