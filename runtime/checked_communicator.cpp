// make_checked_communicator: the collective-sequence debug mode.
//
// Note [collective sequence check]
// A rank that calls a different collective than its peers (a skipped bucket, a branch taken on one rank
// only) makes NCCL hang or mix up buffers, far from the bug. In this mode every collective first
// all_gathers, through the inner communicator, a fixed-size descriptor of what this rank is about to call
// (sequence number, op, dtype, sizes, root, whether its own arguments are valid). The exchange is the same
// collective on every rank whatever they are about to call, so it always matches; the ranks then compare
// the descriptors identically, and on a disagreement all_gather their histories (the last
// CheckedCommunicatorOptions::history descriptors) and throw the same report on every rank, without issuing
// the real collective. The group stays consistent, so the caller may go on after catching it.
// Device communicators stage the descriptors through a device buffer and synchronize the stream to read
// them: a host sync per collective, acceptable for a debug mode.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/device_allocator.h"
#include "runtime/in_process_group.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda_check.h"
#endif

namespace zt {
namespace {

// One collective as the ranks compare it; kind -1 marks an empty history slot. Plain int64 words, so any
// backend can all_gather it as i64.
struct Descriptor {
  int64_t sequence = -1;
  int64_t kind = -1;
  int64_t dtype = 0;
  int64_t input_numel = 0;
  int64_t output_numel = 0;
  int64_t root = 0;
  int64_t invalid_arguments = 0;  // 1: this rank's own arguments fail collective_argument_problem
  int64_t unused = 0;             // keeps the record 64 bytes

