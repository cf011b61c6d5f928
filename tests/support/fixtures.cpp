#include "tests/support/fixtures.h"

#include <hdf5.h>

#include "runtime/check.h"

namespace zt::test {

std::string fixture_path(const std::string& file) {
  if (!file.empty() && file[0] == '/') return file;
  return std::string(ZT_TEST_DATA_DIR) + "/" + file;
}

Fixture::Fixture(const std::string& file) : path_(fixture_path(file)) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ZT_CHECK(file_ >= 0, "cannot open fixture ", path_);
}

Fixture::~Fixture() {
  if (file_ >= 0) H5Fclose(file_);
}

bool Fixture::has(const std::string& name) const {
  return H5Lexists(file_, name.c_str(), H5P_DEFAULT) > 0;
}

namespace {
struct Dataset {
  hid_t id;
  Dataset(hid_t file, const std::string& name, const std::string& path) {
    id = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    ZT_CHECK(id >= 0, "fixture ", path, " has no dataset '", name, "'");
  }
  ~Dataset() { H5Dclose(id); }
  int64_t numel() const {
    hid_t space = H5Dget_space(id);
    hssize_t n = H5Sget_simple_extent_npoints(space);
    H5Sclose(space);
    return n;
  }
};
}  // namespace

std::vector<int64_t> Fixture::shape(const std::string& name) const {
  Dataset d(file_, name, path_);
  hid_t space = H5Dget_space(d.id);
  int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Sclose(space);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::vector<float> Fixture::read_f32(const std::string& name) const {
  Dataset d(file_, name, path_);
  std::vector<float> out(d.numel());
  ZT_CHECK(H5Dread(d.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0, "cannot read '",
           name, "' from ", path_, " as f32");
  return out;
}

std::vector<int64_t> Fixture::read_i64(const std::string& name) const {
  Dataset d(file_, name, path_);
  std::vector<int64_t> out(d.numel());
  ZT_CHECK(H5Dread(d.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0, "cannot read '",
           name, "' from ", path_, " as i64");
  return out;
}

std::vector<std::string> Fixture::names(const std::string& group) const {
  // Index-based listing: portable across HDF5 1.10 (CI) and 2.x (GPU machine).
  hid_t g = H5Gopen2(file_, group.c_str(), H5P_DEFAULT);
  ZT_CHECK(g >= 0, "fixture ", path_, " has no group '", group, "'");
  H5G_info_t info{};
  H5Gget_info(g, &info);
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<size_t>(len), '\0');
    H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), len + 1, H5P_DEFAULT);
    out.push_back(name);
  }
  H5Gclose(g);
  return out;
}

double Fixture::attr_f64(const std::string& name) const {
  hid_t a = H5Aopen(file_, name.c_str(), H5P_DEFAULT);
  ZT_CHECK(a >= 0, "fixture ", path_, " has no attribute '", name, "'");
  double v = 0;
  herr_t rc = H5Aread(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  ZT_CHECK(rc >= 0, "cannot read attribute '", name, "' of ", path_);
  return v;
}

std::string Fixture::attr_str(const std::string& name) const {
  hid_t a = H5Aopen(file_, name.c_str(), H5P_DEFAULT);
  ZT_CHECK(a >= 0, "fixture ", path_, " has no attribute '", name, "'");
  hid_t type = H5Aget_type(a);
  std::string out;
  if (H5Tis_variable_str(type) > 0) {
    char* s = nullptr;
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Aread(a, mem, &s);
    if (s) out = s;
    H5free_memory(s);
    H5Tclose(mem);
  } else {
    out.resize(H5Tget_size(type));
    H5Aread(a, type, out.data());
    while (!out.empty() && out.back() == '\0') out.pop_back();
  }
  H5Tclose(type);
  H5Aclose(a);
  return out;
}

}  // namespace zt::test
