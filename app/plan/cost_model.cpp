#include "app/plan/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "model/parameters.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/partition.h"
#include "runtime/check.h"

namespace zt::plan {

namespace {

// The figures by their JSON key, so that load and save cannot disagree.
template <typename F>
void for_each_figure(MachineFigures& m, F&& f) {
  f("gemm_tflops", m.gemm_tflops);
  f("hbm_gbps", m.hbm_gbps);
  f("layer_latency_us", m.layer_latency_us);
  f("activation_bytes_per_token_layer_per_hidden", m.activation_bytes_per_token_layer_per_hidden);
  f("gpu_adamw_gparams", m.gpu_adamw_gparams);
  f("pcie_gbps", m.pcie_gbps);
  f("host_gbps", m.host_gbps);
  f("cpu_adamw_gparams", m.cpu_adamw_gparams);
  f("overlap_hidden_forward", m.overlap_hidden_forward);
  f("disk_read_gbps", m.disk_read_gbps);
  f("disk_write_gbps", m.disk_write_gbps);
  f("nccl_bus_gbps", m.nccl_bus_gbps);
  f("device_group_gbps", m.device_group_gbps);
}

double ms_for_bytes(double bytes, double gbps) {
  return bytes / (gbps * 1e9) * 1e3;
}

// The measured layer keys: all in a file or none.
constexpr const char* kLayerKeys[] = {"layer_fixed_us",
                                      "layer_token_ns",
                                      "layer_score_ps",
                                      "layer_forward_fixed_us",
                                      "layer_forward_token_ns",
                                      "layer_forward_score_ps",
                                      "layer_recompute_fixed_us",
                                      "layer_recompute_token_ns",
                                      "layer_recompute_score_ps",
                                      "head_fixed_us",
                                      "head_token_ns"};

// MeasuredLayerCost's LayerTerms by their keys' prefix (<prefix>fixed_us, <prefix>token_ns,
// <prefix>score_ps).
constexpr std::array<std::pair<const char*, LayerTerms MeasuredLayerCost::*>, 3> kLayerTerms = {
    {{"layer_", &MeasuredLayerCost::pair},
     {"layer_forward_", &MeasuredLayerCost::forward},
     {"layer_recompute_", &MeasuredLayerCost::recompute}}};

// A [[L, ps], ...] table of the file: lengths ascending, both positive (ps >= 0 where zero_allowed).
void load_score_table(const nlohmann::json& j, const char* key, const std::string& path, bool zero_allowed,
                      std::vector<double>& lengths, std::vector<double>& ps) {
  const nlohmann::json& table = j[key];
  ZT_CHECK(table.is_array() && !table.empty(), "--machine_figures ", path, ": ", key,
           " must be a non-empty array of [length, ps per score]");
  for (const nlohmann::json& row : table) {
    ZT_CHECK(row.is_array() && row.size() == 2 && row[0].is_number() && row[1].is_number() &&
                 row[0].get<double>() > 0 && (row[1].get<double>() > 0 || (zero_allowed && row[1] == 0)),
             "--machine_figures ", path, ": ", key, " rows are [length, ps per score], ",
             zero_allowed ? "a positive length and ps >= 0" : "both positive");
    ZT_CHECK(lengths.empty() || row[0].get<double>() > lengths.back(), "--machine_figures ", path, ": ", key,
             " lengths must ascend");
    lengths.push_back(row[0].get<double>());
    ps.push_back(row[1].get<double>());
  }
}

nlohmann::json score_table(const std::vector<double>& lengths, const std::vector<double>& ps) {
  nlohmann::json table = nlohmann::json::array();
  for (size_t i = 0; i < lengths.size(); ++i) table.push_back({lengths[i], ps[i]});
  return table;
}

// Linear in log L between the measured lengths, the end values outside them.
double interpolate_in_log_length(const std::vector<double>& lengths, const std::vector<double>& values,
                                 double length) {
  ZT_CHECK(!lengths.empty() && values.size() == lengths.size(), "no measured per-score cost");
  if (length <= lengths.front()) return values.front();
  if (length >= lengths.back()) return values.back();
  size_t i = 1;
  while (lengths[i] < length) ++i;
  const double t = std::log(length / lengths[i - 1]) / std::log(lengths[i] / lengths[i - 1]);
  return values[i - 1] + t * (values[i] - values[i - 1]);
}

MeasuredLayerCost load_layer_cost(const nlohmann::json& j, const std::string& path) {
  MeasuredLayerCost c;
  ZT_CHECK(!j.contains("layer_forward_share"), "--machine_figures ", path,
           ": layer_forward_share is an earlier --calibrate's figure (one forward share for every shape); "
           "run train_mrpc --calibrate again");
  int given = 0;
  for (const char* key : kLayerKeys) given += j.contains(key) ? 1 : 0;
  ZT_CHECK(given > 0 || !j.contains("layer_model"), "--machine_figures ", path,
           ": layer_model names the model of measured layer costs, and there are none");
  if (given == 0) return c;
  ZT_CHECK(j.contains("layer_recompute_fixed_us") || j.contains("layer_recompute_score_ps"),
           "--machine_figures ", path,
           ": an earlier --calibrate's figures (checkpointing's recompute not timed); run train_mrpc "
           "--calibrate again");
  for (const char* key : kLayerKeys)
    ZT_CHECK(j.contains(key), "--machine_figures ", path, ": ", key,
             " is missing (the measured layer keys come all together, from --calibrate)");
  auto number = [&](const char* key, bool zero_allowed) {
    ZT_CHECK(j[key].is_number() && (j[key].get<double>() > 0 || (zero_allowed && j[key].get<double>() == 0)),
             "--machine_figures ", path, ": ", key,
             zero_allowed ? " must be a number >= 0" : " must be positive");
    return j[key].get<double>();
  };
  for (const auto& [prefix, member] : kLayerTerms) {
    (c.*member).fixed_us = number((std::string(prefix) + "fixed_us").c_str(), true);
    (c.*member).token_ns = number((std::string(prefix) + "token_ns").c_str(), true);
  }
  c.head_fixed_us = number("head_fixed_us", true);
  c.head_token_ns = number("head_token_ns", true);
  if (j.contains("layer_model")) {
    const nlohmann::json& d = j["layer_model"];
    auto dim = [&](const char* key) {
      ZT_CHECK(d.is_object() && d.contains(key) && d[key].is_number_integer() && d[key].get<int64_t>() > 0,
               "--machine_figures ", path, ": layer_model.", key, " must be a positive integer");
      return d[key].get<int64_t>();
    };
    c.dims.hidden = dim("hidden_size");
    c.dims.intermediate = dim("intermediate_size");
    c.dims.heads = dim("num_attention_heads");
    c.dims.relative_rows = dim("relative_rows");
    ZT_CHECK(d.contains("attention_kernel") && d["attention_kernel"].is_string(), "--machine_figures ", path,
             ": layer_model.attention_kernel must be a string");
    c.dims.attention_kernel = d["attention_kernel"].get<std::string>();
    ZT_CHECK(d.size() == 5, "--machine_figures ", path,
             ": layer_model has keys besides hidden_size, intermediate_size, num_attention_heads, "
             "relative_rows and attention_kernel");
  }
  // The forward + backward's table sets the lengths (its costs positive); the others' are at the same.
  load_score_table(j, "layer_score_ps", path, false, c.score_lengths, c.pair.score_ps);
  for (const auto& [prefix, member] : kLayerTerms) {
    if (member == &MeasuredLayerCost::pair) continue;
    const std::string key = std::string(prefix) + "score_ps";
    std::vector<double> lengths;
    load_score_table(j, key.c_str(), path, true, lengths, (c.*member).score_ps);
    ZT_CHECK(lengths == c.score_lengths, "--machine_figures ", path, ": ", key,
             " is at other lengths than layer_score_ps");
  }
  return c;
}

bool is_layer_key(const std::string& key) {
  return std::any_of(std::begin(kLayerKeys), std::end(kLayerKeys), [&](const char* k) { return key == k; });
}

// Solves A x = b (n x n, row-major) by Gaussian elimination with partial pivoting; false when singular.
bool solve_linear(std::vector<double> a, std::vector<double> b, std::vector<double>& x) {
  const size_t n = b.size();
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < n; ++r)
      if (std::abs(a[r * n + col]) > std::abs(a[pivot * n + col])) pivot = r;
    if (std::abs(a[pivot * n + col]) < 1e-12) return false;
    for (size_t k = 0; k < n; ++k) std::swap(a[col * n + k], a[pivot * n + k]);
    std::swap(b[col], b[pivot]);
    for (size_t r = col + 1; r < n; ++r) {
      const double f = a[r * n + col] / a[col * n + col];
      for (size_t k = col; k < n; ++k) a[r * n + k] -= f * a[col * n + k];
      b[r] -= f * b[col];
    }
  }
  x.assign(n, 0);
  for (size_t r = n; r-- > 0;) {
    double s = b[r];
    for (size_t k = r + 1; k < n; ++k) s -= a[r * n + k] * x[k];
    x[r] = s / a[r * n + r];
  }
  return true;
}

