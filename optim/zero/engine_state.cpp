// ZeroEngine's state piece by piece: the owned pieces, their master / m / v read and written (checkpoints),
// parameters loaded, the compute copy refreshed from the master, and the full master gathered.
#include "optim/zero/engine_impl.h"

namespace zt::optim {

std::vector<ZeroEngine::OwnedPiece> ZeroEngine::owned_pieces() const {
  std::vector<OwnedPiece> out;
  if (options_.stage == 0) {
    for (size_t k = 0; k < table_.size(); ++k) out.push_back({k, 0, table_.entries()[k].numel()});
  } else {
    for (const ShardPiece& p : partition_.pieces(rank())) out.push_back({p.tensor, p.tensor_offset, p.numel});
  }
  return out;
}

// Element offset of an owned piece inside the state buffer of `kind`.
static int64_t piece_state_offset(const ZeroPartition& part, int stage, bool mixed, bool offload, int rank,
                                  const ZeroEngine::OwnedPiece& p, int kind) {
  const size_t unit = part.unit_of_tensor(p.tensor);
  const ZeroUnit& u = part.units()[unit];
  const int64_t flat = part.tensor_flat_offset(p.tensor) + p.tensor_offset;
  if (stage == 0) return flat;
  const int64_t in_slice = flat - part.slice_begin(unit, rank);
  ZT_CHECK(in_slice >= 0 && in_slice + p.numel <= u.slice_numel,
           "ZeRO engine: piece outside the rank's slice");
  const bool master_is_full_compute = kind == 0 && !mixed && stage < 3 && !offload;
  return master_is_full_compute ? flat : u.shard_begin + in_slice;
}

// Partial offload: an owned piece's elements [0, numel) cut at the shard's host part (ZeroPlan::host_shard):
// [0, on_host) in the host store at shard offset `shard`, [on_host, numel) on the device at `device`, its
// offset in the device buffer of `kind` (the f32 master is the compute copy, as without offload).
struct PieceSplit {
  int64_t shard = 0, on_host = 0, device = 0;
};
static PieceSplit split_piece(const ZeroPartition& part, const ZeroPlan& plan, int rank,
                              const ZeroEngine::OwnedPiece& p, int kind) {
  PieceSplit out;
  out.shard = piece_state_offset(part, plan.stage, plan.mixed(), true, rank, p, kind);
  out.on_host = std::clamp<int64_t>(plan.host_shard - out.shard, 0, p.numel);
  const ZeroEngine::OwnedPiece rest{p.tensor, p.tensor_offset + out.on_host, p.numel - out.on_host};
  const int64_t resident = piece_state_offset(part, plan.stage, plan.mixed(), false, rank, rest, kind);
  const bool in_compute_copy = kind == 0 && !plan.mixed();
  out.device = rest.numel == 0 ? 0 : in_compute_copy ? resident : resident - plan.host_shard;
  return out;
}

void ZeroEngine::read_state(int kind, const OwnedPiece& piece, std::span<float> host) const {
  impl_->land_all();  // the state an overlapped update writes
  const Impl& s = *impl_;
  ZT_CHECK(static_cast<int64_t>(host.size()) == piece.numel, "ZeRO engine: read_state size mismatch");
  if (s.plan->partial_offload()) {
    const PieceSplit at = split_piece(partition_, *s.plan, rank(), piece, kind);
    const auto on_host = static_cast<size_t>(at.on_host);
    if (on_host > 0) {
      impl_->offloaded->copy_state(partition_.unit_of_tensor(piece.tensor), kind, at.shard,
                                   host.first(on_host), false);
    }
    if (at.on_host < piece.numel)
      copy_tensor(view(s.device_state->state(kind), DType::f32, at.device, piece.numel - at.on_host),
                  Tensor(host.data() + on_host, Shape{piece.numel - at.on_host}, DType::f32));
    return;
  }
  const int64_t offset = piece_state_offset(partition_, s.plan->stage, s.plan->mixed(),
                                            s.plan->offload_optimizer, rank(), piece, kind);
  if (s.plan->offload_optimizer) {
    impl_->offloaded->copy_state(partition_.unit_of_tensor(piece.tensor), kind, offset, host, false);
    return;
  }
  const Tensor out(host.data(), Shape{piece.numel}, DType::f32);
  if (kind == 0 && s.device_state->split) {
    if (piece.numel == 0) return;
#ifdef ZT_WITH_CUDA
    const DeviceBuffer joined =
        device_allocator().allocate(host.size() * 4, MemoryCategory::scratch, "master (joined for a read)");
    const Tensor values(joined.data(), Shape{piece.numel}, DType::f32, DeviceKind::cuda);
    gpu::join_split_master(s.device_state->whole_split_master(), offset, values, work_stream());
    copy_tensor(values, out);
#endif
    return;
  }
  copy_tensor(view(s.device_state->state(kind), DType::f32, offset, piece.numel), out);
}

void ZeroEngine::write_state(int kind, const OwnedPiece& piece, std::span<const float> host) {
  impl_->land_all();
  const Impl& s = *impl_;
  ZT_CHECK(static_cast<int64_t>(host.size()) == piece.numel, "ZeRO engine: write_state size mismatch");
  if (s.plan->partial_offload()) {
    const PieceSplit at = split_piece(partition_, *s.plan, rank(), piece, kind);
    const auto on_host = static_cast<size_t>(at.on_host);
    if (on_host > 0) {
      impl_->offloaded->copy_state(partition_.unit_of_tensor(piece.tensor), kind, at.shard,
                                   {const_cast<float*>(host.data()), on_host}, true);
    }
    if (at.on_host < piece.numel)
      copy_tensor(
          Tensor(const_cast<float*>(host.data()) + on_host, Shape{piece.numel - at.on_host}, DType::f32),
          view(s.device_state->state(kind), DType::f32, at.device, piece.numel - at.on_host));
    return;
  }
  const int64_t offset = piece_state_offset(partition_, s.plan->stage, s.plan->mixed(),
                                            s.plan->offload_optimizer, rank(), piece, kind);
  if (s.plan->offload_optimizer) {
    impl_->offloaded->copy_state(partition_.unit_of_tensor(piece.tensor), kind, offset,
                                 {const_cast<float*>(host.data()), host.size()}, true);
    return;
  }
  const Tensor in(const_cast<float*>(host.data()), Shape{piece.numel}, DType::f32);
  if (kind == 0 && s.device_state->split) {  // the compute copy (hi) is written with the master
    if (piece.numel == 0) return;
#ifdef ZT_WITH_CUDA
    const DeviceBuffer staged =
        device_allocator().allocate(host.size() * 4, MemoryCategory::scratch, "master (staged for a write)");
    const Tensor values(staged.data(), Shape{piece.numel}, DType::f32, DeviceKind::cuda);
    copy_tensor(in, values);
    gpu::write_split_master(values, s.device_state->whole_split_master(), offset, work_stream());
    ZT_CUDA_CHECK(cudaStreamSynchronize(work_stream()));  // before `staged` goes back to the allocator
#endif
    return;
  }
  copy_tensor(in, view(s.device_state->state(kind), DType::f32, offset, piece.numel));
}

void ZeroEngine::refresh_compute_copy() {
  Impl& s = *impl_;
  s.land_all();
  if (s.plan->offload_optimizer) s.offloaded->refresh_parameters();
  // The device's master into the compute copy: every block, or a partial offload's device parts. The split
  // master's high halves are the compute copy already.
  if ((!s.plan->offload_optimizer || s.plan->partial_offload()) && s.plan->mixed() &&
      !s.device_state->split) {
    for (const OwnedBlock& b : s.plan->partial_offload() ? s.device_blocks : s.blocks)
      kernels::copy(view(*s.device_state->master_arena, DType::f32, b.master, b.numel),
                    view(*s.device_state->compute_copy, s.plan->compute, b.compute, b.numel));
  }
  gather_updated_compute_copy();
}

void ZeroEngine::load_parameter(size_t tensor, std::span<const float> values) {
  impl_->land_all();
  ZT_CHECK(tensor < table_.size(), "load_parameter: tensor ", tensor, " outside the table (", table_.size(),
           " tensors)");
  ZT_CHECK(static_cast<int64_t>(values.size()) == tensor_numel(tensor),
           "load_parameter: ", tensor_name(tensor), " has ", tensor_numel(tensor), " elements, got ",
           values.size(), " values");
  for (const OwnedPiece& p : owned_pieces())
    if (p.tensor == tensor)
      write_state(0, p, values.subspan(static_cast<size_t>(p.tensor_offset), static_cast<size_t>(p.numel)));
}

void ZeroEngine::load_full_parameters(const Arena& host_f32) {
  ZT_CHECK(host_f32.device() == DeviceKind::cpu, "load_full_parameters needs a host arena");
  for (size_t k = 0; k < table_.size(); ++k) {
    const Tensor whole = host_f32.tensor(table_.entries()[k].name);
    load_parameter(k, {static_cast<const float*>(whole.data()), static_cast<size_t>(whole.numel())});
  }
  finish_loading();
}

void ZeroEngine::gather_full_master(const Arena* host_f32) {
  ZT_CHECK(host_f32 == nullptr || host_f32->device() == DeviceKind::cpu,
           "gather_full_master needs a host arena");
  TensorSink into_arena;
  if (host_f32 != nullptr) {
    into_arena = [&](size_t k, const Tensor& values) {
      copy_tensor(values, host_f32->tensor(table_.entries()[k].name));
    };
  }
  gather_full_master(into_arena);
}

void ZeroEngine::gather_full_master(const TensorSink& take) {
  Impl& s = *impl_;
  finish_delayed_update();
  compute_waits_for_comm();  // overlap_comm: its gathers on the compute stream, after the comm stream's work
  const auto& units = partition_.units();
  std::unique_ptr<Arena> unit_buffer, master_upload;
  // `buffer` as f32 [numel], grown (reallocated) when a unit needs more than it holds.
  auto scratch_f32 = [&](std::unique_ptr<Arena>& buffer, const char* name, int64_t numel) {
    if (!buffer || buffer->bytes() < static_cast<size_t>(numel) * 4)
      buffer = std::make_unique<Arena>(name, flat_layout(numel, DType::f32),
                                       s.options(MemoryCategory::scratch, false));
    return view(*buffer, DType::f32, 0, numel);
  };
  for (size_t u = 0; u < units.size(); ++u) {
    const ZeroUnit& unit = units[u];
    const OwnedBlock& b = s.blocks[u];
    // The unit's full f32 values: in the master itself at stage 0, else gathered into a unit buffer.
    Tensor full;
    if (s.device_state->split) {  // stage 0 only: joined from its three parts into a unit buffer
#ifdef ZT_WITH_CUDA
      full = scratch_f32(unit_buffer, "consolidation buffer", unit.numel);
      gpu::join_split_master(s.device_state->whole_split_master(), unit.flat_begin, full, work_stream());
#endif
    } else if (s.plan->stage == 0) {
      full = view(s.device_state->master(), DType::f32, unit.flat_begin, unit.numel);
    } else {
      full = scratch_f32(unit_buffer, "consolidation buffer", unit.numel);
      Tensor mine;
      if (s.plan->partial_offload()) {  // the host part comes up from the host store, beside the device's
        mine = scratch_f32(master_upload, "consolidation upload", b.numel);
        const OwnedBlock& host = s.host_blocks[u];
        const OwnedBlock& device = s.device_blocks[u];
        s.offloaded->read_master(host, mine.slice_rows(0, host.numel));
        kernels::copy(view(s.device_state->master(), DType::f32, device.master, device.numel),
                      mine.slice_rows(host.numel, b.numel));
      } else if (s.plan->offload_optimizer) {  // the slice comes up from the host store first
        mine = scratch_f32(master_upload, "consolidation upload", b.numel);
        s.offloaded->read_master(b, mine);
      } else {
        mine = view(s.device_state->master(), DType::f32, b.master, b.numel);
      }
      if (world_size() == 1) {
        kernels::copy(mine, full);
      } else {
        comm_.all_gather(mine, full, work_comm_stream());
      }
    }
    if (!take) continue;  // this rank only takes part in the gathers
    for (size_t k = unit.first_tensor; k < unit.end_tensor; ++k) {
      const ParameterInfo& info = table_.entries()[k];
      const int64_t offset = partition_.tensor_flat_offset(k) - unit.flat_begin;
      take(k, Tensor(static_cast<float*>(full.data()) + offset, info.shape, DType::f32, full.device()));
    }
  }
}

}  // namespace zt::optim
