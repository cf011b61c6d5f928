// HF checkpoints in and out: every format imports to weights whose forward matches HF's logits, the MNLI head
// is re-initialised for MRPC as HF does, export → re-import is bit-identical, and hostile or broken files
// (malicious pickles, truncated or corrupt archives, bad safetensors headers, wrong dtypes, missing tensors)
// end in a readable zt::Error, never a crash. Fixtures: tools/golden/make_hf_checkpoints.py.
#include "model/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/deberta.h"
#include "model/hf_readers.h"
#include "model/model_file.h"
#include "model/parameters.h"
#include "runtime/check.h"
#include "tests/support/fixtures.h"
#include "tests/support/tolerance.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = test::fixture_path("hf_tiny_mnli");

fs::path temp_dir() {
  fs::path dir = fs::temp_directory_path() /
                 ("zt_hf_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
                  std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(dir);
  return dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_CONTAINS(statement, text)                                      \
  do {                                                                              \
    const std::string message_ = error_of([&] { statement; });                      \
    EXPECT_NE(message_.find(text), std::string::npos) << "error was: " << message_; \
  } while (0)

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// The bytes of a string literal, embedded NULs included (not the terminating one).
template <size_t N>
std::vector<uint8_t> literal_bytes(const char (&s)[N]) {
  return std::vector<uint8_t>(s, s + N - 1);
}

// A model loaded from a model file, with the fixture batch.
struct Imported {
  ModelFile file;
  ParameterTable table;
  Arena params;
  explicit Imported(const std::string& path)
      : file(path),
        table(file.config()),
        params("params", table.layout(DType::f32), {.kind = MemoryKind::host, .zero_fill = true}) {
    file.load_params(params);
  }
  std::vector<float> param(const std::string& name) const {
    Tensor t = params.tensor(name);
    return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
  }
  std::vector<float> logits() {
    test::Fixture f(kFixtures + "/logits.h5");
    std::vector<int64_t> ids = f.read_i64("input_ids"), mask = f.read_i64("attention_mask");
    const int64_t b = f.shape("input_ids")[0], l = f.shape("input_ids")[1];
    DebertaForSequenceClassification model(file.config(), b, l);
    model.forward(params,
                  {Tensor(ids.data(), {b, l}, DType::i64), Tensor(mask.data(), {b, l}, DType::i64), {}}, {});
    Tensor out = model.logits();
    return std::vector<float>(out.data_as<float>(), out.data_as<float>() + out.numel());
  }
};

HfImportOptions quiet() {
  HfImportOptions options;
  options.show_progress = false;
  return options;
}

std::string import_to(const fs::path& dir, const std::string& fixture, HfImportOptions options = {}) {
  options.show_progress = false;
  const std::string out = (dir / (fixture + ".h5")).string();
  import_hf_checkpoint(kFixtures + "/" + fixture, out, options);
  return out;
}

// ---- every format reproduces HF's logits ----

struct FormatCase {
  const char* dir;
  const char* reference;  // dataset of logits.h5: HF on the same (rounded) weights
};

class ImportFormat : public ::testing::TestWithParam<FormatCase> {};

TEST_P(ImportFormat, ForwardMatchesHfLogits) {
  fs::path dir = temp_dir();
  Imported m(import_to(dir, GetParam().dir));
  EXPECT_EQ(m.file.config().num_labels, 3);
  std::vector<float> ref = test::Fixture(kFixtures + "/logits.h5").read_f32(GetParam().reference);
  EXPECT_TRUE(test::all_close(std::string(GetParam().dir) + " logits", m.logits(), ref,
                              test::tolerance_for(DType::f32)));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, ImportFormat,
                         ::testing::Values(FormatCase{"safetensors_f32", "logits_f32"},
                                           FormatCase{"safetensors_f16", "logits_f16"},
                                           FormatCase{"safetensors_bf16", "logits_bf16"},
                                           FormatCase{"safetensors_sharded", "logits_f32"},
                                           FormatCase{"safetensors_extras", "logits_f32"},
                                           FormatCase{"torch_f32", "logits_f32"},
                                           FormatCase{"torch_f16", "logits_f16"}),
                         [](const ::testing::TestParamInfo<FormatCase>& info) {
                           return std::string(info.param.dir);
                         });

TEST(HfImport, TorchViewsAndSafetensorsAgreeBitwise) {
  // torch_f32 stores layer-0 query/key as views of one shared storage and value transposed.
  fs::path dir = temp_dir();
  Imported a(import_to(dir, "safetensors_f32"));
  Imported b(import_to(dir, "torch_f32"));
  for (const ParameterInfo& p : a.table.entries()) EXPECT_EQ(a.param(p.name), b.param(p.name)) << p.name;
  fs::remove_all(dir);
}

TEST(HfImport, ExtrasAreSkippedAndBertPrefixRenamed) {
  fs::path dir = temp_dir();
  HfImportReport r =
      import_hf_checkpoint(kFixtures + "/safetensors_extras", (dir / "m.h5").string(), quiet());
  ASSERT_EQ(r.skipped.size(), 4u);
  std::string all;
  for (const std::string& s : r.skipped) all += s + "\n";
  EXPECT_NE(all.find("deberta.embeddings.position_ids [1, 64] I64"), std::string::npos) << all;
  EXPECT_NE(all.find("deberta.embeddings.position_embeddings.weight"), std::string::npos) << all;
  EXPECT_NE(all.find("lm_predictions.lm_head.bias"), std::string::npos) << all;
  EXPECT_EQ(r.renamed.size(), 3u);
  EXPECT_TRUE(r.initialised.empty());
  fs::remove_all(dir);
}

TEST(HfImport, SpmModelIsCopiedBesideTheOutput) {
  fs::path dir = temp_dir();
  HfImportReport r = import_hf_checkpoint(kFixtures + "/safetensors_f32", (dir / "m.h5").string(), quiet());
  EXPECT_TRUE(r.copied_tokenizer);
  EXPECT_EQ(read_file(dir / "spm.model"), read_file(kFixtures + "/safetensors_f32/spm.model"));
  fs::remove_all(dir);
}

// ---- MNLI (3 labels) -> MRPC (2 labels) ----

TEST(HfImport, MnliToTwoLabelsKeepsPoolerAndReinitialisesClassifier) {
  fs::path dir = temp_dir();
  Imported mnli(import_to(dir, "torch_f32"));
  HfImportOptions options;
  options.num_labels = 2;
  options.seed = 5;
  const std::string mrpc_path = import_to(dir, "torch_f16", options);
  Imported mrpc(mrpc_path);
  Imported mnli16(import_to(dir, "safetensors_f16"));

  EXPECT_EQ(mrpc.file.config().num_labels, 2);
  EXPECT_EQ(mrpc.file.config().id2label, (std::vector<std::string>{"LABEL_0", "LABEL_1"}));
  EXPECT_EQ(mrpc.param("pooler.dense.weight"), mnli16.param("pooler.dense.weight"));
  EXPECT_EQ(mrpc.param("pooler.dense.bias"), mnli16.param("pooler.dense.bias"));
  EXPECT_EQ(mrpc.table.at("classifier.weight").shape, (Shape{2, 32}));
  for (float b : mrpc.param("classifier.bias")) EXPECT_EQ(b, 0.0f);

  std::vector<float> w = mrpc.param("classifier.weight");
  double sum = 0, sq = 0;
  for (float v : w) sum += v, sq += static_cast<double>(v) * v;
  const double mean = sum / w.size(), std_dev = std::sqrt(sq / w.size() - mean * mean);
  // 64 draws of N(0, 0.02²): the sample std is within ±35% and the mean within 4 sigma/sqrt(64) = 0.01.
  EXPECT_NEAR(std_dev, 0.02, 0.007);
  EXPECT_NEAR(mean, 0.0, 0.01);

  // Seeded: the same seed gives the same head, another seed another one.
  Imported again(import_to(dir, "torch_f16", options));
  EXPECT_EQ(again.param("classifier.weight"), w);
  options.seed = 6;
  fs::path other = dir / "other";
  fs::create_directories(other);
  Imported reseeded(import_to(other, "torch_f16", options));
  EXPECT_NE(reseeded.param("classifier.weight"), w);
  EXPECT_EQ(mrpc.logits().size(), 6u);
  fs::remove_all(dir);
}

// ---- export -> re-import ----

TEST(HfExport, ReimportIsBitIdentical) {
  fs::path dir = temp_dir();
  for (const char* fixture : {"torch_f16", "safetensors_sharded"}) {
    HfImportOptions options;
    options.num_labels = 2;
    const std::string first = import_to(dir, fixture, options);
    const fs::path hf = dir / (std::string(fixture) + "_hf");
    export_hf_checkpoint(first, hf.string(), false);
    ASSERT_TRUE(fs::exists(hf / "model.safetensors") && fs::exists(hf / "config.json"));
    const std::string second = (dir / (std::string(fixture) + "_again.h5")).string();
    import_hf_checkpoint(hf.string(), second, quiet());
    Imported a(first), b(second);
    EXPECT_EQ(a.file.config(), b.file.config());
    ASSERT_EQ(a.params.bytes(), b.params.bytes());
    EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.bytes()), 0) << fixture;

    // HF names in table order, F32, __metadata__ {"format": "pt"}.
    MappedFile st((hf / "model.safetensors").string());
    std::vector<CheckpointTensor> ts = read_safetensors(st.bytes(), st.path());
    ASSERT_EQ(ts.size(), a.table.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT_EQ(ts[i].name, a.table.entries()[i].name);
      EXPECT_EQ(ts[i].dtype, StoredDType::f32);
    }
    uint64_t n = 0;
    std::memcpy(&n, st.bytes().data(), 8);
    auto header =
        nlohmann::json::parse(st.bytes().begin() + 8, st.bytes().begin() + 8 + static_cast<long>(n));
    EXPECT_EQ(header["__metadata__"], (nlohmann::json{{"format", "pt"}}));
  }
  fs::remove_all(dir);
}

