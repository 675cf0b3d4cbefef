// The softmax forward's long rows inside one process (issue 4: C = 50257 / 131072 at 78-86% of the copy; the method:
// inproc_ab.cuh): the handler's own choice (softmax_fwd.cu included whole: launch_fwd_v3, the default version, v79: v77
// with the f32 clusters on the register kernels; v77: v75 with the f32 clusters at twice the rule's k; v75: v74 with
// f32 rows by tickets; v74: v50 with v14's rows on a full grid; v50: v49's prefetch at L2's evict_last priority)
// against v77, v78, v75, v76, v74, v50, v72, v73, v27 (no prefetch into L2), v49, the bulk-copy cluster alone under
// other plans than the rule's (v50's calls: cluster size k, CTAs of 256 / 512 / 1024 threads, 75 or 100% of each CTA's
// next share prefetched into L2, at L2's evict_last priority or not, two buffers prefetching the row after next), v14's
// two-pass kernel and three copies of the same bytes. (v36's pipelined two-pass kernel, v49's prefetch sizes:
// RESULTS.md and git history; v51's prefetches 2-3 rows ahead and v14's kernel prefetching its next row: RESULTS.md,
// branch v51-depth.) Per variant: GB/s (x read, y written), its ratio to the default (median of the per-sample ratios);
// the default twice (A/A). Every output checked against float64 on sampled rows, NaN poured into the outputs first.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/softmax_long_ab.cu \
//        cpp/softmax_ladder.cu -o /tmp/softmax_long_ab && /tmp/softmax_long_ab [f32:C | bf16:C ...]
// AB_VARIANTS=v27,v49 (name fragments) times the default and those variants alone (the copies always);
// AB_ELEMS_LOG2=28 (20..30; inproc_ab.cuh) runs tensors of 2^28 elements instead of 2^26; AB_SPIN_US=50 keeps the host's
// launch path out of the timed intervals (inproc_ab.cuh spin_ns); AB_BURST=8 times 8 launches back to back per sample.
// Built with -DJM_TRACE_EXITS, AB_TRACE=1 also traces each CTA's start and exit (trace_exits below).
#include <algorithm>
#include <string_view>

#include "softmax_ab_common.cuh"
#include "softmax_fwd.cu"

