#include "app/plan/cost_model.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

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
}

double ms_for_bytes(double bytes, double gbps) {
  return bytes / (gbps * 1e9) * 1e3;
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
  for (const auto& [key, value] : j.items()) {
    bool known = key == "name";
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
  std::ofstream out(path);
  ZT_CHECK(out.good(), "cannot write ", path);
  out << j.dump(2) << "\n";
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
  const double micro = gemm_ms + memory_ms + floor_ms;
  const auto accumulation = static_cast<double>(plan.accumulation);

  StepCost c;
  c.compute_ms = micro * accumulation;
  const auto all = static_cast<double>(in.parameters);
  const double shard = plan.stage == 0 ? all : all / in.world_size;
  if (plan.stage >= 2) c.zero_ms += accumulation * ms_for_bytes(8 * all, f.hbm_gbps);
  if (plan.stage == 3) c.zero_ms += accumulation * ms_for_bytes(8 * all, f.hbm_gbps);
  if (plan.stage <= 1) c.zero_ms += (accumulation - 1) * ms_for_bytes(4 * all, f.hbm_gbps);

  const double on_host = plan.optimizer_offload == OptimizerOffload::none ? 0.0 : plan.offload_ratio;
  const double gpu_update_ms = (1 - on_host) * shard / (f.gpu_adamw_gparams * 1e9) * 1e3;
  double host_update_ms = 0, before_updates_ms = 0;
  if (on_host > 0) {
    const double host_shard = on_host * shard;
    // Backward (with checkpointing: the recomputed forward too) is 2 of the 3 (3 of the 4) forwards.
    const double backward_ms = micro * (plan.gradient_checkpointing ? 3.0 / 4.0 : 2.0 / 3.0);
    // The norm pass: on the host over the streamed gradients (full offload), on the device over the gradient
    // shard a partial offload keeps there.
    const double norm_ms = plan.partial_offload() ? ms_for_bytes(4 * shard, f.hbm_gbps)
                                                  : ms_for_bytes(4 * host_shard, f.host_gbps);
    const double download_ms = ms_for_bytes(4 * host_shard, f.pcie_gbps);
    double adam_ms = host_shard / (f.cpu_adamw_gparams * 1e9) * 1e3;
    if (plan.optimizer_offload == OptimizerOffload::nvme)
      adam_ms +=
          ms_for_bytes(12 * host_shard, f.disk_read_gbps) + ms_for_bytes(12 * host_shard, f.disk_write_gbps);
    const double upload_ms = ms_for_bytes(2 * host_shard, f.pcie_gbps);
    c.transfer_ms += std::max(0.0, download_ms - backward_ms - norm_ms);
    // A partial offload takes the norm before queueing either update; the full one's is the CPU side's.
    (plan.partial_offload() ? before_updates_ms : host_update_ms) += norm_ms;
    host_update_ms += adam_ms + std::max(0.0, upload_ms - adam_ms);
    // The overlapped exact update (ZeroOffload::overlap_update: world 1, state in host memory) runs under
    // the next forward's first units.
    // That forward is 1 of the micro-batch's 3 forward-equivalents (4 with checkpointing, whose recomputed
    // forward runs in the backward, not under the update).
    const double next_forward_ms = micro / (plan.gradient_checkpointing ? 4.0 : 3.0);
    if (in.world_size == 1 && plan.optimizer_offload == OptimizerOffload::cpu && !plan.partial_offload())
      c.hidden_ms = std::min(adam_ms, f.overlap_hidden_forward * next_forward_ms);
  }
  c.optimizer_ms = before_updates_ms + std::max(gpu_update_ms, host_update_ms);
  if (plan.param_offload) c.transfer_ms += accumulation * ms_for_bytes(4 * shard, f.pcie_gbps);
  return c;
}

}  // namespace zt::plan
