#include "runtime/h5file.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <utility>

#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/log.h"

namespace zt {

static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t is stored as int64_t");

namespace {

// HDF5 prints its own error stack to stderr by default; our errors carry the file and dataset instead.
// Called before every file is opened or created, so it is also the first HDF5 call of a process that uses
// H5File, which H5dont_atexit must be (Note [Closing a file after a failed write]).
void silence_hdf5_errors() {
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// Closes an HDF5 handle at scope exit with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), closer_(other.closer_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  Closer closer_;
};

std::string clean_name(std::string_view name) {
  ZT_CHECK(!name.empty(), "empty HDF5 object name");
  return std::string(name);
}

// HDF5 types for a DType: (type stored in the file, type of the in-memory buffer).
std::pair<hid_t, hid_t> hdf5_types(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
    case DType::bf16:
    case DType::f16:
      return {H5T_STD_U16LE, H5T_NATIVE_UINT16};
    case DType::i32:
      return {H5T_STD_I32LE, H5T_NATIVE_INT32};
    case DType::i64:
      return {H5T_STD_I64LE, H5T_NATIVE_INT64};
  }
  ZT_FAIL("unsupported dtype");
}

// The most specific entry of HDF5's error stack (where the failure was detected), e.g. "data error detected
// by Fletcher32 checksum"; empty when the stack is empty.
// A failed system call's description spans lines and lists buffer addresses; its strerror text, quoted as
// "error message = '...'", is what a user needs.
herr_t keep_innermost_error(unsigned depth, const H5E_error2_t* error, void* out) {
  if (depth != 0 || error->desc == nullptr) return 0;
  std::string desc = error->desc;
  constexpr std::string_view kSystemError = "error message = '";
  if (const size_t at = desc.find(kSystemError); at != std::string::npos) {
    const size_t start = at + kSystemError.size();
    desc = desc.substr(start, desc.find('\'', start) - start);
  }
  *static_cast<std::string*>(out) = desc.substr(0, desc.find('\n'));
  return 0;
}
std::string hdf5_error_detail() {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost_error, &detail);
  return detail.empty() ? std::string() : str("; HDF5: ", detail);
}

// Note [Closing a file after a failed write]
// When a write fails (disk full, file size limit), H5Fclose's flush fails too and HDF5 leaves the file
// half closed: any later use of that id crashes (H5Fget_vfd_handle does), and so did HDF5's own cleanup
// at exit (SIGSEGV in H5F__close_cb, HDF5 1.10.8). So the library's exit handler is not installed
// (H5dont_atexit, before the first HDF5 call; every file is closed by its H5File anyway), and the
// descriptor of a file whose close failed is pointed at /dev/null, which releases the disk space of the
// removed temp file. Returns whether everything reached the file; `detail` gets HDF5's reason otherwise.
bool close_file_id(hid_t id, std::string* detail = nullptr) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(id, H5P_DEFAULT, &handle) < 0) handle = nullptr;
  const bool flushed = H5Fflush(id, H5F_SCOPE_LOCAL) >= 0;
  if (!flushed && detail != nullptr) *detail = hdf5_error_detail();
  if (H5Fclose(id) >= 0) return flushed;
  if (detail != nullptr && detail->empty()) *detail = hdf5_error_detail();
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull >= 0 && handle != nullptr) ::dup2(devnull, *static_cast<int*>(handle));
  if (devnull >= 0) ::close(devnull);
  return false;
}

// Note [Integrity of stored data]
// Every dataset with data is chunked with HDF5's Fletcher-32 filter, so a damaged byte of tensor data
// fails the read of that dataset instead of loading a wrong (often NaN) value; files are written in the
// HDF5 1.10 format, whose object headers, chunk indexes and superblock carry checksums too, so damaged
// metadata (names, shapes, attributes such as the step counters) fails as well. Scalar datasets cannot be
// chunked and stay unchecked (checkpoints and model files have none). Files without checksums (written
// before, or by h5py) still read, unverified.
constexpr size_t kTargetChunkBytes = size_t{1} << 20;

