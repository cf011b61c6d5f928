// convert_hf as users run it: usage text, exit codes, readable errors, and a full import → export run.
// The tool is found beside this test executable (both go to <build>/bin).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/fixtures.h"

namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

fs::path tool_path() {
  return fs::read_symlink("/proc/self/exe").parent_path() / "convert_hf";
}

RunResult run_tool_in_shell(const std::string& command_line) {
  const std::string command = "(" + command_line + ") 2>&1";
  RunResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) r.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

RunResult run_tool(const std::string& args) {
  return run_tool_in_shell(tool_path().string() + " " + args);
}

// run_tool under a file size limit of 20 blocks.
RunResult run_tool_limited(const std::string& args) {
  return run_tool_in_shell("ulimit -f 20; " + tool_path().string() + " " + args);
}

class ConvertHfTool : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(tool_path())) << "build the convert_hf target first: " << tool_path();
    dir_ = fs::temp_directory_path() / ("zt_convert_hf_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  const std::string fixtures_ = zt::test::fixture_path("hf_tiny_mnli");
};

TEST_F(ConvertHfTool, UsageAndBadArguments) {
  RunResult none = run_tool("");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.output.find("convert_hf import DIR OUT"), std::string::npos) << none.output;
  EXPECT_EQ(run_tool("--help").exit_code, 0);
  RunResult unknown = run_tool("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown command 'frobnicate'"), std::string::npos) << unknown.output;
  RunResult option =
      run_tool("import " + fixtures_ + "/torch_f32 " + (dir_ / "m.h5").string() + " --labels 2");
  EXPECT_EQ(option.exit_code, 2);
  EXPECT_NE(option.output.find("unknown flag '--labels'"), std::string::npos) << option.output;
  RunResult bad_int =
      run_tool("import " + fixtures_ + "/torch_f32 " + (dir_ / "m.h5").string() + " --num_labels two");
  EXPECT_EQ(bad_int.exit_code, 2);
  EXPECT_NE(bad_int.output.find("--num_labels needs an integer, got 'two'"), std::string::npos)
      << bad_int.output;
}

TEST_F(ConvertHfTool, MissingInputsAreReadableErrors) {
  RunResult r = run_tool("import " + (dir_ / "absent").string() + " " + (dir_ / "m.h5").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("convert_hf import: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is not a directory"), std::string::npos) << r.output;
  RunResult e = run_tool("export " + (dir_ / "absent.h5").string() + " " + (dir_ / "out").string());
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_NE(e.output.find("convert_hf export: error: "), std::string::npos) << e.output;
}

TEST_F(ConvertHfTool, ImportMnliAsTwoLabelsThenExport) {
  const std::string model = (dir_ / "m.h5").string();
  RunResult r = run_tool("import " + fixtures_ + "/torch_f16 " + model + " --num_labels 2 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("initialised: classifier.weight [2, 32]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("46 tensors"), std::string::npos) << r.output;
  RunResult e = run_tool("export " + model + " " + (dir_ / "hf").string());
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_TRUE(fs::exists(dir_ / "hf" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "hf" / "config.json"));
  RunResult f = run_tool("forward " + model + " " + fixtures_ + "/logits.h5 " + (dir_ / "ours.h5").string());
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_TRUE(fs::exists(dir_ / "ours.h5"));
}

// An error inside config.json is reported with the file's name and the config parser's message, without
// the failed check and the source location (those need ZT_VERBOSE_ERRORS=1).
TEST_F(ConvertHfTool, ABadConfigIsReportedWithoutInternals) {
  const fs::path source = dir_ / "bad_config";
  fs::copy(fixtures_ + "/torch_f32", source);
  std::ofstream(source / "config.json") << R"({"model_type": "deberta-v2", "hidden_size": -4})";
  RunResult r = run_tool("import " + source.string() + " " + (dir_ / "m.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config.json: config sizes must be positive"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("check failed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(".cpp:"), std::string::npos) << r.output;
}

// A full disk (emulated by ulimit -f, under which the tool ignores SIGXFSZ so writes fail with EFBIG):
// export and import end with one error line and exit code 2, leave no temp file, and keep what was there.
TEST_F(ConvertHfTool, AFullDiskIsOneErrorLineAndKeepsThePreviousFiles) {
  const std::string model = (dir_ / "m.h5").string();
  ASSERT_EQ(run_tool("import " + fixtures_ + "/torch_f32 " + model + " --num_labels 2").exit_code, 0);
  const fs::path hf = dir_ / "hf";
  ASSERT_EQ(run_tool("export " + model + " " + hf.string()).exit_code, 0);
  const auto exported_size = fs::file_size(hf / "model.safetensors");
  const auto model_size = fs::file_size(model);

  // ulimit -f counts 512- or 1024-byte blocks depending on the shell: 20 blocks is at most 20 KiB, well
  // under the 100 KiB files.
  RunResult e = run_tool_limited("export " + model + " " + hf.string());
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("convert_hf export: error: "), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("disk full"), std::string::npos) << e.output;
  EXPECT_EQ(fs::file_size(hf / "model.safetensors"), exported_size);

  RunResult i = run_tool_limited("import " + fixtures_ + "/torch_f32 " + model + " --num_labels 2");
  EXPECT_EQ(i.exit_code, 2) << i.output;
  EXPECT_NE(i.output.find("convert_hf import: error: "), std::string::npos) << i.output;
  EXPECT_EQ(fs::file_size(model), model_size);

  for (const fs::path& folder : {dir_, hf}) {
    for (const auto& entry : fs::directory_iterator(folder))
      EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

}  // namespace
