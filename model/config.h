// DeBERTa-v2 configuration: HF config.json (DebertaV2Config) parsed into one struct, with the model's
// getattr defaults for attributes DebertaV2Config does not declare, and the derived attention constants.
//
// Parsing is strict: an unknown key is an error naming it (generic HF keys that do not change the model
// are accepted and ignored, see config.cpp), and so is a value the C++ model cannot honour (it implements
// relative attention with shared keys, no absolute position / token-type embeddings, erf GELU).
//
//   DebertaConfig c = load_deberta_config("checkpoints/deberta-v2-xlarge-mnli/config.json");
//   c.att_span();          // 256 for xlarge: rel_embeddings has 2 * att_span rows
//   c.attention_scale();   // sqrt(head_size * (1 + c2p + p2c)) = sqrt(192)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/relative_position.h"

namespace zt {

// Member defaults are what HF uses when config.json omits a key: DebertaV2Config's declared defaults
// (which describe an absolute-position BERT-like model, so an empty config is rejected) and the model's
// getattr defaults for the extra attributes. Sizes written 0 are derived from hidden_size while parsing.
struct DebertaConfig {
  // Architecture (DebertaV2Config fields).
  int64_t vocab_size = 128100;
  int64_t hidden_size = 1536;
  int64_t num_hidden_layers = 24;
  int64_t num_attention_heads = 24;
  int64_t attention_head_size = 0;  // extra attribute; default hidden_size / num_attention_heads
  int64_t intermediate_size = 6144;
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 0;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-7;
  std::optional<int64_t> pad_token_id = 0;  // null allowed: then word_embeddings has no padding row
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // HF allows an int or a list

  // Relative attention. relative_attention, max_relative_positions, position_biased_input and pos_att_type
  // are DebertaV2Config fields; the rest are extra attributes the model reads with getattr.
  bool relative_attention = false;
  int64_t max_relative_positions = -1;  // as written; < 1 means max_position_embeddings
  int64_t position_buckets = -1;        // <= 0: no log bucketing
  bool c2p = false;                     // pos_att_type contains "c2p"
  bool p2c = false;                     // pos_att_type contains "p2c"
  bool share_att_key = false;
  bool position_biased_input = true;
  bool rel_embeddings_layer_norm = false;  // norm_rel_ebd contains "layer_norm" (module encoder.LayerNorm)
  int64_t conv_kernel_size = 0;            // 0: no encoder.conv
  int64_t conv_groups = 1;
  std::string conv_act = "tanh";
  int64_t embedding_size = 0;  // extra attribute; default hidden_size

  // Head (DebertaV2ForSequenceClassification).
  int64_t pooler_hidden_size = 0;  // default hidden_size
  double pooler_dropout = 0.0;
  std::string pooler_hidden_act = "gelu";
  std::optional<double> cls_dropout;  // absent: hidden_dropout_prob
  int64_t num_labels = 2;
  std::vector<std::string> id2label;  // index = label id; size num_labels ("LABEL_<i>" when absent)
  std::map<std::string, int64_t> label2id;
  std::optional<std::string> problem_type;  // null: HF picks the loss from num_labels and label dtype

  // Training-time, not architecture (never read from or written to config.json, like HF's TrainingArguments
  // flag of the same name): the backward recomputes each encoder layer's forward from the layer's input
  // instead of the forward keeping every layer's activations. The activation arena then holds one layer's
  // activations and the layer outputs hidden.0..n; a step costs one more encoder forward. Same kernels on
  // the same inputs with the same dropout masks (pure functions of seed, step, layer, site): the gradients
  // equal those without it bit for bit.
  bool gradient_checkpointing = false;
  // Training-time too: which attention core runs. automatic: the flash path (nothing [L, L] kept,
  // kernels/disentangled_attention.h) from max_seq 1024 in 16 bits with head size 64 (measured faster there)
  // and wherever the stored-probabilities path cannot run (max_seq > kernels::kStoredAttentionMaxLength);
  // the stored path below (faster at 512 and under).
  // stored / flash force one (the flash path needs bf16/f16 and head size 64 on the GPU, f32 on the CPU).
  enum class AttentionKernel { automatic, stored, flash };
  AttentionKernel attention_kernel = AttentionKernel::automatic;

  // Bookkeeping carried through export; none of it changes the model.
  std::string model_type = "deberta-v2";
  std::vector<std::string> architectures;
  std::optional<std::string> dtype;  // "dtype" (v5) or "torch_dtype" (v4)
  std::optional<std::string> transformers_version;
  std::optional<std::string> name_or_path;  // "_name_or_path"
  std::optional<std::string> pooling_json;  // Microsoft's "pooling" object, kept verbatim; HF ignores it

  // Derived constants.
  int64_t head_size() const { return attention_head_size; }
  int64_t resolved_max_relative_positions() const;  // max_relative_positions < 1 ⇒ max_position_embeddings
  int64_t att_span() const;                         // position_buckets if > 0, else the resolved maximum
  kernels::RelativePositionConfig relative_positions() const;    // the attention's bucketing
  int64_t rel_embedding_rows() const { return 2 * att_span(); }  // pos_ebd_size of the encoder table
  int64_t scale_factor() const { return 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0); }
  float attention_scale() const;  // sqrt(head_size * scale_factor) in fp32, as HF computes it
  double classifier_dropout() const { return cls_dropout.value_or(hidden_dropout_prob); }
  bool has_conv() const { return conv_kernel_size > 0; }
  // HF's choice of loss: problem_type when set, else regression (MSE) exactly when num_labels is 1.
  bool is_regression() const { return problem_type ? *problem_type == "regression" : num_labels == 1; }

  // config.json text HF's DebertaV2Config.from_pretrained reads back to the same model.
  std::string to_json() const;

  // The number of parameters the model has (ParameterTable's total), computed in double from the
  // dimensions alone, so that absurd values can be refused before anything is built (Note [Model size
  // limit] in config.cpp). Exact below 2^53.
  double implied_parameter_count() const;
  // Parameters of one encoder layer.
  static double layer_parameters(double hidden, double intermediate);
  bool operator==(const DebertaConfig&) const = default;
};

// Parses config.json text; throws zt::Error naming the offending key for unknown keys, wrong types,
// contradictory values and settings the C++ model does not implement.
DebertaConfig parse_deberta_config(const std::string& json_text);
DebertaConfig load_deberta_config(const std::string& path);

// The microsoft/deberta-v2-xlarge-mnli layout (24 layers, hidden 1536, 24 heads, vocab 128100) with a
// 2-label MRPC head (not_equivalent / equivalent), dropouts as in the checkpoint (0.1).
DebertaConfig deberta_v2_xlarge_config();
// The default model of train_mrpc on a CPU; see config.cpp for why these sizes.
DebertaConfig deberta_small_cpu_config();

}  // namespace zt