// ---- DeBERTa-v3 shape (no conv layer) ----

TEST(HfImport, DebertaV3ShapeImportsMatchesHfAndRoundTrips) {
  const std::string v3 = test::fixture_path("hf_tiny_v3");
  fs::path dir = temp_dir();
  const std::string first = (dir / "v3.h5").string();
  HfImportReport r = import_hf_checkpoint(v3, first, quiet());
  EXPECT_TRUE(r.copied_tokenizer);
  EXPECT_FALSE(r.config.has_conv());
  EXPECT_EQ(r.config.num_labels, 3);
  EXPECT_EQ(r.config.label2id.at("contradiction"), 2);
  Imported m(first);
  for (const ParameterInfo& p : m.table.entries())
    EXPECT_EQ(p.name.find(".conv."), std::string::npos) << p.name;
  // Forward on the imported weights against HF's logits on the same batch.
  test::Fixture f(v3 + "/logits.h5");
  std::vector<int64_t> ids = f.read_i64("input_ids"), mask = f.read_i64("attention_mask");
  const int64_t b = f.shape("input_ids")[0], l = f.shape("input_ids")[1];
  DebertaForSequenceClassification model(m.file.config(), b, l);
  model.forward(m.params,
                {Tensor(ids.data(), {b, l}, DType::i64), Tensor(mask.data(), {b, l}, DType::i64), {}}, {});
  Tensor out = model.logits();
  EXPECT_TRUE(test::all_close("v3 logits",
                              std::vector<float>(out.data_as<float>(), out.data_as<float>() + out.numel()),
                              f.read_f32("logits_f32"), test::tolerance_for(DType::f32)));
  // Export and import again: the same config and bit-identical parameters; HF's reader gets no conv layer.
  const fs::path hf = dir / "v3_hf";
  export_hf_checkpoint(first, hf.string(), false);
  const auto exported = nlohmann::json::parse(std::ifstream(hf / "config.json"));
  EXPECT_EQ(exported.value("conv_kernel_size", -1), 0);
  const std::string second = (dir / "v3_again.h5").string();
  import_hf_checkpoint(hf.string(), second, quiet());
  Imported again(second);
  EXPECT_EQ(m.file.config(), again.file.config());
  ASSERT_EQ(m.params.bytes(), again.params.bytes());
  EXPECT_EQ(std::memcmp(m.params.data(), again.params.data(), m.params.bytes()), 0);
  fs::remove_all(dir);
}

