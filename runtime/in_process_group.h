// The rendezvous shared by the in-process communicators (host tensors in communicator.cpp, device tensors
// in cuda/in_process_device_communicator.cu): ranks are threads of one process, and every collective is
// "post what you called -> rendezvous -> validate every post the same way -> ... -> rendezvous". Internal to
// runtime/; users go through runtime/communicator.h.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/communicator.h"

namespace zt::detail {

// What one rank passed to the collective it is in.
struct Post {
  CollectiveKind kind = CollectiveKind::barrier;
  DType dtype = DType::f32;
  const std::byte* input = nullptr;
  std::byte* output = nullptr;  // the device backend checks outputs against every rank's inputs
  int64_t input_numel = 0;
  int64_t output_numel = 0;
  int root = 0;
  std::string problem;  // this rank's own argument error, "" if none
};

// world_size ranks meeting at generation-counted rendezvous; abort and timeout wake every waiter.
class InProcessGroup {
 public:
  InProcessGroup(int world_size, InProcessGroupOptions options);

  int world_size() const { return world_size_; }
  // Valid between the rendezvous after post_and_wait and the next one.
  const Post& post(int rank) const { return posts_[static_cast<size_t>(rank)]; }

  // Publishes rank's post, then waits for every rank's.
  void post_and_wait(int rank, Post p);
  void wait(int rank);  // a rendezvous without a post
  void abort(int rank, std::string_view reason) noexcept;

  // Throws on every rank alike when any post has a problem or the posts disagree (call after the rendezvous
  // of post_and_wait: every rank sees the same posts, so no rank is left waiting for one that threw).
  void validate_posts() const;

 private:
  void abort_locked(int rank, std::string reason);
  void throw_if_aborted_locked(int rank) const;
  void wait_locked(std::unique_lock<std::mutex>& lock, int rank);

  const int world_size_;
  const InProcessGroupOptions options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Post> posts_;    // [world_size], written under the mutex before the first rendezvous
  std::vector<bool> arrived_;  // [world_size], who is in the current rendezvous (timeout messages)
  int arrived_count_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  int abort_rank_ = -1;
  std::string abort_reason_;
};

bool is_sum(CollectiveKind kind);
bool has_output(CollectiveKind kind);

}  // namespace zt::detail