// Least squares min |W (X c - y)| over columns scaled to unit maximum (the columns span 1 to ~1e9), through
// the normal equations; false when the columns are dependent. FitError::absolute: W = 1; ::relative: W =
// diag(1 / y) (every y > 0), each timing's error as a fraction of it, so that a 4k-token micro-batch's 2 ms
// weighs as much as a 16k one's 7: the absolute fit over-predicted the 4k points by 3.6-5 % (H100, session
// 21), the planner's micro-batches of 32 x 128 by ~8 %, and chose 128 x 4 over a 7 % faster 32 x 16.
enum class FitError { absolute, relative };
bool least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& y,
                   std::vector<double>& coefficients, FitError error) {
  const size_t n = rows.front().size();
  std::vector<double> scale(n, 0);
  for (const auto& r : rows)
    for (size_t k = 0; k < n; ++k) scale[k] = std::max(scale[k], std::abs(r[k]));
  for (double& s : scale)
    if (s == 0) return false;
  std::vector<double> ata(n * n, 0), aty(n, 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const double w = error == FitError::relative ? 1.0 / y[i] : 1.0;
    for (size_t p = 0; p < n; ++p) {
      aty[p] += w * rows[i][p] / scale[p] * w * y[i];
      for (size_t q = 0; q < n; ++q) ata[p * n + q] += w * rows[i][p] / scale[p] * w * rows[i][q] / scale[q];
    }
  }
  if (!solve_linear(ata, aty, coefficients)) return false;
  for (size_t k = 0; k < n; ++k) coefficients[k] /= scale[k];
  return true;
}

}  // namespace

