#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/progress.h"

namespace zt {
namespace {

// Captures what a Progress writes, with a clock the test advances by hand.
struct Capture {
  Capture() : file(std::tmpfile()) {}
  ~Capture() { std::fclose(file); }
  std::string text() const {
    std::fflush(file);
    std::rewind(file);
    std::string out;
    for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) out.push_back(static_cast<char>(c));
    return out;
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::string t = text(), line;
    for (char c : t) {
      if (c == '\n') {
        out.push_back(line);
        line.clear();
      } else {
        line.push_back(c);
      }
    }
    if (!line.empty()) out.push_back(line);
    return out;
  }
  ProgressOptions options(bool terminal) {
    ProgressOptions o;
    o.out = file;
    o.terminal = terminal;
    o.clock = [this] { return now; };
    return o;
  }
  FILE* file;
  double now = 1000.0;
};

TEST(Progress, RateAndEtaComeFromTheInjectedClock) {
  Capture c;
  Progress p("train epoch 1", 1000, c.options(false));
  EXPECT_EQ(p.items_per_second(), 0.0);
  EXPECT_LT(p.eta_s(), 0.0);  // unknown before any time passes
  c.now += 2.0;
  p.update(100);
  EXPECT_DOUBLE_EQ(p.elapsed_s(), 2.0);
  EXPECT_DOUBLE_EQ(p.items_per_second(), 50.0);
  EXPECT_DOUBLE_EQ(p.eta_s(), 18.0);  // 900 left at 50/s
  c.now += 2.0;
  p.update(300);
  EXPECT_DOUBLE_EQ(p.items_per_second(), 100.0);
  EXPECT_DOUBLE_EQ(p.eta_s(), 6.0);
}

TEST(Progress, PlainOutputIsThrottledAndEndsWithAFinalLine) {
  Capture c;
  ProgressOptions options = c.options(false);
  options.plain_interval_s = 10.0;
  {
    Progress p("train epoch 1", 3668, options);
    for (int step = 1; step <= 40; ++step) {  // 40 steps of 1 s: lines at t = 10, 20, 30, 40
      c.now += 1.0;
      p.update(40, {{"loss", 0.5312}, {"lr", 2e-5}});
    }
    c.now += 0.5;
    p.finish();
    p.finish();  // idempotent
  }
  std::vector<std::string> lines = c.lines();
  ASSERT_EQ(lines.size(), 5u) << c.text();
  EXPECT_EQ(lines[0],
            "train epoch 1: 400/3668 (10%) 40.0 samples/s elapsed 00:10 eta 01:21 loss=0.5312 lr=2e-05");
  EXPECT_EQ(lines[3],
            "train epoch 1: 1600/3668 (43%) 40.0 samples/s elapsed 00:40 eta 00:51 loss=0.5312 lr=2e-05");
  EXPECT_EQ(lines[4],
            "train epoch 1: 1600/3668 (43%) 39.5 samples/s elapsed 00:40 loss=0.5312 lr=2e-05 done");
  EXPECT_EQ(c.text().find('\r'), std::string::npos);
}

TEST(Progress, TerminalRedrawsOneLine) {
  Capture c;
  {
    Progress p("eval", 10, c.options(true));
    c.now += 1.0;
    p.update(5, {{"acc", 0.75}});
    c.now += 1.0;
    p.update(5);  // keeps the previous metrics
  }
  std::string text = c.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 3) << text;  // two updates and the final line
  EXPECT_NE(
      text.find("\reval [###############...............]  50% 5/10  5.0 samples/s  00:01<00:01  acc=0.75"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("100% 10/10  5.0 samples/s  00:02  acc=0.75"), std::string::npos) << text;
}

TEST(Progress, FormatsDurationsAndRejectsMisuse) {
  EXPECT_EQ(Progress::format_duration(0), "00:00");
  EXPECT_EQ(Progress::format_duration(754.4), "12:34");
  EXPECT_EQ(Progress::format_duration(3723), "1:02:03");
  EXPECT_EQ(Progress::format_duration(-1), "--:--");
  Capture c;
  Progress p("x", 1, c.options(false));
  p.finish();
  EXPECT_THROW(p.update(1), Error);
  EXPECT_THROW(Progress("bad", -1, c.options(false)), Error);
}

}  // namespace
}  // namespace zt
