#include "runtime/host_memory_budget.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt {

std::string_view host_memory_kind_name(HostMemoryKind kind) {
  return kind == HostMemoryKind::pinned ? "pinned" : "pageable";
}

HostMemoryBudget::Charge::Charge(Charge&& other) noexcept
    : budget_(other.budget_), bytes_(other.bytes_), kind_(other.kind_) {
  other.budget_ = nullptr;
  other.bytes_ = 0;
}

HostMemoryBudget::Charge& HostMemoryBudget::Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    kind_ = other.kind_;
    other.budget_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void HostMemoryBudget::Charge::release() {
  if (budget_ != nullptr) budget_->give_back(bytes_, kind_);
  budget_ = nullptr;
  bytes_ = 0;
}

HostMemoryBudget::HostMemoryBudget(size_t limit_bytes) : limit_(limit_bytes) {}

HostMemoryBudget::~HostMemoryBudget() {
  // A Charge outliving its budget would write into freed memory when it is released: a programming error
  // that must not pass quietly, and a destructor cannot throw.
  if (pinned_ + pageable_ != 0) {
    std::fprintf(stderr, "zerotrain: HostMemoryBudget destroyed with %zu bytes still charged\n",
                 pinned_ + pageable_);
    std::abort();
  }
}

HostMemoryBudget::Charge HostMemoryBudget::charge(size_t bytes, HostMemoryKind kind, std::string_view what) {
  std::lock_guard lock(mutex_);
  const size_t used = pinned_ + pageable_;
  ZT_CHECK(limit_ == 0 || (bytes <= limit_ && used <= limit_ - bytes), "host memory limit exceeded: ", what,
           " needs ", format_memory_size(bytes), " (", host_memory_kind_name(kind), "), and ",
           format_memory_size(used), " is in use (", format_memory_size(pinned_), " pinned, ",
           format_memory_size(pageable_), " pageable) of the --host_memory_limit ",
           format_memory_size(limit_));
  (kind == HostMemoryKind::pinned ? pinned_ : pageable_) += bytes;
  peak_ = std::max(peak_, pinned_ + pageable_);
  return Charge(this, bytes, kind);
}

bool HostMemoryBudget::fits(size_t bytes) const {
  std::lock_guard lock(mutex_);
  const size_t used = pinned_ + pageable_;
  return limit_ == 0 || (bytes <= limit_ && used <= limit_ - bytes);
}

size_t HostMemoryBudget::used() const {
  std::lock_guard lock(mutex_);
  return pinned_ + pageable_;
}

size_t HostMemoryBudget::used(HostMemoryKind kind) const {
  std::lock_guard lock(mutex_);
  return kind == HostMemoryKind::pinned ? pinned_ : pageable_;
}

size_t HostMemoryBudget::peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

size_t HostMemoryBudget::available() const {
  std::lock_guard lock(mutex_);
  return limit_ == 0 ? SIZE_MAX : limit_ - (pinned_ + pageable_);
}

void HostMemoryBudget::give_back(size_t bytes, HostMemoryKind kind) {
  std::lock_guard lock(mutex_);
  (kind == HostMemoryKind::pinned ? pinned_ : pageable_) -= bytes;
}

}  // namespace zt
