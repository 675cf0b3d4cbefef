// The CPU handlers built a second time, for AVX2 (CMake's jax_memops_cpu_avx2 library: cpp/*_cpu.cc with -mavx2), as
// a plain shared library beside the nanobind module. Why not a second copy inside the module: the inline functions of
// the shared headers and of the standard library would exist twice under one name, and the linker may keep the AVX2
// copy for the baseline code too (an illegal instruction on a CPU without AVX2, which no CI machine with it would
// show). Here every symbol but jm_cpu_handler_table is local (CMake's version script), and module.cc opens the
// library (RTLD_LOCAL) only where its cpu_supports("avx2") says this CPU runs it (jax_memops/_ext.py). No -mfma:
// without contraction into FMAs both builds give the same bits (tests/test_cpu_isa.py), 8 lanes where the baseline
// has 4.
#include "handlers.h"

namespace {

#define JM_CPU_ENTRY(target, name) {target, name##Cpu},
const JmCpuHandler kTable[] = {JM_TARGETS(JM_CPU_ENTRY)};
#undef JM_CPU_ENTRY

}  // namespace

extern "C" __attribute__((visibility("default"))) const JmCpuHandler* jm_cpu_handler_table(int* count) {
  *count = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  return kTable;
}
