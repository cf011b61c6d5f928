// Reading the DeepSpeed JSON: the file (once, size-capped), the parse (duplicate keys and overflowing numbers
// refused with the key's path) and JsonSection, which marks every key it reads so that nothing is ignored.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "app/config/train_config_sections.h"

namespace zt::optim::config_detail {

using nlohmann::json;

namespace {

// Follows nlohmann's parser events to know the path of the value being parsed: for duplicate keys, which the
// parser would silently collapse to one, and for a number that overflows, which it reports without a key.
class KeyPathTracker {
 public:
  explicit KeyPathTracker(std::string_view source) : source_(source) {}

  void on_event(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        frames_.emplace_back(true);
        break;
      case json::parse_event_t::array_start:
        frames_.emplace_back(false);
        break;
      case json::parse_event_t::key: {
        Frame& frame = frames_.back();
        frame.key = parsed.get<std::string>();
        // Python's json (DeepSpeed) keeps the last of two equal keys, nlohmann the first: either way one
        // value is dropped without a word, so a duplicate is an error.
        ZT_CHECK(frame.keys.insert(frame.key).second, "DeepSpeed config '", source_, "': key '", path(),
                 "' appears twice (one of the two values would be ignored); keep one");
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        count_element();
        break;
      case json::parse_event_t::value:
        count_element();
        break;
    }
  }

  // The dotted path of the value being parsed, e.g. "optimizer.params.betas[1]".
  std::string path() const {
    std::string out;
    for (const Frame& frame : frames_) {
      if (!frame.object) {
        out += str("[", frame.elements, "]");
      } else if (!frame.key.empty()) {
        out += (out.empty() ? "" : ".") + frame.key;
      }
    }
    return out;
  }

 private:
  struct Frame {
    explicit Frame(bool is_object) : object(is_object) {}
    bool object;
    std::set<std::string> keys;  // objects: keys seen so far
    std::string key;             // objects: the key whose value is being parsed
    int64_t elements = 0;        // arrays: elements finished so far (= index of the one being parsed)
  };
  void count_element() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().elements;
  }

  std::string_view source_;
  std::vector<Frame> frames_;
};

}  // namespace

std::string read_config_file(const std::string& path, std::string_view flag) {
  // One open and one pass to EOF: no size query first (a FIFO has none, and a second open of a FIFO waits for
  // a writer that has gone), and the cap bounds the memory a file without end (/dev/zero) can take.
  std::ifstream file(path, std::ios::binary);
  ZT_CHECK(file.is_open(), flag, ": cannot open '", path, "'");
  std::string text;
  std::array<char, 64 * 1024> chunk;
  while (text.size() <= kMaxDeepSpeedConfigBytes) {
    file.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    text.append(chunk.data(), static_cast<size_t>(file.gcount()));
    if (!file) break;
  }
  ZT_CHECK(!file.bad(), flag, ": cannot read '", path, "'");
  return text;
}

json parse_config_json(std::string_view text, std::string_view source) {
  KeyPathTracker tracker(source);
  try {
    // nlohmann's parser is iterative, but printing a value (dump, in messages) recurses: the depth the
    // callback is given (enclosing containers) bounds the document before any of that.
    return json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
      const bool opens =
          event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
      ZT_CHECK(!opens || depth < kMaxConfigNesting, "DeepSpeed config '", source, "': key '", tracker.path(),
               "' is nested more than ", kMaxConfigNesting, " levels deep (a DeepSpeed config nests a few)");
      tracker.on_event(event, parsed);
      return true;
    });
  } catch (const json::parse_error& e) {
    // nlohmann's message carries line and column; the byte offset helps with one-line configs.
    ZT_FAIL("DeepSpeed config '", source, "' is not valid JSON (byte ", e.byte, "): ", e.what());
  } catch (const json::out_of_range&) {
    // The only range error of parsing: a number beyond a double (1e400). Its key is the one being parsed.
    ZT_FAIL("DeepSpeed config '", source, "': the number of key '", tracker.path(),
            "' is out of range (beyond the largest double)");
  }
}

// ---------------------------------------------------------------------------------------------------------
// JsonSection

JsonSection::JsonSection(const json& object, std::string path, std::string_view source)
    : object_(&object),
      path_(std::move(path)),
      source_(source),
      read_paths_(std::make_shared<std::set<std::string, std::less<>>>()) {
  ZT_CHECK(object_->is_object(), where(), path_.empty() ? "the top level" : "key '" + path_ + "'",
           " must be a JSON object, got ", object_->type_name());
}

