// The optimizer offloaded to the host (ZeroOffload; optim/zero/engine.h describes the pipeline): the rank's
// fp32 master, m and v in a host store (resident, or on the disk tier) cut into sub-groups, the f32 gradient
// shard copied down per unit, the CPU AdamW writing the compute-dtype values into a staging shard (or the
// stage-3 host shard, or its record in the parameter file), and the copies that put them back where the
// model reads them. The update runs in one of three ways, each its own object:
//   in step()   update_in_step: unit by unit, each unit's upload queued as its update ends;
//   overlapped  OverlappedUnitUpdate: on a host thread in the forward's order, each unit landed by the
//               next forward's acquire (land_unit) or by land_all;
//   delayed     DelayedUpdate: on a host thread, unit by unit, while the next step's forward and backward
//               run on the parameters one update old, into a second gradient shard; published collectively
//               by publish_delayed (ZeroEngine::finish_delayed_update), each unit's upload queued as soon as
//               the thread is done with it, beside the CPU update of the units after it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "optim/adamw.h"
#include "optim/zero/host_optimizer_store.h"
#include "optim/zero/offload_copies.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "optim/zero/unit_order.h"
#include "optim/zero/zero_plan.h"
#include "runtime/arena.h"

namespace zt::optim {

// The exact update of every unit on a host thread, in a given order; each unit waited for and landed once.
class OverlappedUnitUpdate {
 public:
  ~OverlappedUnitUpdate();
  // Runs update(unit) for each unit of `order` on a host thread (units: how many units there are).
  void start(size_t units, std::vector<size_t> order, std::function<void(size_t)> update);
  // Whether unit `unit`'s update is in flight and not landed yet; wait_until_updated then blocks until the
  // thread is done with it (rethrowing the thread's error); mark_landed records that it landed.
  bool pending(size_t unit) const;
  bool any_pending() const { return future_.valid(); }
  // Whether the thread is done with unit `unit` (without waiting; false once it failed).
  bool updated(size_t unit);
  void wait_until_updated(size_t unit);
  void mark_landed(size_t unit);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<char> updated_;  // the thread is done with unit u (under mutex_)
  std::vector<char> landed_;   // unit u's parameters went where the model reads them (rank thread only)
  bool failed_ = false;        // the thread threw (future_.get rethrows)
  std::future<void> future_;   // last: the thread ends before the rest goes
};

class OffloadedOptimizer {
 public:
  // Where the updated parameters go and where the gradients come from, owned by the engine (each outlives
  // this object): the compute copy (device; the stage-3 host shard with offload_param; null with the
  // shard on disk), the parameter file (parameters on disk), the device gradient buffer (null when
  // streamed), and the read-ahead of the parameter file after the update of a unit.
  struct Places {
    Arena* compute_copy = nullptr;
    SwappedParameterShard* param_file = nullptr;
    const Arena* device_gradients = nullptr;
    std::function<void(size_t)> prefetch_after_update;
  };
  // `blocks`: the owned blocks whose state is on the host (with a partial offload their host parts,
  // split_owned_blocks), one per unit; the host buffers hold the shard's first plan.host_shard elements.
  OffloadedOptimizer(const ZeroPlan& plan, const ZeroPartition& partition, std::vector<OwnedBlock>& blocks,
                     std::unique_ptr<HostOptimizerStore> store, std::vector<HostBlockExtent> extents,
                     MemoryKind host_kind, std::unique_ptr<OffloadCopies> copies, AdamW& adamw,
                     Places places);
  ~OffloadedOptimizer();

  const HostOptimizerStore& store() const { return *store_; }
  bool pipelined_copies() const { return copies_->pipelined(); }
  // With overlap: the update runs beside the next forward (ZeroOffload::overlap_update).
  void enable_overlapped_update();
  bool overlapped_update() const { return overlapped_ != nullptr; }