MachineFigures MachineFigures::load(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "--machine_figures ", path, ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  ZT_CHECK(!j.is_discarded() && j.is_object(), "--machine_figures ", path, ": not a JSON object");
  MachineFigures m;
  m.name = j.value("name", path);
  for_each_figure(m, [&](const char* key, double& field) {
    if (!j.contains(key)) return;
    ZT_CHECK(j[key].is_number() && j[key].get<double>() > 0, "--machine_figures ", path, ": ", key,
             " must be a positive number");
    field = j[key].get<double>();
  });
  m.layer = load_layer_cost(j, path);
  for (const auto& [key, value] : j.items()) {
    bool known = key == "name" || key == "layer_model" || is_layer_key(key);
    for_each_figure(m, [&](const char* k, double&) { known = known || key == k; });
    ZT_CHECK(known, "--machine_figures ", path, ": unknown key '", key, "'");
  }
  return m;
}

void MachineFigures::save(const std::string& path) const {
  nlohmann::json j;
  j["name"] = name;
  MachineFigures copy = *this;
  for_each_figure(copy, [&](const char* key, double& field) { j[key] = field; });
  if (layer.present()) {
    for (const auto& [prefix, member] : kLayerTerms) {
      const LayerTerms& terms = layer.*member;
      j[std::string(prefix) + "fixed_us"] = terms.fixed_us;
      j[std::string(prefix) + "token_ns"] = terms.token_ns;
      j[std::string(prefix) + "score_ps"] = score_table(layer.score_lengths, terms.score_ps);
    }
    j["head_fixed_us"] = layer.head_fixed_us;
    j["head_token_ns"] = layer.head_token_ns;
    if (layer.dims.known())
      j["layer_model"] = {{"hidden_size", layer.dims.hidden},
                          {"intermediate_size", layer.dims.intermediate},
                          {"num_attention_heads", layer.dims.heads},
                          {"relative_rows", layer.dims.relative_rows},
                          {"attention_kernel", layer.dims.attention_kernel}};
  }
  std::ofstream out(path);
  ZT_CHECK(out.good(), "cannot write ", path);
  out << j.dump(2) << "\n";
}

LayerDims LayerDims::of(const DebertaConfig& model) {
  using Kernel = DebertaConfig::AttentionKernel;
  return {.hidden = model.hidden_size,
          .intermediate = model.intermediate_size,
          .heads = model.num_attention_heads,
          .relative_rows = model.relative_attention ? model.rel_embedding_rows() : 0,
          .attention_kernel = model.attention_kernel == Kernel::stored  ? "stored"
                              : model.attention_kernel == Kernel::flash ? "flash"
                                                                        : "automatic"};
}

