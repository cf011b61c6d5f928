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

// The fused forward (kernels/cuda/fused_disentangled_attention.cuh): the same contract and results as
// disentangled_attention_forward (P within the dtype's tolerance, the identical dropout keep pattern) with
// one kernel per (b, h, 32-query tile) and no score scratch in HBM. Supported: bf16/f16 storage, head size
// 16, 32, 64 or 128, 1 <= L <= 512, 16-byte aligned tensors, B * N <= 65535 and a bucketing whose 63
// consecutive relative positions reach at most 64 table rows. fused_attention_forward_unsupported returns
// why not (a phrase) or nullptr; fused_disentangled_attention_forward throws with that reason.
const char* fused_attention_forward_unsupported(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& pos_key, const Tensor& pos_query,
                                                const Tensor& context,
                                                const DisentangledAttentionConfig& config);
void fused_disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& pos_key, const Tensor& pos_query,
                                          const Tensor& attention_mask,
                                          const DisentangledAttentionConfig& config, const Tensor& context,
                                          const Tensor& probs, cudaStream_t stream);

// Whether disentangled_attention_forward routes supported shapes through the fused forward: the environment
// variable ZT_FUSED_ATTENTION, read once per process — "1" on; unset, empty or "0" off (the default until
// the fused kernel has been validated and timed on a GPU); anything else is an error naming the value.
bool fused_attention_forward_enabled();

// The fused backward (fused_disentangled_attention.cuh: a rows kernel for dQ and Gc, a keys kernel for dK, dV
// and Gp, the positional GEMMs unchanged), taken by disentangled_attention_backward when
// ZT_FUSED_ATTENTION_BACKWARD=1 (read once; same values as ZT_FUSED_ATTENTION; off by default until it has
// run on a GPU) and supported: the forward's conditions (with dcontext in place of context) and 16-byte
// aligned dq, dk, dv. Independent of the forward switch, so each can be A/B-tested alone.
bool fused_attention_backward_enabled();
// The backward through the fused kernels whatever the switch says; throws (with the reason) when unsupported.
void fused_disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& pos_key, const Tensor& pos_query,
                                           const Tensor& attention_mask, const Tensor& probs,
                                           const Tensor& dcontext, const DisentangledAttentionConfig& config,
                                           const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                           const Tensor& dpos_key, const Tensor& dpos_query,
                                           cudaStream_t stream);
const char* fused_attention_backward_unsupported(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& pos_key, const Tensor& pos_query,
                                                 const Tensor& dcontext, const Tensor& dq, const Tensor& dk,
                                                 const Tensor& dv, const DisentangledAttentionConfig& config);

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
