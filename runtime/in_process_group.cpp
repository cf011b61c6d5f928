#include "runtime/in_process_group.h"

#include <algorithm>
#include <utility>

#include "runtime/check.h"

namespace zt::detail {

bool is_sum(CollectiveKind kind) {
  return kind == CollectiveKind::all_reduce_sum || kind == CollectiveKind::reduce_scatter_sum;
}

bool has_output(CollectiveKind kind) {
  return kind == CollectiveKind::reduce_scatter_sum || kind == CollectiveKind::all_gather;
}

InProcessGroup::InProcessGroup(int world_size, InProcessGroupOptions options)
    : world_size_(world_size),
      options_(options),
      posts_(static_cast<size_t>(world_size)),
      arrived_(static_cast<size_t>(world_size), false) {}

void InProcessGroup::post_and_wait(int rank, Post p) {
  std::unique_lock lock(mutex_);
  throw_if_aborted_locked(rank);
  posts_[static_cast<size_t>(rank)] = std::move(p);
  wait_locked(lock, rank);
}

void InProcessGroup::wait(int rank) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, rank);
}

void InProcessGroup::abort(int rank, std::string_view reason) noexcept {
  try {
    std::lock_guard lock(mutex_);
    abort_locked(rank, std::string(reason));
  } catch (...) {  // std::string allocation failed; the flag alone still wakes the waiters
    aborted_ = true;
  }
  cv_.notify_all();
}

void InProcessGroup::validate_posts() const {
  for (int r = 0; r < world_size_; ++r)
    if (!post(r).problem.empty()) ZT_FAIL(post(r).problem);
  const Post& first = post(0);
  for (int r = 1; r < world_size_; ++r) {
    const Post& p = post(r);
    const std::string_view op = collective_name(p.kind);
    ZT_CHECK(p.kind == first.kind, "collective mismatch: rank 0 called ", collective_name(first.kind),
             " but rank ", r, " called ", op);
    ZT_CHECK(p.dtype == first.dtype, op, ": rank 0 passes ", dtype_name(first.dtype), " but rank ", r,
             " passes ", dtype_name(p.dtype));
    ZT_CHECK(p.input_numel == first.input_numel && p.output_numel == first.output_numel, op,
             ": size mismatch: rank 0 passes input ", first.input_numel, " / output ", first.output_numel,
             " elements but rank ", r, " passes input ", p.input_numel, " / output ", p.output_numel);
    ZT_CHECK(p.root == first.root, op, ": rank 0 broadcasts from root ", first.root, " but rank ", r,
             " from root ", p.root);
  }
}

void InProcessGroup::abort_locked(int rank, std::string reason) {
  if (aborted_) return;  // the first cause is the one worth reporting
  aborted_ = true;
  abort_rank_ = rank;
  abort_reason_ = std::move(reason);
}

void InProcessGroup::throw_if_aborted_locked(int rank) const {
  if (aborted_)
    ZT_FAIL("in-process communicator (rank ", rank, "): group aborted by rank ", abort_rank_, ": ",
            abort_reason_);
}

// A generation-counted rendezvous: the last rank to arrive opens the next generation.
void InProcessGroup::wait_locked(std::unique_lock<std::mutex>& lock, int rank) {
  throw_if_aborted_locked(rank);
  const uint64_t generation = generation_;
  arrived_[static_cast<size_t>(rank)] = true;
  if (++arrived_count_ == world_size_) {
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++generation_;
    cv_.notify_all();
    return;
  }
  auto done = [&] { return generation_ != generation || aborted_; };
  if (options_.timeout.count() > 0) {
    if (!cv_.wait_for(lock, options_.timeout, done)) {
      std::string missing;
      for (int r = 0; r < world_size_; ++r)
        if (!arrived_[static_cast<size_t>(r)]) missing += str(missing.empty() ? "" : ", ", r);
      abort_locked(rank,
                   str("timed out after ", options_.timeout.count(), " ms waiting for rank(s) ", missing,
                       " (post: ", collective_name(posts_[static_cast<size_t>(rank)].kind), ")"));
      cv_.notify_all();
    }
  } else {
    cv_.wait(lock, done);
  }
  // A rank aborted after everyone arrived may still finish this rendezvous; only a waiter left behind by the
  // abort throws here (any later rendezvous throws on entry).
  if (generation_ == generation) throw_if_aborted_locked(rank);
}

}  // namespace zt::detail