std::string LayerDims::describe() const {
  return str("hidden ", hidden, ", ffn ", intermediate, ", ", heads, " heads, ", relative_rows,
             " relative rows, attention ", attention_kernel);
}

std::string measured_layer_cost_mismatch(const MachineFigures& f, const DebertaConfig& model) {
  if (!f.layer.present()) return "";
  const LayerDims wanted = LayerDims::of(model);
  if (!f.layer.dims.known())
    return str("the machine figures' encoder layer costs do not say which model they were timed for (",
               f.name, "); this model is ", wanted.describe(),
               ": the compute part is the formulas' (run train_mrpc --calibrate with this model's flags)");
  if (f.layer.dims == wanted) return "";
  return str("the machine figures' encoder layer costs were timed for ", f.layer.dims.describe(),
             "; this model is ", wanted.describe(),
             ": the compute part is the formulas' (run train_mrpc --calibrate with this model's flags)");
}

double MeasuredLayerCost::score_ps_at(const LayerTerms& terms, double length) const {
  return interpolate_in_log_length(score_lengths, terms.score_ps, length);
}

double MeasuredLayerCost::us(const LayerTerms& terms, double batch, double length, double heads) const {
  return terms.fixed_us + terms.token_ns * 1e-3 * batch * length +
         score_ps_at(terms, length) * 1e-6 * batch * heads * length * length;
}

double MeasuredLayerCost::head_us(double batch, double length) const {
  return head_fixed_us + head_token_ns * 1e-3 * batch * length;
}

namespace {

// A fit's coefficients (fixed, per token, per score at each length) as LayerTerms, a negative one as 0.
LayerTerms clamped_terms(const std::vector<double>& fit) {
  LayerTerms t;
  t.fixed_us = std::max(0.0, fit[0]);
  t.token_ns = std::max(0.0, fit[1]);
  for (size_t i = 2; i < fit.size(); ++i) t.score_ps.push_back(std::max(0.0, fit[i]));
  return t;
}

}  // namespace

