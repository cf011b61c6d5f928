#include "optim/swap/swap_pipeline.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/check.h"

namespace zt::swap {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Every ticket of the pass, waited for (without throwing) when the pass ends early, so that no transfer
// outlives the pass's use of the buffers.
class TicketsInFlight {
 public:
  explicit TicketsInFlight(size_t buffers) : reads_(buffers), writes_(buffers) {}
  ~TicketsInFlight() {
    for (const IoTicket& t : reads_) t.wait_quietly();
    for (const IoTicket& t : writes_) t.wait_quietly();
  }
  IoTicket& read(size_t buffer) { return reads_[buffer]; }
  IoTicket& write(size_t buffer) { return writes_[buffer]; }

 private:
  std::vector<IoTicket> reads_;
  std::vector<IoTicket> writes_;
};

}  // namespace

int swap_pipeline_min_buffers(const SwapPipelineOptions& options) {
  return 1 + (options.read && options.pipeline_read ? 1 : 0) +
         (options.write && options.pipeline_write ? 1 : 0);
}

void run_swap_pipeline(SwapStore& store, std::span<AlignedBuffer> buffers, int64_t first, int64_t count,
                       const SwapPipelineOptions& options,
                       const std::function<void(int64_t record, std::span<std::byte> bytes)>& update,
                       SwapPipelineStats* stats) {
  const auto buffer_count = static_cast<int64_t>(buffers.size());
  const int needed = swap_pipeline_min_buffers(options);
  ZT_CHECK(buffer_count >= needed, "the swap pipeline over ", store.path(), " needs at least ", needed,
           " buffers (", options.pipeline_read ? "read ahead, " : "",
           options.pipeline_write ? "write behind, " : "", "one being updated), got ", buffer_count);
  ZT_CHECK(first >= 0 && count >= 0 && first + count <= store.record_count(), "swap records [", first, ", ",
           first + count, ") out of range [0, ", store.record_count(), ") of ", store.path());
  // Any buffer may get any record of the pass: each must hold the largest.
  int64_t largest = first;
  for (int64_t k = first; k < first + count; ++k) {
    if (store.transfer_bytes(k) > store.transfer_bytes(largest)) largest = k;
  }
  const size_t needed_bytes = count > 0 ? store.transfer_bytes(largest) : 0;
  for (const AlignedBuffer& b : buffers) {
    ZT_CHECK(b.size() >= needed_bytes, "swap buffer of ", b.size(), " bytes is smaller than record ", largest,
             " of ", store.path(), " (", needed_bytes, " bytes)");
  }

  const bool writes_behind = options.write && options.pipeline_write;
  const int64_t lookahead = !(options.read && options.pipeline_read)
                                ? 0
                                : std::max<int64_t>(1, buffer_count - (writes_behind ? 2 : 1));
  SwapPipelineStats local;
  SwapPipelineStats& s = stats != nullptr ? *stats : local;
  const Clock::time_point pass_start = Clock::now();
  TicketsInFlight tickets(buffers.size());

  auto buffer_of = [&](int64_t j) { return static_cast<size_t>(j % buffer_count); };
  auto wait = [&](IoTicket& ticket) {
    const Clock::time_point start = Clock::now();
    IoTicket done = std::exchange(ticket, IoTicket());
    done.wait();
    s.io_wait_seconds += seconds_since(start);
  };
  // Record first + j into its buffer, once the write that last used the buffer is done.
  auto start_read = [&](int64_t j) {
    const size_t b = buffer_of(j);
    wait(tickets.write(b));
    tickets.read(b) = store.read(first + j, buffers[b].bytes());
    s.bytes_read += store.transfer_bytes(first + j);
  };

  if (options.read) {
    for (int64_t j = 0; j < std::min(lookahead, count); ++j) start_read(j);
  }
  for (int64_t k = 0; k < count; ++k) {
    const size_t b = buffer_of(k);
    if (options.read) {
      if (lookahead == 0) start_read(k);
      wait(tickets.read(b));
      if (lookahead > 0 && k + lookahead < count) start_read(k + lookahead);
    } else {
      wait(tickets.write(b));
    }
    const Clock::time_point update_start = Clock::now();
    update(first + k, buffers[b].bytes().first(store.record_bytes(first + k)));
    s.update_seconds += seconds_since(update_start);
    if (options.write) {
      tickets.write(b) = store.write(first + k, buffers[b].bytes());
      s.bytes_written += store.transfer_bytes(first + k);
      if (!options.pipeline_write) wait(tickets.write(b));
    }
  }
  for (int64_t b = 0; b < buffer_count; ++b) wait(tickets.write(static_cast<size_t>(b)));
  s.total_seconds += seconds_since(pass_start);
}

}  // namespace zt::swap
