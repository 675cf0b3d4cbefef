// Every FFI handler this library exports, for module.cc to wrap into capsules. The CPU handlers
// (cpp/*_cpu.cc) and the CUDA handlers (cpp/*.cu) have the same signature per op:
//
//   target                    args (in order)                    results                   attrs
//   jax_memops_softmax_fwd    x                                  y                         algorithm:i64
//   jax_memops_softmax_bwd    y, dy                              dx
//   jax_memops_layer_norm_fwd x, scale, bias                     y, mean, rstd             epsilon:f32
//   jax_memops_layer_norm_bwd x, scale, mean, rstd, dy           dx, dscale, dbias, workspace
//   jax_memops_rms_norm_fwd   x, scale                           y, rstd                   epsilon:f32
//   jax_memops_rms_norm_bwd   x, scale, rstd, dy                 dx, dscale, workspace
//   jax_memops_layer_norm_jvp x, scale, bias, tx, tscale, tbias  y, ty                     epsilon:f32
//   jax_memops_rms_norm_jvp   x, scale, tx, tscale               y, ty                     epsilon:f32
//   jax_memops_gelu_fwd       x, scale, bias                     y                         scale_value:f32, bias_value:f32
//   jax_memops_gelu_bwd       x, scale, bias, dy                 dx, dscale, dbias, ws     scale_value:f32, bias_value:f32
//   jax_memops_gelu_jvp       x, scale, bias, tx, tscale, tbias  y, ty                     scale_value, bias_value: f32
//   jax_memops_scale          x                                  y = x * value             value:f32
//   jax_memops_bias           x                                  y = x + value             value:f32
//   jax_memops_gelu           x                                  y = gelu(x)               value:f32 (unused)
//
// The *_jvp targets are forward mode's: an op's value and tangent (tx, tscale, tbias: the tangents of x, scale, bias;
// an absent tangent parameter is zero) in one pass.
// x, y, dy, dx: row tensors (..., C) of one dtype (f32, bf16 or f16). scale/bias: params, dscale/dbias:
// param gradients, mean/rstd: row statistics — see ffi_common.h. For gelu, an absent scale/bias array
// means the scalar attribute is used instead. workspace (ws): f32 scratch (S, G*P, C) for the
// parameter-gradient partials of the backward kernels, or (0,); see PartialsView in ffi_common.h (the CPU
// handlers use its partial rows too: cpu_grad_sums.h). Its contents are undefined on entry and exit.
#pragma once

#include "xla/ffi/api/c_api.h"

// Every target and its handlers' name stem (JmSoftmaxFwd: JmSoftmaxFwdCpu, JmSoftmaxFwdCuda), the one list the
// declarations below and the capsule tables (module.cc, cpu_isa_table.cc) are made from.
#define JM_TARGETS(X)                            \
  X("jax_memops_softmax_fwd", JmSoftmaxFwd)       \
  X("jax_memops_softmax_bwd", JmSoftmaxBwd)       \
  X("jax_memops_layer_norm_fwd", JmLayerNormFwd)  \
  X("jax_memops_layer_norm_bwd", JmLayerNormBwd)  \
  X("jax_memops_rms_norm_fwd", JmRmsNormFwd)      \
  X("jax_memops_rms_norm_bwd", JmRmsNormBwd)      \
  X("jax_memops_layer_norm_jvp", JmLayerNormJvp)  \
  X("jax_memops_rms_norm_jvp", JmRmsNormJvp)      \
  X("jax_memops_gelu_fwd", JmGeluFwd)             \
  X("jax_memops_gelu_bwd", JmGeluBwd)             \
  X("jax_memops_gelu_jvp", JmGeluJvp)             \
  X("jax_memops_scale", JmScale)                  \
  X("jax_memops_bias", JmBias)                    \
  X("jax_memops_gelu", JmGeluOnly)                \
  X("jax_memops_copy", JmCopy)

#define JM_DECLARE_HANDLER(name) extern "C" XLA_FFI_Error* name(XLA_FFI_CallFrame* call_frame)

#define JM_DECLARE_CPU(target, name) JM_DECLARE_HANDLER(name##Cpu);
JM_TARGETS(JM_DECLARE_CPU)
#undef JM_DECLARE_CPU

// A CPU handler by target: the table that the AVX2 build of the CPU handlers (cpu_isa_table.cc) exports as
// kJmCpuTableSymbol, a function of this type, for module.cc's cpu_handlers_from.
struct JmCpuHandler {
  const char* target;
  XLA_FFI_Error* (*handler)(XLA_FFI_CallFrame*);
};
using JmCpuTableFn = const JmCpuHandler* (*)(int* count);
inline constexpr const char kJmCpuTableSymbol[] = "jm_cpu_handler_table";

#ifdef JAX_MEMOPS_WITH_CUDA
#define JM_DECLARE_CUDA(target, name) JM_DECLARE_HANDLER(name##Cuda);
JM_TARGETS(JM_DECLARE_CUDA)
#undef JM_DECLARE_CUDA
#endif
