// train_mrpc: fine-tunes DeBERTa-v2 on GLUE MRPC.
// Until the model lands this builds the data pipeline only: it reads train/dev, tokenizes them with the
// shipped SentencePiece model, builds the training batches and prints what it built.
//
//   train_mrpc [--data_dir DIR] [--max_length N] [--per_device_train_batch_size N] [--seed N]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "data/batcher.h"
#include "data/glue_tsv.h"
#include "data/tokenizer.h"
#include "runtime/check.h"
#include "runtime/device.h"

namespace {

struct Flags {
  std::string data_dir = ZT_DATA_DIR;
  int64_t max_length = 128;
  int64_t per_device_train_batch_size = 8;
  uint64_t seed = 42;
};

constexpr const char* kUsage =
    "usage: train_mrpc [--data_dir DIR] [--max_length N] [--per_device_train_batch_size N] [--seed N]\n";

int64_t parse_int(std::string_view flag, const std::string& value) {
  size_t used = 0;
  long long parsed = 0;
  try {
    parsed = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZT_CHECK(used == value.size() && !value.empty(), flag, " needs an integer, got '", value, "'");
  return parsed;
}

// Accepts "--flag value" and "--flag=value", as HF's argument parser does.
Flags parse_flags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else {
      ZT_CHECK(i + 1 < argc, "flag ", arg, " needs a value\n", kUsage);
      value = argv[++i];
    }
    if (arg == "--data_dir") {
      flags.data_dir = value;
    } else if (arg == "--max_length") {
      flags.max_length = parse_int(arg, value);
      ZT_CHECK(flags.max_length >= 3, "--max_length must be at least 3, got ", flags.max_length);
    } else if (arg == "--per_device_train_batch_size") {
      flags.per_device_train_batch_size = parse_int(arg, value);
      ZT_CHECK(flags.per_device_train_batch_size > 0, "--per_device_train_batch_size must be positive");
    } else if (arg == "--seed") {
      flags.seed = static_cast<uint64_t>(parse_int(arg, value));
    } else {
      ZT_FAIL("unknown flag '", arg, "'\n", kUsage);
    }
  }
  return flags;
}

int run(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  std::printf("zerotrain train_mrpc: %s\n", zt::describe_devices().c_str());
  std::printf("data_dir %s, max_length %lld, per_device_train_batch_size %lld, seed %llu\n",
              flags.data_dir.c_str(), static_cast<long long>(flags.max_length),
              static_cast<long long>(flags.per_device_train_batch_size),
              static_cast<unsigned long long>(flags.seed));

  const zt::data::Tokenizer tokenizer(flags.data_dir + "/spm8k.model");
  std::printf("tokenizer %s: %d pieces, [CLS]=%d [SEP]=%d [PAD]=%d [UNK]=%d\n",
              tokenizer.model_path().c_str(), tokenizer.vocab_size(), tokenizer.cls_id(), tokenizer.sep_id(),
              tokenizer.pad_id(), tokenizer.unk_id());

  const zt::data::GlueDataset train =
      zt::data::read_glue_mrpc_tsv(zt::data::mrpc_split_path(flags.data_dir, "train"));
  const zt::data::GlueDataset dev =
      zt::data::read_glue_mrpc_tsv(zt::data::mrpc_split_path(flags.data_dir, "dev"));
  const zt::data::EncodedDataset train_encoded(train, tokenizer, flags.max_length);
  const zt::data::EncodedDataset dev_encoded(dev, tokenizer, flags.max_length);
  std::printf("train: %s\n", zt::data::describe(train_encoded.length_stats()).c_str());
  std::printf("dev:   %s\n", zt::data::describe(dev_encoded.length_stats()).c_str());

  zt::data::Batcher train_batches(
      train_encoded, {.batch_size = flags.per_device_train_batch_size, .shuffle = true, .seed = flags.seed});
  zt::data::Batcher dev_batches(dev_encoded,
                                {.batch_size = flags.per_device_train_batch_size, .shuffle = false});
  int64_t padded_tokens = 0, real_tokens = 0;
  zt::data::Batch batch;
  while (train_batches.next(batch)) {
    padded_tokens += batch.batch_size * batch.seq_len;
    for (int64_t m : batch.attention_mask) real_tokens += m;
  }
  std::printf(
      "train batches per epoch: %lld (dynamic padding: %lld of %lld positions are real tokens, %.1f%%)\n",
      static_cast<long long>(train_batches.batches_per_epoch()), static_cast<long long>(real_tokens),
      static_cast<long long>(padded_tokens), 100.0 * static_cast<double>(real_tokens) / padded_tokens);
  std::printf("dev batches: %lld\n", static_cast<long long>(dev_batches.batches_per_epoch()));

  train_batches.set_epoch(0);
  ZT_CHECK(train_batches.next(batch), "no training batch");
  const int64_t row = batch.example_index[0];
  const auto ids = train_encoded.ids(row);
  std::printf(
      "first batch: [%lld, %lld]; its first example is train row %lld (label %d, %zu tokens):\n  %s\n",
      static_cast<long long>(batch.batch_size), static_cast<long long>(batch.seq_len),
      static_cast<long long>(row), train_encoded.label(row), ids.size(), tokenizer.decode(ids).c_str());
  std::printf("model not built yet: nothing to train\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const zt::Error& e) {
    std::fprintf(stderr, "train_mrpc: %s\n", e.what());
    return 2;
  }
}
