// train_mrpc: fine-tunes DeBERTa-v2 on GLUE MRPC. (Being built: this placeholder prints the devices.)
#include <cstdio>

#include "runtime/device.h"

int main() {
  std::printf("zerotrain train_mrpc: %s\n", zt::describe_devices().c_str());
  return 0;
}
