#!/usr/bin/env python3
"""Seed spread of PyTorch + HF on the recipe of zerotrain's embedded default CPU run, the band the C++ trainer's
dev accuracy / F1 must fall inside. Writes tests/fixtures/torch_mrpc_seeds.json:

  recipe   model config (deberta_small_cpu_config() values), data, tokenization, optimizer, schedule, ...
  runs     per seed {seed, dev_accuracy, dev_f1, final_train_loss, seconds, ...}
  summary  min / max / mean of dev accuracy and F1, plus the dev majority-class baseline

Model: model/config.cpp deberta_small_cpu_config(): vocab 8000 (data/glue_mrpc/spm8k.model), hidden 128, 2 heads
of 64, 2 layers, intermediate 512, position_buckets 64, other fields as deberta-v2-xlarge (dropout 0.1, conv
kernel 3 gelu, p2c|c2p, share_att_key, layer_norm rel embeddings, max_position_embeddings 512), num_labels 2.
HF's own random init after torch.manual_seed(seed). Data: train.tsv shuffled every epoch with a torch.Generator
seeded by seed (torch.randperm), max_length 128 (sentencepiece + longest_first, as the C++ tokenizer), dynamic
padding, batch 32 (the last partial batch kept); eval on all of dev.tsv in file order, batch 64, model.eval().
Recipe: RECIPE below = tools/train_mrpc.cpp's embedded default (AdamW lr 1e-4, 3 epochs, weight decay 0, linear
decay without warmup, clip 1.0), so the C++ default run is compared on the same recipe.
Threads: torch.set_num_threads(2). --merge combines per-seed JSONs (e.g. seeds run as parallel processes).

Usage: python3 tools/golden/torch_mrpc_seeds.py [--seeds 0,1,2] [--out tests/fixtures/torch_mrpc_seeds.json]
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import sentencepiece
import torch
import transformers
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mmf  # noqa: E402
from make_mrpc_training_fixture import batches, encode, pad_batch, read_rows  # noqa: E402

# model/config.cpp deberta_small_cpu_config() (= deberta_v2_xlarge_config() with the sizes changed).
SMALL_CPU_CONFIG = dict(
    mmf.TINY_CONFIG,
    vocab_size=8000,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=512,
    pooler_hidden_size=128,
    max_position_embeddings=512,
    position_buckets=64,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    pooler_dropout=0.0,
    _name_or_path="zerotrain/deberta-small-cpu",
)
SMALL_CPU_CONFIG.pop("cls_dropout")  # xlarge has none: StableDropout(cls_dropout) falls back to hidden_dropout_prob

# tools/train_mrpc.cpp's embedded default (apply_embedded_defaults + TrainConfig defaults, run_glue_no_trainer's):
# lr 1e-4, 3 epochs, batch 32, eval batch 64, weight decay 0, linear schedule without warmup, clip 1.0.
RECIPE = {
    "lr": 1e-4,
    "epochs": 3,
    "batch_size": 32,
    "eval_batch_size": 64,
    "max_length": 128,
    "padding": "dynamic (each batch to its longest row)",
    "drop_last": False,
    "shuffle": "every epoch, torch.randperm(n, generator=torch.Generator().manual_seed(seed)) (one generator, "
               "advanced each epoch)",
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "weight_decay": 0.0,
    "no_decay": ["bias", "LayerNorm.weight"],
    "schedule": "linear",
    "warmup_steps": 0,
    "total_steps": None,  # filled in: epochs * ceil(3668 / batch_size)
    "max_grad_norm": 1.0,
    "gradient_accumulation_steps": 1,
    "dtype": "float32",
    "init": "HF _init_weights after torch.manual_seed(seed) (normal 0.02 weights, zero biases, unit LayerNorm)",
    "final_train_loss": "mean training loss over the last epoch's batches",
}


def evaluate(model, dev):
    model.eval()
    preds, labels = [], []
    with torch.no_grad():
        for ids, mask, y in dev:
            logits = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits
            preds.append(logits.argmax(-1).numpy())
            labels.append(y)
    model.train()
    p, y = np.concatenate(preds), np.concatenate(labels)
    tp = int(((p == 1) & (y == 1)).sum())
    fp = int(((p == 1) & (y == 0)).sum())
    fn = int(((p == 0) & (y == 1)).sum())
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return float((p == y).mean()), float(f1), float((p == 1).mean())


def run(seed, train_rows, train_tokens, dev, recipe):
    started = time.time()
    torch.manual_seed(seed)
    model = DebertaV2ForSequenceClassification(DebertaV2Config(**SMALL_CPU_CONFIG)).float()
    model.train()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(nd in name for nd in recipe["no_decay"]) else decay).append(p)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": recipe["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=recipe["lr"], betas=tuple(recipe["betas"]), eps=recipe["eps"])
    scheduler = transformers.get_scheduler("linear", optimizer=optimizer, num_warmup_steps=recipe["warmup_steps"],
                                           num_training_steps=recipe["total_steps"])
    generator = torch.Generator().manual_seed(seed)
    labels_all = np.array([r[0] for r in train_rows], dtype=np.int64)
    n, bs = len(train_rows), recipe["batch_size"]
    epoch_losses = []
    for epoch in range(recipe["epochs"]):
        order = torch.randperm(n, generator=generator).numpy()
        losses = []
        for start in range(0, n, bs):
            idx = order[start:start + bs]
            ids, mask = pad_batch([train_tokens[i] for i in idx])
            out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        labels=torch.from_numpy(labels_all[idx]))
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(out.loss.item())
        acc, f1, pos = evaluate(model, dev)
        epoch_losses.append(float(np.mean(losses)))
        print(f"  seed {seed} epoch {epoch}: train loss {epoch_losses[-1]:.4f}, dev acc {acc:.4f} f1 {f1:.4f} "
              f"(predicted positive {pos:.3f}), {time.time() - started:.1f} s", flush=True)
    return {
        "seed": seed,
        "dev_accuracy": acc,
        "dev_f1": f1,
        "dev_predicted_positive_rate": pos,
        "final_train_loss": epoch_losses[-1],
        "epoch_train_loss": epoch_losses,
        "seconds": round(time.time() - started, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--data_dir", default=os.path.join(mmf.REPO_ROOT, "data", "glue_mrpc"))
    parser.add_argument("--out", default=os.path.join(mmf.REPO_ROOT, "tests", "fixtures", "torch_mrpc_seeds.json"))
    parser.add_argument("--lr", type=float, default=RECIPE["lr"])
    parser.add_argument("--epochs", type=int, default=RECIPE["epochs"])
    parser.add_argument("--merge", default="", help="comma-separated JSONs written by earlier --seeds runs: "
                        "combine their runs instead of training")
    parser.add_argument("--notes", default="", help="free text stored as the JSON's notes")
    args = parser.parse_args()
    torch.set_num_threads(2)

    recipe = dict(RECIPE, lr=args.lr, epochs=args.epochs)
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.data_dir, "spm8k.model"))
    train_rows = read_rows(os.path.join(args.data_dir, "train.tsv"))
    train_tokens = encode(sp, train_rows)
    dev = batches(sp, read_rows(os.path.join(args.data_dir, "dev.tsv")), recipe["eval_batch_size"])
    dev_labels = np.concatenate([y for _, _, y in dev])
    steps_per_epoch = math.ceil(len(train_rows) / recipe["batch_size"])
    recipe["total_steps"] = recipe["epochs"] * steps_per_epoch
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, threads {torch.get_num_threads()}; "
          f"train {len(train_rows)} rows ({steps_per_epoch} steps/epoch), dev {len(dev_labels)} rows "
          f"(majority {max(dev_labels.mean(), 1 - dev_labels.mean()):.4f}); lr {recipe['lr']}, "
          f"epochs {recipe['epochs']}, warmup {recipe['warmup_steps']}/{recipe['total_steps']}", flush=True)

    if args.merge:
        runs = []
        for path in args.merge.split(","):
            with open(path) as f:
                part = json.load(f)
            assert part["recipe"] == recipe, f"{path}: recipe differs"
            runs += part["runs"]
            threads, versions = part["torch_threads"], (part["transformers_version"], part["torch_version"])
        runs.sort(key=lambda r: r["seed"])
    else:
        runs = [run(int(s), train_rows, train_tokens, dev, recipe) for s in args.seeds.split(",")]
        threads, versions = torch.get_num_threads(), (transformers.__version__, torch.__version__)
    acc = [r["dev_accuracy"] for r in runs]
    f1 = [r["dev_f1"] for r in runs]
    majority = float(max(dev_labels.mean(), 1 - dev_labels.mean()))
    result = {
        "generator": "tools/golden/torch_mrpc_seeds.py",
        "transformers_version": versions[0],
        "torch_version": versions[1],
        "torch_threads": threads,
        "notes": args.notes,
        "recipe": recipe,
        "config_json": DebertaV2Config(**SMALL_CPU_CONFIG).to_json_string(use_diff=True),
        "data": {"train": "data/glue_mrpc/train.tsv (%d rows)" % len(train_rows),
                 "dev": "data/glue_mrpc/dev.tsv (%d rows)" % len(dev_labels),
                 "tokenizer": "sentencepiece spm8k.model, [CLS] A [SEP] B [SEP], longest_first truncation"},
        "runs": runs,
        "summary": {
            "dev_accuracy": {"min": min(acc), "max": max(acc), "mean": float(np.mean(acc))},
            "dev_f1": {"min": min(f1), "max": max(f1), "mean": float(np.mean(f1))},
            "dev_majority_accuracy": majority,
            "dev_majority_f1": 2 * float(dev_labels.mean()) / (1 + float(dev_labels.mean())),
        },
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result["summary"], indent=2))
    for r in runs:
        print(f"seed {r['seed']}: acc {r['dev_accuracy']:.4f} f1 {r['dev_f1']:.4f} "
              f"final train loss {r['final_train_loss']:.4f}, {r['seconds']} s")


if __name__ == "__main__":
    main()
