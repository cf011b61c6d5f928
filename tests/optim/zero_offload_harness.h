// Drives a ZeroEngine through steps with synthetic gradients, without the model: per step, backward's hook
// order (layers last to first, then the embeddings, then the shared unit), every gradient handle of a unit
// written with deterministic values before its gradients_ready. Returns the gathered fp32 master after the
// steps, for bit-for-bit comparisons between engine configurations (offload or not, pipelined or not).
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "optim/loss_scaler.h"
#include "optim/zero/engine.h"
#include "runtime/communicator.h"
#include "runtime/device.h"
#include "tests/support/rank_threads.h"

namespace zt::optim::testing {

// deberta_small_cpu_config shrunk to hidden 16 / vocab 50: ~10k parameters in a few dozen tensors.
inline DebertaConfig offload_tiny_config() {
  DebertaConfig c = deberta_small_cpu_config();
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.embedding_size = 16;
  c.num_attention_heads = 4;
  c.attention_head_size = 4;
  c.intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.position_buckets = 4;
  c.max_relative_positions = -1;
  c.max_position_embeddings = 16;
  c.pooler_hidden_size = 16;
  c.num_labels = 3;
  return c;
}

// Writes value(i) = amplitude * sin(seed + 0.37 i) into t (any device; f32 gradients).
inline void write_gradient(const Tensor& t, double seed, double amplitude) {
  if (t.data() == nullptr) return;  // a tensor this model does not have (no conv layer)
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(amplitude * std::sin(seed + 0.37 * static_cast<double>(i)));
  copy_tensor(Tensor(values.data(), t.shape(), DType::f32), t);
}

inline void write_layer(const DebertaLayerTensors& l, double seed, double a) {
  for (const Tensor* t :
       {&l.query_weight, &l.query_bias, &l.key_weight, &l.key_bias, &l.value_weight, &l.value_bias,
        &l.attention_output_weight, &l.attention_output_bias, &l.attention_ln_weight, &l.attention_ln_bias,
        &l.intermediate_weight, &l.intermediate_bias, &l.output_weight, &l.output_bias, &l.output_ln_weight,
        &l.output_ln_bias})
    write_gradient(*t, seed += 1.0, a);
}

// Backward's hooks of one step with synthetic gradients (seeded by `step`, scaled by `scale`), then the step;
// the hooks in the model's order (model/deberta.cpp's backward: the shared unit held throughout, each unit
// acquired before its gradients are written, released, then reported ready).
inline ZeroStepResult synthetic_step(ZeroEngine& engine, const DebertaConfig& config, int step, double scale,
                                     LossScaler& scaler) {
  using Pass = DebertaUnitHooks::Pass;
  engine.begin_backward(true, true);
  const DebertaTensors& g = engine.gradient_handles();
  const double seed = 100.0 * step;
  const size_t shared = shared_unit(config);
  engine.acquire(shared, Pass::backward);
  for (int l = config.num_hidden_layers - 1; l >= 0; --l) {
    engine.acquire(layer_unit(l), Pass::backward);
    write_layer(g.layers[static_cast<size_t>(l)], seed + 20.0 * l, 0.3 * scale);
    engine.release(layer_unit(l), Pass::backward);
    engine.gradients_ready(layer_unit(l));
  }
  engine.acquire(kEmbeddingsUnit, Pass::backward);
  for (const Tensor* t : {&g.embeddings.word_embeddings, &g.embeddings.ln_weight, &g.embeddings.ln_bias})
    write_gradient(*t, seed + 7.0, 0.2 * scale);
  engine.release(kEmbeddingsUnit, Pass::backward);
  engine.gradients_ready(kEmbeddingsUnit);
  const DebertaSharedTensors& s = g.shared;
  for (const Tensor* t : {&s.rel_embeddings, &s.encoder_ln_weight, &s.encoder_ln_bias, &s.conv_weight,
                          &s.conv_bias, &s.conv_ln_weight, &s.conv_ln_bias, &s.pooler_weight, &s.pooler_bias,
                          &s.classifier_weight, &s.classifier_bias})
    write_gradient(*t, seed + 3.0, 0.1 * scale);
  engine.release(shared, Pass::backward);
  engine.gradients_ready(shared);
  return engine.step(1e-2, scaler);
}

// The initial parameters of the synthetic runs: 0.05 cos(0.11 i) over the flat f32 layout.
// The engine options both harness runs share (clipping at 0.5, so the norm and its scale are exercised).
inline ZeroEngineOptions harness_engine_options(int stage, DeviceKind device, DType compute,
                                                const ZeroOffload& offload) {
  ZeroEngineOptions options;
  options.stage = stage;
  options.device = device;
  options.compute = compute;
  options.max_grad_norm = 0.5;
  options.offload = offload;
  return options;
}

inline Arena synthetic_initial_parameters(const ParameterTable& table) {
  Arena init("initial parameters", table.layout(DType::f32), {.zero_fill = true});
  const Tensor flat = init.flat(DType::f32);
  for (int64_t i = 0; i < flat.numel(); ++i)
    flat.data_as<float>()[i] = 0.05f * static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
  return init;
}

// `steps` steps of world-1 training with synthetic gradients; max_grad_norm small enough to clip.
// `param_disk`: offload.param's shard on disk (ZeroEngineOptions::param_disk).
inline std::vector<float> train_with_synthetic_gradients(DeviceKind device, DType compute, int stage,
                                                         ZeroOffload offload, int steps, bool pin = false,
                                                         std::optional<ZeroParamDiskTier> param_disk = {}) {
  const DebertaConfig config = offload_tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngineOptions options = harness_engine_options(stage, device, compute, offload);
  options.pin_memory = pin;
  options.pin_param_memory = pin;
  options.param_disk = std::move(param_disk);
  ZeroEngine engine(table, config, *comms[0], options);
  engine.load_full_parameters(synthetic_initial_parameters(table));
  LossScaler scaler =
      compute == DType::f16 ? LossScaler(LossScalerConfig{.initial_scale_power = 4}) : LossScaler::disabled();
  const double scale = compute == DType::f16 ? scaler.scale() : 1.0;
  for (int step = 0; step < steps; ++step) {
    if (!synthetic_step(engine, config, step, scale, scaler).applied) return {};
  }
  Arena out("final master", table.layout(DType::f32), {.zero_fill = true});
  engine.gather_full_master(&out);
  const Tensor flat = out.flat(DType::f32);
  return {flat.data_as<float>(), flat.data_as<float>() + flat.numel()};
}

// One rank's checkpointed state: master, m and v of each owned piece (owned_pieces order), the AdamW step.
struct RankState {
  std::vector<std::vector<float>> kinds[3];
  int64_t step_count = 0;
};

inline RankState read_rank_state(const ZeroEngine& engine) {
  RankState out;
  for (const ZeroEngine::OwnedPiece& piece : engine.owned_pieces()) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> values(static_cast<size_t>(piece.numel));
      engine.read_state(kind, piece, values);
      out.kinds[kind].push_back(std::move(values));
    }
  }
  out.step_count = engine.adamw().step_count();
  return out;
}

