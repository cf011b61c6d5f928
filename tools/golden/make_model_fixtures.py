#!/usr/bin/env python3
"""Golden fixtures for the C++ DeBERTa-v2 model: HF DebertaV2ForSequenceClassification forward + backward.

Weights come from the deterministic init in golden_init.py (model/golden_init.h computes the same values),
so the files hold only inputs, outputs and gradients. One gzip HDF5 per configuration:

  attrs    config_json (as save_pretrained writes it), config_json_full (no diff), transformers_version, torch_version, generator, notes
           param_table_json  [[HF name, [shape...]], ...] in state-dict order
  input_ids [B,L] i64, attention_mask [B,L] i64, labels [B] i64 (f32 for a regression head), logits [B,C] f32,
  loss [] f32
  grad_scale [] f32                 (some files) the grads below are of grad_scale x loss: a power of 2, so
                                    exactly the loss's gradients scaled, lifting ~1e-6 ones above f32's atol
  hidden_states/<k>                 k = 0 embedding output, k = 1.. every layer output (HF output_hidden_states)
  grad/<HF name>                    every parameter gradient (numel <= 65536)
  grad_sample/<HF name>/{index,value}, grad_stats/<HF name> = [sum, L2 norm] (f64)   (numel > 65536)
  hidden_sample/<k>/{index,value}, hidden_stats/<k>                                    (big hidden states)
  param_sample/<HF name>/{index,value}   a few initialized values, so C++ can check the init bit for bit

Usage: python3 tools/golden/make_model_fixtures.py [--out_dir tests/fixtures] [--only tiny,...]
"""

import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch
import transformers
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_init  # noqa: E402

FULL_LIMIT = 65536  # tensors with more elements are stored as a sample + stats
SAMPLE_COUNT = 512
PADDING_NOTE = ("; hidden_states at padded positions follow new-HF semantics (a fully masked query row attends "
                "uniformly): compare real positions only")
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Every field the C++ config parser must understand; the dropouts are 0 so the training path is deterministic.
TINY_CONFIG = {
    "model_type": "deberta-v2",
    "architectures": ["DebertaV2ForSequenceClassification"],
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "pooler_dropout": 0.0,
    "cls_dropout": 0.0,
    "pooler_hidden_act": "gelu",
    "pooler_hidden_size": 32,
    "max_position_embeddings": 64,
    "type_vocab_size": 0,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-7,
    "relative_attention": True,
    "max_relative_positions": -1,
    "position_buckets": 8,
    "pos_att_type": "p2c|c2p",
    "share_att_key": True,
    "norm_rel_ebd": "layer_norm",
    "conv_kernel_size": 3,
    "conv_act": "gelu",
    "position_biased_input": False,
    "pad_token_id": 0,
    "num_labels": 2,
    "id2label": {"0": "not_equivalent", "1": "equivalent"},
    "label2id": {"equivalent": 1, "not_equivalent": 0},
}

XLARGE_LAYOUT_CONFIG = dict(
    TINY_CONFIG,
    vocab_size=1000,
    hidden_size=1536,
    num_hidden_layers=2,
    num_attention_heads=24,
    intermediate_size=6144,
    pooler_hidden_size=1536,
    max_position_embeddings=512,
    position_buckets=256,
    num_labels=3,
    id2label={"0": "CONTRADICTION", "1": "NEUTRAL", "2": "ENTAILMENT"},
    label2id={"CONTRADICTION": 0, "ENTAILMENT": 2, "NEUTRAL": 1},
)


# DeBERTa-v3 (microsoft/deberta-v3-base/large config.json): model type deberta-v2 without the conv layer (no
# conv_kernel_size / conv_act keys), 128k vocabulary, position_buckets 256. Tiny sizes otherwise; the vocab
# stays small (the 128k rows change no code path), so each fixture is about 250 KiB.
V3_TINY_CONFIG = {k: v for k, v in TINY_CONFIG.items() if not k.startswith("conv_")}
V3_TINY_3CLASS_CONFIG = dict(
    V3_TINY_CONFIG,
    num_labels=3,
    id2label={"0": "entailment", "1": "neutral", "2": "contradiction"},
    label2id={"contradiction": 2, "entailment": 0, "neutral": 1},
)
V3_TINY_REGRESSION_CONFIG = dict(V3_TINY_CONFIG, num_labels=1, id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})


