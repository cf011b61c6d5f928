#include <gtest/gtest.h>

#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/support/temp_dir_test.h"

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/dtype.h"
#include "runtime/h5file.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

using H5FileTest = test::TempDirTest;

TEST_F(H5FileTest, RoundTripsEveryDtypeWithShapesGroupsAndAttributes) {
  const std::string file = path("ckpt.h5");
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  std::vector<bf16> b16 = {float_to_bf16(1.0f), float_to_bf16(-0.5f), float_to_bf16(3.0f)};
  std::vector<f16> h16 = {float_to_f16(0.25f), float_to_f16(-65504.0f)};
  std::vector<int32_t> i32 = {-7, 0, 2147483647};
  std::vector<int64_t> i64 = {int64_t{1} << 40, -1};
  std::vector<uint8_t> bytes = {0, 1, 255, 128};
  {
    H5File f = H5File::create(file);
    f.write<float>("params/deberta.embeddings.word_embeddings.weight", f32, {2, 3});
    f.write<bf16>("params/deberta.encoder.layer.0.output.dense.bias", b16, {3});
    f.write<f16>("half/h", h16, {2, 1});
    f.write<int32_t>("ints/i32", i32, {3});
    f.write<int64_t>("ints/i64", i64, {2});
    f.write<float>("scalar", std::vector<float>{42.0f}, Shape{});
    f.write<float>("empty", std::vector<float>{}, {0, 4});
    f.write_bytes("rng/state", bytes);
    f.set_attribute("model", "microsoft/deberta-v2-xlarge");
    f.set_attribute("step", int64_t{1234});
    f.set_attribute("loss_scale", 65536.0);
    f.set_attribute("step", int64_t{1235});  // replaces
    f.set_attribute("world_size", int64_t{4}, "params");
    f.create_group("optimizer/m");
  }
  H5File f = H5File::open_read(file);
  Shape shape;
  EXPECT_EQ(f.read_vector<float>("params/deberta.embeddings.word_embeddings.weight", &shape), f32);
  EXPECT_EQ(shape, (Shape{2, 3}));
  std::vector<bf16> b16_back = f.read_vector<bf16>("params/deberta.encoder.layer.0.output.dense.bias");
  ASSERT_EQ(b16_back.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(b16_back[i].bits, b16[i].bits);
  H5DatasetInfo half = f.info("half/h");
  EXPECT_EQ(half.dtype, DType::f16);
  EXPECT_EQ(half.shape, (Shape{2, 1}));
  EXPECT_EQ(f.read_vector<f16>("half/h")[1].bits, h16[1].bits);
  EXPECT_EQ(f.read_vector<int32_t>("ints/i32"), i32);
  EXPECT_EQ(f.read_vector<int64_t>("ints/i64"), i64);
  EXPECT_EQ(f.read_vector<float>("scalar", &shape), std::vector<float>{42.0f});
  EXPECT_EQ(shape.rank, 0);
  EXPECT_TRUE(f.read_vector<float>("empty").empty());
  EXPECT_EQ(f.info("empty").shape, (Shape{0, 4}));
  EXPECT_EQ(f.read_bytes("rng/state"), bytes);
  EXPECT_TRUE(f.info("rng/state").raw_bytes);

  EXPECT_EQ(f.attribute_string("model"), "microsoft/deberta-v2-xlarge");
  EXPECT_EQ(f.attribute_int("step"), 1235);
  EXPECT_EQ(f.attribute_double("loss_scale"), 65536.0);
  EXPECT_EQ(f.attribute_int("world_size", "params"), 4);
  EXPECT_FALSE(f.has_attribute("epoch"));
  EXPECT_EQ(f.attribute_double("step"), 1235.0);  // integers read as numbers too
  expect_error([&] { f.attribute_int("epoch"); }, {"has no attribute 'epoch'"});
  expect_error([&] { f.attribute_int("model"); }, {"'model'", "is not an integer"});
  expect_error([&] { f.attribute_double("model"); }, {"'model'", "is not a number"});
  expect_error([&] { f.attribute_string("step"); }, {"'step'", "is not a string"});
  expect_error([&] { f.attribute_int("world_size"); }, {"'/'", "no attribute 'world_size'"});

  EXPECT_EQ(f.list(),
            (std::vector<std::string>{"empty", "half", "ints", "optimizer", "params", "rng", "scalar"}));
  EXPECT_EQ(f.list("params"), (std::vector<std::string>{"deberta.embeddings.word_embeddings.weight",
                                                        "deberta.encoder.layer.0.output.dense.bias"}));
  EXPECT_TRUE(f.exists("optimizer/m"));
  EXPECT_FALSE(f.exists("optimizer/v"));
  EXPECT_FALSE(f.exists("nothing/here/at/all"));
}

TEST_F(H5FileTest, ReadsIntoTensorsWithDtypeAndShapeChecks) {
  const std::string file = path("t.h5");
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  {
    H5File f = H5File::create(file);
    f.write("w", Tensor(values.data(), {3, 2}, DType::f32));
  }
  H5File f = H5File::open_read(file);
  std::vector<float> back(6, 0.0f);
  f.read("w", Tensor(back.data(), {3, 2}, DType::f32));
  EXPECT_EQ(back, values);
  expect_error(
      [&] {
        f.read("w", Tensor(back.data(), {2, 3}, DType::f32));
      },
      {file, "'w'", "shape [3, 2]", "expected [2, 3]"});
  std::vector<bf16> wrong(6);
  expect_error(
      [&] {
        f.read("w", Tensor(wrong.data(), {3, 2}, DType::bf16));
      },
      {file, "'w'", "holds f32", "bf16"});
  expect_error([&] { f.read_vector<float>("params/missing"); }, {file, "params/missing"});
  expect_error([&] { f.read_bytes("w"); }, {file, "not raw bytes"});
  expect_error([&] { f.attribute_int("step"); }, {file, "step"});
}

TEST_F(H5FileTest, WritingAnExistingNameIsAnError) {
  H5File f = H5File::create(path("dup.h5"));
  f.write<int32_t>("a/b", std::vector<int32_t>{1}, {1});
  expect_error([&] { f.write<int32_t>("a/b", std::vector<int32_t>{2}, {1}); }, {"'a/b'", "already exists"});
  expect_error([&] { f.write<int32_t>("c", std::vector<int32_t>{1, 2}, {3}); }, {"'c'", "2 values"});
  expect_error([&] { f.create_group("a/b"); }, {"a dataset has that name"});
}

TEST_F(H5FileTest, AtomicWriterReplacesOnlyOnCommit) {
  const std::string file = path("model.h5");
  {
    AtomicH5Writer w(file);
    w.file().write<int64_t>("version", std::vector<int64_t>{1}, {1});
    EXPECT_FALSE(fs::exists(file));  // nothing published before commit
    EXPECT_TRUE(fs::exists(w.temp_path()));
    w.commit();
    EXPECT_FALSE(fs::exists(w.temp_path()));
  }
  std::string temp;
  {
    AtomicH5Writer w(file);
    temp = w.temp_path();
    w.file().write<int64_t>("version", std::vector<int64_t>{2}, {1});
    // destroyed without commit, as when an exception unwinds a half-written checkpoint
  }
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(H5File::open_read(file).read_vector<int64_t>("version"), std::vector<int64_t>{1});
  {
    AtomicH5Writer w(file);
    w.file().write<int64_t>("version", std::vector<int64_t>{3}, {1});
    w.commit();
    EXPECT_THROW(w.commit(), Error);
  }
  EXPECT_EQ(H5File::open_read(file).read_vector<int64_t>("version"), std::vector<int64_t>{3});
}

TEST_F(H5FileTest, TruncatedCorruptAndMissingFilesGiveClearErrors) {
  const std::string file = path("full.h5");
  {
    H5File f = H5File::create(file);
    std::vector<float> big(100000, 1.0f);
    f.write<float>("params/w", big, {100000});
  }
  const auto size = fs::file_size(file);
  const std::string truncated = path("truncated.h5");
  fs::copy_file(file, truncated);
  fs::resize_file(truncated, size / 2);
  expect_error(
      [&] {
        H5File f = H5File::open_read(truncated);
        f.read_vector<float>("params/w");
      },
      {truncated});
  const std::string cut_header = path("cut_header.h5");
  fs::copy_file(file, cut_header);
  fs::resize_file(cut_header, 100);
  expect_error([&] { H5File::open_read(cut_header); }, {cut_header, "corrupt or truncated"});
  const std::string garbage = path("garbage.h5");
  std::ofstream(garbage) << "this is not an HDF5 file";
  expect_error([&] { H5File::open_read(garbage); }, {garbage, "not a readable HDF5 file"});
  expect_error([&] { H5File::open_read(path("missing.h5")); }, {"missing.h5", "does not exist"});
  expect_error([&] { H5File::open_read(dir_.string()); }, {dir_.string(), "is a directory, not a file"});
  expect_error([&] { H5File::create(path("no/such/dir/x.h5")); }, {"x.h5"});
}

// Flips `count` bytes at the middle of a file, as a bad disk sector or a broken copy does.
void flip_bytes_at_middle(const std::string& file, size_t count) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto middle = static_cast<std::streamoff>(fs::file_size(file) / 2);
  std::vector<char> bytes(count);
  f.seekg(middle);
  f.read(bytes.data(), static_cast<std::streamsize>(count));
  for (char& b : bytes) b = static_cast<char>(~b);
  f.seekp(middle);
  f.write(bytes.data(), static_cast<std::streamsize>(count));
}

