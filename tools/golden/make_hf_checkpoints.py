#!/usr/bin/env python3
"""Small HF checkpoints of the tiny DeBERTa-v2 config in every format convert_hf reads, plus HF logits.

The config is tests/fixtures/deberta_tiny.h5's config_json with an MNLI-like 3-label head. Weights are HF's
random init, then every tensor (biases and LayerNorms included, which HF would init to 0/1) is perturbed so a
mis-mapped tensor changes the logits. Output, under tests/fixtures/hf_tiny_mnli/:

  safetensors_f32/       config.json, model.safetensors (F32), spm.model (a few bytes; checks the copy)
  safetensors_f16/       F16 weights            safetensors_bf16/   BF16 weights
  safetensors_sharded/   model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json (F32)
  safetensors_extras/    F32 with "bert." prefixes for the embeddings and the tensors HF ignores
                         (position_embeddings, position_ids I64, lm_predictions.*)
  torch_f32/             pytorch_model.bin via torch.save (zip); query/key weights of layer 0 are views of
                         one shared storage, value weight of layer 0 a transposed (non-contiguous) view
  torch_f16/             pytorch_model.bin with HalfStorage
  logits.h5              input_ids, attention_mask [B, L] i64; logits_f32 / logits_f16 / logits_bf16 [B, 3]:
                         HF forward in f32 on the f32 weights / on the f16- / bf16-rounded weights upcast
  attrs                  config_json, transformers_version, torch_version

A DeBERTa-v3-shaped checkpoint (no conv layer: the config has no conv_* keys, as microsoft/deberta-v3-*)
with a 3-label head, under tests/fixtures/hf_tiny_v3/: config.json, model.safetensors (F32), spm.model (a real
56-piece SentencePiece model with DeBERTa's [PAD] [CLS] [SEP] [UNK] ids 0-3, trained here on a fixed word list,
so train_mrpc can fine-tune the checkpoint end to end; sentencepiece's trainer is not byte-reproducible),
logits.h5 (input_ids, attention_mask, logits_f32 of HF
on those weights).

Usage: python3 tools/golden/make_hf_checkpoints.py [--out_dir tests/fixtures/hf_tiny_mnli] [--which mnli,v3]
"""

import argparse
import json
import os
import shutil
from collections import OrderedDict

import h5py
import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MNLI_LABELS = ["CONTRADICTION", "NEUTRAL", "ENTAILMENT"]


def tiny_mnli_config():
    with h5py.File(os.path.join(REPO_ROOT, "tests", "fixtures", "deberta_tiny.h5"), "r") as f:
        cfg = json.loads(f.attrs["config_json"])
    cfg["num_labels"] = 3
    cfg["id2label"] = {str(i): n for i, n in enumerate(MNLI_LABELS)}
    cfg["label2id"] = {n: i for i, n in enumerate(MNLI_LABELS)}
    for key in ("transformers_version",):
        cfg.pop(key, None)
    return DebertaV2Config(**cfg)


def tiny_v3_config():
    cfg = json.loads(tiny_mnli_config().to_json_string())
    for key in [k for k in cfg if k.startswith("conv_")] + ["transformers_version"]:
        cfg.pop(key, None)
    cfg["id2label"] = {"0": "entailment", "1": "neutral", "2": "contradiction"}
    cfg["label2id"] = {"entailment": 0, "neutral": 1, "contradiction": 2}
    return DebertaV2Config(**cfg)


