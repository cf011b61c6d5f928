#!/usr/bin/env python3
"""Golden 50-step training run on REAL MRPC batches: HF DebertaV2ForSequenceClassification + torch.optim.AdamW,
set up as run_glue_no_trainer does. The C++ trainer must reproduce the loss curve within 0.5 % per step.
Writes tests/fixtures/deberta_mrpc_train50.h5:

  attrs    config_json (what save_pretrained writes as config.json), config_json_full, optimizer (JSON),
           data (JSON: files, rows, tokenization), notes, generator, transformers_version, torch_version,
           sentencepiece_version, spm_model_sha256
  input_ids/<s> [8, L_s] i64, attention_mask/<s> [8, L_s] i64, labels/<s> [8] i64     s = 0..49, step s's batch
           (train.tsv rows 8s..8s+7 in file order, header excluded; padded to the batch's longest row with id 0
           and mask 0 -- dynamic padding, what data/batcher.h does with shuffle off)
  loss [50] f32         loss of step s's batch before its update
  lr [50] f64           learning rate step s's update used (lr[0] = 0: warmup; step 0 still advances AdamW's
                        moments and step count, as torch does)
  grad_norm [50] f32    total L2 norm of the gradients before clipping (clip_grad_norm_'s return value)
  eval_input_ids/<k> [16, L_k], eval_attention_mask/<k>, eval_labels/<k>    k = 0..3, dev rows 16k..16k+15
  eval_logits [64, 2] f32   logits of dev rows 0..63 after the 50 steps (model.eval(); dropout is 0 anyway)

Model: vocab 8000 (data/glue_mrpc/spm8k.model), hidden 64, 2 heads (d 32), 2 layers, intermediate 256,
position_buckets 64, max_position_embeddings 512, conv kernel 3 gelu, every dropout 0; weights = the golden init
(golden_init.py; model/golden_init.h computes the same values).
Tokenization: the sentencepiece package (nmt_nfkc) per sentence, [CLS] A [SEP] B [SEP], tokenizers' longest_first
truncation at max_length 128 -- exactly make_token_fixture.py's "spm" variant (= the C++ tokenizer).
Optimizer: AdamW lr 2e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 except on names containing "bias" or
"LayerNorm.weight"; transformers.get_scheduler("linear") with 5 warmup steps over 50; clip_grad_norm_ 1.0 before
step; gradient accumulation 1; fp32; model.train().

With --dtype bf16 (GPU machine): the same run on CUDA under torch.autocast(bfloat16) -- fp32 parameters, AdamW
and gradients, bf16 matmuls -- written to deberta_mrpc_train50_bf16.h5, the reference of the bf16 loss curve.

Usage: python3 tools/golden/make_mrpc_training_fixture.py [--out_dir tests/fixtures] [--data_dir data/glue_mrpc]
                                                          [--dtype fp32|bf16]
"""

import argparse
import hashlib
import json
import os
import sys
import time

import h5py
import numpy as np
import sentencepiece
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mmf  # noqa: E402
from make_token_fixture import truncated_lengths  # noqa: E402

STEPS, BATCH, MAX_LENGTH = 50, 8, 128
EVAL_ROWS, EVAL_BATCH = 64, 16

CONFIG = dict(
    mmf.TINY_CONFIG,
    vocab_size=8000,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=256,
    pooler_hidden_size=64,
    max_position_embeddings=512,
    position_buckets=64,
)

OPTIMIZER = {
    "lr": 2e-4,
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "weight_decay": 0.01,
    "no_decay": ["bias", "LayerNorm.weight"],
    "schedule": "linear",
    "warmup_steps": 5,
    "total_steps": STEPS,
    "max_grad_norm": 1.0,
    "gradient_accumulation_steps": 1,
    "batch_size": BATCH,
}


