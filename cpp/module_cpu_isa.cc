// The CPU handlers built a second time, for AVX2 (CMake's _jax_memops_cpu_avx2: cpp/*_cpu.cc with -mavx2), as an
// extension of their own. Why a module and not a second copy inside _jax_memops: the inline functions of the shared
// headers and of the standard library would exist twice under one name, and the linker may keep the AVX2 copy for
// the baseline code too (an illegal instruction on a CPU without AVX2, which no CI machine with it would show).
// Here every symbol but the module's init is local to this shared object (CMake's version script), and _ext.py
// imports it only where module.cc's cpu_supports("avx2") says this CPU runs it. No -mfma: without contraction into
// FMAs the two builds give bitwise the same results (tests/test_cpu_isa.py), 8 lanes where the baseline has 4.
#include <nanobind/nanobind.h>

#include "handlers.h"

namespace nb = nanobind;

namespace {

using Handler = XLA_FFI_Error* (*)(XLA_FFI_CallFrame*);

struct Entry {
  const char* target;
  Handler cpu;
};

#define JM_CPU_ENTRY(target, name) {target, name##Cpu},
const Entry kEntries[] = {JM_TARGETS(JM_CPU_ENTRY)};
#undef JM_CPU_ENTRY

}  // namespace

NB_MODULE(_jax_memops_cpu_avx2, m) {
  m.def(
      "registrations",
      [] {
        nb::dict cpu;
        for (const Entry& e : kEntries) cpu[e.target] = nb::capsule(reinterpret_cast<void*>(e.cpu));
        return cpu;
      },
      "The AVX2 build's CPU handler capsules: {target name: capsule}.");
}