// ---- hostile and broken inputs ----

// A ZIP of stored entries, written from the format description: local headers, central directory, EOCD.
std::vector<uint8_t> make_zip(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries) {
  std::vector<uint8_t> out, central;
  auto le = [](std::vector<uint8_t>& v, uint64_t x, int n) {
    for (int i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
  };
  for (const auto& [name, data] : entries) {
    const uint64_t local = out.size();
    le(out, 0x04034b50, 4), le(out, 20, 2), le(out, 0, 2), le(out, 0, 2), le(out, 0, 4), le(out, 0, 4);
    le(out, data.size(), 4), le(out, data.size(), 4), le(out, name.size(), 2), le(out, 0, 2);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    le(central, 0x02014b50, 4), le(central, 20, 2), le(central, 20, 2), le(central, 0, 2), le(central, 0, 2);
    le(central, 0, 4), le(central, 0, 4), le(central, data.size(), 4), le(central, data.size(), 4);
    le(central, name.size(), 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 2);
    le(central, 0, 4), le(central, local, 4);
    central.insert(central.end(), name.begin(), name.end());
  }
  const uint64_t cd_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  le(out, 0x06054b50, 4), le(out, 0, 2), le(out, 0, 2), le(out, entries.size(), 2),
      le(out, entries.size(), 2);
  le(out, central.size(), 4), le(out, cd_offset, 4), le(out, 0, 2);
  return out;
}

// A protocol-2 pickle that would run os.system("echo pwned") under Python's unpickler.
const std::vector<uint8_t> kOsSystemPickle = literal_bytes(
    "\x80\x02"
    "cposix\nsystem\nq\x00X\x0a\x00\x00\x00"
    "echo pwnedq\x01\x85R.");

TEST(HfReaders, PickleRejectsCodeExecutionGlobals) {
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(kOsSystemPickle, "evil.pkl"),
                        "pickle: global 'posix.system' is not allowed in a state dict");
  // The same through STACK_GLOBAL (protocol 4) and through a whole pytorch_model.bin.
  const std::vector<uint8_t> stack_global = literal_bytes("\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93.");
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(stack_global, "evil.pkl"),
                        "global 'os.system' is not allowed");
  const std::string builtins =
      "\x80\x02"
      "c__builtin__\neval\n.";
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(bytes_of(builtins), "evil.pkl"), "global '__builtin__.eval'");
  std::vector<uint8_t> zip = make_zip({{"archive/data.pkl", kOsSystemPickle}});
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(zip, "evil.bin"), "global 'posix.system' is not allowed");
}