  // Gradients down. download: the unit's final gradients (device_gradients at block.grad); download_and_zero
  // (streamed): `slice` of a bucket, the bucket `bucket` zeroed once the copy landed, recorded against the
  // bucket's slot so that backward waits before writing it again (current_stream_waits_for_bucket).
  void download(size_t unit);
  void download_and_zero(size_t unit, size_t slot, const Tensor& slice, const Tensor& bucket);
  void current_stream_waits_for_bucket(size_t slot);
  // The host copy of unit `unit`'s gradients: its owned block's, or with a partial offload its host part's.
  Tensor host_gradients(size_t unit) const;
  bool downloaded(size_t unit) const { return downloaded_[unit]; }
  // fp16 overflow: the step is skipped; the downloads end before the gradients are cleared.
  void drop_downloads();

  // The update of every owned block with the gradients scaled by grad_scale (the clip, and on the GPU
  // 1/(loss_scale W)), in step() or started overlapped or delayed; clear_gradients clears the device
  // gradients once every download landed.
  void update(double lr, float grad_scale, const std::function<void()>& clear_gradients);
  // Overlapped update: unit `unit` (every unit) landed where the model reads it.
  void land_unit(size_t unit);
  void land_all();
  // Delayed update: waits for it to end (the host state is complete); publish_delayed also puts its
  // parameters where the model reads them (then the caller all-gathers) and says whether there were any:
  // `unit_by_unit`, each unit not landed yet as soon as the thread is done with it; otherwise after the
  // whole update (the reference: the same copies of the same values). land_delayed_unit_if_updated: unit
  // `unit`'s now if the thread is done with it (the caller's stream has queued the last read of its
  // parameters); not with offload_param, nor on a GPU without pipelined copies from pinned memory.
  void wait_for_delayed_update();
  bool publish_delayed(bool unit_by_unit);
  void land_delayed_unit_if_updated(size_t unit);
  // Host wall time of the CPU AdamW over every owned block in the latest update that ended (in step(),
  // overlapped or delayed; the sum of the blocks' updates), in ms; 0 before the first.
  double last_update_ms() const;

  // Checkpoints: the state of `kind` (0 master, 1 m, 2 v) for shard elements [offset, offset + host.size())
  // of unit `unit`, read or written through the host store.
  void copy_state(size_t unit, int kind, int64_t offset, std::span<float> host, bool write);
  // The compute copy re-derived from the master (after loading).
  void refresh_parameters();
  // Block b's master into `out` (f32 [b.numel], on the device).
  void read_master(const OwnedBlock& b, const Tensor& out);

 private:
  struct DelayedUpdate;
  Tensor params_on_host(const OwnedBlock& b) const;
  bool params_in_file() const;
  Tensor begin_params_write(const OwnedBlock& b, bool keep_unwritten);
  void end_params_write(const OwnedBlock& b);
  void publish(const OwnedBlock& b);
  void update_blocks(double lr, float grad_scale, const Arena& gradients);
  void update_block(size_t unit, double lr, float grad_scale, const Arena& gradients);
  void timed_update_block(size_t unit, double lr, float grad_scale, const Arena& gradients, bool last);

  const ZeroPlan& plan_;
  const ZeroPartition& partition_;
  const std::vector<OwnedBlock>& blocks_;
  AdamW& adamw_;
  Places places_;
  std::vector<size_t> forward_order_;  // the overlapped update's order (UnitOrder)
  std::vector<SubGroup> sub_groups_;   // host store block g is sub_groups_[g]
  std::unique_ptr<HostOptimizerStore> store_;
  std::unique_ptr<Arena> host_gradients_;  // the f32 gradient shard, copied down per block
  std::unique_ptr<Arena> host_params_;     // the compute-dtype staging shard (ZeroPlan::host_staging)
  std::unique_ptr<OffloadCopies> copies_;
  std::vector<bool> downloaded_;  // per unit: its final gradients went down this step
  // Streamed gradients: the unit whose slice last went down from each bucket slot.
  std::optional<size_t> bucket_last_unit_[4];
  // timed_update_block's sums: the update in progress, and the latest one that ended (read by the rank's
  // thread while a delayed or overlapped update's thread writes them).
  std::atomic<int64_t> update_ns_in_progress_{0};
  std::atomic<int64_t> last_update_ns_{0};
  std::unique_ptr<OverlappedUnitUpdate> overlapped_;
  std::unique_ptr<DelayedUpdate> delayed_;  // last: destroyed first, so its thread ends before the buffers go
};

}  // namespace zt::optim
