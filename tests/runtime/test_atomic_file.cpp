#include "runtime/atomic_file.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "tests/support/temp_dir_test.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

using AtomicFileTest = test::TempDirTest;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  ZT_CHECK(!out.fail(), "cannot write ", path, " (disk full?)");
}

TEST_F(AtomicFileTest, PublishesTheWholeFileAndLeavesNoTemp) {
  const std::string file = path("config.json");
  atomic_write_file(file, [](const std::string& temp) { write_text(temp, "first"); });
  atomic_write_file(file, [](const std::string& temp) { write_text(temp, "second"); });
  EXPECT_EQ(read_all(file), "second");
  EXPECT_EQ(names(), std::vector<std::string>{"config.json"});
}

TEST_F(AtomicFileTest, AThrowingWriterRemovesTheTempAndKeepsThePreviousFile) {
  const std::string file = path("model.safetensors");
  atomic_write_file(file, [](const std::string& temp) { write_text(temp, "previous"); });
  expect_error(
      [&] {
        atomic_write_file(file, [](const std::string& temp) {
          write_text(temp, "half of the new one");
          ZT_FAIL("writer failed half way");
        });
      },
      {"writer failed half way"});
  EXPECT_EQ(read_all(file), "previous");
  EXPECT_EQ(names(), std::vector<std::string>{"model.safetensors"});
}

// A full disk, emulated by a file size limit with SIGXFSZ ignored (as run_tool_main does): the write fails
// with EFBIG, the error names the file, and neither the temp file nor a damaged target remain. In a child
// process so the limit does not touch the test runner; the child reports through its exit code.
TEST_F(AtomicFileTest, AFullDiskIsAnErrorThatLeavesThePreviousFileIntact) {
  const std::string file = path("model.safetensors");
  atomic_write_file(file, [](const std::string& temp) { write_text(temp, "previous"); });
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 4096;
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      atomic_write_file(file, [](const std::string& temp) { write_text(temp, std::string(1 << 20, 'x')); });
    } catch (const Error& e) {
      const std::string message = e.message();
      std::exit(message.find("disk full") != std::string::npos && message.find(".tmp-") != std::string::npos
                    ? 0
                    : 3);
    }
    std::exit(4);  // the write did not fail
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: the error does not name the temp file; 4: no error";
  EXPECT_EQ(read_all(file), "previous");
  EXPECT_EQ(names(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(AtomicFileTest, TempFileNamesCarryTheWritersPid) {
  EXPECT_EQ(temp_path_for("out/step_5.h5"), str("out/step_5.h5.tmp-", getpid()));
  EXPECT_EQ(temp_file_owner("step_5.h5.tmp-1234"), 1234);
  EXPECT_EQ(temp_file_owner("model.h5.tmp-7"), 7);
  EXPECT_EQ(temp_file_owner("model.h5.tmp-"), 0);
  EXPECT_EQ(temp_file_owner("model.h5.tmp-12x"), 0);
  EXPECT_EQ(temp_file_owner("model.h5.tmp--3"), 0);
  EXPECT_EQ(temp_file_owner(".tmp-12"), 0);
  EXPECT_EQ(temp_file_owner("model.h5"), 0);
}

TEST_F(AtomicFileTest, RemovesTempFilesOfDeadProcessesOnly) {
  const std::string dead = path(str("step_5.h5.tmp-", dead_pid()));
  const std::string live = path(str("model.h5.tmp-", getpid()));
  const std::string parent = path(str("step_10.h5.tmp-", getppid()));
  for (const std::string& name : {dead, live, parent, path("notes.tmp-abc"), path("step_5.h5")})
    write_text(name, "x");
  fs::create_directory(path(str("dir.tmp-", dead_pid())));  // only files are temp files

  EXPECT_EQ(remove_stale_temp_files(dir_.string()), std::vector<std::string>{dead});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(parent));
  EXPECT_TRUE(fs::exists(path("notes.tmp-abc")));
  EXPECT_TRUE(fs::exists(path("step_5.h5")));
  EXPECT_TRUE(remove_stale_temp_files(path("no_such_dir")).empty());
}

}  // namespace
}  // namespace zt
