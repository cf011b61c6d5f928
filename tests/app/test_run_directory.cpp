// --output_dir: one run per directory (Note [One run per output directory]).
#include "app/run/run_directory.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "tests/support/temp_dir_test.h"

namespace zt::optim {
namespace {

namespace fs = std::filesystem;

class RunDirectoryTest : public test::TempDirTest {
 protected:
  // The files a finished run leaves, and two that are not ours.
  void fill_with_a_finished_run() {
    for (const char* name : {"metrics.jsonl", "model.h5", "MRPC.tsv", "step_5.h5", "step_10.h5"}) touch(name);
    fs::create_directory(path("step_15"));
    touch("step_15/state.bin");
    touch("notes.txt");
    fs::create_directory(path("step_plots"));
  }
  void touch(const std::string& name) { std::ofstream(path(name)) << "x"; }
};

TEST_F(RunDirectoryTest, AFreshOrUnrelatedDirectoryIsUsedAsItIs) {
  const std::string fresh = path("new/out");
  EXPECT_TRUE(prepare_output_dir(fresh, false, false).removed_for_overwrite.empty());
  EXPECT_TRUE(fs::is_directory(fresh));
  touch("notes.txt");
  fs::create_directory(path("step_plots"));
  EXPECT_NO_THROW(prepare_output_dir(dir_.string(), false, false));
  EXPECT_EQ(names(), (std::vector<std::string>{"new", "notes.txt", "step_plots"}));
}

TEST_F(RunDirectoryTest, AnEarlierRunIsRefusedWithHfsMessage) {
  fill_with_a_finished_run();
  expect_error([&] { prepare_output_dir(dir_.string(), false, false); },
               {"Output directory (" + dir_.string() + ") already exists and is not empty",
                "MRPC.tsv, metrics.jsonl, model.h5, step_10.h5, step_15, step_5.h5", "--overwrite_output_dir",
                "--resume_from_checkpoint " + dir_.string()});
  EXPECT_EQ(run_files_in(dir_.string()).size(), 6u) << "a refused run removes nothing";
}

TEST_F(RunDirectoryTest, ResumingKeepsEverything) {
  fill_with_a_finished_run();
  const std::vector<std::string> before = names();
  prepare_output_dir(dir_.string(), false, true);
  EXPECT_EQ(names(), before);
}

TEST_F(RunDirectoryTest, TensorBoardRunsAreFilesOfTheRun) {
  fs::create_directories(path("runs/glue_no_trainer"));
  touch("runs/glue_no_trainer/events.out.tfevents.1.host.2.0");
  expect_error([&] { prepare_output_dir(dir_.string(), false, false); }, {"holds runs of an earlier run"});
  prepare_output_dir(dir_.string(), true, false);
  EXPECT_TRUE(names().empty());
}

TEST_F(RunDirectoryTest, OverwriteRemovesOurFilesOnly) {
  fill_with_a_finished_run();
  const OutputDirReport report = prepare_output_dir(dir_.string(), true, false);
  EXPECT_EQ(report.removed_for_overwrite.size(), 6u);
  EXPECT_EQ(names(), (std::vector<std::string>{".zerotrain.lock", "notes.txt", "step_plots"}));
}

// A sharded (ZeRO) run's checkpoint directories, committed or not, are files of a run too; an uncommitted
// one (step_<N>.zero.tmp/) is a dead writer's once the directory is locked, and is removed.
TEST_F(RunDirectoryTest, ShardedCheckpointDirectoriesBelongToTheRun) {
  fs::create_directory(path("step_20.zero"));
  touch("step_20.zero/rank_0_of_2.h5");
  fs::create_directory(path("step_25.zero.tmp"));
  touch("step_25.zero.tmp/rank_1_of_2.h5");
  touch("notes.txt");
  EXPECT_EQ(run_files_in(dir_.string()), (std::vector<std::string>{"step_20.zero", "step_25.zero.tmp"}));
  expect_error([&] { prepare_output_dir(dir_.string(), false, false); },
               {"holds step_20.zero of an earlier run"});
  EXPECT_EQ(names(), (std::vector<std::string>{"notes.txt", "step_20.zero"}));
  prepare_output_dir(dir_.string(), true, false);
  EXPECT_EQ(names(), (std::vector<std::string>{"notes.txt"}));
}

TEST_F(RunDirectoryTest, AnUnfinishedShardedCheckpointIsRemovedWhenResuming) {
  fs::create_directory(path("step_5.zero"));
  touch("step_5.zero/rank_0_of_2.h5");
  fs::create_directory(path("step_10.zero.tmp"));
  touch("step_10.zero.tmp/rank_0_of_2.h5");
  const OutputDirReport report = prepare_output_dir(dir_.string(), false, true, path("step_5.zero"));
  EXPECT_EQ(report.removed_stale_temp_files, std::vector<std::string>{path("step_10.zero.tmp")});
  EXPECT_EQ(run_files_in(dir_.string()), std::vector<std::string>{"step_5.zero"});
}

// Note [The output directory's lock]: while a run holds the directory a second one is refused, also with
// --overwrite_output_dir (which deleted the live run's files) and when resuming; the lock ends with the run.
TEST_F(RunDirectoryTest, ASecondRunIsRefusedWhileTheFirstHoldsTheDirectory) {
  {
    const OutputDirReport first = prepare_output_dir(dir_.string(), false, false);
    EXPECT_TRUE(first.lock.held());
    touch("metrics.jsonl");
    touch("step_5.h5");
    for (const bool resuming : {false, true}) {
      expect_error([&] { prepare_output_dir(dir_.string(), true, resuming); },
                   {"--output_dir " + dir_.string() + " is in use by another run (process " +
                        std::to_string(getpid()) + ")",
                    ".zerotrain.lock"});
    }
    EXPECT_EQ(run_files_in(dir_.string()), (std::vector<std::string>{"metrics.jsonl", "step_5.h5"}));
  }
  EXPECT_EQ(names(), (std::vector<std::string>{"metrics.jsonl", "step_5.h5"})) << "the lock file is removed";
  EXPECT_NO_THROW(prepare_output_dir(dir_.string(), false, true, path("step_5.h5")));
}

// Resuming continues the checkpoint's run: into the directory of another run it is refused, into its own or
// an empty one it goes on.
TEST_F(RunDirectoryTest, ResumingIntoAnotherRunsDirectoryIsRefused) {
  fill_with_a_finished_run();
  fs::create_directory(path("a"));
  touch("a/step_2.h5");
  expect_error([&] { prepare_output_dir(dir_.string(), false, true, path("a/step_2.h5")); },
               {"holds MRPC.tsv, metrics.jsonl", "of another run than the checkpoint " + path("a/step_2.h5"),
                "Resume into " + path("a")});
  EXPECT_NO_THROW(prepare_output_dir(dir_.string(), false, true, path("step_10.h5")));
  EXPECT_NO_THROW(prepare_output_dir(path("b"), false, true, path("a/step_2.h5")));
}

TEST_F(RunDirectoryTest, TempFilesOfDeadWritersAreRemovedAndLiveOnesRefused) {
  const std::string stale = str("step_5.h5.tmp-", dead_pid());
  touch(stale);
  EXPECT_EQ(prepare_output_dir(dir_.string(), false, false).removed_stale_temp_files,
            std::vector<std::string>{path(stale)});
  EXPECT_TRUE(names().empty());

  // The parent of this test is alive: a run writing here now.
  touch(str("model.h5.tmp-", getppid()));
  expect_error([&] { prepare_output_dir(dir_.string(), true, true); },
               {"is in use: process " + std::to_string(getppid()), "model.h5.tmp-"});
}

TEST_F(RunDirectoryTest, AFileInPlaceOfTheDirectoryIsNamed) {
  touch("out");
  expect_error([&] { prepare_output_dir(path("out"), true, false); }, {path("out"), "is not a directory"});
}

}  // namespace
}  // namespace zt::optim