# Past 512 tokens: DeBERTa-v2/v3 have no absolute position embedding (position_biased_input false), so
# max_position_embeddings 512 only sets the relative range (max_relative_positions -1 resolves to it) and
# inputs may be longer. Head size 64 (the GPU flash kernels' size) with one head, and 16 log buckets, keep
# every gradient stored whole in a ~0.4 MB file.
LONG_CONFIG = dict(
    TINY_CONFIG,
    hidden_size=64,
    num_attention_heads=1,
    intermediate_size=128,
    pooler_hidden_size=64,
    max_position_embeddings=512,
    position_buckets=16,
)


def token_ids(rng, batch, length, vocab):
    """Ids in [4, vocab): 0..3 are [PAD] [CLS] [SEP] [UNK]; rows start with [CLS]=1 and end with [SEP]=2."""
    ids = rng.integers(4, vocab, size=(batch, length), dtype=np.int64)
    ids[:, 0] = 1
    ids[:, -1] = 2
    return ids


def pad_rows(ids, lengths):
    """Right-pads row b after lengths[b] real tokens with [PAD]=0 and a 0 mask; the last real token is [SEP]."""
    mask = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, n - 1] = 2
        ids[b, n:] = 0
        mask[b, :n] = 1
    return ids, mask


def case_tiny():
    rng = np.random.default_rng(1001)
    ids = token_ids(rng, 3, 16, TINY_CONFIG["vocab_size"])
    mask = np.ones_like(ids)
    labels = np.array([1, 0, 1], dtype=np.int64)
    notes = "B=3 L=16 > bucket midpoint 4 (log-bucket branch runs); no padding; all labels used"
    return "deberta_tiny.h5", TINY_CONFIG, ids, mask, labels, notes


def case_tiny_padded(ignored_label_dropped):
    rng = np.random.default_rng(1002)
    ids = token_ids(rng, 4, 12, TINY_CONFIG["vocab_size"])
    ids, mask = pad_rows(ids, [12, 9, 3, 7])
    ids[0, 5] = 0  # [PAD] id inside a real row: nn.Embedding(padding_idx=0) still gives row 0 no gradient
    labels = np.array([0, 1, 1, 0], dtype=np.int64)
    if ignored_label_dropped:
        labels[3] = -1
        notes = ("B=4 L=12, real lengths [12,9,3,7]; id 0 at [0,5] inside a real row; labels[3] = -1 is dropped "
                 "by HF (loss = mean CE over the 3 rows with label >= 0)")
    else:
        notes = "B=4 L=12, real lengths [12,9,3,7]; id 0 at [0,5] inside a real row; no ignored label"
    return "deberta_tiny_padded.h5", TINY_CONFIG, ids, mask, labels, notes


def case_xlarge_layout():
    rng = np.random.default_rng(1003)
    ids = token_ids(rng, 2, 136, XLARGE_LAYOUT_CONFIG["vocab_size"])
    ids, mask = pad_rows(ids, [136, 97])
    labels = np.array([2, 0], dtype=np.int64)
    notes = "xlarge layer layout, vocab 1000, 2 layers; B=2 L=136 > bucket midpoint 128; row 1 has 97 real tokens"
    return "deberta_xlarge_layout.h5", XLARGE_LAYOUT_CONFIG, ids, mask, labels, notes


def case_v3_three_class():
    rng = np.random.default_rng(1004)
    ids = token_ids(rng, 4, 14, V3_TINY_CONFIG["vocab_size"])
    ids, mask = pad_rows(ids, [14, 10, 6, 14])
    labels = np.array([2, 0, 1, 2], dtype=np.int64)
    notes = "DeBERTa-v3 shape (no conv), 3-class head; B=4 L=14, real lengths [14,10,6,14]"
    return "deberta_v3_tiny_3class.h5", V3_TINY_3CLASS_CONFIG, ids, mask, labels, notes