TEST_F(H5FileTest, DamagedTensorDataFailsTheReadNamingTheDataset) {
  const std::string file = path("damaged.h5");
  std::vector<float> values(300000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  {
    H5File f = H5File::create(file);
    f.write<float>("params/small", std::vector<float>{1, 2}, {2});
    f.write<float>("params/w", values, {1000, 300});  // 1.2 MB: the middle of the file is its data
  }
  flip_bytes_at_middle(file, 64);
  H5File f = H5File::open_read(file);
  EXPECT_EQ(f.read_vector<float>("params/small"), (std::vector<float>{1, 2}));
  expect_error([&] { f.read_vector<float>("params/w"); }, {file, "'params/w'", "Fletcher32 checksum"});
}

// A damaged byte in a group's list of names (metadata, checksummed in the 1.10 format) makes HDF5 fail the
// lookup: that is a damaged file, said as such, not a name the file lacks (which read as "tensor missing,
// the checkpoint is of another model").
TEST_F(H5FileTest, ADamagedNameLookupIsAnErrorNotAMissingName) {
  const std::string file = path("damaged_names.h5");
  {
    H5File f = H5File::create(file);
    for (int i = 0; i < 20; ++i)
      f.write<float>(str("params/tensor_number_", 100 + i), std::vector<float>{1}, {1});
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t at = bytes.find("tensor_number_107");
    ASSERT_NE(at, std::string::npos);
    f.seekp(static_cast<std::streamoff>(at + 14));
    f.put('9');  // tensor_number_907
  }
  H5File f = H5File::open_read(file);
  EXPECT_FALSE(f.exists("other/tensor_number_107"));  // a missing parent is still just missing
  expect_error([&] { static_cast<void>(f.exists("params/tensor_number_107")); },
               {file, "is damaged", "params"});
}

// Files without checksums (written before checksums were added, or by h5py) still read.
TEST_F(H5FileTest, ReadsContiguousDatasetsWithoutChecksums) {
  const std::string file = path("old.h5");
  const std::vector<float> values = {1.5f, -2.5f, 3.5f};
  {
    hid_t id = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[1] = {3};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t dataset = H5Dcreate2(id, "w", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(dataset);
    H5Sclose(space);
    H5Fclose(id);
  }
  EXPECT_EQ(H5File::open_read(file).read_vector<float>("w"), values);
}

// A full disk, emulated in a child by a file size limit with SIGXFSZ ignored: the write throws naming the
// dataset, the writer removes its temp file, the previous file is intact, the next file writes, and the
// child then exits normally (HDF5's own cleanup at exit crashed on the file whose close had failed). Exit
// codes report what went wrong in the child.
TEST_F(H5FileTest, AFullDiskFailsTheWriteAndTheProcessExitsCleanly) {
  const std::string file = path("step_5.h5");
  {
    AtomicH5Writer w(file);
    w.file().write<int64_t>("version", std::vector<int64_t>{1}, {1});
    w.commit();
  }
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 64 * 1024;
    setrlimit(RLIMIT_FSIZE, &limit);
    int code = 4;  // no error
    std::string temp;
    try {
      AtomicH5Writer w(file);
      temp = w.temp_path();
      w.file().write<float>("params/w", std::vector<float>(1 << 20, 1.0f), {1 << 20});
      w.commit();
    } catch (const Error& e) {
      code = std::string(e.message()).find("disk full") != std::string::npos ? 0 : 3;
    }
    if (code == 0 && fs::exists(temp)) code = 5;
    try {  // HDF5 still works for the next file
      const std::string next = file + ".next";
      AtomicH5Writer w(next);
      w.file().write<int64_t>("version", std::vector<int64_t>{2}, {1});
      w.commit();
      if (H5File::open_read(next).read_vector<int64_t>("version") != std::vector<int64_t>{2}) code = 6;
      fs::remove(next);
    } catch (const Error&) {
      code = 6;
    }
    std::exit(code);  // runs the exit handlers
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "3: no 'disk full' in the error; 4: no error; 5: temp file left; 6: the next file failed";
  EXPECT_EQ(H5File::open_read(file).read_vector<int64_t>("version"), std::vector<int64_t>{1});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace zt
