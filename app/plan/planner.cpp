#include "app/plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt::plan {

PlanChoice choose_plan(const PlanRequest& request, const std::vector<Plan>& plans, const MemoryOf& memory_of,
                       const CostOf& cost_of) {
  PlanChoice choice;
  choice.ranked.reserve(plans.size());
  for (const Plan& p : plans) {
    Candidate c{.plan = p, .memory = memory_of(p), .cost = cost_of(p)};
    c.fits_device = static_cast<double>(c.memory.device) <= request.device_budget();
    c.fits_host = request.host_cap == 0 || static_cast<double>(c.memory.host) <= request.host_budget();
    choice.ranked.push_back(c);
  }
  // Stable: equal time and memory keep the enumeration's order.
  std::stable_sort(choice.ranked.begin(), choice.ranked.end(), [](const Candidate& a, const Candidate& b) {
    if (a.predicted_ms() != b.predicted_ms()) return a.predicted_ms() < b.predicted_ms();
    return a.memory.device < b.memory.device;
  });
  for (size_t i = 0; i < choice.ranked.size(); ++i) {
    if (choice.ranked[i].fits()) {
      choice.chosen = i;
      break;
    }
  }
  return choice;
}

std::string rejection_reason(const Candidate& c, const PlanRequest& request) {
  std::ostringstream out;
  const char* sep = "";
  if (!c.fits_device) {
    out << "device " << format_memory_size(c.memory.device) << " > budget "
        << format_memory_size(static_cast<size_t>(request.device_budget()));
    sep = "; ";
  }
  if (!c.fits_host) {
    out << sep << "host " << format_memory_size(c.memory.host) << " > budget "
        << format_memory_size(static_cast<size_t>(request.host_budget()));
    sep = "; ";
  }
  return out.str();
}

namespace {

std::string row(const Candidate& c) {
  char line[256];
  std::snprintf(line, sizeof line, "%-56s %9.1f ms  device %10s  host %10s", c.plan.describe().c_str(),
                c.predicted_ms(), format_memory_size(c.memory.device).c_str(),
                format_memory_size(c.memory.host).c_str());
  return line;
}

std::string header(const PlanRequest& r) {
  std::ostringstream out;
  out << "auto plan: global batch " << r.global_batch << " (micro-batch x accumulation x world size "
      << r.world_size << "), device cap " << format_memory_size(r.device_cap) << " per rank (budget "
      << format_memory_size(static_cast<size_t>(r.device_budget())) << ", "
      << format_memory_size(r.device_headroom) << " headroom), host "
      << (r.host_cap == 0 ? std::string("not checked") : format_memory_size(r.host_cap)) << "\n";
  return out.str();
}

// How far over its budget a plan is: the larger ratio of bytes to budget (device, host).
double excess(const Candidate& c, const PlanRequest& r) {
  double e = static_cast<double>(c.memory.device) / r.device_budget();
  if (r.host_cap > 0) e = std::max(e, static_cast<double>(c.memory.host) / r.host_budget());
  return e;
}

}  // namespace

std::string describe_choice(const PlanChoice& choice, const PlanRequest& request, int next_best,
                            int max_rejected) {
  ZT_CHECK(choice.chosen.has_value(), "describe_choice: nothing fits");
  std::ostringstream out;
  out << header(request);
  const size_t chosen = *choice.chosen;
  out << "  chosen:  " << row(choice.ranked[chosen]) << "\n";
  int shown = 0;
  for (size_t i = chosen + 1; i < choice.ranked.size() && shown < next_best; ++i) {
    if (!choice.ranked[i].fits()) continue;
    out << "  next:    " << row(choice.ranked[i]) << "\n";
    ++shown;
  }
  if (chosen > 0) out << "  faster plans, rejected:\n";
  for (size_t i = 0; i < chosen; ++i) {
    if (static_cast<int>(i) == max_rejected) {
      out << "    ... and " << chosen - i << " more\n";
      break;
    }
    out << "    " << row(choice.ranked[i]) << ": " << rejection_reason(choice.ranked[i], request) << "\n";
  }
  out << "  (predicted by the cost model of app/plan/cost_model.h; the plan changes how the step is "
         "computed, "
         "not what)\n";
  return out.str();
}

std::string describe_no_fit(const PlanChoice& choice, const PlanRequest& request, int closest) {
  std::vector<const Candidate*> closest_first;
  for (const Candidate& c : choice.ranked) closest_first.push_back(&c);
  // Least over budget first; among equals (the host's excess is the same for every offload plan) the one
  // with the least device excess.
  std::stable_sort(closest_first.begin(), closest_first.end(), [&](const Candidate* a, const Candidate* b) {
    if (excess(*a, request) != excess(*b, request)) return excess(*a, request) < excess(*b, request);
    return a->memory.device < b->memory.device;
  });
  std::ostringstream out;
  out << "--auto_plan: no plan fits. " << header(request)
      << "  the closest plans and what would make them fit:\n";
  // The cap whose budget holds the bytes: the budget's share of the cap scaled up (for a headroom that grows
  // with the cap, at most 1 %, a little more than needed).
  const double keep = request.device_budget() / static_cast<double>(request.device_cap);
  const double host_keep = 1.0 - request.host_headroom;
  for (int i = 0; i < closest && i < static_cast<int>(closest_first.size()); ++i) {
    const Candidate& c = *closest_first[i];
    out << "    " << row(c) << ": " << rejection_reason(c, request) << "; fits ";
    const char* sep = "";
    if (!c.fits_device) {
      out << "a device cap of "
          << format_memory_size(static_cast<size_t>(static_cast<double>(c.memory.device) / keep) + 1);
      sep = " and ";
    }
    if (!c.fits_host)
      out << sep << "host memory of "
          << format_memory_size(static_cast<size_t>(static_cast<double>(c.memory.host) / host_keep) + 1);
    out << "\n";
  }
  bool host_short = false;
  for (const Candidate* c : closest_first) host_short = host_short || (c->fits_device && !c->fits_host);
  if (host_short && !request.allow_nvme)
    out << "  with an nvme_path (offload_optimizer device nvme), the optimizer state could go to disk\n";
  if (request.eval_batch > 0)
    out << "  the activations are planned for the larger of the micro-batch and --per_device_eval_batch_size "
        << request.eval_batch << "\n";
  out << "  or lower the global batch or max_length, or add ranks";
  return out.str();
}

}  // namespace zt::plan