// Collective (refresh_compute_copy). The engine must own the pieces `state` was read from (same world and
// stage: the same owned_pieces).
inline void write_rank_state(ZeroEngine& engine, const RankState& state) {
  const std::vector<ZeroEngine::OwnedPiece> pieces = engine.owned_pieces();
  for (size_t i = 0; i < pieces.size(); ++i)
    for (int kind = 0; kind < 3; ++kind) engine.write_state(kind, pieces[i], state.kinds[kind][i]);
  engine.adamw().set_step_count(state.step_count);
  engine.refresh_compute_copy();
}

// World-`world` training with synthetic gradients (max_grad_norm small enough to clip; on the CPU in f32, on
// the GPU at world 1 in f32 or bf16): `steps` steps with `offload`; with `resumed` the state after
// `resume_after` steps is read out (as a checkpoint does: read_state per owned piece), a new engine with the
// offload `resumed` is built, the state written into it, and the remaining steps run there. Returns the
// gathered fp32 master.
inline std::vector<float> train_ranks_with_synthetic_gradients(
    int world, int stage, ZeroOffload offload, int steps, std::optional<ZeroOffload> resumed = {},
    int resume_after = 0, DeviceKind device = DeviceKind::cpu, DType compute = DType::f32) {
  const DebertaConfig config = offload_tiny_config();
  const ParameterTable table(config);
  const Arena init = synthetic_initial_parameters(table);
  auto comms = make_in_process_group(world);
  Arena out("final master", table.layout(DType::f32), {.zero_fill = true});
  auto make_engine = [&](Communicator& comm, const ZeroOffload& o) {
    ZeroEngineOptions options = harness_engine_options(stage, device, compute, o);
    options.ranks_sharing_host = world;
    return std::make_unique<ZeroEngine>(table, config, comm, options);
  };
  const std::vector<std::string> errors = zt::test::run_ranks(comms, [&](Communicator& comm) {
    std::unique_ptr<ZeroEngine> engine = make_engine(comm, offload);
    engine->load_full_parameters(init);
    LossScaler scaler = LossScaler::disabled();
    for (int step = 0; step < steps; ++step) {
      if (resumed && step == resume_after) {
        const RankState state = read_rank_state(*engine);
        engine.reset();
        engine = make_engine(comm, *resumed);
        write_rank_state(*engine, state);
      }
      synthetic_step(*engine, config, step, 1.0, scaler);
    }
    engine->gather_full_master(comm.rank() == 0 ? &out : nullptr);
  });
  zt::test::expect_all_succeeded(errors);
  const Tensor flat = out.flat(DType::f32);
  return {flat.data_as<float>(), flat.data_as<float>() + flat.numel()};
}

}  // namespace zt::optim::testing
