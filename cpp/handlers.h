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
//   jax_memops_gelu_fwd       x, scale, bias                     y                         scale_value:f32, bias_value:f32
//   jax_memops_gelu_bwd       x, scale, bias, dy                 dx, dscale, dbias, ws     scale_value:f32, bias_value:f32
//   jax_memops_scale          x                                  y = x * value             value:f32
//   jax_memops_bias           x                                  y = x + value             value:f32
//   jax_memops_gelu           x                                  y = gelu(x)               value:f32 (unused)
//
// x, y, dy, dx: row tensors (..., C) of one dtype (f32, bf16 or f16). scale/bias: params, dscale/dbias:
// param gradients, mean/rstd: row statistics — see ffi_common.h. For gelu, an absent scale/bias array
// means the scalar attribute is used instead. workspace (ws): f32 scratch (S, G*P, C) for the
// parameter-gradient partials of the CUDA backward kernels, or (0,); see WorkspaceView in
// ffi_common.h. Its contents are undefined on entry and exit; the CPU handlers ignore it.
#pragma once

#include "xla/ffi/api/c_api.h"

#define JM_DECLARE_HANDLER(name) extern "C" XLA_FFI_Error* name(XLA_FFI_CallFrame* call_frame)

JM_DECLARE_HANDLER(JmSoftmaxFwdCpu);
JM_DECLARE_HANDLER(JmSoftmaxBwdCpu);
JM_DECLARE_HANDLER(JmLayerNormFwdCpu);
JM_DECLARE_HANDLER(JmLayerNormBwdCpu);
JM_DECLARE_HANDLER(JmRmsNormFwdCpu);
JM_DECLARE_HANDLER(JmRmsNormBwdCpu);
JM_DECLARE_HANDLER(JmGeluFwdCpu);
JM_DECLARE_HANDLER(JmGeluBwdCpu);
JM_DECLARE_HANDLER(JmScaleCpu);
JM_DECLARE_HANDLER(JmBiasCpu);
JM_DECLARE_HANDLER(JmGeluOnlyCpu);
JM_DECLARE_HANDLER(JmCopyCpu);

#ifdef JAX_MEMOPS_WITH_CUDA
JM_DECLARE_HANDLER(JmSoftmaxFwdCuda);
JM_DECLARE_HANDLER(JmSoftmaxBwdCuda);
JM_DECLARE_HANDLER(JmLayerNormFwdCuda);
JM_DECLARE_HANDLER(JmLayerNormBwdCuda);
JM_DECLARE_HANDLER(JmRmsNormFwdCuda);
JM_DECLARE_HANDLER(JmRmsNormBwdCuda);
JM_DECLARE_HANDLER(JmGeluFwdCuda);
JM_DECLARE_HANDLER(JmGeluBwdCuda);
JM_DECLARE_HANDLER(JmScaleCuda);
JM_DECLARE_HANDLER(JmBiasCuda);
JM_DECLARE_HANDLER(JmGeluOnlyCuda);
JM_DECLARE_HANDLER(JmCopyCuda);
#endif