// Chunk dims of about kTargetChunkBytes: whole trailing dimensions, and as many slices of the first
// dimension that does not fit whole as the target allows (at least one).
void chunk_dims_for(const Shape& shape, size_t element_bytes, hsize_t* chunk) {
  size_t inner_bytes = element_bytes;
  for (int i = shape.rank - 1; i >= 0; --i) {
    const size_t extent = static_cast<size_t>(shape[i]);
    if (inner_bytes * extent <= kTargetChunkBytes) {
      chunk[i] = extent;
      inner_bytes *= extent;
      continue;
    }
    chunk[i] = std::max<size_t>(1, kTargetChunkBytes / inner_bytes);
    for (int j = i - 1; j >= 0; --j) chunk[j] = 1;
    return;
  }
}

Handle make_dataspace(const Shape& shape) {
  if (shape.rank == 0) return Handle(H5Screate(H5S_SCALAR), H5Sclose);
  hsize_t dims[kMaxRank];
  for (int i = 0; i < shape.rank; ++i) dims[i] = static_cast<hsize_t>(shape[i]);
  return Handle(H5Screate_simple(shape.rank, dims, nullptr), H5Sclose);
}

}  // namespace

// ---- open / close ----

H5File H5File::open_read(const std::string& path) {
  silence_hdf5_errors();
  ZT_CHECK(std::filesystem::exists(path), "HDF5 file ", path, " does not exist");
  ZT_CHECK(!std::filesystem::is_directory(path), "HDF5 file ", path, " is a directory, not a file");
  ZT_CHECK(H5Fis_hdf5(path.c_str()) > 0, "file ", path,
           " is not a readable HDF5 file (corrupt or truncated?)");
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ZT_CHECK(id >= 0, "cannot open HDF5 file ", path, " (corrupt or truncated?)");
  return H5File(id, path);
}

H5File H5File::open_read_write(const std::string& path) {
  silence_hdf5_errors();
  ZT_CHECK(std::filesystem::exists(path), "HDF5 file ", path, " does not exist");
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ZT_CHECK(id >= 0, "cannot open HDF5 file ", path, " for writing (corrupt, truncated or read-only?)");
  return H5File(id, path);
}

H5File H5File::create(const std::string& path) {
  silence_hdf5_errors();
  // The 1.10 format checksums the metadata (Note [Integrity of stored data]).
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  ZT_CHECK(access.valid() && H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0,
           "cannot prepare HDF5 file ", path);
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
  ZT_CHECK(id >= 0, "cannot create HDF5 file ", path, " (missing directory or no permission?)");
  return H5File(id, path);
}

H5File::~H5File() {
  if (id_ >= 0) close_file_id(id_);
}

H5File::H5File(H5File&& other) noexcept : id_(std::exchange(other.id_, -1)), path_(std::move(other.path_)) {}

