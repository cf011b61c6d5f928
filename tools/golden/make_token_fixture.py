#!/usr/bin/env python3
"""Golden token ids for GLUE MRPC pairs, for tests/data/test_tokenizer_parity.cpp.

Two reference encodings of every (#1 String, #2 String) pair of train/dev/test, at max_length 128 and 32,
truncation=True (longest_first), no padding:

  hf   DebertaV2Tokenizer.from_pretrained(<folder with spm.model + tokenizer_config.json>), the tokenizer
       run_glue builds. In transformers 5.x this is a `tokenizers` Unigram whose normalizer is NFC (not the
       model's NFKC charsmap), so characters such as U+00BD, U+00B4, U+2026 come out as [UNK].
  spm  the `sentencepiece` package encoding each sentence with the model's own normalization (nmt_nfkc),
       then [CLS] A [SEP] B [SEP] with the `tokenizers` longest_first rule (reference/deberta-v2.md 10.2).
       This is what libsentencepiece gives, and what HF 4.x (fast, converted with the Precompiled charsmap)
       gives.

Layout (all datasets gzip-compressed):
  /<variant>/<split>/L<max_length>/ids      uint16 (int32 if the vocab needs it), all rows concatenated
  /<variant>/<split>/L<max_length>/offsets  int64 [rows + 1]; row r is ids[offsets[r]:offsets[r+1]]
  /spm/<split>/len_a, /spm/<split>/len_b    int32 [rows], piece counts of each sentence before truncation
  /diff/<split>/L<max_length>               int64 row indices (0-based, header excluded) where hf != spm
  root attrs: transformers_version, tokenizers_version, sentencepiece_version, spm_model_sha256, data_dir,
              max_lengths, splits, and per split <split>_rows.
The attention mask is 1 on every stored token (no padding), which the script asserts for the hf variant.

Usage: python3 tools/golden/make_token_fixture.py [--data_dir data/glue_mrpc] [--out tests/fixtures/mrpc_tokens.h5]
Needs transformers, tokenizers, sentencepiece, protobuf (transformers reads spm.model through it), h5py.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import unicodedata

import h5py
import numpy as np

SPLITS = ("train", "dev", "test")
MAX_LENGTHS = (128, 32)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_pairs(path):
    """(sentence1, sentence2) per row of a GLUE MRPC TSV: tab-separated, no quoting, optional BOM."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    pairs = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 5:
            sys.exit(f"{path}:{number}: expected 5 tab-separated fields, got {len(fields)}")
        pairs.append((fields[3], fields[4]))
    return pairs


def truncated_lengths(n_a, n_b, budget):
    """tokenizers' longest_first for a pair: how many leading tokens of A and of B are kept."""
    if n_a + n_b <= budget:
        return n_a, n_b
    a_is_short = n_a <= n_b
    n1, n2 = (n_a, n_b) if a_is_short else (n_b, n_a)
    n2 = n1 if n1 > budget else max(n1, budget - n1)
    if n1 + n2 > budget:
        n1 = budget // 2
        n2 = n1 + budget % 2
    return (n1, n2) if a_is_short else (n2, n1)


