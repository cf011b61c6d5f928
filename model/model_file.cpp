#include "model/model_file.h"

#include <cstring>
#include <vector>

#include "runtime/check.h"

namespace zt {
namespace {

const std::string kParamsGroup = "params";

std::string dataset_name(const std::string& name) {
  return kParamsGroup + "/" + name;
}

// Elementwise float conversion between host buffers of the float dtypes (f32, bf16, f16).
void convert_floats(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  if (src_type == dst_type) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_type));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (src_type) {
      case DType::f32:
        v = static_cast<const float*>(src)[i];
        break;
      case DType::bf16:
        v = bf16_to_float(static_cast<const bf16*>(src)[i]);
        break;
      case DType::f16:
        v = f16_to_float(static_cast<const f16*>(src)[i]);
        break;
      default:
        ZT_FAIL("model file: cannot convert ", dtype_name(src_type));
    }
    switch (dst_type) {
      case DType::f32:
        static_cast<float*>(dst)[i] = v;
        break;
      case DType::bf16:
        static_cast<bf16*>(dst)[i] = float_to_bf16(v);
        break;
      case DType::f16:
        static_cast<f16*>(dst)[i] = float_to_f16(v);
        break;
      default:
        ZT_FAIL("model file: cannot convert to ", dtype_name(dst_type));
    }
  }
}

bool is_float_storage(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16;
}

}  // namespace

ModelFileWriter::ModelFileWriter(const std::string& path, const DebertaConfig& config)
    : writer_(path), table_(config) {
  H5File& f = writer_.file();
  f.set_attribute("format", kModelFileFormat);
  f.set_attribute("format_version", kModelFileVersion);
  f.set_attribute("config_json", config.to_json());
  f.create_group(kParamsGroup);
}

ModelFileWriter::~ModelFileWriter() = default;

void ModelFileWriter::write(const std::string& name, const Tensor& tensor) {
  ZT_CHECK(table_.contains(name), "model file: '", name, "' is not a parameter of this configuration");
  const ParameterInfo& p = table_.at(name);
  ZT_CHECK(tensor.shape() == p.shape, "model file: '", name, "' has shape ", tensor.shape().to_string(),
           ", the configuration needs ", p.shape.to_string());
  ZT_CHECK(is_float_storage(tensor.dtype()), "model file: '", name, "' is ", dtype_name(tensor.dtype()),
           "; parameters are stored as f32, bf16 or f16");
  ZT_CHECK(written_.insert(name).second, "model file: '", name, "' written twice");
  writer_.file().write(dataset_name(name), tensor);
}

void ModelFileWriter::commit() {
  std::string missing;
  for (const ParameterInfo& p : table_.entries()) {
    if (!written_.contains(p.name)) missing += (missing.empty() ? "" : ", ") + p.name;
  }
  ZT_CHECK(missing.empty(), "model file: tensors not written: ", missing);
  writer_.commit();
}

void save_model_file(const std::string& path, const DebertaConfig& config, const ParameterTable& table,
                     const Arena& params) {
  ModelFileWriter writer(path, config);
  for (const ParameterInfo& p : table.entries()) writer.write(p.name, params.tensor(p.name));
  writer.commit();
}

ModelFile::ModelFile(const std::string& path) : file_(H5File::open_read(path)) {
  ZT_CHECK(file_.has_attribute("format") && file_.attribute_string("format") == kModelFileFormat, path,
           " is not a zerotrain model file (attribute format != '", kModelFileFormat, "')");
  const int64_t version = file_.attribute_int("format_version");
  ZT_CHECK(version == kModelFileVersion, path, ": model file format_version ", version,
           " is not supported (this build reads ", kModelFileVersion, ")");
  try {
    config_ = parse_deberta_config(file_.attribute_string("config_json"));
  } catch (const Error& e) {
    throw with_context(str(path, ": config_json: "), e);
  }
}

ModelFile open_model_file(const std::string& path) {
  return ModelFile(path);
}

void ModelFile::read_param(const std::string& name, const Tensor& into) const {
  const std::string ds = dataset_name(name);
  ZT_CHECK(file_.exists(ds), path(), ": missing tensor '", name, "'");
  H5DatasetInfo info = file_.info(ds);
  ZT_CHECK(!info.raw_bytes && is_float_storage(info.dtype), path(), ": tensor '", name,
           "' is not stored as f32, bf16 or f16");
  ZT_CHECK(info.shape == into.shape(), path(), ": tensor '", name, "' has shape ", info.shape.to_string(),
           ", expected ", into.shape().to_string());
  // A damaged or diverged file must not become weights (app/run/checkpoint.cpp, Note [Loaded values are
  // checked]).
  auto check_finite = [&](const void* values, DType dtype) {
    const int64_t bad = first_invalid_float(values, dtype, info.shape.numel());
    ZT_CHECK(bad < 0, path(), ": tensor '", name, "' holds ", float_value_at(values, dtype, bad),
             " at element ", bad, "; the file is damaged, or the model had diverged before it was saved");
  };
  if (info.dtype == into.dtype()) {
    file_.read(ds, into);
    check_finite(into.data(), into.dtype());
    return;
  }
  std::vector<uint8_t> staging(static_cast<size_t>(info.shape.numel()) * dtype_size(info.dtype));
  file_.read(ds, staging.data(), info.shape, info.dtype);
  check_finite(staging.data(), info.dtype);
  convert_floats(staging.data(), info.dtype, into.data(), into.dtype(), info.shape.numel());
}

void ModelFile::load_params(const Arena& params) const {
  ZT_CHECK(params.kind() != MemoryKind::device, "load_params needs a host arena; copy to the device after");
  std::vector<std::string> stored =
      file_.exists(kParamsGroup) ? file_.list(kParamsGroup) : std::vector<std::string>{};
  std::unordered_set<std::string> wanted;
  std::string missing, extra, misshaped;
  auto append = [](std::string& list, const std::string& item) { list += (list.empty() ? "" : ", ") + item; };
  for (const ArenaSlot& slot : params.layout().slots()) {
    wanted.insert(slot.name);
    const std::string ds = dataset_name(slot.name);
    if (!file_.exists(ds)) {
      append(missing, slot.name);
      continue;
    }
    H5DatasetInfo info = file_.info(ds);
    if (!(info.shape == slot.shape)) {
      append(misshaped,
             slot.name + " (file " + info.shape.to_string() + ", model " + slot.shape.to_string() + ")");
    }
  }
  for (const std::string& name : stored) {
    if (!wanted.contains(name)) append(extra, name);
  }
  ZT_CHECK(missing.empty() && extra.empty() && misshaped.empty(), path(),
           " does not match the model:", missing.empty() ? "" : "\n  missing: " + missing,
           extra.empty() ? "" : "\n  unexpected: " + extra,
           misshaped.empty() ? "" : "\n  wrong shape: " + misshaped);
  for (const ArenaSlot& slot : params.layout().slots()) read_param(slot.name, params.tensor(slot.name));
}

}  // namespace zt