H5File& H5File::operator=(H5File&& other) noexcept {
  if (this != &other) {
    if (id_ >= 0) close_file_id(id_);
    id_ = std::exchange(other.id_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

void H5File::close() {
  if (id_ < 0) return;
  hid_t id = std::exchange(id_, -1);
  std::string detail;
  ZT_CHECK(close_file_id(id, &detail), "cannot flush and close HDF5 file ", path_, " (disk full?", detail,
           ")");
}

int64_t H5File::handle() const {
  ZT_CHECK(id_ >= 0, "HDF5 file ", path_, " is closed");
  return id_;
}

// ---- datasets ----

void H5File::write_typed(std::string_view name, const void* data, const Shape& shape, int64_t file_type,
                         int64_t memory_type, std::string_view dtype_label) {
  std::string path = clean_name(name);
  ZT_CHECK(!exists(path), "cannot write dataset '", path, "' to ", path_, ": it already exists");
  for (int i = 0; i < shape.rank; ++i)
    ZT_CHECK(shape[i] >= 0, "dataset '", path, "' has a negative dimension ", shape.to_string());
  Handle space = make_dataspace(shape);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  ZT_CHECK(space.valid() && lcpl.valid() && H5Pset_create_intermediate_group(lcpl.get(), 1) >= 0,
           "cannot prepare dataset '", path, "' in ", path_);
  Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  ZT_CHECK(create.valid(), "cannot prepare dataset '", path, "' in ", path_);
  if (shape.rank > 0 && shape.numel() > 0) {
    hsize_t chunk[kMaxRank] = {};
    chunk_dims_for(shape, H5Tget_size(file_type), chunk);
    ZT_CHECK(H5Pset_chunk(create.get(), shape.rank, chunk) >= 0 && H5Pset_fletcher32(create.get()) >= 0,
             "cannot set up checksummed chunks for dataset '", path, "' in ", path_, hdf5_error_detail());
  }
  Handle dataset(
      H5Dcreate2(handle(), path.c_str(), file_type, space.get(), lcpl.get(), create.get(), H5P_DEFAULT),
      H5Dclose);
  ZT_CHECK(dataset.valid(), "cannot create dataset '", path, "' in ", path_, " (disk full?",
           hdf5_error_detail(), ")");
  if (shape.numel() > 0)
    ZT_CHECK(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0,
             "cannot write dataset '", path, "' to ", path_, " (disk full?", hdf5_error_detail(), ")");
  set_attribute("dtype", dtype_label, path);
}

void H5File::write(std::string_view name, const void* data, const Shape& shape, DType dtype) {
  ZT_CHECK(data != nullptr || shape.numel() == 0, "writing '", name, "' to ", path_, ": null data");
  auto [file_type, memory_type] = hdf5_types(dtype);
  write_typed(name, data, shape, file_type, memory_type, dtype_name(dtype));
}

void H5File::write(std::string_view name, const Tensor& tensor) {
  ZT_CHECK(tensor.device() == DeviceKind::cpu, "writing '", name, "' to ", path_,
           ": copy device tensors to the host first (", tensor.describe(), ")");
  ZT_CHECK(tensor.is_contiguous(), "writing '", name, "' to ", path_, ": tensor must be contiguous");
  write(name, tensor.data(), tensor.shape(), tensor.dtype());
}

void H5File::write_bytes(std::string_view name, std::span<const uint8_t> bytes) {
  write_typed(name, bytes.data(), Shape{static_cast<int64_t>(bytes.size())}, H5T_STD_U8LE, H5T_NATIVE_UINT8,
              "u8");
}

bool H5File::exists(std::string_view name) const {
  std::string path = clean_name(name);
  if (path == "/") return true;
  // H5Lexists fails (rather than returning false) when a parent is missing, so check prefix by prefix.
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    std::string prefix = path.substr(0, slash);
    const htri_t found = H5Lexists(handle(), prefix.c_str(), H5P_DEFAULT);
    // The parent exists (checked before), so a failure is a damaged file, not a missing name.
    ZT_CHECK(found >= 0, "HDF5 file ", path_, " is damaged: looking up '", prefix, "' fails",
             hdf5_error_detail());
    if (found == 0) return false;
    if (slash == std::string::npos) return true;
  }
}

H5DatasetInfo H5File::info(std::string_view name) const {
  std::string path = clean_name(name);
  ZT_CHECK(exists(path), "HDF5 file ", path_, " has no dataset '", path, "'");
  Handle dataset(H5Dopen2(handle(), path.c_str(), H5P_DEFAULT), H5Dclose);
  ZT_CHECK(dataset.valid(), "'", path, "' in ", path_, " is not a readable dataset");
  H5DatasetInfo out;
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.get());
  ZT_CHECK(rank >= 0 && rank <= kMaxRank, "dataset '", path, "' in ", path_, " has unsupported rank ", rank);
  hsize_t dims[kMaxRank] = {};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  out.shape.rank = rank;
  for (int i = 0; i < rank; ++i) out.shape[i] = static_cast<int64_t>(dims[i]);

  std::string label;
  if (has_attribute("dtype", path)) label = attribute_string("dtype", path);
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.get());
  const size_t type_size = H5Tget_size(type.get());
  const bool is_signed = type_class == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_2;
  if (label == "u8" || (label.empty() && type_class == H5T_INTEGER && type_size == 1 && !is_signed)) {
    ZT_CHECK(type_class == H5T_INTEGER && type_size == 1, "dataset '", path, "' in ", path_,
             " is labelled u8 but is not 1-byte integer data");
    out.raw_bytes = true;
    return out;
  }
  if (!label.empty()) {
    out.dtype = parse_dtype(label);
    const bool matches = (out.dtype == DType::f32 && type_class == H5T_FLOAT && type_size == 4) ||
                         ((out.dtype == DType::bf16 || out.dtype == DType::f16) &&
                          type_class == H5T_INTEGER && type_size == 2) ||
                         (out.dtype == DType::i32 && is_signed && type_size == 4) ||
                         (out.dtype == DType::i64 && is_signed && type_size == 8);
    ZT_CHECK(matches, "dataset '", path, "' in ", path_, " is labelled ", label,
             " but its HDF5 type does not match (corrupt file?)");
    return out;
  }
  if (type_class == H5T_FLOAT && type_size == 4) {
    out.dtype = DType::f32;
  } else if (is_signed && type_size == 4) {
    out.dtype = DType::i32;
  } else if (is_signed && type_size == 8) {
    out.dtype = DType::i64;
  } else {
    ZT_FAIL("dataset '", path, "' in ", path_, " has an unsupported type (class ",
            static_cast<int>(type_class), ", ", type_size,
            " bytes); supported: float32, int32, int64, uint8, and uint16 labelled bf16/f16");
  }
  return out;
}