namespace {

namespace smx = jm::cuda::smx;
using inproc::kElems;
using inproc::kSamples;
using inproc::kWarmup;

#ifdef JM_TRACE_EXITS
// AB_TRACE=1 (a build with -DJM_TRACE_EXITS): one more launch of each timed bulk-copy or L2 two-pass variant with each
// CTA's start, exit and SM recorded (softmax_rows.cuh's trace_exit): the span from the first start to the last exit,
// the percentiles of the SMs' last exits as a share of it, and the SM time left idle after them (mean over the SMs of
// (last exit - the SM's last exit) / span: what a grid whose SMs all finished together would not waste); for the
// bulk-copy kernels also when their CTAs started, when their first rows' shares landed, their next copies went out
// (register kernels), their blocks and clusters merged and their outputs went out, and how long their last rows took
// from their shares' landing to the exit (the ramp and the drain).
template <typename Kernels, typename T>
void trace_exits(const Kernels& ks, const std::vector<size_t>& timed, const T* x, const std::vector<T*>& ys) {
  constexpr int kSlots = smx::kTraceSlots, kS = smx::kTraceStride;
  unsigned long long* d = nullptr;
  CK(cudaMalloc(&d, kS * kSlots * sizeof(unsigned long long)));
  CK(cudaMemcpyToSymbol(smx::g_trace_exits, &d, sizeof(d)));
  std::printf("\n| variant (traced launch) | CTAs | SMs | span us | SMs' last exits at p0 / p10 / p50 / p90 "
              "(%% of span) | SM time idle after them (%%) |\n|---|---|---|---|---|---|\n");
  std::vector<unsigned long long> h(kS * kSlots);
  std::string ramp;  // the bulk-copy kernels' first rows and last rows (softmax_rows.cuh trace_exit's slots 3..8)
  for (const size_t i : timed) {
    CK(cudaMemset(d, 0, h.size() * sizeof(h[0])));
    ks[i].launch(x, ys[i]);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), d, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> last(1024, 0);  // per SM id
    unsigned long long t0 = ~0ull, t1 = 0;
    int ctas = 0;
    for (int b = 0; b < kSlots; ++b) {
      if (h[kS * b] == 0) continue;
      ++ctas;
      t0 = std::min(t0, h[kS * b]);
      t1 = std::max(t1, h[kS * b + 1]);
      unsigned long long& l = last[std::min<unsigned long long>(h[kS * b + 2], 1023)];
      l = std::max(l, h[kS * b + 1]);
    }
    // µs from the grid's first start to each CTA's milestone `slot` (or, slot 6, from its last share's landing to its
    // exit): p10 / p50 / p90 over the CTAs that reached it.
    const auto milestone = [&](int slot) {
      std::vector<double> v;
      for (int b = 0; b < kSlots; ++b) {
        if (h[kS * b] == 0 || h[kS * b + slot] == 0) continue;
        v.push_back(slot == 6 ? double(h[kS * b + 1] - h[kS * b + 6]) : double(h[kS * b + slot] - t0));
      }
      if (v.empty()) return std::string("-");
      std::sort(v.begin(), v.end());
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.1f / %.1f / %.1f", v[v.size() / 10] / 1e3, v[v.size() / 2] / 1e3,
                    v[9 * v.size() / 10] / 1e3);
      return std::string(buf);
    };
    if (const std::string landed = milestone(3); landed != "-") {
      ramp += "| " + ks[i].name + " | " + milestone(0) + " | " + landed + " | " + milestone(7) + " | " +
              milestone(8) + " | " + milestone(4) + " | " + milestone(5) + " | " + milestone(6) + " |\n";
    }
    std::vector<double> ex;
    for (const unsigned long long l : last) {
      if (l != 0) ex.push_back(static_cast<double>(l));
    }
    if (ex.empty()) continue;  // not a traced kernel
    std::sort(ex.begin(), ex.end());
    const double span = static_cast<double>(t1 - t0);
    const auto pct = [&](double q) { return 100.0 * (ex[static_cast<size_t>(q * (ex.size() - 1))] - t0) / span; };
    double idle = 0;
    for (const double e : ex) idle += (t1 - e) / span;
    std::printf("| %s | %d | %zu | %.1f | %.1f / %.1f / %.1f / %.1f | %.1f |\n", ks[i].name.c_str(), ctas, ex.size(),
                span / 1e3, pct(0), pct(0.1), pct(0.5), pct(0.9), 100.0 * idle / ex.size());
  }
  if (!ramp.empty()) {
    std::printf("\n| variant (traced launch; µs, p10 / p50 / p90 over the CTAs) | CTA start | first share landed | "
                "next copy issued | block reduced | first row merged | first output pass issued | last share landed -> "
                "exit |\n|---|---|---|---|---|---|---|---|\n%s",
                ramp.c_str());
  }
  const unsigned long long* none = nullptr;
  CK(cudaMemcpyToSymbol(smx::g_trace_exits, &none, sizeof(none)));
  CK(cudaFree(d));
}
#endif

