// libFuzzer target: the restricted pickle VM must throw zt::Error or return a state dict on any input.
#include <cstddef>
#include <cstdint>

#include "model/hf_readers.h"
#include "runtime/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    zt::read_pickled_state_dict({data, size}, "fuzz");
  } catch (const zt::Error&) {
  }
  return 0;
}