MeasuredLayerCost fit_layer_cost(std::span<const LayerTiming> timings, int64_t heads,
                                 std::vector<double> score_lengths) {
  ZT_CHECK(heads > 0 && !score_lengths.empty() && std::is_sorted(score_lengths.begin(), score_lengths.end()),
           "fit_layer_cost: heads and ascending score lengths needed");
  // The two depths timed (the shallow and the deep model), then (batch, length) -> the timings at each.
  std::vector<int64_t> depths;
  for (const LayerTiming& t : timings)
    if (std::find(depths.begin(), depths.end(), t.layers) == depths.end()) depths.push_back(t.layers);
  std::sort(depths.begin(), depths.end());
  ZT_CHECK(depths.size() == 2 && depths.front() >= 1, "fit_layer_cost: timings at two depths needed, not ",
           depths.size());
  const auto shallow = static_cast<double>(depths.front());
  const auto added = static_cast<double>(depths.back() - depths.front());
  std::map<std::pair<int64_t, int64_t>, std::pair<const LayerTiming*, const LayerTiming*>> pairs;
  for (const LayerTiming& t : timings) {
    ZT_CHECK(t.batch > 0 && t.length > 0 && t.pair_ms > 0 && t.forward_ms > 0,
             "fit_layer_cost: a timing is not positive");
    auto& slot = pairs[{t.batch, t.length}];
    (t.layers == depths.front() ? slot.first : slot.second) = &t;
  }
  const size_t checkpointed = static_cast<size_t>(std::count_if(
      timings.begin(), timings.end(), [](const LayerTiming& t) { return t.checkpointed_pair_ms > 0; }));
  ZT_CHECK(checkpointed == 0 || checkpointed == timings.size(), "fit_layer_cost: ", checkpointed, " of ",
           timings.size(), " timings have their checkpointed pair: all or none");
  const size_t nodes = score_lengths.size();
  std::vector<std::vector<double>> layer_rows, head_rows;
  std::vector<double> layer_us, layer_forward_us, layer_recompute_us, head_us;
  for (const auto& [key, slot] : pairs) {
    const auto [batch, length] = key;
    ZT_CHECK(slot.first != nullptr && slot.second != nullptr, "fit_layer_cost: batch ", batch, " length ",
             length, " lacks its timing at ", slot.first == nullptr ? depths.front() : depths.back(),
             " layer(s)");
    const double b = static_cast<double>(batch), l = static_cast<double>(length);
    const double one_layer_us = (slot.second->pair_ms - slot.first->pair_ms) * 1e3 / added;
    const double one_layer_forward_us = (slot.second->forward_ms - slot.first->forward_ms) * 1e3 / added;
    ZT_CHECK(one_layer_forward_us > 0 && one_layer_forward_us < one_layer_us, "fit_layer_cost: at batch ",
             batch, " length ", length, " a layer's forward (", one_layer_forward_us,
             " us) is not in (0, its forward + backward ", one_layer_us, " us): the timings are too noisy");
    if (checkpointed > 0) {
      const double one_layer_recompute_us =
          (slot.second->checkpointed_pair_ms - slot.first->checkpointed_pair_ms) * 1e3 / added - one_layer_us;
      ZT_CHECK(one_layer_recompute_us > 0 && one_layer_recompute_us < one_layer_us,
               "fit_layer_cost: at batch ", batch, " length ", length, " checkpointing's cost a layer (",
               one_layer_recompute_us, " us) is not in (0, its forward + backward ", one_layer_us,
               " us): the timings are too noisy");
      layer_recompute_us.push_back(one_layer_recompute_us);
    }
    // Columns: fixed, tokens (in thousands: ns -> us), then the scores (in millions: ps -> us) spread over
    // the two measured lengths around l by score_ps_at's log-L weights.
    std::vector<double> row(2 + nodes, 0);
    row[0] = 1;
    row[1] = b * l * 1e-3;
    const double scores = b * static_cast<double>(heads) * l * l * 1e-6;
    if (l <= score_lengths.front()) {
      row[2] = scores;
    } else if (l >= score_lengths.back()) {
      row[1 + nodes] = scores;
    } else {
      size_t i = 1;
      while (score_lengths[i] < l) ++i;
      const double t = std::log(l / score_lengths[i - 1]) / std::log(score_lengths[i] / score_lengths[i - 1]);
      row[2 + i - 1] = (1 - t) * scores;
      row[2 + i] = t * scores;
    }
    layer_rows.push_back(row);
    layer_us.push_back(one_layer_us);
    layer_forward_us.push_back(one_layer_forward_us);
    head_rows.push_back({1, b * l * 1e-3});
    head_us.push_back(slot.first->pair_ms * 1e3 - shallow * one_layer_us);
  }
  std::vector<double> layer_fit, forward_fit, head_fit;
  ZT_CHECK(
      layer_rows.size() >= 2 + nodes && least_squares(layer_rows, layer_us, layer_fit, FitError::relative),
      "fit_layer_cost: the timings do not determine the fit (", layer_rows.size(), " (batch, length) pairs ",
      "for ", 2 + nodes, " coefficients; two batch sizes and a length below ", score_lengths.front(),
      " are needed)");
  ZT_CHECK(least_squares(layer_rows, layer_forward_us, forward_fit, FitError::relative),
           "fit_layer_cost: the forward's fit is singular");
  ZT_CHECK(least_squares(head_rows, head_us, head_fit, FitError::absolute),
           "fit_layer_cost: the head's fit is singular");
  // Not timed: checkpointing's cost is its forward once more.
  std::vector<double> recompute_fit = forward_fit;
  if (checkpointed > 0)
    ZT_CHECK(least_squares(layer_rows, layer_recompute_us, recompute_fit, FitError::relative),
             "fit_layer_cost: the recompute's fit is singular");
  for (size_t i = 0; i < nodes; ++i)
    ZT_CHECK(layer_fit[2 + i] > 0, "fit_layer_cost: the per-score cost at length ", score_lengths[i],
             " fitted non-positive (", layer_fit[2 + i], " ps): the timings are too noisy");
  MeasuredLayerCost c;
  c.score_lengths = std::move(score_lengths);
  // The forward's and the recompute's terms are smaller and noisier: a negative one (noise) becomes 0, as
  // the intercepts do.
  c.pair = clamped_terms(layer_fit);
  c.forward = clamped_terms(forward_fit);
  c.recompute = clamped_terms(recompute_fit);
  c.head_fixed_us = std::max(0.0, head_fit[0]);
  c.head_token_ns = std::max(0.0, head_fit[1]);
  return c;
}

