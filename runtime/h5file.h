// HDF5 files for checkpoints and golden data: named, typed, shaped datasets in nested groups, plus
// string / int64 / double attributes. A thin wrapper over the HDF5 C API that only uses calls present in both
// HDF5 1.10 and 2.0.
//
// Storage: f32 as IEEE f32, i32/i64 as little-endian integers, u8 (raw bytes) as uint8; bf16 and f16 are
// stored as uint16 bit patterns (HDF5 1.10 has no 16-bit float type) and every dataset carries a "dtype"
// string attribute ("f32", "bf16", ...) so 16-bit floats read back as what they are. Datasets written by
// other tools (h5py) without the attribute are typed from their HDF5 type (float32, int32, int64, uint8).
//
// Names are paths: "params/deberta.embeddings.word_embeddings.weight" (groups are created as needed; dots
// are ordinary characters). Every failure — missing/corrupt/truncated file, missing dataset, wrong dtype or
// shape — throws zt::Error naming the file and the dataset; HDF5's own error printing is silenced.
//
// Integrity: datasets are written with checksums and verified on every read (Note [Integrity of stored
// data] in h5file.cpp), so a damaged file fails naming the dataset rather than reading wrong values. A
// failed write (disk full) throws, and closing that file afterwards neither throws from a destructor nor
// leaves HDF5 a file to crash on at exit (Note [Closing a file after a failed write]).
//
//   {
//     AtomicH5Writer w("ckpt/step_100.h5");          // writes ckpt/step_100.h5.tmp-<pid>
//     w.file().write("params/w", tensor);
//     w.file().set_attribute("step", int64_t{100});
//     w.commit();                                     // renames onto ckpt/step_100.h5
//   }                                                 // without commit: temp removed, old file untouched
//   H5File f = H5File::open_read("ckpt/step_100.h5");
//   f.read("params/w", tensor);                       // checks dtype and shape
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt {

// What a dataset holds. raw_bytes: a uint8 dataset (DType has no u8); `dtype` is then meaningless.
struct H5DatasetInfo {
  Shape shape;
  DType dtype = DType::f32;
  bool raw_bytes = false;
};

class H5File {
 public:
  static H5File open_read(const std::string& path);
  static H5File open_read_write(const std::string& path);
  static H5File create(const std::string& path);  // truncates an existing file
  ~H5File();
  H5File(H5File&& other) noexcept;
  H5File& operator=(H5File&& other) noexcept;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  const std::string& path() const { return path_; }
  // Flushes and closes; later calls throw. On failure (disk full) the handle is released all the same and
  // the unwritten data is dropped.
  void close();

  // ---- datasets ----
  // Writes a new dataset (an existing name is an error). `data` holds shape.numel() elements of dtype.
  void write(std::string_view name, const void* data, const Shape& shape, DType dtype);
  void write(std::string_view name, const Tensor& tensor);  // contiguous host tensor
  template <typename T>
  void write(std::string_view name, std::span<const T> values, const Shape& shape) {
    ZT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "writing '", name, "' to ", path_, ": ",
             values.size(), " values for shape ", shape.to_string());
    write(name, values.data(), shape, dtype_of<T>::value);
  }
  void write_bytes(std::string_view name, std::span<const uint8_t> bytes);  // 1-D uint8

  bool exists(std::string_view name) const;  // dataset or group
  H5DatasetInfo info(std::string_view name) const;
  // Reads into caller memory; the dataset's dtype and shape must equal the given ones.
  void read(std::string_view name, void* data, const Shape& shape, DType dtype) const;
  void read(std::string_view name, const Tensor& into) const;  // contiguous host tensor
  template <typename T>
  std::vector<T> read_vector(std::string_view name, Shape* shape_out = nullptr) const {
    H5DatasetInfo i = info(name);
    std::vector<T> values(static_cast<size_t>(i.shape.numel()));
    read(name, values.data(), i.shape, dtype_of<T>::value);
    if (shape_out != nullptr) *shape_out = i.shape;
    return values;
  }
  std::vector<uint8_t> read_bytes(std::string_view name) const;

  // ---- groups ----
  void create_group(std::string_view name);  // with missing parents; an existing group is fine
  // Names (not paths) of the direct children of a group, in name order.
  std::vector<std::string> list(std::string_view group = "/") const;

  // ---- attributes, on the root ("/") or on any group or dataset; setting one replaces it ----
  void set_attribute(std::string_view key, std::string_view value, std::string_view object = "/");
  void set_attribute(std::string_view key, const char* value, std::string_view object = "/") {
    set_attribute(key, std::string_view(value), object);
  }
  void set_attribute(std::string_view key, int64_t value, std::string_view object = "/");
  void set_attribute(std::string_view key, double value, std::string_view object = "/");
  bool has_attribute(std::string_view key, std::string_view object = "/") const;
  std::string attribute_string(std::string_view key, std::string_view object = "/") const;
  int64_t attribute_int(std::string_view key, std::string_view object = "/") const;
  double attribute_double(std::string_view key, std::string_view object = "/") const;

 private:
  H5File(int64_t id, std::string path) : id_(id), path_(std::move(path)) {}
  int64_t handle() const;  // the open hid_t; throws when closed
  void write_typed(std::string_view name, const void* data, const Shape& shape, int64_t file_type,
                   int64_t memory_type, std::string_view dtype_label);

  int64_t id_ = -1;  // hid_t
  std::string path_;
};

// Writes a file so that readers see either the previous file or the complete new one, never a partial one:
// everything goes to "<path>.tmp-<pid>", which commit() flushes, syncs, renames onto <path> and makes
// durable (runtime/atomic_file.h, Note [Atomic file replacement]). Destroyed without commit() (an
// exception), or when commit() fails, the temp file is removed and <path> is left as it was; after a
// crash remove_stale_temp_files removes it.
class AtomicH5Writer {
 public:
  explicit AtomicH5Writer(std::string path);
  ~AtomicH5Writer();
  AtomicH5Writer(const AtomicH5Writer&) = delete;
  AtomicH5Writer& operator=(const AtomicH5Writer&) = delete;

  H5File& file();
  const std::string& temp_path() const { return temp_path_; }
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  H5File file_;
  bool committed_ = false;
};

}  // namespace zt
