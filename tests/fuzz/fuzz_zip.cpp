// libFuzzer target: the ZIP reader and the whole torch checkpoint path (zip → data.pkl → storages → views)
// must throw zt::Error or succeed on any input; returned tensors are converted to prove their views are
// inside the input.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/hf_readers.h"
#include "runtime/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    zt::read_zip_entries({data, size}, "fuzz");
  } catch (const zt::Error&) {
  }
  try {
    std::vector<zt::CheckpointTensor> tensors = zt::read_torch_checkpoint({data, size}, "fuzz");
    for (const zt::CheckpointTensor& t : tensors) {
      if (!zt::stored_dtype_is_parameter(t.dtype) || t.numel() > (1 << 16)) continue;
      std::vector<float> out(static_cast<size_t>(t.numel()));
      zt::convert_to(t, zt::Tensor(out.data(), {t.numel()}, zt::DType::f32));
    }
  } catch (const zt::Error&) {
  }
  return 0;
}