void H5File::read(std::string_view name, void* data, const Shape& shape, DType dtype) const {
  std::string path = clean_name(name);
  H5DatasetInfo stored = info(path);
  ZT_CHECK(!stored.raw_bytes, "dataset '", path, "' in ", path_, " holds raw bytes; read it with read_bytes");
  ZT_CHECK(stored.dtype == dtype, "dataset '", path, "' in ", path_, " holds ", dtype_name(stored.dtype),
           ", asked to read it as ", dtype_name(dtype));
  ZT_CHECK(stored.shape == shape, "dataset '", path, "' in ", path_, " has shape ", stored.shape.to_string(),
           ", expected ", shape.to_string());
  if (shape.numel() == 0) return;
  ZT_CHECK(data != nullptr, "reading '", path, "' from ", path_, ": null destination");
  Handle dataset(H5Dopen2(handle(), path.c_str(), H5P_DEFAULT), H5Dclose);
  ZT_CHECK(H5Dread(dataset.get(), hdf5_types(dtype).second, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0,
           "cannot read dataset '", path, "' from ", path_, " (corrupt or truncated file",
           hdf5_error_detail(), ")");
}

void H5File::read(std::string_view name, const Tensor& into) const {
  ZT_CHECK(into.device() == DeviceKind::cpu, "reading '", name, "' from ", path_,
           ": read into host memory and copy to the device (", into.describe(), ")");
  ZT_CHECK(into.is_contiguous(), "reading '", name, "' from ", path_, ": tensor must be contiguous");
  read(name, into.data(), into.shape(), into.dtype());
}

std::vector<uint8_t> H5File::read_bytes(std::string_view name) const {
  std::string path = clean_name(name);
  H5DatasetInfo stored = info(path);
  ZT_CHECK(stored.raw_bytes, "dataset '", path, "' in ", path_, " holds ", dtype_name(stored.dtype),
           ", not raw bytes");
  std::vector<uint8_t> bytes(static_cast<size_t>(stored.shape.numel()));
  if (bytes.empty()) return bytes;
  Handle dataset(H5Dopen2(handle(), path.c_str(), H5P_DEFAULT), H5Dclose);
  ZT_CHECK(H5Dread(dataset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0,
           "cannot read dataset '", path, "' from ", path_, " (corrupt or truncated file",
           hdf5_error_detail(), ")");
  return bytes;
}

// ---- groups ----

void H5File::create_group(std::string_view name) {
  std::string path = clean_name(name);
  if (exists(path)) {
    Handle group(H5Gopen2(handle(), path.c_str(), H5P_DEFAULT), H5Gclose);
    ZT_CHECK(group.valid(), "cannot create group '", path, "' in ", path_, ": a dataset has that name");
    return;
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  ZT_CHECK(lcpl.valid() && H5Pset_create_intermediate_group(lcpl.get(), 1) >= 0, "cannot prepare group '",
           path, "' in ", path_);
  Handle group(H5Gcreate2(handle(), path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  ZT_CHECK(group.valid(), "cannot create group '", path, "' in ", path_);
}

std::vector<std::string> H5File::list(std::string_view group_name) const {
  std::string path = clean_name(group_name);
  ZT_CHECK(exists(path), "HDF5 file ", path_, " has no group '", path, "'");
  Handle group(H5Gopen2(handle(), path.c_str(), H5P_DEFAULT), H5Gclose);
  ZT_CHECK(group.valid(), "'", path, "' in ", path_, " is not a group");
  H5G_info_t group_info{};
  ZT_CHECK(H5Gget_info(group.get(), &group_info) >= 0, "cannot list group '", path, "' in ", path_);
  std::vector<std::string> names;
  names.reserve(group_info.nlinks);
  for (hsize_t i = 0; i < group_info.nlinks; ++i) {
    ssize_t length =
        H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    ZT_CHECK(length >= 0, "cannot list group '", path, "' in ", path_);
    std::string name(static_cast<size_t>(length), '\0');
    H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1,
                       H5P_DEFAULT);
    names.push_back(std::move(name));
  }
  return names;
}

// ---- attributes ----

namespace {

// Opens the object an attribute lives on (a group or a dataset).
Handle open_object(hid_t file, const std::string& object, const std::string& file_path) {
  Handle h(H5Oopen(file, object.c_str(), H5P_DEFAULT), H5Oclose);
  ZT_CHECK(h.valid(), "HDF5 file ", file_path, " has no object '", object, "'");
  return h;
}

void write_attribute(hid_t object, const std::string& key, hid_t file_type, hid_t memory_type,
                     const void* value, const std::string& where) {
  if (H5Aexists(object, key.c_str()) > 0)
    ZT_CHECK(H5Adelete(object, key.c_str()) >= 0, "cannot replace attribute '", key, "' on ", where);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(H5Acreate2(object, key.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose);
  ZT_CHECK(attribute.valid() && H5Awrite(attribute.get(), memory_type, value) >= 0,
           "cannot write attribute '", key, "' on ", where);
}

}  // namespace

void H5File::set_attribute(std::string_view key, std::string_view value, std::string_view object) {
  std::string object_path = clean_name(object);
  Handle target = open_object(handle(), object_path, path_);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  ZT_CHECK(H5Tset_size(type.get(), std::max<size_t>(value.size(), 1)) >= 0 &&
               H5Tset_strpad(type.get(), H5T_STR_NULLPAD) >= 0,
           "cannot make a string type for attribute '", key, "'");
  std::string padded(value);
  if (padded.empty()) padded.push_back('\0');
  write_attribute(target.get(), std::string(key), type.get(), type.get(), padded.data(),
                  str("'", object_path, "' in ", path_));
}

void H5File::set_attribute(std::string_view key, int64_t value, std::string_view object) {
  std::string object_path = clean_name(object);
  Handle target = open_object(handle(), object_path, path_);
  write_attribute(target.get(), std::string(key), H5T_STD_I64LE, H5T_NATIVE_INT64, &value,
                  str("'", object_path, "' in ", path_));
}

void H5File::set_attribute(std::string_view key, double value, std::string_view object) {
  std::string object_path = clean_name(object);
  Handle target = open_object(handle(), object_path, path_);
  write_attribute(target.get(), std::string(key), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value,
                  str("'", object_path, "' in ", path_));
}

bool H5File::has_attribute(std::string_view key, std::string_view object) const {
  std::string object_path = clean_name(object);
  if (!exists(object_path)) return false;
  Handle target = open_object(handle(), object_path, path_);
  const htri_t found = H5Aexists(target.get(), std::string(key).c_str());
  ZT_CHECK(found >= 0, "HDF5 file ", path_, " is damaged: looking up attribute '", key, "' of '", object_path,
           "' fails", hdf5_error_detail());
  return found > 0;
}

namespace {

// An attribute opened for reading: what attribute_string / _int / _double share. Throws (naming the file, the
// object and the key) when the attribute is missing or its type class is not one of `accepted`.
struct OpenedAttribute {
  Handle attribute, type;
};

OpenedAttribute open_attribute(const H5File& file, hid_t root, std::string_view key, std::string_view object,
                               std::initializer_list<H5T_class_t> accepted, const char* expected) {
  const std::string object_path = clean_name(object), k(key);
  ZT_CHECK(file.has_attribute(key, object_path), "HDF5 file ", file.path(), ": '", object_path,
           "' has no attribute '", k, "'");
  Handle target = open_object(root, object_path, file.path());
  Handle attribute(H5Aopen(target.get(), k.c_str(), H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.get());
  ZT_CHECK(std::find(accepted.begin(), accepted.end(), type_class) != accepted.end(), "attribute '", k,
           "' on '", object_path, "' in ", file.path(), " is not ", expected);
  return {std::move(attribute), std::move(type)};
}

}  // namespace

std::string H5File::attribute_string(std::string_view key, std::string_view object) const {
  const OpenedAttribute opened = open_attribute(*this, handle(), key, object, {H5T_STRING}, "a string");
  const hid_t attribute = opened.attribute.get(), type = opened.type.get();
  if (H5Tis_variable_str(type) > 0) {  // as h5py writes them
    Handle memory_type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memory_type.get(), H5T_VARIABLE);
    char* text = nullptr;
    ZT_CHECK(H5Aread(attribute, memory_type.get(), &text) >= 0, "cannot read attribute '", key, "' in ",
             path_);
    std::string value = text != nullptr ? std::string(text) : std::string();
    H5free_memory(text);
    return value;
  }
  std::string value(H5Tget_size(type), '\0');
  ZT_CHECK(H5Aread(attribute, type, value.data()) >= 0, "cannot read attribute '", key, "' in ", path_);
  value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
  return value;
}

int64_t H5File::attribute_int(std::string_view key, std::string_view object) const {
  const OpenedAttribute opened = open_attribute(*this, handle(), key, object, {H5T_INTEGER}, "an integer");
  int64_t value = 0;
  ZT_CHECK(H5Aread(opened.attribute.get(), H5T_NATIVE_INT64, &value) >= 0, "cannot read attribute '", key,
           "' in ", path_);
  return value;
}

double H5File::attribute_double(std::string_view key, std::string_view object) const {
  const OpenedAttribute opened =
      open_attribute(*this, handle(), key, object, {H5T_FLOAT, H5T_INTEGER}, "a number");
  double value = 0;
  ZT_CHECK(H5Aread(opened.attribute.get(), H5T_NATIVE_DOUBLE, &value) >= 0, "cannot read attribute '", key,
           "' in ", path_);
  return value;
}

// ---- AtomicH5Writer ----

AtomicH5Writer::AtomicH5Writer(std::string path)
    : path_(std::move(path)), temp_path_(temp_path_for(path_)), file_(H5File::create(temp_path_)) {}

AtomicH5Writer::~AtomicH5Writer() {
  if (committed_) return;
  try {
    file_.close();
  } catch (const Error&) {  // the temp file is being discarded anyway
  }
  std::error_code ignored;
  std::filesystem::remove(temp_path_, ignored);
}

H5File& AtomicH5Writer::file() {
  ZT_CHECK(!committed_, "AtomicH5Writer for ", path_, " already committed");
  return file_;
}

void AtomicH5Writer::commit() {
  ZT_CHECK(!committed_, "AtomicH5Writer for ", path_, " committed twice");
  file_.close();
  committed_ = true;  // from here on publish_temp_file owns the temp file (and removes it on failure)
  publish_temp_file(temp_path_, path_);
}

}  // namespace zt