template <typename T>
bool run_case(const char* dtype, int cols, int sms) {
  const int64_t rows = kElems / cols, n = rows * cols, bytes = n * int64_t{sizeof(T)};
  const jm::RowShape s{rows, cols};
  // full: a grid of one CTA per row (the hardware schedules them as CTAs exit), else the CTAs resident at once.
  const auto resident = [&](auto kernel, int block, const T* x, T* y, bool full = false) {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, 0));
    const int64_t grid = full ? rows : std::min<int64_t>(rows, int64_t{per_sm} * sms);
    kernel<<<static_cast<unsigned>(grid), block>>>(x, y, rows, cols);
    return true;
  };
  struct Kernel {
    std::string name;
    std::function<bool(const T*, T*)> launch;  // false: no plan of this variant fits the shape (not timed)
  };
  using jm::cuda::FwdVersion;
  const auto handler = [&](FwdVersion version) {
    return [&, version](const T* x, T* y) {
      bool launched = false;
      if (jm::cuda::launch_fwd_v3<T>(nullptr, s, true, version, x, y, &launched).failure()) std::exit(1);
      return launched;
    };
  };
  jm::cuda::DeviceInfo dev;
  if (jm::cuda::device_info(&dev).failure()) std::exit(1);
  // The bulk-copy cluster alone (where 16-bit rows take the L2 two-pass kernel by default too) on CTAs of B threads,
  // ahead_pct % of each CTA's next share prefetched into L2 (v3's two buffers: of the row after next), cluster size k
  // (0: the rule's).
  // keep: the prefetches at L2's evict_last priority (launch_fwd_tma's kKeep).
  // rpc: rows per cluster (0: the persistent grid; else a grid of rows / rpc clusters in waves).
  // tickets: the persistent grid's rows past each cluster's first two from a counter (v73).
  const auto tma_tickets = [&](auto tickets, auto block, auto keep, int ahead_pct, int k, FwdVersion version,
                               int rpc) {
    return [&, ahead_pct, k, version, rpc](const T* x, T* y) {
      bool launched = false;
      if (jm::cuda::launch_fwd_tma<T, decltype(block)::value, true, decltype(keep)::value, decltype(tickets)::value>(
              dev, nullptr, s, version, x, y, &launched, ahead_pct, k, rpc)
              .failure()) {
        std::exit(1);
      }
      return launched;
    };
  };
  const auto tma = [&](auto block, auto keep, int ahead_pct, int k, FwdVersion version, int rpc = 0) {
    return tma_tickets(std::false_type{}, block, keep, ahead_pct, k, version, rpc);
  };
  const auto bulk_copy = [&](auto block, int ahead_pct, int k = 0, FwdVersion version = FwdVersion::kV5) {
    return tma(block, std::false_type{}, ahead_pct, k, version);
  };
  using B256 = std::integral_constant<int, 256>;
  using B512 = std::integral_constant<int, 512>;
  using B1024 = std::integral_constant<int, 1024>;
  std::vector<Kernel> ks = {
      {"default (v79)", handler(FwdVersion::kV79)},
      {"default again (A/A)", handler(FwdVersion::kV79)},
      {"v77 (f32 clusters of one buffer)", handler(FwdVersion::kV77)},
      {"v78 (v77 with 16-bit one buffers at twice the rule's k)", handler(FwdVersion::kV78)},
      {"v75 (f32 tickets at the rule's k)", handler(FwdVersion::kV75)},
      {"v74 (fixed rows per cluster, L2 rows on a full grid)", handler(FwdVersion::kV74)},
      {"v73 (tickets)", handler(FwdVersion::kV73)},
      {"v76 (tickets in one buffer at twice the rule's k, 16-bit too)", handler(FwdVersion::kV76)},
      {"v50 (fixed rows per cluster, v14 persistent)", handler(FwdVersion::kV50)},
      {"v72 (grids of 2 rows per cluster under 256 KB)", handler(FwdVersion::kV72)},
      {"v27 (no prefetch)", handler(FwdVersion::kV27)},
      {"v49 (the prefetch at the normal priority)", handler(FwdVersion::kV49)},
      {"bulk copy, rule's k, 75%", bulk_copy(B256{}, 75)},
      {"bulk copy, rule's k, 100%", bulk_copy(B256{}, 100)},
      {"bulk copy, rule's k, 75%, kept (evict_last)", tma(B256{}, std::true_type{}, 75, 0, FwdVersion::kV5)},
      {"bulk copy, rule's k, 100%, kept (evict_last)", tma(B256{}, std::true_type{}, 100, 0, FwdVersion::kV5)},
      {"bulk copy, rule's k, 1024 threads, 75%", bulk_copy(B1024{}, 75)},
      {"bulk copy, k = 1, 75%", bulk_copy(B256{}, 75, 1)},
      {"bulk copy, k = 1, 512 threads, 75%", bulk_copy(B512{}, 75, 1)},
      {"bulk copy, k = 1, 1024 threads, 75%", bulk_copy(B1024{}, 75, 1)},
      {"bulk copy, k = 1, 1024 threads, 100%", bulk_copy(B1024{}, 100, 1)},
      {"bulk copy, k = 2, 1024 threads, 75%", bulk_copy(B1024{}, 75, 2)},
      {"bulk copy, k = 3, 1024 threads, 75%", bulk_copy(B1024{}, 75, 3)},
      {"bulk copy, k = 4, 1024 threads, 75%", bulk_copy(B1024{}, 75, 4)},
      {"bulk copy, k = 4, 75%", bulk_copy(B256{}, 75, 4)},
      {"bulk copy, k = 16, 75%", bulk_copy(B256{}, 75, 16)},
      {"bulk copy, one buffer (v5-s1), 512 threads, 75%", bulk_copy(B512{}, 75, 0, FwdVersion::kV5S1)},
      {"two buffers (v3), rule's k, 0%", bulk_copy(B256{}, 0, 0, FwdVersion::kV3)},
      {"two buffers (v3), rule's k, 75% of the row after next", bulk_copy(B256{}, 75, 0, FwdVersion::kV3)},
      // v69's question: does the persistent grid's fixed share of rows per cluster leave the slower clusters last?
      // The default's plan (75% kept) on grids the hardware schedules in waves, `rpc` rows per cluster.
      {"grid, 1 row per cluster (75%, kept)", tma(B256{}, std::true_type{}, 75, 0, FwdVersion::kV5, 1)},
      {"grid, 2 rows per cluster (75%, kept)", tma(B256{}, std::true_type{}, 75, 0, FwdVersion::kV5, 2)},
      {"grid, 4 rows per cluster (75%, kept)", tma(B256{}, std::true_type{}, 75, 0, FwdVersion::kV5, 4)},
      {"grid, 8 rows per cluster (75%, kept)", tma(B256{}, std::true_type{}, 75, 0, FwdVersion::kV5, 8)},
      // ... and the persistent grid whose rows past each cluster's first two come from a counter (v73's tickets).
      {"tickets (75%, kept)", tma_tickets(std::true_type{}, B256{}, std::true_type{}, 75, 0, FwdVersion::kV5, 0)},
      // The twenty-fourth session's question (RESULTS.md "v76 and v77"): the 16-bit rows' one buffer at k = 8 (32 KB
      // shares, up to 7 CTAs per SM) against the rule's k = 4 (64 KB, 3 per SM) at C = 131072, the f32 rows' at k = 16
      // against 8; one buffer read from shared memory at every k (v5-s1: no register plan), kept prefetches, tickets or
      // not. [kb]
      {"one buffer, k = 4, 75%, kept [kb]", tma(B256{}, std::true_type{}, 75, 4, FwdVersion::kV5S1)},
      {"one buffer, k = 8, 75%, kept [kb]", tma(B256{}, std::true_type{}, 75, 8, FwdVersion::kV5S1)},
      {"one buffer, k = 8, tickets, 75%, kept [kb]",
       tma_tickets(std::true_type{}, B256{}, std::true_type{}, 75, 8, FwdVersion::kV5S1, 0)},
      {"one buffer, k = 16, tickets, 75%, kept [kb]",
       tma_tickets(std::true_type{}, B256{}, std::true_type{}, 75, 16, FwdVersion::kV5S1, 0)},
      // The twenty-fifth session's question: the register kernels (each CTA copies its share into registers once and
      // refills its buffer with the next row's share at once, so the next copy overlaps this row's merge and writes)
      // by tickets at k = 4, 8, 16 (16-bit: 16 or 8 packs per thread at C = 131072; f32 as v5-reg's rows), against
      // one buffer read twice from shared memory (the default's plans). [kr]
      {"registers, k = 4, tickets, 75%, kept [kr]",
       tma_tickets(std::true_type{}, B256{}, std::true_type{}, 75, 4, FwdVersion::kV5Reg, 0)},
      {"registers, k = 8, tickets, 75%, kept [kr]",
       tma_tickets(std::true_type{}, B256{}, std::true_type{}, 75, 8, FwdVersion::kV5Reg, 0)},
      {"registers, k = 16, tickets, 75%, kept [kr]",
       tma_tickets(std::true_type{}, B256{}, std::true_type{}, 75, 16, FwdVersion::kV5Reg, 0)},
      // The twenty-eighth session's traces: the first row merged ~4-6 us after its share landed, where its arithmetic
      // takes ~1. Does thread 0's prefetch of the next share into L2 (issued right after the landing, before the
      // block's reduction, which waits for thread 0) hold the CTA? The same register kernels without it. [kr0]
      {"registers, k = 4, tickets, no prefetch [kr0]",
       tma_tickets(std::true_type{}, B256{}, std::false_type{}, 0, 4, FwdVersion::kV5Reg, 0)},
      {"registers, k = 8, tickets, no prefetch [kr0]",
       tma_tickets(std::true_type{}, B256{}, std::false_type{}, 0, 8, FwdVersion::kV5Reg, 0)},
      {"v14 two-pass, 512 x 2 per SM",
       [&](const T* x, T* y) { return resident(smx::softmax_fwd_l2_kernel<T>, smx::kL2Block, x, y); }},
      {"v14 two-pass, 512 x 2 per SM, full grid",
       [&](const T* x, T* y) { return resident(smx::softmax_fwd_l2_kernel<T>, smx::kL2Block, x, y, true); }},
  };
  // AB_VARIANTS (comma-separated name fragments, so none can hold a comma): only the variants whose names hold one of
  // them, the default kept.
  if (const char* only = std::getenv("AB_VARIANTS"); only != nullptr && *only != '\0') {
    std::vector<std::string> frags;
    for (std::string_view rest = only; !rest.empty();) {
      const size_t comma = std::min(rest.find(','), rest.size());
      if (comma > 0) frags.emplace_back(rest.substr(0, comma));
      rest.remove_prefix(std::min(comma + 1, rest.size()));
    }
    std::vector<Kernel> kept = {ks[0]};
    for (size_t i = 1; i < ks.size(); ++i) {
      for (const std::string& f : frags) {
        if (ks[i].name.find(f) != std::string::npos) {
          kept.push_back(ks[i]);
          break;
        }
      }
    }
    ks = std::move(kept);
  }
  T* x;
  CK(cudaMalloc(&x, bytes));
  fill_x<<<1024, 256>>>(x, n, 7u + cols);
  CK(cudaGetLastError());
  std::vector<T*> ys(ks.size() + 3);
  for (T*& y : ys) {
    CK(cudaMalloc(&y, bytes));
    CK(cudaMemset(y, 0xff, bytes));  // NaN in every dtype
  }
  // One launch of each first: a variant with no plan for this shape is listed, not timed.
  std::vector<size_t> timed;  // indices into ks
  for (size_t i = 0; i < ks.size(); ++i) {
    if (ks[i].launch(x, ys[i])) timed.push_back(i);
  }
  CK(cudaDeviceSynchronize());
  if (timed.empty() || timed[0] != 0) {  // the ratios' baseline
    std::fprintf(stderr, "the default did not launch at C = %d\n", cols);
    std::exit(1);
  }
  std::vector<inproc::Variant> vs;
  for (const size_t i : timed) vs.push_back({ks[i].name, [&, i] { ks[i].launch(x, ys[i]); }, {}});
  const size_t c0 = vs.size();
  add_copies(vs, x, reinterpret_cast<void* const*>(ys.data() + ks.size()), bytes);
  inproc::time_rotated(vs, kWarmup, kSamples);
  CK(cudaDeviceSynchronize());
  double best_copy = 0;
  for (size_t i = c0; i < vs.size(); ++i) best_copy = std::max(best_copy, 2.0 * bytes / inproc::median(vs[i].ms) / 1e6);
  std::printf("\n**%s, C = %d, %lld rows** (%.1f MB per row)\n\n| variant | GB/s | %% of the best copy | / default "
              "(per sample: median, q1, q3) | check |\n|---|---|---|---|---|\n",
              dtype, cols, static_cast<long long>(rows), cols * double(sizeof(T)) / 1e6);
  bool ok = true;
  for (size_t i = 0; i < vs.size(); ++i) {
    const double gbs = 2.0 * bytes / inproc::median(vs[i].ms) / 1e6;
    double r[3];
    inproc::sample_ratio(vs[i], vs[0], r);
    const std::string check = i < c0 ? check_cell(x, ys[timed[i]], rows, cols, &ok) : "-";
    std::printf("| %s | %.0f | %.1f | %.3f (%.3f, %.3f) | %s |\n", vs[i].name.c_str(), gbs, 100 * gbs / best_copy,
                r[0], r[1], r[2], check.c_str());
  }
  for (size_t i = 0, t = 0; i < ks.size(); ++i) {
    if (t < timed.size() && timed[t] == i) {
      ++t;
    } else {
      std::printf("| %s | no plan for this shape | | | |\n", ks[i].name.c_str());
    }
  }
#ifdef JM_TRACE_EXITS
  if (std::getenv("AB_TRACE") != nullptr) trace_exits(ks, timed, x, ys);
#endif
  for (T* y : ys) CK(cudaFree(y));
  CK(cudaFree(x));
  return ok;
}

}  // namespace

// Arguments: cases as dtype:C (f32 or bf16), default f32:50257 bf16:50257 f32:131072 bf16:131072.
int main(int argc, char** argv) {
  return run_cases(argc, argv, {"f32:50257", "bf16:50257", "f32:131072", "bf16:131072"},
                   "softmax forward, long rows", run_case<float>, run_case<__nv_bfloat16>);
}