namespace {

// A partial offload's CPU side from the norm's end, as the engine runs it (optim/zero/engine.h): the host
// part of unit u (the first host_shard elements of the rank's shard, unit by unit) goes down when u's
// gradients are final on the last micro-batch: the layers evenly through the backward from the last one, the
// embeddings and the shared unit at its end; the downloads queue on one copy stream. step() waits for the
// norm, then the CPU takes the units in order (the embeddings first), each once its download landed, and
// queues its upload (2 bytes a parameter, the other copy stream) as it ends; the step waits for the last.
struct PartialHostSide {
  double download_wait_ms = 0;  // the CPU idle, waiting for downloads
  double adam_ms = 0;           // the CPU AdamW over the host part
  double upload_tail_ms = 0;    // the uploads past the CPU AdamW's end
};

PartialHostSide partial_host_side(const Plan& plan, const CostInputs& in, const MachineFigures& f,
                                  double backward_ms, double norm_ms) {
  const optim::ZeroPartition partition(ParameterTable(*in.model), plan.stage == 0 ? 1 : in.world_size);
  const auto& units = partition.units();
  const int64_t host_shard = optim::offloaded_shard_numel(partition.shard_numel(), plan.offload_ratio);
  auto host_numel = [&](const optim::ZeroUnit& u) {
    return static_cast<double>(std::clamp<int64_t>(host_shard - u.shard_begin, 0, u.slice_numel));
  };
  const auto layers = static_cast<double>(in.model->num_hidden_layers);
  // Times from the last backward's start. Ready: layer l after (L - l) / L of the backward.
  std::vector<double> ready(units.size(), backward_ms);
  for (size_t u = 0; u < units.size(); ++u)
    if (units[u].layer >= 0) ready[u] = backward_ms * (layers - units[u].layer) / layers;
  std::vector<size_t> queued;  // the download queue's order: the layers last to first, then the rest
  for (size_t u = units.size(); u-- > 0;)
    if (units[u].layer >= 0) queued.push_back(u);
  for (size_t u = 0; u < units.size(); ++u)
    if (units[u].layer < 0) queued.push_back(u);
  std::vector<double> landed(units.size(), 0);
  double copy_free = 0;
  for (const size_t u : queued) {
    copy_free = std::max(copy_free, ready[u]) + ms_for_bytes(4 * host_numel(units[u]), f.pcie_gbps);
    landed[u] = copy_free;
  }
  PartialHostSide side;
  const double start = backward_ms + norm_ms;
  double cpu = start, upload_free = start;
  for (size_t u = 0; u < units.size(); ++u) {
    const double n = host_numel(units[u]);
    if (n == 0) continue;
    side.download_wait_ms += std::max(0.0, landed[u] - cpu);
    cpu = std::max(cpu, landed[u]);
    const double adam_ms = n / (f.cpu_adamw_gparams * 1e9) * 1e3;
    side.adam_ms += adam_ms;
    cpu += adam_ms;
    upload_free = std::max(upload_free, cpu) + ms_for_bytes(2 * n, f.pcie_gbps);
  }
  side.upload_tail_ms = std::max(0.0, upload_free - cpu);
  return side;
}

}  // namespace

std::string default_machine_figures_path() {
  if (const char* explicit_path = std::getenv("ZT_MACHINE_FIGURES"); explicit_path && *explicit_path)
    return explicit_path;
  std::filesystem::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = std::filesystem::path(home) / ".cache";
  } else {
    base = ".cache";
  }
  return (base / "zerotrain" / "machine_figures.json").string();
}

PlanningFigures planning_figures(const std::string& path) {
  if (!path.empty()) return {MachineFigures::load(path), "--machine_figures " + path};
  const std::string cached = default_machine_figures_path();
  if (std::filesystem::exists(cached))
    return {MachineFigures::load(cached), "this machine's calibration, " + cached};
  return {MachineFigures{}, "the built-in figures (no calibration at " + cached + ": run --calibrate once)"};
}

double collective_ms(CollectiveKind kind, double bytes, int world_size, CollectiveTransport transport,
                     const MachineFigures& f) {
  ZT_CHECK(world_size >= 1 && bytes >= 0, "collective_ms: world size ", world_size, ", bytes ", bytes);
  if (world_size == 1) return 0;
  const double w = world_size;
  const bool sum_all = kind == CollectiveKind::all_reduce_sum;
  ZT_CHECK(sum_all || kind == CollectiveKind::reduce_scatter_sum || kind == CollectiveKind::all_gather,
           "collective_ms: ", collective_name(kind), " is not one the step runs");
  if (transport == CollectiveTransport::nccl)
    return ms_for_bytes((sum_all ? 2 : 1) * (w - 1) / w * bytes, f.nccl_bus_gbps);
  // The in-process device group: the memory traffic of the rank's own kernels.
  const double traffic = sum_all                                      ? (w + 3) * bytes
                         : kind == CollectiveKind::reduce_scatter_sum ? (1 + 1 / w) * bytes
                                                                      : 2 * (w - 1) / w * bytes;
  return ms_for_bytes(traffic, f.device_group_gbps);
}