TEST(HfReaders, PickleProtocol4StateDict) {
  // {'w': _rebuild_tensor_v2(('storage', torch.HalfStorage, '0', 'cpu', 6), 1, (2, 2), (1, 2), False, {})}
  // written with FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL, EMPTY_DICT/SETITEM.
  std::string p = "\x80\x04\x95";
  p += std::string(8, '\0');
  auto u = [&](const std::string& s) {
    p += "\x8c" + std::string(1, static_cast<char>(s.size())) + s + "\x94";
  };
  p += "}\x94";  // root dict
  u("w");
  u("torch._utils");
  u("_rebuild_tensor_v2");
  p += "\x93\x94(";
  p += "(";
  u("storage");
  u("torch");
  u("HalfStorage");
  p += "\x93\x94";
  u("0");
  u("cpu");
  p += "K\x06tQ";                                  // BININT1 6, TUPLE, BINPERSID
  p += "K\x01K\x02K\x02\x86K\x01K\x02\x86\x89}t";  // offset 1, size (2,2), stride (1,2), False, {}
  p += "Rs.";
  std::vector<PickledTensor> ts = read_pickled_state_dict(bytes_of(p), "p4.pkl");
  ASSERT_EQ(ts.size(), 1u);
  EXPECT_EQ(ts[0].name, "w");
  EXPECT_EQ(ts[0].storage.dtype, StoredDType::f16);
  EXPECT_EQ(ts[0].storage.numel, 6);
  EXPECT_EQ(ts[0].offset, 1);
  EXPECT_EQ(ts[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ts[0].strides, (std::vector<int64_t>{1, 2}));

  // Stored in a zip whose storage is too short for the view: offset 1 + (1*1 + 1*2) = 4 < 6 fits, but a
  // 4-element storage does not.
  std::vector<uint8_t> six(12), four(8);
  EXPECT_EQ(
      read_torch_checkpoint(make_zip({{"a/data.pkl", bytes_of(p)}, {"a/data/0", six}}), "ok.bin").size(), 1u);
  EXPECT_ERROR_CONTAINS(
      read_torch_checkpoint(make_zip({{"a/data.pkl", bytes_of(p)}, {"a/data/0", four}}), "short.bin"),
      "declares 6 elements of F16 but holds 8 bytes");
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(make_zip({{"a/data.pkl", bytes_of(p)}}), "nostorage.bin"),
                        "has no entry a/data/0");
}