  bool same_call(const Descriptor& o) const {
    return sequence == o.sequence && kind == o.kind && dtype == o.dtype && input_numel == o.input_numel &&
           output_numel == o.output_numel && root == o.root;
  }
};
constexpr int64_t kDescriptorWords = sizeof(Descriptor) / sizeof(int64_t);
static_assert(sizeof(Descriptor) == 8 * sizeof(int64_t), "descriptors are exchanged as 8 i64 words");

std::string describe(const Descriptor& d) {
  if (d.kind < 0) return "-";
  const auto kind = static_cast<CollectiveKind>(d.kind);
  if (kind == CollectiveKind::barrier) return "barrier";
  const std::string dtype(dtype_name(static_cast<DType>(d.dtype)));
  std::string text = str(collective_name(kind), " ", dtype, "[", d.input_numel, "]");
  if (detail::has_output(kind)) text += str("->[", d.output_numel, "]");
  if (kind == CollectiveKind::broadcast) text += str(" root ", d.root);
  if (d.invalid_arguments != 0) text += " (invalid arguments)";
  return text;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

class CheckedCommunicator final : public Communicator {
 public:
  CheckedCommunicator(std::unique_ptr<Communicator> inner, CheckedCommunicatorOptions options)
      : inner_(std::move(inner)), options_(options), backend_name_(str("checked ", inner_->backend_name())) {
    ZT_CHECK(options_.history >= 1, "make_checked_communicator: history must be >= 1, got ",
             options_.history);
  }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string_view backend_name() const override { return backend_name_; }
  int cuda_device() const override { return inner_->cuda_device(); }

  void all_reduce_sum(const Tensor& in_out, CommStream stream) override {
    check(CollectiveKind::all_reduce_sum, in_out, in_out, 0, stream);
    inner_->all_reduce_sum(in_out, stream);
  }
  void reduce_scatter_sum(const Tensor& input, const Tensor& output, CommStream stream) override {
    check(CollectiveKind::reduce_scatter_sum, input, output, 0, stream);
    inner_->reduce_scatter_sum(input, output, stream);
  }
  void all_gather(const Tensor& input, const Tensor& output, CommStream stream) override {
    check(CollectiveKind::all_gather, input, output, 0, stream);
    inner_->all_gather(input, output, stream);
  }
  void broadcast(const Tensor& in_out, int root, CommStream stream) override {
    check(CollectiveKind::broadcast, in_out, in_out, root, stream);
    inner_->broadcast(in_out, root, stream);
  }
  void barrier(CommStream stream) override {
    check(CollectiveKind::barrier, Tensor(), Tensor(), 0, stream);
    inner_->barrier(stream);
  }
  void abort(std::string_view reason) noexcept override { inner_->abort(reason); }
  void check_async_error() override { inner_->check_async_error(); }

 private:
  void check(CollectiveKind kind, const Tensor& input, const Tensor& output, int root, CommStream stream) {
    const int world = world_size();
    const DeviceKind device = cuda_device() < 0 ? DeviceKind::cpu : DeviceKind::cuda;
    Descriptor mine;
    std::string problem;
    mine.sequence = sequence_++;
    mine.kind = static_cast<int64_t>(kind);
    if (kind != CollectiveKind::barrier) {
      mine.dtype = static_cast<int64_t>(input.dtype());
      mine.input_numel = input.numel();
      mine.output_numel = detail::has_output(kind) ? output.numel() : input.numel();
      mine.root = root;
      problem = collective_argument_problem(kind, rank(), world, input, output, root, device);
      mine.invalid_arguments = problem.empty() ? 0 : 1;
    }
    history_.push_back(mine);
    if (history_.size() > static_cast<size_t>(options_.history)) history_.pop_front();

    // Invalid arguments anywhere: no rank calls the inner collective (a rank left in it would wait for
    // ever); the rank that passed them throws its own precise message, the others name it.
    const std::vector<Descriptor> all = exchange({mine}, stream);
    if (!problem.empty()) ZT_FAIL(problem);
    for (int r = 0; r < world; ++r)
      if (all[static_cast<size_t>(r)].invalid_arguments != 0)
        ZT_FAIL("collective #", mine.sequence, ": rank ", r, " passed invalid arguments to ",
                describe(all[static_cast<size_t>(r)]), " (its own error says what); this rank called ",
                describe(mine));
    bool agree = true;
    for (const Descriptor& d : all) agree = agree && d.same_call(all[0]);
    if (agree) return;

    std::vector<Descriptor> mine_history(static_cast<size_t>(options_.history));
    std::copy(history_.begin(), history_.end(),
              mine_history.end() - static_cast<std::ptrdiff_t>(history_.size()));
    ZT_FAIL(mismatch_report(all, exchange(mine_history, stream)));
  }

  // The report every rank throws: one column per distinct call (the lowest rank making it), its last
  // `history` collectives oldest first, the rows that differ marked.
  std::string mismatch_report(const std::vector<Descriptor>& current,
                              const std::vector<Descriptor>& histories) const {
    const int world = world_size();
    const size_t h = static_cast<size_t>(options_.history);
    std::vector<int> columns;
    std::vector<std::vector<int>> alike;  // [column] the other ranks making the same call
    for (int r = 0; r < world; ++r) {
      auto it = std::find_if(columns.begin(), columns.end(), [&](int c) {
        return current[static_cast<size_t>(c)].same_call(current[static_cast<size_t>(r)]);
      });
      if (it == columns.end()) {
        columns.push_back(r);
        alike.emplace_back();
      } else {
        alike[static_cast<size_t>(it - columns.begin())].push_back(r);
      }
    }
    std::string text = str("collective sequence mismatch at collective #", current[0].sequence, ":");
    for (size_t c = 0; c < columns.size(); ++c) {
      text += str(c == 0 ? " " : "; ", "rank ", columns[c]);
      for (int r : alike[c]) text += str(",", r);
      text += str(" called ", describe(current[static_cast<size_t>(columns[c])]));
    }
    text += str(". Last ", h, " collectives of each, oldest first:");
    auto slot = [&](size_t column, size_t i) -> const Descriptor& {
      return histories[static_cast<size_t>(columns[column]) * h + i];
    };
    std::vector<std::string> header(columns.size());
    size_t width = 0;
    for (size_t c = 0; c < columns.size(); ++c) {
      header[c] = str("rank ", columns[c]);
      for (int r : alike[c]) header[c] += str(",", r);
      width = std::max(width, header[c].size());
      for (size_t i = 0; i < h; ++i) width = std::max(width, describe(slot(c, i)).size());
    }
    auto add_line = [&](std::string line) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      text += str("\n  ", line);
    };
    std::string line = pad("#", 6);
    for (const std::string& cell : header) line += pad(cell, width + 2);
    add_line(line);
    for (size_t i = 0; i < h; ++i) {
      bool any = false;
      bool differs = false;
      int64_t sequence = -1;
      line.clear();
      for (size_t c = 0; c < columns.size(); ++c) {
        any = any || slot(c, i).kind >= 0;
        sequence = std::max(sequence, slot(c, i).sequence);
        differs = differs || !slot(c, i).same_call(slot(0, i));
        line += pad(describe(slot(c, i)), width + 2);
      }
      if (!any) continue;  // fewer collectives so far than the history holds
      add_line(pad(str(sequence), 6) + line + (differs ? "<-- differs" : ""));
    }
    return text;
  }

  // all_gather of `mine` (the same count on every rank) through the inner communicator: [world][count].
  std::vector<Descriptor> exchange(const std::vector<Descriptor>& mine, CommStream stream) {
    const int world = world_size();
    const int64_t words = static_cast<int64_t>(mine.size()) * kDescriptorWords;
    std::vector<Descriptor> all(mine.size() * static_cast<size_t>(world));
    if (cuda_device() < 0) {
      std::vector<Descriptor> in = mine;
      inner_->all_gather(Tensor(in.data(), {words}, DType::i64),
                         Tensor(all.data(), {words * world}, DType::i64), stream);
      return all;
    }
#ifdef ZT_WITH_CUDA
    const size_t block_bytes = mine.size() * sizeof(Descriptor);
    const size_t total = block_bytes * static_cast<size_t>(world);
    if (staging_.size() < total)
      staging_ = device_allocator(cuda_device())
                     .allocate(total, MemoryCategory::communication, "checked communicator descriptors");
    std::byte* own_block = staging_.data_as<std::byte>() + block_bytes * static_cast<size_t>(rank());
    const auto s = static_cast<cudaStream_t>(stream);
    ZT_CUDA_CHECK(cudaMemcpyAsync(own_block, mine.data(), block_bytes, cudaMemcpyHostToDevice, s));
    // The in-place form (input = own block of the output), which every backend supports.
    inner_->all_gather(Tensor(own_block, {words}, DType::i64, DeviceKind::cuda),
                       Tensor(staging_.data(), {words * world}, DType::i64, DeviceKind::cuda), stream);
    ZT_CUDA_CHECK(cudaMemcpyAsync(all.data(), staging_.data(), total, cudaMemcpyDeviceToHost, s));
    ZT_CUDA_CHECK(cudaStreamSynchronize(s));
    inner_->check_async_error();  // a watchdog abort also ends the sync above; say why
    return all;
#else
    ZT_FAIL("checked communicator: the inner communicator uses CUDA device ", cuda_device(),
            " but this build has no CUDA");
#endif
  }

  std::unique_ptr<Communicator> inner_;
  const CheckedCommunicatorOptions options_;
  const std::string backend_name_;
  int64_t sequence_ = 0;
  std::deque<Descriptor> history_;  // this rank's last options_.history descriptors, oldest first
  DeviceBuffer staging_;            // [world * descriptors] on the inner communicator's device
};

}  // namespace

std::unique_ptr<Communicator> make_checked_communicator(std::unique_ptr<Communicator> inner,
                                                        CheckedCommunicatorOptions options) {
  ZT_CHECK(inner != nullptr, "make_checked_communicator: no communicator given");
  return std::make_unique<CheckedCommunicator>(std::move(inner), options);
}

}  // namespace zt