std::string JsonSection::path_of(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

std::string JsonSection::where() const {
  return str("DeepSpeed config '", source_, "': ");
}

const json* JsonSection::take(std::string_view key) {
  const auto it = object_->find(std::string(key));
  if (it == object_->end()) return nullptr;
  read_paths_->insert(path_of(key));
  return &*it;
}

std::optional<JsonSection> JsonSection::section(std::string_view key) {
  declared_auto_allowed(path_of(key), JsonType::object);
  const json* value = take(key);
  if (value == nullptr) return std::nullopt;
  JsonSection child(*value, path_of(key), source_);
  child.read_paths_ = read_paths_;
  return child;
}

JsonValue<int64_t> JsonSection::integer(std::string_view key, int64_t minimum, int64_t maximum) {
  // Outside int64 is its own message: nlohmann keeps 2^64-1 as unsigned (get<int64_t> would wrap to -1)
  // and turns larger integers into doubles (1e30), which are whole but no int64.
  bool out_of_int64 = false;
  JsonValue<int64_t> v =
      read<int64_t>(key, JsonType::integer, "an integer", [&](const json& j) -> std::optional<int64_t> {
        if (j.is_number_unsigned()) {
          if (j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            return j.get<int64_t>();
          out_of_int64 = true;
          return int64_t{0};
        }
        if (j.is_number_integer()) return j.get<int64_t>();
        // DeepSpeed configs write sizes as floats ("2e8"); accept them when they are whole numbers.
        if (j.is_number_float()) {
          const double d = j.get<double>();
          if (std::floor(d) != d) return std::nullopt;
          // 2^63 is the first double past int64's range.
          if (std::abs(d) < 9223372036854775808.0) return static_cast<int64_t>(d);
          out_of_int64 = true;
          return int64_t{0};
        }
        return std::nullopt;
      });
  const auto range = [&] {
    return maximum == std::numeric_limits<int64_t>::max() ? str("at least ", minimum)
                                                          : str("in [", minimum, ", ", maximum, "]");
  };
  ZT_CHECK(!out_of_int64, where(), "key '", v.path, "' is out of range (it must be ", range(), ")");
  ZT_CHECK(!v.given() || (v.value >= minimum && v.value <= maximum), where(), "key '", v.path, "' must be ",
           range(), ", got ", v.value);
  return v;
}

JsonValue<double> JsonSection::number(std::string_view key) {
  return read<double>(key, JsonType::number, "a number", [](const json& v) -> std::optional<double> {
    if (v.is_number()) return v.get<double>();
    return std::nullopt;
  });
}

JsonValue<bool> JsonSection::boolean(std::string_view key) {
  return read<bool>(key, JsonType::boolean, "true or false", [](const json& v) -> std::optional<bool> {
    if (v.is_boolean()) return v.get<bool>();
    return std::nullopt;
  });
}

JsonValue<std::string> JsonSection::string(std::string_view key) {
  return read<std::string>(key, JsonType::string, "a string",
                           [](const json& v) -> std::optional<std::string> {
                             if (v.is_string()) return v.get<std::string>();
                             return std::nullopt;
                           });
}

JsonValue<std::array<double, 2>> JsonSection::pair(std::string_view key) {
  return read<std::array<double, 2>>(
      key, JsonType::pair, "a list of two numbers",
      [](const json& v) -> std::optional<std::array<double, 2>> {
        if (v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number())
          return std::array<double, 2>{v[0].get<double>(), v[1].get<double>()};
        return std::nullopt;
      });
}

template <typename T, typename Convert>
JsonValue<T> JsonSection::read(std::string_view key, JsonType type, std::string_view expected,
                               Convert convert) {
  JsonValue<T> result;
  result.path = path_of(key);
  const bool auto_allowed = declared_auto_allowed(result.path, type);
  result.auto_allowed = auto_allowed;
  const json* value = take(key);
  if (value == nullptr) return result;
  if (value->is_string() && value->get<std::string>() == "auto") {
    ZT_CHECK(
        auto_allowed, where(), "key '", result.path,
        "' is \"auto\", but \"auto\" is only resolved for keys HF's DeepSpeed integration fills "
        "(batch sizes, clipping, optimizer and scheduler params, fp16/bf16 enabled, hidden-size buckets)");
    result.state = JsonState::automatic;
    return result;
  }
  const std::optional<T> converted = convert(*value);
  ZT_CHECK(converted.has_value(), where(), "key '", result.path, "' must be ", expected, ", got ",
           value->dump());
  result.state = JsonState::given;
  result.value = *converted;
  return result;
}

}  // namespace zt::optim::config_detail
