// CUDA entry points of kernels/disentangled_attention.h, reached from kernels/cpu/disentangled_attention.cpp
// when the tensors are on the GPU. Plain C++ declarations (included from .cpp files). Dtype contract and
// workspace memory: see kernels/disentangled_attention.h. Queued on `stream` (the thread's current stream
// when reached from the tensor-level entry points).
#pragma once

#include <cuda_runtime.h>

#include "kernels/disentangled_attention.h"
#include "runtime/tensor.h"

namespace zt::kernels::gpu {

void disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                    const Tensor& pos_query, const Tensor& attention_mask,
                                    const DisentangledAttentionConfig& config, const Tensor& context,
                                    const Tensor& probs, cudaStream_t stream);

// Whether disentangled_attention_forward runs these tensors as one kernel (short_disentangled_attention.cu:
// 16-bit storage, heads of 64, L <= 128, 16-byte aligned, the tables' rows within each tile's window).
bool short_attention_forward_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                     const Tensor& pos_query, const Tensor& attention_mask,
                                     const DisentangledAttentionConfig& config, const Tensor& context,
                                     const Tensor& probs);

void disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                     const Tensor& pos_query, const Tensor& attention_mask,
                                     const Tensor& probs, const Tensor& dcontext,
                                     const DisentangledAttentionConfig& config, const Tensor& dq,
                                     const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                     const Tensor& dpos_query, cudaStream_t stream);

// The flash attention (kernels/disentangled_attention.h, flash_disentangled_attention.cuh): bf16/f16, head
// size 64, any L. flash_attention_unsupported returns why not (a phrase) or nullptr.
const char* flash_attention_unsupported(const Tensor& q, const DisentangledAttentionConfig& config);
void flash_disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& pos_key, const Tensor& pos_query,
                                          const Tensor& attention_mask,
                                          const DisentangledAttentionConfig& config, const Tensor& context,
                                          const Tensor& softmax_stats, cudaStream_t stream);
void flash_disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& pos_key, const Tensor& pos_query,
                                           const Tensor& attention_mask, const Tensor& context,
                                           const Tensor& softmax_stats, const Tensor& dcontext,
                                           const DisentangledAttentionConfig& config, const Tensor& dq,
                                           const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                           const Tensor& dpos_query, cudaStream_t stream);

}  // namespace zt::kernels::gpu
