// The flag table every tool parses with (runtime/flag_table.h): values, switches, operands, the errors a
// user meets, and --help generated from the same rows.
#include "runtime/flag_table.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "tests/support/error_matchers.h"

namespace zt {
namespace {

struct Options {
  int64_t reps = 5;
  std::string mode = "fast";
  size_t bytes = 1024;
  bool verbose = false;
};

using V = const std::string&;
using F = std::string_view;

const auto kFlags = std::to_array<Flag<Options>>({
    {"reps", "N", "repetitions", [](Options& o, F f, V v) { o.reps = parse_integer_flag(f, v, 1, 100); },
     [](const Options& o) { return std::to_string(o.reps); }},
    {"mode", "fast|slow", "how",
     [](Options& o, F f, V v) {
       o.mode = parse_choice_flag(f, v, {"fast", "slow"});
     },
     [](const Options& o) { return o.mode; }},
    {"bytes", "SIZE", "how much", [](Options& o, F f, V v) { o.bytes = parse_size_flag(f, v); }, nullptr},
    {"verbose", "", "say more", [](Options& o, F, V) { o.verbose = true; }, nullptr},
});

Options parsed(const std::vector<std::string>& args) {
  Options o;
  parse_flags<Options>(kFlags, args, o);
  return o;
}

TEST(FlagTable, BothSyntaxesSwitchesAndSizes) {
  const Options o = parsed({"--reps", "7", "--mode=slow", "--bytes", "4KiB", "--verbose"});
  EXPECT_EQ(o.reps, 7);
  EXPECT_EQ(o.mode, "slow");
  EXPECT_EQ(o.bytes, 4096u);
  EXPECT_TRUE(o.verbose);
  EXPECT_FALSE(parsed({"--verbose=false"}).verbose);
}

TEST(FlagTable, ErrorsNameTheFlag) {
  EXPECT_ERROR_HAS(parsed({"--rep", "3"}), "unknown flag '--rep'", "did you mean 'reps'");
  EXPECT_ERROR_HAS(parsed({"--reps"}), "--reps needs a value (N)");
  EXPECT_ERROR_HAS(parsed({"--reps", "x"}), "--reps needs an integer, got 'x'");
  EXPECT_ERROR_HAS(parsed({"--reps", "0"}), "--reps must be at least 1");
  EXPECT_ERROR_HAS(parsed({"--mode", "medium"}), "--mode must be one of fast, slow, got 'medium'");
  EXPECT_ERROR_HAS(parsed({"--bytes", "lots"}), "--bytes needs a size");
  EXPECT_ERROR_HAS(parsed({"--verbose=yes"}), "--verbose is a switch");
  EXPECT_ERROR_HAS(parsed({"stray"}), "unexpected argument 'stray'");
}

TEST(FlagTable, OperandsWhenTheProgramTakesThem) {
  Options o;
  const ParsedFlags p = parse_flags<Options>(kFlags, {"in.txt", "--reps", "2", "out.txt"}, o, true);
  EXPECT_EQ(p.operands, (std::vector<std::string>{"in.txt", "out.txt"}));
  EXPECT_TRUE(p.given.contains("reps"));
  EXPECT_TRUE(parse_flags<Options>(kFlags, {"--reps", "2", "-h"}, o).help);
}

TEST(FlagTable, HelpListsEveryRowWithItsDefault) {
  const std::string help = flags_help<Options>(kFlags, Options{}, "usage: t\n");
  EXPECT_TRUE(help.starts_with("usage: t\n"));
  for (const Flag<Options>& flag : kFlags)
    EXPECT_NE(help.find("--" + std::string(flag.name)), std::string::npos);
  EXPECT_NE(help.find("repetitions [default: 5]"), std::string::npos) << help;
  EXPECT_NE(help.find("how [default: fast]"), std::string::npos) << help;
  EXPECT_NE(help.find("  --help"), std::string::npos);
}

}  // namespace
}  // namespace zt