CollectiveCost predict_collectives(const Plan& plan, const CostInputs& in, const MachineFigures& f,
                                   double backward_ms) {
  CollectiveCost c;
  const int w = in.world_size;
  if (w == 1) return c;
  const optim::ZeroPartition partition(ParameterTable(*in.model), w);
  double numel = 0, at_backward_end = 0;  // the padded model; the units reduced after the last layer
  for (const optim::ZeroUnit& u : partition.units()) {
    numel += static_cast<double>(u.numel);
    if (u.layer < 0) at_backward_end += static_cast<double>(u.numel);
  }
  auto ms = [&](CollectiveKind kind, double bytes) {
    return collective_ms(kind, bytes, w, in.collectives, f);
  };
  const double gradient_bytes = 4 * numel, parameter_bytes = in.compute_bytes * numel;
  // Stage 0 all-reduces; 1-3 reduce-scatter (all-reduce without reduce_scatter).
  const CollectiveKind reduction = plan.stage == 0 || !in.reduce_scatter ? CollectiveKind::all_reduce_sum
                                                                         : CollectiveKind::reduce_scatter_sum;
  const double reduction_ms = ms(reduction, gradient_bytes);
  // Stages 0/1 reduce once, after the last micro-batch's backward; 2/3 every micro-batch's bucket.
  const double reductions = plan.stage <= 1 ? 1.0 : static_cast<double>(plan.accumulation);
  c.gradient_ms = reductions * reduction_ms;
  if (plan.stage == 1 || plan.stage == 2) c.gather_ms = ms(CollectiveKind::all_gather, parameter_bytes);
  if (plan.stage == 3)
    c.gather_ms =
        2 * static_cast<double>(plan.accumulation) * ms(CollectiveKind::all_gather, parameter_bytes);
  if (in.overlap_comm && in.collectives == CollectiveTransport::nccl) {
    const double exposed = std::max(reduction_ms * at_backward_end / numel, reduction_ms - backward_ms);
    c.hidden_ms = reductions * (reduction_ms - std::min(reduction_ms, exposed));
  }
  return c;
}