def make_model(config):
    torch.manual_seed(20240611)
    model = DebertaV2ForSequenceClassification(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn_like(p)
            if name.endswith("LayerNorm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.15 * noise)
    return model


def batch():
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(4, 128, (3, 11), generator=gen)
    ids[:, 0] = 1
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # a padded row
    ids[1, 8:] = 0
    mask[2, 5:] = 0
    ids[2, 5:] = 0
    return ids, mask


def logits_with(model, state, ids, mask):
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float().numpy()


def write_dir(out, name, config_json, spm=False):
    d = os.path.join(out, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(config_json)
    if spm:
        with open(os.path.join(d, "spm.model"), "wb") as f:
            f.write(b"not a real sentencepiece model; convert_hf only copies it\n")
    return d


TINY_WORDS = ("the a movie film story plot actor scene evening sunday night day week city old new small big good bad "
              "great awful entailment neutral contradiction question answer yes no is was").split()


def write_tiny_spm(path):
    import random
    import tempfile
    import sentencepiece as spm
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("\n".join(" ".join(rng.choice(TINY_WORDS) for _ in range(8)) for _ in range(2000)))
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(tmp, "spm"), vocab_size=56,
                                       model_type="unigram", pad_id=0, pad_piece="[PAD]", bos_id=1,
                                       bos_piece="[CLS]", eos_id=2, eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]",
                                       normalization_rule_name="identity", character_coverage=1.0, minloglevel=2,
                                       num_threads=1)
        shutil.copy(os.path.join(tmp, "spm.model"), path)


def make_v3(out):
    config = tiny_v3_config()
    model = make_model(config)
    assert not hasattr(model.deberta.encoder, "conv") or model.deberta.encoder.conv is None
    config_json = config.to_json_string()
    assert "conv_kernel_size" not in json.loads(config_json)
    sd = OrderedDict((k, v.detach().clone().contiguous()) for k, v in model.state_dict().items())
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(config_json)
    write_tiny_spm(os.path.join(out, "spm.model"))
    save_file(dict(sd), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    ids, mask = batch()
    with h5py.File(os.path.join(out, "logits.h5"), "w") as f:
        f.attrs["config_json"] = config_json
        f.attrs["transformers_version"] = str(transformers.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["generator"] = "tools/golden/make_hf_checkpoints.py"
        f["input_ids"] = ids.numpy()
        f["attention_mask"] = mask.numpy()
        f["logits_f32"] = logits_with(make_model(config), sd, ids, mask)
    print("wrote", out, "tensors", len(sd))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out_dir", default=os.path.join(REPO_ROOT, "tests", "fixtures", "hf_tiny_mnli"))
    ap.add_argument("--v3_out_dir", default=os.path.join(REPO_ROOT, "tests", "fixtures", "hf_tiny_v3"))
    ap.add_argument("--which", default="mnli,v3", help="comma-separated: mnli, v3")
    args = ap.parse_args()
    if "v3" in args.which.split(","):
        make_v3(args.v3_out_dir)
    if "mnli" not in args.which.split(","):
        return
    out = args.out_dir
    os.makedirs(out, exist_ok=True)

    config = tiny_mnli_config()
    model = make_model(config)
    config_json = config.to_json_string()
    sd = OrderedDict((k, v.detach().clone().contiguous()) for k, v in model.state_dict().items())

    # safetensors in three dtypes
    for dtype, tag in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")):
        d = write_dir(out, "safetensors_" + tag, config_json, spm=(tag == "f32"))
        save_file({k: v.to(dtype).contiguous() for k, v in sd.items()}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})

    # two shards + index
    d = write_dir(out, "safetensors_sharded", config_json)
    names = list(sd)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(halves):
        shard = "model-%05d-of-00002.safetensors" % (i + 1)
        save_file({k: sd[k] for k in part}, os.path.join(d, shard), metadata={"format": "pt"})
        weight_map.update({k: shard for k in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * 4 for v in sd.values())}, "weight_map": weight_map},
                  f, indent=2)

    # old-style names and tensors HF ignores
    d = write_dir(out, "safetensors_extras", config_json)
    extras = OrderedDict()
    for k, v in sd.items():
        extras[k.replace("deberta.embeddings.", "bert.embeddings.")] = v
    extras["deberta.embeddings.position_embeddings.weight"] = torch.randn(config.max_position_embeddings,
                                                                         config.hidden_size)
    extras["deberta.embeddings.position_ids"] = torch.arange(config.max_position_embeddings).unsqueeze(0)
    extras["lm_predictions.lm_head.bias"] = torch.zeros(config.vocab_size)
    extras["lm_predictions.lm_head.dense.weight"] = torch.randn(config.hidden_size, config.hidden_size)
    save_file(dict(extras), os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

    # torch zip: fp32 with shared-storage and transposed views, and fp16
    d = write_dir(out, "torch_f32", config_json)
    views = OrderedDict(sd)
    q = "deberta.encoder.layer.0.attention.self.query_proj.weight"
    k = "deberta.encoder.layer.0.attention.self.key_proj.weight"
    v = "deberta.encoder.layer.0.attention.self.value_proj.weight"
    shared = torch.cat([sd[q].flatten(), sd[k].flatten()])
    views[q] = shared[: sd[q].numel()].view(sd[q].shape)
    views[k] = shared[sd[q].numel():].view(sd[k].shape)
    views[v] = sd[v].t().contiguous().t()
    assert views[k].storage_offset() > 0 and not views[v].is_contiguous()
    torch.save(views, os.path.join(d, "pytorch_model.bin"))
    d = write_dir(out, "torch_f16", config_json)
    torch.save(OrderedDict((k2, t.half()) for k2, t in sd.items()), os.path.join(d, "pytorch_model.bin"))

    ids, mask = batch()
    ref = make_model(config)
    with h5py.File(os.path.join(out, "logits.h5"), "w") as f:
        f.attrs["config_json"] = config_json
        f.attrs["transformers_version"] = str(transformers.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["generator"] = "tools/golden/make_hf_checkpoints.py"
        f["input_ids"] = ids.numpy()
        f["attention_mask"] = mask.numpy()
        f["logits_f32"] = logits_with(ref, sd, ids, mask)
        f["logits_f16"] = logits_with(ref, {k2: t.half() for k2, t in sd.items()}, ids, mask)
        f["logits_bf16"] = logits_with(ref, {k2: t.bfloat16() for k2, t in sd.items()}, ids, mask)
    print("wrote", out)


if __name__ == "__main__":
    main()