def read_rows(path):
    """(label, sentence1, sentence2) per data row, read as the C++ reader does: skip the UTF-8 BOM and the header,
    split on '\\n' and '\\t' (5 fields, no quoting)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 5:
            sys.exit(f"{path}:{number}: expected 5 tab-separated fields, got {len(fields)}")
        rows.append((int(fields[0]), fields[3], fields[4]))
    return rows


def encode(sp, rows):
    """Token ids of every row, make_token_fixture.py's spm variant at MAX_LENGTH."""
    cls_id, sep_id = sp.piece_to_id("[CLS]"), sp.piece_to_id("[SEP]")
    assert (cls_id, sep_id, sp.piece_to_id("[PAD]")) == (1, 2, 0), "spm8k special ids changed"
    out = []
    for _, a_text, b_text in rows:
        a, b = sp.encode(a_text), sp.encode(b_text)
        keep_a, keep_b = truncated_lengths(len(a), len(b), MAX_LENGTH - 3)
        out.append([cls_id] + a[:keep_a] + [sep_id] + b[:keep_b] + [sep_id])
    return out


def pad_batch(token_rows):
    """Dynamic padding: to the batch's longest row, id 0 and mask 0 after each row's tokens."""
    width = max(len(r) for r in token_rows)
    ids = np.zeros((len(token_rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, r in enumerate(token_rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    return ids, mask


def batches(sp, rows, batch):
    tokens = encode(sp, rows)
    out = []
    for start in range(0, len(rows), batch):
        ids, mask = pad_batch(tokens[start:start + batch])
        labels = np.array([r[0] for r in rows[start:start + batch]], dtype=np.int64)
        out.append((ids, mask, labels))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out_dir", default=os.path.join(mmf.REPO_ROOT, "tests", "fixtures"))
    parser.add_argument("--data_dir", default=os.path.join(mmf.REPO_ROOT, "data", "glue_mrpc"))
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    bf16 = args.dtype == "bf16"
    if bf16:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        assert torch.cuda.is_available(), "--dtype bf16 runs on a GPU"
    device = torch.device("cuda" if bf16 else "cpu")

    def on(array):
        return torch.from_numpy(array).to(device)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16)
    os.makedirs(args.out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    started = time.time()

    spm_path = os.path.join(args.data_dir, "spm8k.model")
    with open(spm_path, "rb") as f:
        spm_sha = hashlib.sha256(f.read()).hexdigest()
    sp = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    train = batches(sp, read_rows(os.path.join(args.data_dir, "train.tsv"))[:STEPS * BATCH], BATCH)
    dev = batches(sp, read_rows(os.path.join(args.data_dir, "dev.tsv"))[:EVAL_ROWS], EVAL_BATCH)
    assert len(train) == STEPS and len(dev) == EVAL_ROWS // EVAL_BATCH

    model = mmf.build_model(CONFIG).to(device)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(nd in name for nd in OPTIMIZER["no_decay"]) else decay).append(p)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": OPTIMIZER["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=OPTIMIZER["lr"], betas=tuple(OPTIMIZER["betas"]), eps=OPTIMIZER["eps"])
    scheduler = transformers.get_scheduler("linear", optimizer=optimizer,
                                           num_warmup_steps=OPTIMIZER["warmup_steps"], num_training_steps=STEPS)

    losses = np.zeros(STEPS, dtype=np.float32)
    lrs = np.zeros(STEPS, dtype=np.float64)
    grad_norms = np.zeros(STEPS, dtype=np.float32)
    model.train()
    for s, (ids, mask, labels) in enumerate(train):
        with autocast():
            out = model(input_ids=on(ids), attention_mask=on(mask), labels=on(labels))
        out.loss.backward()
        grad_norms[s] = torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIMIZER["max_grad_norm"]).item()
        lrs[s] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses[s] = out.loss.item()

    model.eval()
    with torch.no_grad(), autocast():
        eval_logits = np.concatenate([
            model(input_ids=on(ids), attention_mask=on(mask)).logits.float().cpu().numpy()
            for ids, mask, _ in dev]).astype(np.float32)
    eval_labels = np.concatenate([labels for _, _, labels in dev])
    eval_acc = float((eval_logits.argmax(1) == eval_labels).mean())

    data = {
        "train": "data/glue_mrpc/train.tsv rows 0..%d (file order, header excluded), batch %d" % (
            STEPS * BATCH - 1, BATCH),
        "eval": "data/glue_mrpc/dev.tsv rows 0..%d, batch %d" % (EVAL_ROWS - 1, EVAL_BATCH),
        "tokenizer": "sentencepiece spm8k.model, [CLS] A [SEP] B [SEP], longest_first truncation",
        "max_length": MAX_LENGTH,
        "padding": "dynamic: each batch to its longest row, id 0 / mask 0",
    }
    path = os.path.join(args.out_dir, "deberta_mrpc_train50_bf16.h5" if bf16 else "deberta_mrpc_train50.h5")
    with h5py.File(path + ".tmp", "w") as f:
        mmf.set_ascii_attr(f, "config_json", model.config.to_json_string(use_diff=True))
        mmf.set_ascii_attr(f, "config_json_full", model.config.to_json_string(use_diff=False))
        mmf.set_ascii_attr(f, "transformers_version", str(transformers.__version__))
        mmf.set_ascii_attr(f, "torch_version", str(torch.__version__))
        mmf.set_ascii_attr(f, "sentencepiece_version", str(sentencepiece.__version__))
        mmf.set_ascii_attr(f, "spm_model_sha256", spm_sha)
        mmf.set_ascii_attr(f, "generator", "tools/golden/make_mrpc_training_fixture.py")
        mmf.set_ascii_attr(f, "optimizer", json.dumps(OPTIMIZER))
        mmf.set_ascii_attr(f, "data", json.dumps(data))
        mmf.set_ascii_attr(f, "notes", (
            f"{STEPS} AdamW steps on real MRPC batches of {BATCH} consecutive train rows, dynamic padding; "
            "initial weights = golden init; every dropout 0; loss[s] is step s's loss before its update; "
            "lr[s] the lr its update used (lr[0] = 0 with 5 warmup steps: step 0 changes no weight but still "
            "advances AdamW's moments and step count, so bias correction counts it); grad_norm[s] pre-clip "
            "(over all parameters); eval_logits after the last step in model.eval(), "
            f"dev rows 0..{EVAL_ROWS - 1} in batches of {EVAL_BATCH}"
            + ("; CUDA, torch.autocast(bfloat16): fp32 parameters, gradients and AdamW, bf16 matmuls" if bf16
               else "; CPU, fp32")))
        for s, (ids, mask, labels) in enumerate(train):
            f.create_dataset(f"input_ids/{s}", data=ids, compression="gzip")
            f.create_dataset(f"attention_mask/{s}", data=mask, compression="gzip")
            f.create_dataset(f"labels/{s}", data=labels)
        for k, (ids, mask, labels) in enumerate(dev):
            f.create_dataset(f"eval_input_ids/{k}", data=ids, compression="gzip")
            f.create_dataset(f"eval_attention_mask/{k}", data=mask, compression="gzip")
            f.create_dataset(f"eval_labels/{k}", data=labels)
        f.create_dataset("loss", data=losses)
        f.create_dataset("lr", data=lrs)
        f.create_dataset("grad_norm", data=grad_norms)
        f.create_dataset("eval_logits", data=eval_logits)
    os.replace(path + ".tmp", path)

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"sentencepiece {sentencepiece.__version__}")
    print("batch lengths:", [ids.shape[1] for ids, _, _ in train])
    print(" step      loss          lr   grad_norm")
    for s in range(STEPS):
        print(f"{s:5d}  {losses[s]:.6f}  {lrs[s]:.4e}  {grad_norms[s]:.5f}")
    print(f"loss mean first 10 {losses[:10].mean():.5f}, last 10 {losses[-10:].mean():.5f}; "
          f"eval accuracy on dev rows 0..{EVAL_ROWS - 1}: {eval_acc:.4f}; "
          f"{os.path.getsize(path) // 1024} KiB; {time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