StepCost predict_step(const Plan& plan, const CostInputs& in, const MachineFigures& f) {
  ZT_CHECK(in.model != nullptr && in.parameters > 0, "predict_step: no model");
  const DebertaConfig& m = *in.model;
  const auto h = static_cast<double>(m.hidden_size);
  const auto layers = static_cast<double>(m.num_hidden_layers);
  const auto length = static_cast<double>(in.max_length);
  const double tokens = static_cast<double>(plan.micro_batch) * length;
  // One encoder layer: Q, K, V, O (4 h^2) and the feed-forward (2 h I); the positional window W of the
  // disentangled attention (C2P and P2C scores beside Q K^T and P V).
  const double layer_parameters = 4 * h * h + 2 * h * static_cast<double>(m.intermediate_size);
  const double window = std::min<double>(static_cast<double>(m.rel_embedding_rows()), 2 * length - 1);
  const double forward_flops =
      layers * (2 * layer_parameters * tokens + 2 * tokens * h * (2 * length + 2 * window));
  // Forward + backward = 3 forwards; checkpointing runs the encoder's forward once more.
  const double passes = plan.gradient_checkpointing ? 4.0 / 3.0 : 1.0;
  const double gemm_ms = 3 * forward_flops * passes / (f.gemm_tflops * 1e12) * 1e3;
  const double memory_ms =
      ms_for_bytes(f.activation_bytes_per_token_layer_per_hidden * tokens * layers * h * passes, f.hbm_gbps);
  const double floor_ms = f.layer_latency_us * layers * passes * 1e-3;
  // Measured: the layers' forward + backward, checkpointing's recompute as timed (or their forward once
  // more); only where they were timed for this model's dims.
  const std::string mismatch = measured_layer_cost_mismatch(f, m);
  const bool measured = f.layer.present() && mismatch.empty();
  const auto micro_batch = static_cast<double>(plan.micro_batch);
  const auto heads = static_cast<double>(m.num_attention_heads);
  double micro = gemm_ms + memory_ms + floor_ms;
  // The forward's part of the micro-batch (the update may hide under the next one); the rest is backward
  // (with checkpointing including the recompute).
  double forward_share = 1.0 / passes / 3.0;
  if (measured) {
    const double layer_us = f.layer.layer_us(micro_batch, length, heads);
    const double layer_forward_us = f.layer.layer_forward_us(micro_batch, length, heads);
    const double head_us = f.layer.head_us(micro_batch, length);
    const double recompute_us =
        plan.gradient_checkpointing ? layers * f.layer.layer_recompute_us(micro_batch, length, heads) : 0.0;
    micro = (head_us + layers * layer_us + recompute_us) * 1e-3;
    // The head's forward in the layers' proportion (it was timed only with them).
    const double forward_us = (head_us / layer_us + layers) * layer_forward_us;
    forward_share = forward_us * 1e-3 / micro;
  }
  const auto accumulation = static_cast<double>(plan.accumulation);

  StepCost c;
  c.compute_note = mismatch;
  c.compute_ms = micro * accumulation;
  const auto all = static_cast<double>(in.parameters);
  const double shard = plan.stage == 0 ? all : all / in.world_size;
  if (plan.stage >= 2) c.zero_ms += accumulation * ms_for_bytes(8 * all, f.hbm_gbps);
  if (plan.stage == 3) c.zero_ms += accumulation * ms_for_bytes(8 * all, f.hbm_gbps);
  if (plan.stage <= 1) c.zero_ms += (accumulation - 1) * ms_for_bytes(4 * all, f.hbm_gbps);

  const double on_host = plan.optimizer_offload == OptimizerOffload::none ? 0.0 : plan.offload_ratio;
  const double gpu_update_ms = (1 - on_host) * shard / (f.gpu_adamw_gparams * 1e9) * 1e3;
  // Backward: all but the forward share (with checkpointing the recomputed forward is in it).
  const double backward_ms = micro * (1 - forward_share);
  if (plan.partial_offload()) {
    // The norm over the gradient shard on the device, then both updates at once (see the table above).
    const double norm_ms = ms_for_bytes(4 * shard, f.hbm_gbps);
    const PartialHostSide host = partial_host_side(plan, in, f, backward_ms, norm_ms);
    const double busy_ms = host.adam_ms + host.upload_tail_ms;
    c.optimizer_ms = norm_ms + std::max(gpu_update_ms, busy_ms);
    // The CPU side's waits for downloads still in flight, where they make it the longer side.
    c.transfer_ms +=
        std::max(gpu_update_ms, busy_ms + host.download_wait_ms) - std::max(gpu_update_ms, busy_ms);
  } else if (on_host > 0) {
    const double host_shard = on_host * shard;
    // The norm pass on the host over the streamed gradients.
    const double norm_ms = ms_for_bytes(4 * host_shard, f.host_gbps);
    const double download_ms = ms_for_bytes(4 * host_shard, f.pcie_gbps);
    double adam_ms = host_shard / (f.cpu_adamw_gparams * 1e9) * 1e3;
    if (plan.optimizer_offload == OptimizerOffload::nvme)
      adam_ms +=
          ms_for_bytes(12 * host_shard, f.disk_read_gbps) + ms_for_bytes(12 * host_shard, f.disk_write_gbps);
    const double upload_ms = ms_for_bytes(2 * host_shard, f.pcie_gbps);
    c.transfer_ms += std::max(0.0, download_ms - backward_ms - norm_ms);
    c.optimizer_ms = norm_ms + adam_ms + std::max(0.0, upload_ms - adam_ms);
    // The overlapped exact update (ZeroOffload::overlap_update: world 1, state in host memory) runs under
    // the next forward's first units.
    // That forward is the micro-batch's forward share (with the formulas 1 of 3 forward-equivalents, 4 with
    // checkpointing, whose recomputed forward runs in the backward, not under the update).
    const double next_forward_ms = micro * forward_share;
    if (in.world_size == 1 && plan.optimizer_offload == OptimizerOffload::cpu)
      c.hidden_ms = std::min(adam_ms, f.overlap_hidden_forward * next_forward_ms);
  } else {
    c.optimizer_ms = gpu_update_ms;
  }
  if (plan.param_offload) c.transfer_ms += accumulation * ms_for_bytes(4 * shard, f.pcie_gbps);
  if (in.world_size > 1) c.comm_ms = predict_collectives(plan, in, f, backward_ms).exposed_ms();
  return c;
}

}  // namespace zt::plan
