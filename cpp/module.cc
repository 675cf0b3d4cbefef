// The one Python extension: a table of FFI handler capsules per platform, and what was built.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <dlfcn.h>
#endif

#include "handlers.h"

namespace nb = nanobind;

namespace {

using Handler = XLA_FFI_Error* (*)(XLA_FFI_CallFrame*);

nb::capsule capsule(Handler fn) { return nb::capsule(reinterpret_cast<void*>(fn)); }

struct Entry {
  const char* target;
  Handler cpu;
#ifdef JAX_MEMOPS_WITH_CUDA
  Handler cuda;
#endif
};

#ifdef JAX_MEMOPS_WITH_CUDA
#define JM_ENTRY(target, name) {target, name##Cpu, name##Cuda},
#else
#define JM_ENTRY(target, name) {target, name##Cpu},
#endif

const Entry kEntries[] = {JM_TARGETS(JM_ENTRY)};
#undef JM_ENTRY

}  // namespace

NB_MODULE(_jax_memops, m) {
  m.def(
      "registrations",
      [] {
        nb::dict cpu, cuda;
        for (const Entry& e : kEntries) {
          cpu[e.target] = capsule(e.cpu);
#ifdef JAX_MEMOPS_WITH_CUDA
          cuda[e.target] = capsule(e.cuda);
#endif
        }
        nb::dict table;
        table["cpu"] = cpu;
        table["cuda"] = cuda;
        return table;
      },
      "FFI handler capsules: {platform: {target name: capsule}}; 'cuda' is empty without CUDA.");
  m.def(
      "cpu_supports",
      [](const std::string& isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        __builtin_cpu_init();
        // CMake's flags for those builds: both take F16C, AVX-512's x86-64-v4's subsets. __builtin_cpu_supports also
        // asks whether the OS saves the registers (XGETBV), for AVX's and AVX-512's.
        const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
        if (isa == "avx2") return avx2;
        if (isa == "avx512") {
          return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl");
        }
#endif
        return false;
      },
      "Whether this CPU runs code built for `isa` ('avx2', 'avx512'): which build of the CPU handlers _ext.py\n"
      "registers.");
  m.def(
      "cpu_handlers_from",
      [](const std::string& path) {
        nb::dict cpu;
#if defined(__linux__)
        // RTLD_LOCAL: none of the library's symbols can stand in for another's. Never closed: XLA holds its handlers.
        void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) throw std::runtime_error("jax_memops: cannot load " + path + ": " + dlerror());
        const auto table = reinterpret_cast<JmCpuTableFn>(dlsym(lib, kJmCpuTableSymbol));
        if (table == nullptr) throw std::runtime_error("jax_memops: " + path + " has no " + kJmCpuTableSymbol);
        int n = 0;
        const JmCpuHandler* entries = table(&n);
        for (int i = 0; i < n; ++i) cpu[entries[i].target] = capsule(entries[i].handler);
#else
        throw std::runtime_error("jax_memops: a second build of the CPU handlers loads on Linux only, not " + path);
#endif
        return cpu;
      },
      "The CPU handler capsules {target name: capsule} of another build of them (build_info()'s\n"
      "cpu_avx2_library or cpu_avx512_library, beside this module), loaded from `path`: call it only where\n"
      "cpu_supports says that build runs.");
  m.def(
      "build_info",
      [] {
        nb::dict info;
        info["version"] = JAX_MEMOPS_VERSION;
        info["jaxlib_built_against"] = JAX_MEMOPS_JAXLIB_VERSION;
        info["ffi_api"] = std::to_string(XLA_FFI_API_MAJOR) + "." + std::to_string(XLA_FFI_API_MINOR);
#ifdef JAX_MEMOPS_WITH_CUDA
        info["cuda"] = true;
        info["cuda_archs"] = JAX_MEMOPS_CUDA_ARCHS;
        info["cuda_version"] = JAX_MEMOPS_CUDA_VERSION;
#else
        info["cuda"] = false;
        info["cuda_archs"] = "";
        info["cuda_version"] = "";
#endif
        // the file names, beside this module, of the CPU handlers' wider builds ("" where none was made)
#ifdef JAX_MEMOPS_CPU_AVX2_LIBRARY
        info["cpu_avx2_library"] = JAX_MEMOPS_CPU_AVX2_LIBRARY;
#else
        info["cpu_avx2_library"] = "";
#endif
#ifdef JAX_MEMOPS_CPU_AVX512_LIBRARY
        info["cpu_avx512_library"] = JAX_MEMOPS_CPU_AVX512_LIBRARY;
#else
        info["cpu_avx512_library"] = "";
#endif
        return info;
      },
      "How this module was built: versions, FFI API, CUDA and its architectures, the AVX2 and AVX-512 CPU\n"
      "libraries' files.");
}
