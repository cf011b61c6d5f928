// Readers for HuggingFace checkpoint files: safetensors, the torch zip format (pytorch_model.bin: a ZIP
// archive holding a pickled state dict plus one raw file per storage), and the pieces they are built from.
// reference/deberta-v2.md §11 describes the formats; these are independent implementations from that text.
//
// Every reader works on a byte span that it never writes and never reads outside of: each offset, length and
// element count taken from the file is validated against the span before use, and any inconsistency throws
// zt::Error naming the file and what is wrong. Hostile input can make a reader throw, never crash, loop
// without bound, or execute anything (the pickle VM below only builds data and accepts a fixed allow-list of
// globals).
//
// The result of every format is a list of CheckpointTensor: a name, a shape, and a strided view into an
// immutable byte range (the storage). Nothing is copied until the caller converts a tensor (convert_to).
//
//   MappedFile file("model.safetensors");                  // read-only mmap
//   std::vector<CheckpointTensor> ts = read_safetensors(file.bytes(), file.path());
//   convert_to(ts[0], out_tensor);                          // f32/f16/bf16 -> out's dtype, one tensor
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"

namespace zt {

using ByteSpan = std::span<const uint8_t>;

// A whole file mapped read-only. Pages are loaded on access and can be released again (release()) so a
// tensor-by-tensor conversion keeps only the tensor at hand resident.
class MappedFile {
 public:
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  ByteSpan bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Tells the kernel the pages of [offset, offset + length) are not needed any more (they are re-read
  // from the file if touched again).
  void release(size_t offset, size_t length) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Element types that can appear in a checkpoint. Only f32/f16/bf16 convert into model parameters; the
// others are recognised so that ignored tensors (position_ids: i64) can be skipped with a precise report.
enum class StoredDType : uint8_t { f32, f16, bf16, f64, i64, i32, i16, i8, u8, boolean };
size_t stored_dtype_size(StoredDType t);
std::string_view stored_dtype_name(StoredDType t);  // safetensors spelling: "F32", "F16", "BF16", ...
bool stored_dtype_is_parameter(StoredDType t);      // f32, f16 or bf16

// A tensor as a checkpoint stores it: elements at storage[(offset + Σ index_i * strides_i) * elem_size].
// The reader guarantees every addressed element lies inside `storage`.
struct CheckpointTensor {
  std::string name;
  StoredDType dtype = StoredDType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, one per dimension
  int64_t offset = 0;            // in elements
  ByteSpan storage;              // the whole storage this tensor views (shared storages: the same span)
  std::string source;            // file (and entry) it came from, for messages
  int64_t numel() const;
  bool is_contiguous() const;
  // The smallest byte range of `storage` holding every element (for page release / progress).
  std::pair<size_t, size_t> byte_range() const;
};

// Checks a strided view against a storage of `storage_numel` elements (overflow-safe): every index the view
// can address must be < storage_numel. Throws zt::Error mentioning `what`.
void validate_view(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
                   int64_t storage_numel, const std::string& what);

// Copies `src` into a contiguous host tensor of the same element count (shape is checked by the caller),
// converting f32/f16/bf16 to `dst`'s dtype (f32, f16 or bf16) with round-to-nearest-even where narrowing.
void convert_to(const CheckpointTensor& src, const Tensor& dst);

// ---- safetensors ----
// `u64 LE N | N bytes JSON header | data`. Rejects: N past the end or > 100 MB, non-object JSON, unknown
// dtypes, shapes whose byte size differs from data_offsets, offsets past the end, overlapping tensors.
// "__metadata__" is skipped. Tensors come back in file (data offset) order.
std::vector<CheckpointTensor> read_safetensors(ByteSpan file, const std::string& source);

// ---- ZIP (stored entries only) ----
struct ZipEntry {
  std::string name;
  ByteSpan data;  // the entry's bytes inside the archive
};
// Reads the central directory (ZIP64 records where the 32-bit fields overflow) and returns the entries, each
// located through its local header. Compressed or encrypted entries, entries past the end, and names that
// repeat are errors.
std::vector<ZipEntry> read_zip_entries(ByteSpan file, const std::string& source);

// ---- restricted pickle ----
// A storage referenced from data.pkl through a persistent id ('storage', torch.<T>Storage, key, location,
// numel).
struct PickledStorageRef {
  std::string key;
  StoredDType dtype = StoredDType::f32;
  int64_t numel = 0;
};
// One state-dict entry: `name` → torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...).
struct PickledTensor {
  std::string name;
  PickledStorageRef storage;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};
// Runs a pickle (protocols 2–4) that must build a dict of name → tensor, using only the opcodes and globals a
// torch state dict needs (collections.OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter,
// torch.<T>Storage). Any other global is an error naming it: "pickle: global 'os.system' is not allowed in a
// state dict". Entries come back in dict order.
std::vector<PickledTensor> read_pickled_state_dict(ByteSpan pickle, const std::string& source);

// ---- torch zip checkpoint (pytorch_model.bin) ----
// Locates <prefix>/data.pkl, runs it, and resolves each storage to <prefix>/data/<key> (size checked against
// numel × element size, views validated). A legacy (pre-1.6, non-zip) file is rejected with a message
// saying how to re-save it.
std::vector<CheckpointTensor> read_torch_checkpoint(ByteSpan file, const std::string& source);

}  // namespace zt
