// Golden-data fixtures: HDF5 files under tests/fixtures, read by dataset name.
//   Fixture f("deberta_tiny.h5");
//   std::vector<float> logits = f.read_f32("logits");  auto shape = f.shape("logits");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt::test {

std::string fixture_path(const std::string& file);  // ZT_TEST_DATA_DIR/file

class Fixture {
 public:
  explicit Fixture(const std::string& file);  // a name under tests/fixtures, or an absolute path
  ~Fixture();
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  bool has(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  std::vector<float> read_f32(const std::string& name) const;            // any float/int dataset, converted
  std::vector<int64_t> read_i64(const std::string& name) const;          // any integer dataset, converted
  std::vector<std::string> names(const std::string& group = "/") const;  // direct children of a group
  double attr_f64(const std::string& name) const;                        // attribute on the file root
  std::string attr_str(const std::string& name) const;

 private:
  int64_t file_ = -1;
  std::string path_;
};

}  // namespace zt::test
