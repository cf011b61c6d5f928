#include "optim/zero/parameter_gatherer.h"

#include <utility>

#include "kernels/elementwise.h"
#include "optim/zero/buffer_views.h"
#include "runtime/device.h"

namespace zt::optim {

using namespace zero_views;  // NOLINT: the engine's buffer views

ParameterGatherer::ParameterGatherer(const ZeroPartition& partition, Communicator& comm, DType compute,
                                     UnitBuffers buffers, std::unique_ptr<Arena> upload, Source source)
    : partition_(partition),
      comm_(comm),
      compute_(compute),
      order_(partition),
      buffers_(std::move(buffers)),
      upload_(std::move(upload)),
      source_(source) {}

void ParameterGatherer::prefetch(size_t unit, UnitPhase phase, bool last_micro) {
  source_.file->prefetch(
      order_.upcoming(unit, phase, last_micro, static_cast<size_t>(source_.file->buffer_count() - 1)));
}

void ParameterGatherer::gather(size_t unit, UnitPhase phase, bool last_micro) {
  const ZeroUnit& u = partition_.units()[unit];
  const Tensor full = view(buffer(unit), compute_, 0, u.numel);
  const int world = comm_.world_size();
  // offload_param: the slice lives on the host (the shard arena or a record buffer): up first (synchronous
  // on the rank's stream: copy_tensor waits for the copy, so the host slice is free afterwards), then
  // gathered.
  auto upload_and_gather = [&](const Tensor& host_slice) {
    if (world == 1) {
      copy_tensor(host_slice, full);
    } else {
      const Tensor upload = view(*upload_, compute_, 0, u.slice_numel);
      copy_tensor(host_slice, upload);
      comm_.all_gather(upload, full, work_comm_stream());
    }
  };
  if (source_.file != nullptr) {
    // The slice from its record (read ahead by the previous gathers, else read now); the next units'
    // records start before it goes up.
    const Tensor slice = source_.file->acquire(unit);
    prefetch(unit, phase, last_micro);
    upload_and_gather(slice);
    source_.file->release(unit, /*modified=*/false);
    return;
  }
  const Tensor shard = view(*source_.shard, compute_, u.shard_begin, u.slice_numel);
  if (source_.on_host) {
    upload_and_gather(shard);
    return;
  }
  if (world == 1) {
    kernels::copy(shard, full);
  } else {
    comm_.all_gather(shard, full, work_comm_stream());
  }
}

}  // namespace zt::optim
