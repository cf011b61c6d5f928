#!/usr/bin/env python3
"""Writes the small seed corpora of the libFuzzer targets into tests/fuzz/corpus/<target>/.

Seeds are tiny valid files (the fuzzer mutates from there) plus a few known-hostile ones:
  fuzz_safetensors/  F32 / F16 / BF16 / I64 tensors, __metadata__, an empty tensor, space-padded header
  fuzz_zip/          torch.save zips (fp32 with a shared-storage view and a transposed view, fp16, protocol 4)
  fuzz_pickle/       the data.pkl of each zip, and a pickle calling posix.system
Usage: python3 tests/fuzz/make_seed_corpus.py
"""

import io
import os
import zipfile
from collections import OrderedDict

import torch
from safetensors.torch import save

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    torch.manual_seed(0)
    base = torch.randn(3, 4)
    write("fuzz_safetensors", "mixed.safetensors",
          save({"a": base, "b": base.half(), "c": base.bfloat16()[:1].contiguous(), "ids": torch.arange(4),
                "empty": torch.zeros(0, 3)}, metadata={"format": "pt"}))
    header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' + b" " * 6
    write("fuzz_safetensors", "padded.safetensors", len(header).to_bytes(8, "little") + header + bytes(8))

    dicts = {
        "views": OrderedDict(q=base[:2], k=base[2:], v=base.t(), h=base.half()),
        "half": OrderedDict((n, torch.randn(2, 3).half()) for n in ("x", "y")),
    }
    for name, sd in dicts.items():
        for protocol in (2, 4):
            buf = io.BytesIO()
            torch.save(sd, buf, pickle_protocol=protocol)
            data = buf.getvalue()
            write("fuzz_zip", "%s_p%d.bin" % (name, protocol), data)
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
                write("fuzz_pickle", "%s_p%d.pkl" % (name, protocol), z.read(pkl))
    write("fuzz_pickle", "os_system.pkl", b"\x80\x02cposix\nsystem\nq\x00X\x0a\x00\x00\x00echo pwnedq\x01\x85R.")


if __name__ == "__main__":
    main()
