// Command-line flags from one table per program: parsing, the unknown-flag suggestion and --help all read
// it, so a flag cannot be parsed without being documented.
//
//   const std::array<Flag<Options>, 2> kFlags = {{
//       {"size", "BYTES", "bytes per file", [](Options& o, auto f, auto& v) { o.size = parse_size_flag(f, v);
//       },
//        [](const Options& o) { return format_memory_size(o.size); }},
//       {"verbose", "", "print every step", [](Options& o, auto, auto&) { o.verbose = true; }, nullptr}}};
//   Options options;
//   const ParsedFlags parsed = parse_flags(kFlags, args, options);   // throws zt::Error naming the flag
//   if (parsed.help) std::fputs(flags_help(kFlags, Options{}, "usage: tool [flags]\n").c_str(), stdout);
#pragma once

#include <cstdint>
#include <iomanip>
#include <limits>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/check.h"

namespace zt {

template <typename Options>
struct Flag {
  std::string_view name;     // without the leading "--"
  std::string_view metavar;  // empty for a switch (bare, or --name=true|false)
  std::string_view help;
  // Stores the value (a switch gets "" or "true"); throws zt::Error naming the flag for a bad value.
  void (*set)(Options& options, std::string_view flag, const std::string& value);
  // The current value, shown as the default in --help; nullptr shows none.
  std::string (*show)(const Options& options);
};

struct ParsedFlags {
  bool help = false;                  // --help or -h was given (parsing stopped there)
  std::vector<std::string> operands;  // arguments that are not flags, in order (when the program takes any)
  std::set<std::string, std::less<>> given;  // names of the flags given
};

// " (did you mean 'x'?)" for the closest of `candidates` within a few edits of `name`, else "".
std::string did_you_mean(std::string_view name, const std::vector<std::string_view>& candidates);

// Flag values, with errors naming the flag ("--reps needs an integer, got 'x'").
int64_t parse_integer_flag(std::string_view flag, const std::string& text, int64_t minimum,
                           int64_t maximum = std::numeric_limits<int64_t>::max());
double parse_number_flag(std::string_view flag, const std::string& text, double minimum);
// A byte count with an optional unit: 4096, 64KiB, 4GiB, 1.5GB (runtime/memory_size.h).
size_t parse_size_flag(std::string_view flag, const std::string& text);
// One of `choices`, or an error listing them.
std::string parse_choice_flag(std::string_view flag, const std::string& text,
                              std::initializer_list<std::string_view> choices);

namespace flag_detail {
// The usage error for `arg`, with a suggestion from `names`.
[[noreturn]] void fail_unknown(std::string_view arg, const std::vector<std::string_view>& names);
}  // namespace flag_detail

// Parses `args` (without the program name) into `options`. `take_operands`: arguments that do not start with
// "--" are collected; otherwise each is an error. Flags take "--name value" or "--name=value".
template <typename Options>
ParsedFlags parse_flags(std::span<const Flag<Options>> table, const std::vector<std::string>& args,
                        Options& options, bool take_operands = false) {
  ParsedFlags parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      parsed.help = true;
      return parsed;
    }
    if (!arg.starts_with("--") || arg.size() == 2) {
      ZT_CHECK(take_operands && !arg.starts_with("-"), "unexpected argument '", arg,
               "' (flags look like --name value or --name=value; see --help)");
      parsed.operands.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const Flag<Options>* flag = nullptr;
    for (const Flag<Options>& f : table) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      std::vector<std::string_view> names;
      for (const Flag<Options>& f : table) names.push_back(f.name);
      flag_detail::fail_unknown(name, names);
    }
    std::string value;
    if (flag->metavar.empty()) {
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        ZT_CHECK(value == "true" || value == "false", "--", name, " is a switch; give it bare or as --", name,
                 "=true|false, got '", value, "'");
      }
      if (value != "false") flag->set(options, flag->name, value);
    } else {
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else {
        ZT_CHECK(i + 1 < args.size() && !args[i + 1].starts_with("--"), "--", name, " needs a value (",
                 flag->metavar, ")");
        value = args[++i];
      }
      flag->set(options, flag->name, value);
    }
    parsed.given.insert(name);
  }
  return parsed;
}

// `usage` (its own lines), then one line per flag: "  --name METAVAR   help [default: shown]", then --help.
template <typename Options>
std::string flags_help(std::span<const Flag<Options>> table, const Options& defaults,
                       std::string_view usage) {
  std::ostringstream out;
  out << usage;
  for (const Flag<Options>& flag : table) {
    const std::string head =
        "  --" + std::string(flag.name) + (flag.metavar.empty() ? "" : " ") + std::string(flag.metavar);
    out << std::left << std::setw(44) << head << " " << flag.help;
    if (!flag.metavar.empty() && flag.show != nullptr) {
      const std::string shown = flag.show(defaults);
      out << " [default: " << (shown.empty() ? "none" : shown) << "]";
    }
    out << "\n";
  }
  out << std::left << std::setw(44) << "  --help"
      << " print this text and exit\n";
  return out.str();
}

}  // namespace zt
