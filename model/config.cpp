#include "model/config.h"

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "runtime/check.h"
#include "runtime/memory_size.h"
#include "runtime/text_file.h"

namespace zt {

using nlohmann::json;

int64_t DebertaConfig::resolved_max_relative_positions() const {
  return max_relative_positions < 1 ? max_position_embeddings : max_relative_positions;
}

int64_t DebertaConfig::att_span() const {
  return position_buckets > 0 ? position_buckets : resolved_max_relative_positions();
}

kernels::RelativePositionConfig DebertaConfig::relative_positions() const {
  return kernels::RelativePositionConfig::from_model_config(position_buckets, max_relative_positions,
                                                            max_position_embeddings);
}

float DebertaConfig::attention_scale() const {
  // HF: torch.sqrt(torch.tensor(query_layer.size(-1), dtype=torch.float) * scale_factor), i.e. in fp32.
  return std::sqrt(static_cast<float>(head_size()) * static_cast<float>(scale_factor()));
}

namespace {

// Generic PretrainedConfig keys (and tokenizer/generation leftovers) that appear in saved config.json files
// but do not change DebertaV2ForSequenceClassification's parameters or math.
const std::set<std::string_view>& ignored_generic_keys() {
  static const std::set<std::string_view> keys = {"_attn_implementation",
                                                  "_attn_implementation_autoset",
                                                  "_commit_hash",
                                                  "add_cross_attention",
                                                  "bad_words_ids",
                                                  "begin_suppress_tokens",
                                                  "chunk_size_feed_forward",
                                                  "cross_attention_hidden_size",
                                                  "decoder_start_token_id",
                                                  "diversity_penalty",
                                                  "do_sample",
                                                  "early_stopping",
                                                  "encoder_no_repeat_ngram_size",
                                                  "exponential_decay_length_penalty",
                                                  "finetuning_task",
                                                  "forced_bos_token_id",
                                                  "forced_eos_token_id",
                                                  "gradient_checkpointing",
                                                  "is_decoder",
                                                  "is_encoder_decoder",
                                                  "legacy",  // selects the MLM head variant only
                                                  "length_penalty",
                                                  "max_length",
                                                  "min_length",
                                                  "no_repeat_ngram_size",
                                                  "num_beam_groups",
                                                  "num_beams",
                                                  "num_return_sequences",
                                                  "output_attentions",
                                                  "output_hidden_states",
                                                  "output_past",
                                                  "output_scores",
                                                  "prefix",
                                                  "remove_invalid_values",
                                                  "repetition_penalty",
                                                  "return_dict",
                                                  "return_dict_in_generate",
                                                  "sep_token_id",
                                                  "suppress_tokens",
                                                  "task_specific_params",
                                                  "temperature",
                                                  "tf_legacy_loss",
                                                  "tie_encoder_decoder",
                                                  "tie_word_embeddings",
                                                  "tokenizer_class",
                                                  "top_k",
                                                  "top_p",
                                                  "torchscript",
                                                  "typical_p",
                                                  "use_bfloat16",
                                                  "use_cache",
                                                  "vocab_type"};
  return keys;
}

// Typed readers that name the key when the JSON value has the wrong type.
int64_t as_int(const json& v, std::string_view key) {
  ZT_CHECK(v.is_number_integer(), "config key '", key, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}
std::optional<int64_t> as_optional_int(const json& v, std::string_view key) {
  if (v.is_null()) return std::nullopt;
  return as_int(v, key);
}
double as_double(const json& v, std::string_view key) {
  ZT_CHECK(v.is_number(), "config key '", key, "' must be a number, got ", v.dump());
  return v.get<double>();
}
bool as_bool(const json& v, std::string_view key) {
  ZT_CHECK(v.is_boolean(), "config key '", key, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}
std::string as_string(const json& v, std::string_view key) {
  ZT_CHECK(v.is_string(), "config key '", key, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}
std::optional<std::string> as_optional_string(const json& v, std::string_view key) {
  if (v.is_null()) return std::nullopt;
  return as_string(v, key);
}

std::string lower_trimmed(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto first = s.find_first_not_of(" \t");
  const auto last = s.find_last_not_of(" \t");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

// "p2c|c2p" or ["p2c", "c2p"] → entries, lower-cased and stripped as HF does.
std::vector<std::string> split_bar_list(const json& v, std::string_view key) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (v.is_string()) {
    std::stringstream stream(v.get<std::string>());
    std::string part;
    while (std::getline(stream, part, '|')) out.push_back(lower_trimmed(part));
    return out;
  }
  ZT_CHECK(v.is_array(), "config key '", key, "' must be a string like \"p2c|c2p\" or a list, got ",
           v.dump());
  for (const json& item : v) out.push_back(lower_trimmed(as_string(item, key)));
  return out;
}

void parse_pos_att_type(const json& v, DebertaConfig& c) {
  c.c2p = c.p2c = false;
  for (const std::string& kind : split_bar_list(v, "pos_att_type")) {
    if (kind == "c2p") {
      c.c2p = true;
    } else if (kind == "p2c") {
      c.p2c = true;
    } else {
      ZT_FAIL("config key 'pos_att_type' has unsupported entry '", kind, "' (supported: c2p, p2c)");
    }
  }
}

void parse_norm_rel_ebd(const json& v, DebertaConfig& c) {
  c.rel_embeddings_layer_norm = false;
  for (const std::string& kind : split_bar_list(v, "norm_rel_ebd")) {
    if (kind == "layer_norm") {
      c.rel_embeddings_layer_norm = true;
    } else {
      ZT_CHECK(kind == "none", "config key 'norm_rel_ebd' has unsupported entry '", kind,
               "' (supported: none, layer_norm)");
    }
  }
}

void parse_eos(const json& v, DebertaConfig& c) {
  c.eos_token_ids.clear();
  if (v.is_null()) return;
  if (v.is_array()) {
    for (const json& item : v) c.eos_token_ids.push_back(as_int(item, "eos_token_id"));
  } else {
    c.eos_token_ids.push_back(as_int(v, "eos_token_id"));
  }
}

std::vector<std::string> parse_id2label(const json& v) {
  ZT_CHECK(v.is_object(), "config key 'id2label' must be an object like {\"0\": \"name\"}, got ", v.dump());
  std::vector<std::string> labels(v.size());
  std::vector<bool> seen(v.size(), false);
  for (const auto& [key, name] : v.items()) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_CHECK(used == key.size() && id >= 0 && id < static_cast<int64_t>(v.size()), "config 'id2label' key '",
             key, "' must be a label id in [0, ", v.size(), ")");
    ZT_CHECK(!seen[id], "config 'id2label' repeats label id ", id);
    seen[id] = true;
    labels[id] = as_string(name, "id2label");
  }
  return labels;
}

std::map<std::string, int64_t> parse_label2id(const json& v) {
  ZT_CHECK(v.is_object(), "config key 'label2id' must be an object like {\"name\": 0}, got ", v.dump());
  std::map<std::string, int64_t> out;
  for (const auto& [name, id] : v.items()) out[name] = as_int(id, "label2id");
  return out;
}

using KeyHandler = std::function<void(const json&, DebertaConfig&)>;

const std::unordered_map<std::string_view, KeyHandler>& key_handlers() {
  static const std::unordered_map<std::string_view, KeyHandler> handlers = {
      {"vocab_size", [](const json& v, DebertaConfig& c) { c.vocab_size = as_int(v, "vocab_size"); }},
      {"hidden_size", [](const json& v, DebertaConfig& c) { c.hidden_size = as_int(v, "hidden_size"); }},
      {"num_hidden_layers",
       [](const json& v, DebertaConfig& c) { c.num_hidden_layers = as_int(v, "num_hidden_layers"); }},
      {"num_attention_heads",
       [](const json& v, DebertaConfig& c) { c.num_attention_heads = as_int(v, "num_attention_heads"); }},
      {"attention_head_size",
       [](const json& v, DebertaConfig& c) { c.attention_head_size = as_int(v, "attention_head_size"); }},
      {"intermediate_size",
       [](const json& v, DebertaConfig& c) { c.intermediate_size = as_int(v, "intermediate_size"); }},
      {"hidden_act", [](const json& v, DebertaConfig& c) { c.hidden_act = as_string(v, "hidden_act"); }},
      {"hidden_dropout_prob",
       [](const json& v, DebertaConfig& c) { c.hidden_dropout_prob = as_double(v, "hidden_dropout_prob"); }},
      {"attention_probs_dropout_prob",
       [](const json& v, DebertaConfig& c) {
         c.attention_probs_dropout_prob = as_double(v, "attention_probs_dropout_prob");
       }},
      {"max_position_embeddings",
       [](const json& v, DebertaConfig& c) {
         c.max_position_embeddings = as_int(v, "max_position_embeddings");
       }},
      {"type_vocab_size",
       [](const json& v, DebertaConfig& c) { c.type_vocab_size = as_int(v, "type_vocab_size"); }},
      {"initializer_range",
       [](const json& v, DebertaConfig& c) { c.initializer_range = as_double(v, "initializer_range"); }},
      {"layer_norm_eps",
       [](const json& v, DebertaConfig& c) { c.layer_norm_eps = as_double(v, "layer_norm_eps"); }},
      {"pad_token_id",
       [](const json& v, DebertaConfig& c) { c.pad_token_id = as_optional_int(v, "pad_token_id"); }},
      {"bos_token_id",
       [](const json& v, DebertaConfig& c) { c.bos_token_id = as_optional_int(v, "bos_token_id"); }},
      {"eos_token_id", parse_eos},
      {"relative_attention",
       [](const json& v, DebertaConfig& c) { c.relative_attention = as_bool(v, "relative_attention"); }},
      {"max_relative_positions",
       [](const json& v, DebertaConfig& c) {
         c.max_relative_positions = as_int(v, "max_relative_positions");
       }},
      {"position_buckets",
       [](const json& v, DebertaConfig& c) { c.position_buckets = as_int(v, "position_buckets"); }},
      {"pos_att_type", parse_pos_att_type},
      {"share_att_key",
       [](const json& v, DebertaConfig& c) { c.share_att_key = as_bool(v, "share_att_key"); }},
      {"position_biased_input",
       [](const json& v, DebertaConfig& c) {
         c.position_biased_input = as_bool(v, "position_biased_input");
       }},
      {"norm_rel_ebd", parse_norm_rel_ebd},
      {"conv_kernel_size",
       [](const json& v, DebertaConfig& c) { c.conv_kernel_size = as_int(v, "conv_kernel_size"); }},
      {"conv_groups", [](const json& v, DebertaConfig& c) { c.conv_groups = as_int(v, "conv_groups"); }},
      {"conv_act", [](const json& v, DebertaConfig& c) { c.conv_act = as_string(v, "conv_act"); }},
      {"embedding_size",
       [](const json& v, DebertaConfig& c) { c.embedding_size = as_int(v, "embedding_size"); }},
      {"pooler_hidden_size",
       [](const json& v, DebertaConfig& c) { c.pooler_hidden_size = as_int(v, "pooler_hidden_size"); }},
      {"pooler_dropout",
       [](const json& v, DebertaConfig& c) { c.pooler_dropout = as_double(v, "pooler_dropout"); }},
      {"pooler_hidden_act",
       [](const json& v, DebertaConfig& c) { c.pooler_hidden_act = as_string(v, "pooler_hidden_act"); }},
      {"cls_dropout",
       [](const json& v, DebertaConfig& c) {
         c.cls_dropout = v.is_null() ? std::nullopt : std::optional<double>(as_double(v, "cls_dropout"));
       }},
      {"num_labels", [](const json& v, DebertaConfig& c) { c.num_labels = as_int(v, "num_labels"); }},
      {"id2label", [](const json& v, DebertaConfig& c) { c.id2label = parse_id2label(v); }},
      {"label2id", [](const json& v, DebertaConfig& c) { c.label2id = parse_label2id(v); }},
      {"problem_type",
       [](const json& v, DebertaConfig& c) { c.problem_type = as_optional_string(v, "problem_type"); }},
      {"model_type", [](const json& v, DebertaConfig& c) { c.model_type = as_string(v, "model_type"); }},
      {"architectures",
       [](const json& v, DebertaConfig& c) {
         c.architectures.clear();
         if (v.is_null()) return;
         ZT_CHECK(v.is_array(), "config key 'architectures' must be a list, got ", v.dump());
         for (const json& a : v) c.architectures.push_back(as_string(a, "architectures"));
       }},
      {"dtype", [](const json& v, DebertaConfig& c) { c.dtype = as_optional_string(v, "dtype"); }},
      {"torch_dtype",
       [](const json& v, DebertaConfig& c) { c.dtype = as_optional_string(v, "torch_dtype"); }},
      {"transformers_version",
       [](const json& v, DebertaConfig& c) {
         c.transformers_version = as_optional_string(v, "transformers_version");
       }},
      {"_name_or_path",
       [](const json& v, DebertaConfig& c) { c.name_or_path = as_optional_string(v, "_name_or_path"); }},
      {"pooling",
       [](const json& v, DebertaConfig& c) {
         ZT_CHECK(v.is_object() || v.is_null(), "config key 'pooling' must be an object, got ", v.dump());
         c.pooling_json = v.is_null() ? std::nullopt : std::optional<std::string>(v.dump());
       }},
      // Pruned heads change parameter shapes; only the empty value is accepted.
      {"pruned_heads",
       [](const json& v, DebertaConfig&) {
         ZT_CHECK(v.is_null() || v.empty(), "config key 'pruned_heads' = ", v.dump(),
                  ": pruned attention heads are not supported");
       }},
  };
  return handlers;
}

// Note [Model size limit]
// A config.json is small, but the model it describes is allocated in full: num_hidden_layers 1e6 ran for a
// minute and took 6.5 GB before std::bad_alloc. The parameter count is computed from the dimensions (in
// double, so absurd values cannot overflow) before anything is built, and refused over 1 TiB of f32
// parameters (about 275 billion; the largest DeBERTa-v2 has 1.5 billion), naming the keys of its largest
// term. Labels are bounded separately, since id2label is filled one name per label.
constexpr double kMaxParameterBytes = 1024.0 * 1024 * 1024 * 1024;
constexpr int64_t kMaxLabels = int64_t{1} << 20;

void check_implied_model_size(const DebertaConfig& c) {
  ZT_CHECK(c.num_labels <= kMaxLabels, "config num_labels ", c.num_labels, " is over the limit of ",
           kMaxLabels);
  struct Term {
    double parameters;
    std::string keys;
  };
  const double d = static_cast<double>(c.hidden_size), inner = static_cast<double>(c.intermediate_size);
  const double span = static_cast<double>(c.position_buckets > 0         ? c.position_buckets
                                          : c.max_relative_positions < 1 ? c.max_position_embeddings
                                                                         : c.max_relative_positions);
  const double labels = static_cast<double>(std::max<int64_t>(c.num_labels, 1));
  const Term terms[] = {
      {static_cast<double>(c.vocab_size) * d,
       str("vocab_size ", c.vocab_size, " x hidden_size ", c.hidden_size)},
      {static_cast<double>(c.num_hidden_layers) * DebertaConfig::layer_parameters(d, inner),
       str("num_hidden_layers ", c.num_hidden_layers, " x (hidden_size ", c.hidden_size,
           ", intermediate_size ", c.intermediate_size, ")")},
      {2 * span * d,
       str("the relative position table: 2 x ", static_cast<int64_t>(span),
           " rows (position_buckets, max_relative_positions or max_position_embeddings) x hidden_size ",
           c.hidden_size)},
      {std::max(0.0, static_cast<double>(c.conv_kernel_size)) * d * d,
       str("conv_kernel_size ", c.conv_kernel_size, " x hidden_size ", c.hidden_size, " squared")},
      {labels * d, str("num_labels ", c.num_labels, " x hidden_size ", c.hidden_size)},
  };
  const Term* largest = &terms[0];
  for (const Term& term : terms) {
    if (term.parameters > largest->parameters) largest = &term;
  }
  const double bytes = 4 * c.implied_parameter_count();
  ZT_CHECK(bytes <= kMaxParameterBytes, "config implies ", c.implied_parameter_count(), " parameters (",
           bytes < 0x1p63 ? format_memory_size(static_cast<size_t>(bytes)) : str(bytes, " bytes"),
           " as f32), over the limit of ", format_memory_size(static_cast<size_t>(kMaxParameterBytes)), "; ",
           largest->keys, " alone is ", largest->parameters, " parameters");
}

// Resolves derived defaults, then rejects contradictions and settings the C++ model does not implement.
void resolve_and_validate(DebertaConfig& c, const json& root) {
  ZT_CHECK(c.model_type == "deberta-v2", "config model_type '", c.model_type, "' is not 'deberta-v2'");
  ZT_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0 && c.num_attention_heads > 0 &&
               c.intermediate_size > 0,
           "config sizes must be positive: vocab_size ", c.vocab_size, ", hidden_size ", c.hidden_size,
           ", num_hidden_layers ", c.num_hidden_layers, ", num_attention_heads ", c.num_attention_heads,
           ", intermediate_size ", c.intermediate_size);
  check_implied_model_size(c);
  ZT_CHECK(c.hidden_size % c.num_attention_heads == 0, "config hidden_size ", c.hidden_size,
           " is not a multiple of num_attention_heads ", c.num_attention_heads);
  if (c.attention_head_size == 0) c.attention_head_size = c.hidden_size / c.num_attention_heads;
  if (c.embedding_size == 0) c.embedding_size = c.hidden_size;
  if (c.pooler_hidden_size == 0) c.pooler_hidden_size = c.hidden_size;
  ZT_CHECK(c.attention_head_size * c.num_attention_heads == c.hidden_size, "config attention_head_size ",
           c.attention_head_size, " x num_attention_heads ", c.num_attention_heads, " != hidden_size ",
           c.hidden_size, ": attention width different from hidden_size is not supported");
  ZT_CHECK(c.embedding_size == c.hidden_size, "config embedding_size ", c.embedding_size, " != hidden_size ",
           c.hidden_size, ": the embed_proj projection is not supported");
  ZT_CHECK(c.pooler_hidden_size == c.hidden_size, "config pooler_hidden_size ", c.pooler_hidden_size,
           " != hidden_size ", c.hidden_size, " (ContextPooler feeds the [CLS] hidden state straight in)");

  ZT_CHECK(c.hidden_act == "gelu", "config hidden_act '", c.hidden_act,
           "' is not supported (only \"gelu\", the exact erf form)");
  ZT_CHECK(c.pooler_hidden_act == "gelu", "config pooler_hidden_act '", c.pooler_hidden_act,
           "' is not supported (only \"gelu\")");
  ZT_CHECK(c.relative_attention,
           "config relative_attention = false is not supported: this model implements "
           "DeBERTa-v2's disentangled relative attention only");
  ZT_CHECK(!c.position_biased_input,
           "config position_biased_input = true is not supported: absolute position "
           "embeddings are not implemented");
  ZT_CHECK(c.share_att_key,
           "config share_att_key = false is not supported: separate pos_key_proj / "
           "pos_query_proj are not implemented");
  ZT_CHECK(c.type_vocab_size == 0, "config type_vocab_size ", c.type_vocab_size,
           " is not supported: token-type embeddings are not implemented");
  ZT_CHECK(c.max_position_embeddings > 0, "config max_position_embeddings must be positive, got ",
           c.max_position_embeddings);
  if (c.has_conv()) {
    ZT_CHECK(c.conv_kernel_size % 2 == 1, "config conv_kernel_size ", c.conv_kernel_size,
             " is not supported: an even kernel changes the sequence length");
    ZT_CHECK(c.conv_groups == 1, "config conv_groups ", c.conv_groups, " is not supported (only 1)");
    ZT_CHECK(c.conv_act == "gelu", "config conv_act '", c.conv_act,
             "' is not supported (only \"gelu\"; HF's default when absent is \"tanh\")");
  }
  ZT_CHECK(c.conv_kernel_size >= 0, "config conv_kernel_size must not be negative, got ", c.conv_kernel_size);

  for (const auto& [key, p] : {std::pair<const char*, double>{"hidden_dropout_prob", c.hidden_dropout_prob},
                               {"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
                               {"pooler_dropout", c.pooler_dropout},
                               {"cls_dropout", c.classifier_dropout()}}) {
    ZT_CHECK(p >= 0.0 && p < 1.0, "config ", key, " = ", p, " is not a probability in [0, 1)");
  }
  ZT_CHECK(c.layer_norm_eps > 0.0, "config layer_norm_eps must be positive, got ", c.layer_norm_eps);
  if (c.pad_token_id) {
    ZT_CHECK(*c.pad_token_id >= 0 && *c.pad_token_id < c.vocab_size, "config pad_token_id ", *c.pad_token_id,
             " is outside the vocabulary [0, ", c.vocab_size, ")");
  }

  // Labels: HF derives num_labels from id2label and rejects a num_labels that disagrees with it.
  const bool has_num_labels = root.contains("num_labels");
  if (!c.id2label.empty()) {
    ZT_CHECK(!has_num_labels || c.num_labels == static_cast<int64_t>(c.id2label.size()), "config num_labels ",
             c.num_labels, " contradicts id2label, which has ", c.id2label.size(), " labels");
    c.num_labels = static_cast<int64_t>(c.id2label.size());
  }
  ZT_CHECK(c.num_labels >= 1, "config num_labels must be at least 1, got ", c.num_labels);
  if (c.id2label.empty()) {
    for (int64_t i = 0; i < c.num_labels; ++i) c.id2label.push_back(str("LABEL_", i));
  }
  if (c.label2id.empty()) {
    for (int64_t i = 0; i < c.num_labels; ++i) c.label2id[c.id2label[i]] = i;
  }
  ZT_CHECK(c.label2id.size() == c.id2label.size(), "config label2id has ", c.label2id.size(),
           " labels but id2label has ", c.id2label.size());
  for (const auto& [name, id] : c.label2id) {
    ZT_CHECK(id >= 0 && id < c.num_labels && c.id2label[id] == name, "config label2id maps '", name, "' to ",
             id, ", which id2label does not name '", name, "'");
  }
  if (c.problem_type) {
    static const std::set<std::string> known = {"regression", "single_label_classification",
                                                "multi_label_classification"};
    ZT_CHECK(known.contains(*c.problem_type), "config problem_type '", *c.problem_type,
             "' is not one of regression, single_label_classification, multi_label_classification");
  }
}

}  // namespace

DebertaConfig parse_deberta_config(const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    ZT_FAIL("config is not valid JSON: ", e.what());
  }
  ZT_CHECK(root.is_object(), "config must be a JSON object");
  DebertaConfig c;
  const auto& handlers = key_handlers();
  for (const auto& [key, value] : root.items()) {
    if (auto it = handlers.find(key); it != handlers.end()) {
      it->second(value, c);
    } else {
      ZT_CHECK(ignored_generic_keys().contains(key), "config has unknown key '", key, "' = ", value.dump());
    }
  }
  resolve_and_validate(c, root);
  return c;
}

DebertaConfig load_deberta_config(const std::string& path) {
  const std::string text = read_text_file(path, kMaxConfigFileBytes, "config file");
  try {
    return parse_deberta_config(text);
  } catch (const Error& e) {
    throw with_context(str("in ", path, ": "), e);
  }
}

double DebertaConfig::layer_parameters(double hidden, double intermediate) {
  // query, key, value and output projections with biases, two LayerNorms, the two FFN linears.
  return 4 * (hidden * hidden + hidden) + 4 * hidden + 2 * hidden * intermediate + intermediate + hidden;
}

double DebertaConfig::implied_parameter_count() const {
  const double d = static_cast<double>(hidden_size),
               p = static_cast<double>(pooler_hidden_size > 0 ? pooler_hidden_size : hidden_size);
  const double labels = static_cast<double>(num_labels);
  const double span = static_cast<double>(position_buckets > 0         ? position_buckets
                                          : max_relative_positions < 1 ? max_position_embeddings
                                                                       : max_relative_positions);
  double count = static_cast<double>(vocab_size) * d + 2 * d;  // word embeddings, their LayerNorm
  count +=
      static_cast<double>(num_hidden_layers) * layer_parameters(d, static_cast<double>(intermediate_size));
  count += 2 * span * d + (rel_embeddings_layer_norm ? 2 * d : 0);
  if (conv_kernel_size > 0)
    count += d * d * static_cast<double>(conv_kernel_size) + 3 * d;  // weight, bias, LN
  count += p * p + p + labels * p + labels;                          // pooler, classifier
  return count;
}

std::string DebertaConfig::to_json() const {
  json j;
  j["model_type"] = model_type;
  if (!architectures.empty()) j["architectures"] = architectures;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["attention_head_size"] = attention_head_size;
  j["intermediate_size"] = intermediate_size;
  j["hidden_act"] = hidden_act;
  j["hidden_dropout_prob"] = hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = attention_probs_dropout_prob;
  j["max_position_embeddings"] = max_position_embeddings;
  j["type_vocab_size"] = type_vocab_size;
  j["initializer_range"] = initializer_range;
  j["layer_norm_eps"] = layer_norm_eps;
  j["pad_token_id"] = pad_token_id ? json(*pad_token_id) : json(nullptr);
  j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
  if (eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else if (eos_token_ids.size() == 1) {
    j["eos_token_id"] = eos_token_ids[0];
  } else {
    j["eos_token_id"] = eos_token_ids;
  }
  j["relative_attention"] = relative_attention;
  j["max_relative_positions"] = max_relative_positions;
  j["position_buckets"] = position_buckets;
  std::vector<std::string> pos_att;
  if (p2c) pos_att.push_back("p2c");
  if (c2p) pos_att.push_back("c2p");
  j["pos_att_type"] = pos_att;
  j["share_att_key"] = share_att_key;
  j["position_biased_input"] = position_biased_input;
  j["norm_rel_ebd"] = rel_embeddings_layer_norm ? "layer_norm" : "none";
  j["conv_kernel_size"] = conv_kernel_size;
  j["conv_groups"] = conv_groups;
  j["conv_act"] = conv_act;
  j["embedding_size"] = embedding_size;
  j["pooler_hidden_size"] = pooler_hidden_size;
  j["pooler_dropout"] = pooler_dropout;
  j["pooler_hidden_act"] = pooler_hidden_act;
  if (cls_dropout) j["cls_dropout"] = *cls_dropout;
  j["num_labels"] = num_labels;
  json id2label_json = json::object();
  for (size_t i = 0; i < id2label.size(); ++i) id2label_json[std::to_string(i)] = id2label[i];
  j["id2label"] = id2label_json;
  j["label2id"] = label2id;
  j["problem_type"] = problem_type ? json(*problem_type) : json(nullptr);
  if (dtype) j["torch_dtype"] = *dtype;
  if (transformers_version) j["transformers_version"] = *transformers_version;
  if (name_or_path) j["_name_or_path"] = *name_or_path;
  if (pooling_json) j["pooling"] = json::parse(*pooling_json);
  return j.dump(2);
}

namespace {

DebertaConfig with_mrpc_labels(DebertaConfig c) {
  c.num_labels = 2;
  c.id2label = {"not_equivalent", "equivalent"};  // GLUE MRPC ClassLabel order: 1 = equivalent
  c.label2id = {{"not_equivalent", 0}, {"equivalent", 1}};
  return c;
}

}  // namespace

DebertaConfig deberta_v2_xlarge_config() {
  DebertaConfig c;
  c.vocab_size = 128100;
  c.hidden_size = 1536;
  c.num_hidden_layers = 24;
  c.num_attention_heads = 24;
  c.attention_head_size = 64;
  c.intermediate_size = 6144;
  c.hidden_act = "gelu";
  c.hidden_dropout_prob = 0.1;
  c.attention_probs_dropout_prob = 0.1;
  c.max_position_embeddings = 512;
  c.type_vocab_size = 0;
  c.initializer_range = 0.02;
  c.layer_norm_eps = 1e-7;
  c.pad_token_id = 0;
  c.relative_attention = true;
  c.max_relative_positions = -1;
  c.position_buckets = 256;
  c.c2p = c.p2c = true;
  c.share_att_key = true;
  c.position_biased_input = false;
  c.rel_embeddings_layer_norm = true;
  c.conv_kernel_size = 3;
  c.conv_groups = 1;
  c.conv_act = "gelu";
  c.embedding_size = 1536;
  c.pooler_hidden_size = 1536;
  c.pooler_dropout = 0.0;
  c.pooler_hidden_act = "gelu";
  c.architectures = {"DebertaV2ForSequenceClassification"};
  c.name_or_path = "microsoft/deberta-v2-xlarge-mnli";
  return with_mrpc_labels(c);
}

// Sized so train_mrpc trains MRPC on a 2-core CPU in about a minute (≈1.5M parameters, ≈3 MFLOP per token
// per training step, ≈180k tokens per MRPC epoch with dynamic padding):
//  * vocab 8000: the shipped data/glue_mrpc/spm8k.model; the embedding table (1M params) is sparse work.
//  * hidden 128 = 2 heads of 64: keeps xlarge's head size, so the attention scale sqrt(3*64) and the
//    kernels' head-size paths are the ones the big model uses.
//  * 2 layers: layer 0 feeds the conv, layer 1 is a plain layer — both code paths run.
//  * intermediate 512: xlarge's 4x ratio.
//  * position_buckets 64 (midpoint 32): MRPC pairs are ~50 tokens, so both the identity and the log-bucket
//    ranges of the relative positions are exercised, with a 128-row rel table instead of 512.
//  * dropout 0.1 as in the checkpoint config.
DebertaConfig deberta_small_cpu_config() {
  DebertaConfig c = deberta_v2_xlarge_config();
  c.vocab_size = 8000;
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.attention_head_size = 64;
  c.intermediate_size = 512;
  c.position_buckets = 64;
  c.embedding_size = 128;
  c.pooler_hidden_size = 128;
  c.name_or_path = "zerotrain/deberta-small-cpu";
  return c;
}

}  // namespace zt