TEST(HfReaders, PickleMalformedStreams) {
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02}"), "t.pkl"), "truncated");
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02."), "t.pkl"),
                        "STOP with a malformed stack");
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02h\x05."), "t.pkl"),
                        "memo key 5 was never stored");
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02]."), "t.pkl"),
                        "top-level object is a list");
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02}X\x01\x00\x00\x00"
                                                              "aK\x01s."),
                                                "t.pkl"),
                        "entry 'a' is a int, not a tensor");
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02X\xff\xff\xff\x7f"), "t.pkl"),
                        "runs past the end");
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02i"), "t.pkl"),
                        "opcode 0x69 is not allowed");
  // A list appended to itself through the memo: a cycle, harmless in the value pool.
  EXPECT_ERROR_CONTAINS(read_pickled_state_dict(literal_bytes("\x80\x02]q\x00h\x00"
                                                              "a."),
                                                "t.pkl"),
                        "top-level object is a list");
}

TEST(HfReaders, ZipDamage) {
  std::vector<uint8_t> good = read_file(kFixtures + "/torch_f32/pytorch_model.bin");
  ASSERT_GT(good.size(), 1000u);
  EXPECT_GT(read_torch_checkpoint(good, "good.bin").size(), 40u);

  std::vector<uint8_t> truncated(good.begin(), good.begin() + static_cast<long>(good.size() / 2));
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(truncated, "half.bin"),
                        "no zip end-of-central-directory record");

  // Locate the central directory through the EOCD and damage it.
  auto u32 = [](const std::vector<uint8_t>& v, size_t o) {
    return uint32_t{v[o]} | uint32_t{v[o + 1]} << 8 | uint32_t{v[o + 2]} << 16 | uint32_t{v[o + 3]} << 24;
  };
  size_t eocd = good.size() - 22;
  while (u32(good, eocd) != 0x06054b50) --eocd;
  size_t cd = u32(good, eocd + 16);
  if (cd == 0xffffffffu) GTEST_SKIP() << "zip64 fixture";

  std::vector<uint8_t> bad_sig = good;
  bad_sig[cd] ^= 0xff;
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(bad_sig, "sig.bin"), "bad central directory signature");

  std::vector<uint8_t> compressed = good;
  compressed[cd + 10] = 8;  // deflate
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(compressed, "deflate.bin"), "is compressed (method 8)");

  std::vector<uint8_t> past_end = good;
  past_end[cd + 42 + 3] = 0x7f;  // local header offset ~2 GB
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(past_end, "offset.bin"), "runs past the end");

  std::vector<uint8_t> huge_count = good;
  huge_count[eocd + 10] = 0xfe, huge_count[eocd + 11] = 0xff;
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(huge_count, "count.bin"), "cannot hold 65534 entries");

  std::vector<uint8_t> legacy =
      bytes_of(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  EXPECT_ERROR_CONTAINS(read_torch_checkpoint(legacy, "old.bin"), "legacy (pre-torch-1.6, non-zip)");
}

std::vector<uint8_t> safetensors_with_header(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  return out;
}