def case_v3_regression():
    rng = np.random.default_rng(1005)
    ids = token_ids(rng, 3, 12, V3_TINY_CONFIG["vocab_size"])
    ids, mask = pad_rows(ids, [12, 8, 5])
    labels = np.array([4.6, 0.25, 2.0], dtype=np.float32)
    notes = "DeBERTa-v3 shape (no conv), regression head (num_labels 1, MSELoss on f32 labels); B=3 L=12"
    return "deberta_v3_tiny_regression.h5", V3_TINY_REGRESSION_CONFIG, ids, mask, labels, notes


def case_long():
    rng = np.random.default_rng(1006)
    ids = token_ids(rng, 2, 777, LONG_CONFIG["vocab_size"])
    ids, mask = pad_rows(ids, [777, 530])
    labels = np.array([1, 0], dtype=np.int64)
    notes = ("B=2 L=777 > max_position_embeddings 512 (relative positions only); row 1 has 530 real tokens; "
             "16 log buckets over max_relative_positions 512: distances past ~512 clamp to the last bucket; "
             "grads of 64 x loss: the largest (classifier) near 1, where the f32 tolerance is stated; the attention "
             "projections' then ~1e-4 instead of ~1e-6, above its atol")
    return "deberta_long.h5", LONG_CONFIG, ids, mask, labels, notes, 64.0


def build_model(config_dict):
    config = DebertaV2Config(**config_dict)
    torch.manual_seed(0)  # irrelevant (every parameter is overwritten) but keeps construction deterministic
    model = DebertaV2ForSequenceClassification(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(golden_init.fill(name, tuple(p.shape))))
    model.train()  # the training path; every dropout probability is 0
    return model


def hf_drops_negative_labels():
    """Whether the installed HF ignores label -1 for a 1-D int label tensor (DeBERTa-v2 §7 says it should)."""
    model = build_model(dict(TINY_CONFIG, num_hidden_layers=1))
    rng = np.random.default_rng(7)
    ids = torch.from_numpy(token_ids(rng, 2, 6, TINY_CONFIG["vocab_size"]))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        loss_with = model(input_ids=ids, labels=torch.tensor([1, -1])).loss
    expected = torch.nn.functional.cross_entropy(logits[:1], torch.tensor([1]))
    return bool(torch.allclose(loss_with, expected, rtol=1e-6, atol=1e-7))


def sample_indices(name, numel):
    """A fixed sample of flat indices, seeded by the tensor name so every tensor gets its own."""
    seed = golden_init.fnv1a64(name) & 0xFFFFFFFF
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(numel, size=SAMPLE_COUNT, replace=False)).astype(np.int64)


def write_tensor(f, full_name, sample_group, stats_group, key, array):
    """Writes small tensors whole, big ones as a fixed sample plus [sum, L2 norm] in float64."""
    flat = np.ascontiguousarray(array, dtype=np.float32).reshape(-1)
    if flat.size <= FULL_LIMIT:
        f.create_dataset(f"{full_name}/{key}", data=np.asarray(array, dtype=np.float32), compression="gzip")
        return "full"
    index = sample_indices(key, flat.size)
    f.create_dataset(f"{sample_group}/{key}/index", data=index, compression="gzip")
    f.create_dataset(f"{sample_group}/{key}/value", data=flat[index], compression="gzip")
    as64 = flat.astype(np.float64)
    f.create_dataset(f"{stats_group}/{key}", data=np.array([as64.sum(), np.sqrt((as64 * as64).sum())]))
    return "sampled"


def param_sample_names(names):
    """A few tensors of each kind for the init check: embeddings, a Linear, a Conv, LayerNorms, biases."""
    wanted = [
        "deberta.embeddings.word_embeddings.weight",
        "deberta.embeddings.LayerNorm.weight",
        "deberta.embeddings.LayerNorm.bias",
        "deberta.encoder.layer.0.attention.self.query_proj.weight",
        "deberta.encoder.layer.1.intermediate.dense.bias",
        "deberta.encoder.rel_embeddings.weight",
        "deberta.encoder.conv.conv.weight",
        "classifier.weight",
        "classifier.bias",
    ]
    return [n for n in wanted if n in names]


