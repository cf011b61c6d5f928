// Runs one std::thread per rank of a communicator group, for the communicator tests. The harness gives up
// after a deadline (aborting the group to wake the ranks) so a broken backend fails instead of hanging CI.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"

namespace zt::test {

using Comms = std::vector<std::unique_ptr<Communicator>>;

// Runs fn(*comms[r]) on thread r; returns each rank's exception message ("" when it returned normally).
std::vector<std::string> run_ranks(Comms& comms, const std::function<void(Communicator&)>& fn,
                                   std::chrono::seconds deadline = std::chrono::seconds(30));

void expect_all_succeeded(const std::vector<std::string>& errors);

}  // namespace zt::test
