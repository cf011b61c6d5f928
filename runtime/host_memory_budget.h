// A cap on the host memory the trainer's host tier allocates (--host_memory_limit), checked before each
// allocation instead of by the kernel's OOM killer after it.
//
// Note [Host memory budget]
// With CPU offload the optimizer state lives in host memory; with the disk tier (issue 15) only what fits
// under --host_memory_limit stays there and the rest goes through swap files. The host tier charges every
// large host allocation it makes — pinned (page-locked: staging buffers, pinned state) or pageable — to one
// budget before making it. A charge that would exceed the cap is a zt::Error naming the allocation, its size,
// what is charged already (pinned and pageable) and the cap, so a run learns at start what does not fit,
// and the code sizing the tiers can ask fits() first. A Charge returns its bytes when destroyed (RAII, like
// the allocation it stands for). Thread-safe: the ranks of a process share one budget.
//
//   HostMemoryBudget budget(config.host_memory_limit);            // 0: no cap, bytes are still counted
//   HostMemoryBudget::Charge charge = budget.charge(bytes, HostMemoryKind::pinned, "rank 0 Adam m/v");
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

namespace zt {

enum class HostMemoryKind { pageable, pinned };
std::string_view host_memory_kind_name(HostMemoryKind kind);

class HostMemoryBudget {
 public:
  // Bytes charged against a budget until destroyed or released. Move-only.
  class Charge {
   public:
    Charge() = default;
    ~Charge() { release(); }
    Charge(Charge&& other) noexcept;
    Charge& operator=(Charge&& other) noexcept;
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;
    void release();
    size_t bytes() const { return bytes_; }

   private:
    friend class HostMemoryBudget;
    Charge(HostMemoryBudget* budget, size_t bytes, HostMemoryKind kind)
        : budget_(budget), bytes_(bytes), kind_(kind) {}
    HostMemoryBudget* budget_ = nullptr;
    size_t bytes_ = 0;
    HostMemoryKind kind_ = HostMemoryKind::pageable;
  };

  explicit HostMemoryBudget(size_t limit_bytes = 0);  // 0 = no cap
  // Every Charge must be gone first (a zt::Error would be thrown from a destructor otherwise: aborts).
  ~HostMemoryBudget();
  HostMemoryBudget(const HostMemoryBudget&) = delete;
  HostMemoryBudget& operator=(const HostMemoryBudget&) = delete;

  // Charges `bytes` of `kind` for the allocation `what`; throws zt::Error naming it when the cap would be
  // exceeded (Note [Host memory budget]).
  Charge charge(size_t bytes, HostMemoryKind kind, std::string_view what);
  // Whether charge(bytes) would succeed now.
  bool fits(size_t bytes) const;

  size_t limit() const { return limit_; }  // 0 = no cap
  size_t used() const;
  size_t used(HostMemoryKind kind) const;
  size_t peak() const;
  size_t available() const;  // limit - used; SIZE_MAX without a cap

 private:
  void give_back(size_t bytes, HostMemoryKind kind);

  const size_t limit_;
  mutable std::mutex mutex_;
  size_t pinned_ = 0;
  size_t pageable_ = 0;
  size_t peak_ = 0;
};

}  // namespace zt
