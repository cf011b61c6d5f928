// Shared pieces of the checkpoint readers: the mapped file, stored dtypes, view validation, conversion, and
// the torch zip checkpoint that ties the ZIP and pickle readers together.
#include "model/hf_readers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "runtime/check.h"
#include "runtime/dtype.h"

namespace zt {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ZT_CHECK(fd >= 0, "cannot open '", path_, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ZT_FAIL("'", path_, "' is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    ZT_CHECK(p != MAP_FAILED, "cannot map '", path_, "' (", size_, " bytes): ", std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

void MappedFile::release(size_t offset, size_t length) const {
  if (data_ == nullptr || offset >= size_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t begin = (offset + page - 1) / page * page;  // only whole pages inside the range
  size_t end = std::min(size_, offset + length) / page * page;
  if (end > begin) ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

size_t stored_dtype_size(StoredDType t) {
  switch (t) {
    case StoredDType::f64:
    case StoredDType::i64:
      return 8;
    case StoredDType::f32:
    case StoredDType::i32:
      return 4;
    case StoredDType::f16:
    case StoredDType::bf16:
    case StoredDType::i16:
      return 2;
    case StoredDType::i8:
    case StoredDType::u8:
    case StoredDType::boolean:
      return 1;
  }
  return 1;
}

std::string_view stored_dtype_name(StoredDType t) {
  switch (t) {
    case StoredDType::f32:
      return "F32";
    case StoredDType::f16:
      return "F16";
    case StoredDType::bf16:
      return "BF16";
    case StoredDType::f64:
      return "F64";
    case StoredDType::i64:
      return "I64";
    case StoredDType::i32:
      return "I32";
    case StoredDType::i16:
      return "I16";
    case StoredDType::i8:
      return "I8";
    case StoredDType::u8:
      return "U8";
    case StoredDType::boolean:
      return "BOOL";
  }
  return "?";
}

bool stored_dtype_is_parameter(StoredDType t) {
  return t == StoredDType::f32 || t == StoredDType::f16 || t == StoredDType::bf16;
}

int64_t CheckpointTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool CheckpointTensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::pair<size_t, size_t> CheckpointTensor::byte_range() const {
  if (numel() == 0) return {0, 0};
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) last += (shape[i] - 1) * strides[i];
  const size_t elem = stored_dtype_size(dtype);
  return {static_cast<size_t>(offset) * elem, static_cast<size_t>(last + 1) * elem};
}

void validate_view(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
                   int64_t storage_numel, const std::string& what) {
  ZT_CHECK(shape.size() == strides.size(), what, ": ", shape.size(), " sizes but ", strides.size(),
           " strides");
  ZT_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), what, ": rank ", shape.size(), " exceeds ",
           kMaxRank);
  ZT_CHECK(offset >= 0, what, ": negative storage offset ", offset);
  int64_t numel = 1;
  int64_t last = offset;  // index of the last addressed element
  for (size_t i = 0; i < shape.size(); ++i) {
    ZT_CHECK(shape[i] >= 0, what, ": negative size ", shape[i], " in dimension ", i);
    ZT_CHECK(strides[i] >= 0, what, ": negative stride ", strides[i], " in dimension ", i);
    ZT_CHECK(!__builtin_mul_overflow(numel, shape[i], &numel), what, ": element count overflows");
    if (shape[i] > 0) {
      int64_t span = 0;
      ZT_CHECK(!__builtin_mul_overflow(shape[i] - 1, strides[i], &span) &&
                   !__builtin_add_overflow(last, span, &last),
               what, ": view extent overflows");
    }
  }
  if (numel == 0) return;
  ZT_CHECK(last < storage_numel, what, ": view reaches element ", last, " but the storage holds ",
           storage_numel);
}

namespace {

float load_as_float(const uint8_t* p, StoredDType t) {
  switch (t) {
    case StoredDType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case StoredDType::f16: {
      f16 h;
      std::memcpy(&h.bits, p, 2);
      return f16_to_float(h);
    }
    case StoredDType::bf16: {
      bf16 b;
      std::memcpy(&b.bits, p, 2);
      return bf16_to_float(b);
    }
    default:
      ZT_FAIL("dtype ", stored_dtype_name(t), " does not convert to a floating-point parameter");
  }
}

void store_from_float(float v, DType t, uint8_t* out) {
  switch (t) {
    case DType::f32:
      std::memcpy(out, &v, 4);
      return;
    case DType::bf16: {
      uint16_t b = float_to_bf16(v).bits;
      std::memcpy(out, &b, 2);
      return;
    }
    case DType::f16: {
      uint16_t b = float_to_f16(v).bits;
      std::memcpy(out, &b, 2);
      return;
    }
    default:
      ZT_FAIL("cannot convert a checkpoint tensor to ", dtype_name(t));
  }
}

bool same_element_type(StoredDType s, DType d) {
  return (s == StoredDType::f32 && d == DType::f32) || (s == StoredDType::f16 && d == DType::f16) ||
         (s == StoredDType::bf16 && d == DType::bf16);
}

}  // namespace

void convert_to(const CheckpointTensor& src, const Tensor& dst) {
  ZT_CHECK(stored_dtype_is_parameter(src.dtype), "tensor '", src.name, "' in ", src.source, " is ",
           stored_dtype_name(src.dtype), "; parameters must be F32, F16 or BF16");
  ZT_CHECK(dst.device() == DeviceKind::cpu && dst.is_contiguous(),
           "convert_to needs a contiguous host tensor");
  const int64_t n = src.numel();
  ZT_CHECK(n == dst.numel(), "tensor '", src.name, "': ", n, " elements into ", dst.describe());
  const size_t in_size = stored_dtype_size(src.dtype);
  const size_t out_size = dtype_size(dst.dtype());
  uint8_t* out = static_cast<uint8_t*>(dst.data());
  const uint8_t* base = src.storage.data() + static_cast<size_t>(src.offset) * in_size;
  if (n == 0) return;
  if (src.is_contiguous()) {
    if (same_element_type(src.dtype, dst.dtype())) {
      std::memcpy(out, base, static_cast<size_t>(n) * in_size);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      store_from_float(load_as_float(base + i * in_size, src.dtype), dst.dtype(), out + i * out_size);
    return;
  }
  // General strided view: walk the index space row-major with an odometer.
  const size_t rank = src.shape.size();
  std::vector<int64_t> index(rank, 0);
  int64_t element = 0;  // storage element offset of `index` relative to src.offset
  for (int64_t i = 0; i < n; ++i) {
    store_from_float(load_as_float(base + element * in_size, src.dtype), dst.dtype(), out + i * out_size);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < src.shape[d]) {
        element += src.strides[d];
        break;
      }
      element -= (src.shape[d] - 1) * src.strides[d];
      index[d] = 0;
    }
  }
}

std::vector<CheckpointTensor> read_torch_checkpoint(ByteSpan file, const std::string& source) {
  static constexpr uint8_t kZipMagic[4] = {'P', 'K', 3, 4};
  if (file.size() < 4 || std::memcmp(file.data(), kZipMagic, 4) != 0) {
    // The legacy format starts with a pickled magic number (protocol 2: 0x80 0x02 0x8a 0x0a ...).
    bool legacy = file.size() >= 3 && file[0] == 0x80 && file[2] == 0x8a;
    ZT_FAIL(source, ": ",
            legacy ? "legacy (pre-torch-1.6, non-zip) checkpoint format is not supported; re-save it with "
                     "torch.save(torch.load(f), f) or as safetensors"
                   : "not a torch zip checkpoint (no 'PK\\x03\\x04' signature)");
  }
  std::vector<ZipEntry> entries = read_zip_entries(file, source);
  const ZipEntry* pickle = nullptr;
  for (const ZipEntry& e : entries) {
    if (e.name == "data.pkl" || e.name.ends_with("/data.pkl")) {
      // Only the top-level <prefix>/data.pkl: the prefix itself holds no '/'.
      std::string_view prefix = std::string_view(e.name).substr(0, e.name.size() - 8);
      if (prefix.empty() || prefix.find('/') == prefix.size() - 1) {
        ZT_CHECK(pickle == nullptr, source, ": more than one data.pkl entry");
        pickle = &e;
      }
    }
  }
  ZT_CHECK(pickle != nullptr, source, ": zip archive holds no <prefix>/data.pkl entry");
  const std::string prefix = pickle->name.substr(0, pickle->name.size() - 8);
  std::unordered_map<std::string, const ZipEntry*> by_name;
  for (const ZipEntry& e : entries) by_name.emplace(e.name, &e);

  std::vector<PickledTensor> pickled = read_pickled_state_dict(pickle->data, source + ":" + pickle->name);
  std::vector<CheckpointTensor> tensors;
  tensors.reserve(pickled.size());
  for (PickledTensor& p : pickled) {
    const std::string entry = prefix + "data/" + p.storage.key;
    auto it = by_name.find(entry);
    ZT_CHECK(it != by_name.end(), source, ": tensor '", p.name, "' uses storage '", p.storage.key,
             "' but the archive has no entry ", entry);
    const size_t elem = stored_dtype_size(p.storage.dtype);
    ZT_CHECK(p.storage.numel >= 0 && static_cast<uint64_t>(p.storage.numel) <= it->second->data.size() / elem,
             source, ": storage ", entry, " declares ", p.storage.numel, " elements of ",
             stored_dtype_name(p.storage.dtype), " but holds ", it->second->data.size(), " bytes");
    validate_view(p.shape, p.strides, p.offset, p.storage.numel, source + ": tensor '" + p.name + "'");
    CheckpointTensor t;
    t.name = std::move(p.name);
    t.dtype = p.storage.dtype;
    t.shape = std::move(p.shape);
    t.strides = std::move(p.strides);
    t.offset = p.offset;
    t.storage = it->second->data.first(static_cast<size_t>(p.storage.numel) * elem);
    t.source = source;
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace zt