def nfkc_changed_chars(text):
    return sorted({c for c in text if unicodedata.normalize("NFKC", c) != c})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=os.path.join(REPO_ROOT, "data", "glue_mrpc"))
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "tests", "fixtures", "mrpc_tokens.h5"))
    parser.add_argument("--spm_model", default=None, help="default: <data_dir>/spm8k.model")
    args = parser.parse_args()

    try:
        import google.protobuf  # noqa: F401  (transformers needs it to read spm.model)
    except ImportError:
        sys.exit("make_token_fixture: the 'protobuf' package is missing; without it transformers 5.x cannot "
                 "read spm.model (it falls back to a tiktoken reader and fails). pip install protobuf")
    import sentencepiece
    import tokenizers
    import transformers
    from transformers import DebertaV2Tokenizer

    model_path = args.spm_model or os.path.join(args.data_dir, "spm8k.model")
    with open(model_path, "rb") as f:
        model_sha = hashlib.sha256(f.read()).hexdigest()

    # from_pretrained on a folder, as run_glue does; DebertaV2Tokenizer(vocab_file=...) in 5.x ignores the
    # vocabulary and maps every piece to id 1.
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(model_path, os.path.join(folder, "spm.model"))
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": False, "vocab_type": "spm", "model_max_length": 512}, f)
        hf = DebertaV2Tokenizer.from_pretrained(folder)
    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)

    cls_id, sep_id = sp.piece_to_id("[CLS]"), sp.piece_to_id("[SEP]")
    assert hf.convert_tokens_to_ids(["[CLS]", "[SEP]"]) == [cls_id, sep_id], "special ids disagree"
    id_dtype = np.uint16 if sp.get_piece_size() <= 65536 else np.int32
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
          f"sentencepiece {sentencepiece.__version__}; model {model_path} ({sp.get_piece_size()} pieces)")
    if hasattr(hf, "backend_tokenizer"):
        print(f"hf normalizer: {hf.backend_tokenizer.normalizer}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    total_compared = 0
    total_diff = 0
    with h5py.File(args.out, "w") as out:
        out.attrs["transformers_version"] = transformers.__version__
        out.attrs["tokenizers_version"] = tokenizers.__version__
        out.attrs["sentencepiece_version"] = sentencepiece.__version__
        out.attrs["spm_model_sha256"] = model_sha
        out.attrs["max_lengths"] = np.array(MAX_LENGTHS, dtype=np.int64)
        out.attrs["splits"] = ",".join(SPLITS)

        def store(name, values, dtype):
            out.create_dataset(name, data=np.asarray(values, dtype=dtype), compression="gzip",
                               compression_opts=9, shuffle=True)

        for split in SPLITS:
            pairs = read_pairs(os.path.join(args.data_dir, f"{split}.tsv"))
            out.attrs[f"{split}_rows"] = len(pairs)
            pieces_a = [sp.encode(a) for a, _ in pairs]
            pieces_b = [sp.encode(b) for _, b in pairs]
            store(f"spm/{split}/len_a", [len(p) for p in pieces_a], np.int32)
            store(f"spm/{split}/len_b", [len(p) for p in pieces_b], np.int32)
            for max_length in MAX_LENGTHS:
                spm_rows = []
                for a, b in zip(pieces_a, pieces_b):
                    keep_a, keep_b = truncated_lengths(len(a), len(b), max_length - 3)
                    spm_rows.append([cls_id] + a[:keep_a] + [sep_id] + b[:keep_b] + [sep_id])
                enc = hf([a for a, _ in pairs], [b for _, b in pairs], truncation=True, max_length=max_length)
                hf_rows = enc["input_ids"]
                for ids, mask in zip(hf_rows, enc["attention_mask"]):
                    assert len(mask) == len(ids) and all(m == 1 for m in mask), "unpadded mask must be all 1"
                diff = [r for r in range(len(pairs)) if hf_rows[r] != spm_rows[r]]
                for variant, rows in (("hf", hf_rows), ("spm", spm_rows)):
                    offsets = np.cumsum([0] + [len(r) for r in rows], dtype=np.int64)
                    store(f"{variant}/{split}/L{max_length}/ids", [t for r in rows for t in r], id_dtype)
                    store(f"{variant}/{split}/L{max_length}/offsets", offsets, np.int64)
                store(f"diff/{split}/L{max_length}", diff, np.int64)
                total_compared += len(pairs)
                total_diff += len(diff)
                print(f"{split:5s} L={max_length:3d}: {len(pairs)} rows compared, {len(diff)} differ (hf != spm), "
                      f"{sum(len(r) == max_length for r in spm_rows)} hit max_length")
                unk = hf.convert_tokens_to_ids("[UNK]")
                for r in diff:
                    changed = nfkc_changed_chars(pairs[r][0] + pairs[r][1])
                    names = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in changed)
                    print(f"    row {r}: NFKC changes [{names}]; hf has {hf_rows[r].count(unk)} [UNK], "
                          f"spm {spm_rows[r].count(unk)}; lengths hf {len(hf_rows[r])} spm {len(spm_rows[r])}")
    print(f"total: {total_compared} rows compared, {total_diff} differ; wrote {args.out}")


if __name__ == "__main__":
    main()