def set_ascii_attr(f, name, text):
    """Variable-length ASCII: HDF5 1.10 cannot convert h5py's default UTF-8 strings to the C side's C_S1."""
    f.attrs.create(name, data=str(text), dtype=h5py.string_dtype("ascii"))


def make_fixture(out_dir, case):
    file_name, config_dict, ids, mask, labels, notes, *rest = case
    grad_scale = rest[0] if rest else None
    model = build_model(config_dict)
    config_json = model.config.to_json_string(use_diff=True)  # what save_pretrained writes as config.json
    config_json_full = model.config.to_json_string(use_diff=False)  # plus every generic HF key
    params = dict(model.named_parameters())

    out = model(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        labels=torch.from_numpy(labels),
        output_hidden_states=True,
    )
    (out.loss * grad_scale if grad_scale else out.loss).backward()

    path = os.path.join(out_dir, file_name)
    counts = {"full": 0, "sampled": 0}
    with h5py.File(path + ".tmp", "w") as f:
        set_ascii_attr(f, "config_json", config_json)
        set_ascii_attr(f, "config_json_full", config_json_full)
        set_ascii_attr(f, "transformers_version", str(transformers.__version__))
        set_ascii_attr(f, "torch_version", str(torch.__version__))
        set_ascii_attr(f, "generator", "tools/golden/make_model_fixtures.py")
        set_ascii_attr(f, "notes", notes + PADDING_NOTE if (mask == 0).any() else notes)
        set_ascii_attr(f, "param_table_json", json.dumps([[n, list(p.shape)] for n, p in params.items()]))
        f.create_dataset("input_ids", data=ids)
        f.create_dataset("attention_mask", data=mask)
        f.create_dataset("labels", data=labels)
        f.create_dataset("logits", data=out.logits.detach().numpy().astype(np.float32))
        f.create_dataset("loss", data=np.float32(out.loss.item()))
        if grad_scale:
            f.create_dataset("grad_scale", data=np.float32(grad_scale))
        for k, h in enumerate(out.hidden_states):
            write_tensor(f, "hidden_states", "hidden_sample", "hidden_stats", str(k), h.detach().numpy())
        for name, p in params.items():
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            counts[write_tensor(f, "grad", "grad_sample", "grad_stats", name, grad.numpy())] += 1
        for name in param_sample_names(params):
            numel = params[name].numel()
            index = sample_indices("param/" + name, numel) if numel > SAMPLE_COUNT else np.arange(numel)
            value = params[name].detach().numpy().reshape(-1)[index]
            f.create_dataset(f"param_sample/{name}/index", data=index)
            f.create_dataset(f"param_sample/{name}/value", data=value)
    os.replace(path + ".tmp", path)
    size_kb = os.path.getsize(path) / 1024
    total = sum(p.numel() for p in params.values())
    print(f"{file_name}: {len(params)} tensors ({total:,} params), grads {counts['full']} full / "
          f"{counts['sampled']} sampled, loss {out.loss.item():.6f}, logits {out.logits.detach().numpy().ravel()}, "
          f"{size_kb:.0f} KiB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out_dir", default=os.path.join(REPO_ROOT, "tests", "fixtures"))
    parser.add_argument("--only", default="",
                        help="comma-separated subset: tiny,tiny_padded,xlarge_layout,v3_3class,v3_regression,long")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

    dropped = hf_drops_negative_labels()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; "
          f"HF drops label -1 for 1-D int labels: {dropped}")
    cases = {
        "tiny": case_tiny,
        "tiny_padded": lambda: case_tiny_padded(dropped),
        "xlarge_layout": case_xlarge_layout,
        "v3_3class": case_v3_three_class,
        "v3_regression": case_v3_regression,
        "long": case_long,
    }
    selected = [c for c in args.only.split(",") if c] or list(cases)
    for key in selected:
        make_fixture(args.out_dir, cases[key]())


if __name__ == "__main__":
    main()
