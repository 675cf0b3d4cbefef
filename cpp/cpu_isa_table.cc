// The CPU handlers built again for a wider instruction set (CMake's jax_memops_cpu_avx2 and jax_memops_cpu_avx512
// libraries: cpp/*_cpu.cc with -mavx2, or with AVX-512's F, BW, CD, DQ and VL), each a plain shared library beside the
// nanobind module. Why not a second copy inside the module: the inline functions of the shared headers and of the
// standard library would exist twice under one name, and the linker may keep the wider copy for the baseline code
// too (an illegal instruction on a CPU without it, which no CI machine with it would show). Here every symbol but
// jm_cpu_handler_table is local (CMake's version script), and module.cc opens a library (RTLD_LOCAL) only where its
// cpu_supports says this CPU runs it (jax_memops/_ext.py). No contraction into FMAs (-ffp-contract=off; AVX-512F has
// them): every build gives the same bits (tests/test_cpu_isa.py), in 8 or 16 lanes where the baseline has 4.
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