TEST(HfReaders, SafetensorsDamage) {
  std::vector<uint8_t> huge = safetensors_with_header("{}", 0);
  huge[7] = 0x7f;
  EXPECT_ERROR_CONTAINS(read_safetensors(huge, "huge"), "exceeds the 104857600-byte limit");
  std::vector<uint8_t> past = safetensors_with_header("{}", 0);
  past[0] = 200;
  EXPECT_ERROR_CONTAINS(read_safetensors(past, "past"), "runs past the end");
  EXPECT_ERROR_CONTAINS(read_safetensors(safetensors_with_header("{\"a\":", 0), "json"), "not valid JSON");
  EXPECT_ERROR_CONTAINS(
      read_safetensors(
          safetensors_with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "eof"),
      "outside the 8-byte data buffer");
  EXPECT_ERROR_CONTAINS(
      read_safetensors(safetensors_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                               16),
                       "overlap"),
      "overlaps tensor 'a'");
  EXPECT_ERROR_CONTAINS(
      read_safetensors(
          safetensors_with_header(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2), "f8"),
      "unsupported dtype 'F8_E4M3'");
  EXPECT_ERROR_CONTAINS(
      read_safetensors(
          safetensors_with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "size"),
      "shape needs 3 x 4 bytes but data_offsets span 8");
  EXPECT_ERROR_CONTAINS(
      read_safetensors(
          safetensors_with_header(
              R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
          "overflow"),
      "overflows");
  EXPECT_ERROR_CONTAINS(
      read_safetensors(
          safetensors_with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "neg"),
      "non-negative integer");
}

// Rewrites the f32 fixture's safetensors with one tensor changed by `edit` (erase it, change its dtype...).
void write_modified_checkpoint(const fs::path& dir,
                               const std::function<void(nlohmann::ordered_json&)>& edit) {
  fs::create_directories(dir);
  fs::copy_file(kFixtures + "/safetensors_f32/config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  MappedFile src(kFixtures + "/safetensors_f32/model.safetensors");
  std::vector<CheckpointTensor> ts = read_safetensors(src.bytes(), src.path());
  nlohmann::ordered_json header;
  std::vector<uint8_t> data;
  for (const CheckpointTensor& t : ts) {
    header[t.name] = {{"dtype", std::string(stored_dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.storage.size()}}};
    data.insert(data.end(), t.storage.begin(), t.storage.end());
  }
  edit(header);
  std::vector<uint8_t> file = safetensors_with_header(header.dump(), 0);
  file.insert(file.end(), data.begin(), data.end());
  write_file(dir / "model.safetensors", file);
}

TEST(HfImport, CheckpointConfigMismatchesAreNamedErrors) {
  fs::path dir = temp_dir();
  const std::string out = (dir / "m.h5").string();
  const std::string q = "deberta.encoder.layer.1.attention.self.query_proj.weight";
  write_modified_checkpoint(dir / "missing", [&](auto& h) { h.erase(q); });
  EXPECT_ERROR_CONTAINS(import_hf_checkpoint((dir / "missing").string(), out, quiet()),
                        "missing tensors:\n  " + q + " [32, 32]");
  write_modified_checkpoint(dir / "dtype", [&](auto& h) { h[q]["dtype"] = "I32"; });
  EXPECT_ERROR_CONTAINS(import_hf_checkpoint((dir / "dtype").string(), out, quiet()), q + " is I32");
  write_modified_checkpoint(dir / "shape", [&](auto& h) { h[q]["shape"] = {16, 64}; });
  EXPECT_ERROR_CONTAINS(import_hf_checkpoint((dir / "shape").string(), out, quiet()),
                        q + ": checkpoint [16, 64], config needs [32, 32]");
  write_modified_checkpoint(dir / "unknown", [&](auto& h) {
    h["deberta.encoder.layer.7.output.dense.weight"] = h[q];
    h.erase(q);
  });
  const std::string e = error_of([&] { import_hf_checkpoint((dir / "unknown").string(), out, quiet()); });
  EXPECT_NE(e.find("unexpected tensors:\n  deberta.encoder.layer.7.output.dense.weight"), std::string::npos)
      << e;
  EXPECT_NE(e.find("missing tensors:\n  " + q), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out)) << "a failed import must not leave a model file";
  EXPECT_ERROR_CONTAINS(import_hf_checkpoint((dir / "nothing").string(), out, quiet()), "is not a directory");
  fs::create_directories(dir / "empty");
  fs::copy_file(kFixtures + "/safetensors_f32/config.json", dir / "empty" / "config.json");
  EXPECT_ERROR_CONTAINS(import_hf_checkpoint((dir / "empty").string(), out, quiet()),
                        "holds no model.safetensors");
  fs::remove_all(dir);
}

// Note [Sizes checked before the model is built]: a config.json asking for more layers than the weights hold
// (num_hidden_layers: 1000000 made a table of 16 million tensors and a 1 GB list of them) or another
// vocabulary is named at once; lists of tensors in errors stop after ten.
TEST(HfImport, ConfigSizesAreCheckedAgainstTheWeightsFirstAndListsAreCapped) {
  fs::path dir = temp_dir();
  const std::string out = (dir / "m.h5").string();
  for (const int64_t layers : {3, 1000000}) {
    const fs::path case_dir = dir / str("layers", layers);
    write_modified_checkpoint(case_dir, [](auto&) {});
    nlohmann::json config = nlohmann::json::parse(std::ifstream(case_dir / "config.json"));
    config["num_hidden_layers"] = layers;
    std::ofstream(case_dir / "config.json") << config.dump();
    EXPECT_ERROR_CONTAINS(import_hf_checkpoint(case_dir.string(), out, quiet()),
                          str("config.json says num_hidden_layers ", layers,
                              " but model.safetensors holds 2 "
                              "encoder layers (encoder.layer.0 to encoder.layer.1)"));
  }
  write_modified_checkpoint(dir / "vocab", [](auto&) {});
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "vocab" / "config.json"));
  config["vocab_size"] = 99;
  std::ofstream(dir / "vocab" / "config.json") << config.dump();
  EXPECT_ERROR_CONTAINS(import_hf_checkpoint((dir / "vocab").string(), out, quiet()),
                        "config.json says vocab_size 99");
  // Layer 0's 16 tensors missing: ten are listed, and how many more.
  write_modified_checkpoint(dir / "layer0", [](auto& h) {
    for (auto it = h.begin(); it != h.end();) {
      it = it.key().find("encoder.layer.0.") != std::string::npos ? h.erase(it) : std::next(it);
    }
  });
  const std::string e = error_of([&] { import_hf_checkpoint((dir / "layer0").string(), out, quiet()); });
  EXPECT_NE(e.find("\n  and 6 more"), std::string::npos) << e;
  size_t listed = 0;
  for (size_t at = e.find("\n  deberta.encoder.layer.0."); at != std::string::npos;
       at = e.find("\n  deberta.encoder.layer.0.", at + 1))
    ++listed;
  EXPECT_EQ(listed, 10u) << e;
  fs::remove_all(dir);
}

TEST(HfReaders, ConvertHandlesStridedViews) {
  // storage 0..11 as f16; view offset 1, shape [2, 3], strides [1, 4] (a transposed slice).
  std::vector<uint16_t> storage(12);
  for (int i = 0; i < 12; ++i) storage[static_cast<size_t>(i)] = float_to_f16(static_cast<float>(i)).bits;
  CheckpointTensor t;
  t.name = "v";
  t.dtype = StoredDType::f16;
  t.shape = {2, 3};
  t.strides = {1, 4};
  t.offset = 1;
  t.storage = ByteSpan(reinterpret_cast<const uint8_t*>(storage.data()), 24);
  validate_view(t.shape, t.strides, t.offset, 12, "v");
  std::vector<float> out(6);
  convert_to(t, Tensor(out.data(), {2, 3}, DType::f32));
  EXPECT_EQ(out, (std::vector<float>{1, 5, 9, 2, 6, 10}));
  EXPECT_ERROR_CONTAINS(validate_view({2, 3}, {1, 5}, 1, 12, "w"),
                        "view reaches element 12 but the storage holds 12");
  EXPECT_ERROR_CONTAINS(validate_view({2}, {INT64_MAX}, 1, 12, "x"), "overflows");
}

}  // namespace
}  // namespace zt
