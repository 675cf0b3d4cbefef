// Softmax backward over the last axis: the XLA FFI handler JmSoftmaxBwdCuda, dx = y * (dy - sum(dy * y)) with y
// and dy read once (softmax_rows.cuh's kernels; the size classes: softmax_launch.cuh), and the long rows' cluster
// plans (its versions below).
#include "softmax_launch.cuh"
#include "bindings.h"
#include "handlers.h"

#include <initializer_list>
#include <optional>
#include <type_traits>

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

// The backward's versions (JAX_MEMOPS_SOFTMAX_BWD, A/B, read once per process). v42 (the default): before launch_auto,
// launch_bwd_v38 plans the long rows (below): v39's plans, with its clusters of 512-thread CTAs replaced by clusters of
// CTAs of any multiple of 32 threads where those hold more rows at once on no fewer resident CTAs (bwd_v41_choice).
// "v41": the same without the CTAs' condition. "v39": clusters that hold y alone where v38's do not fit 16 CTAs of 512
// threads, or none of its fits. "v38": v39 without clusters that hold y alone. "v37": its register clusters of 5 packs
// per thread wherever they take fewer 512-thread CTAs. "v35" (the rule before v37), "v9" and "v9-1024": launch_auto
// alone, in the cluster order bwd_cluster_order gives.
// (v40's clusters holding 7 packs of y where they leave fewer slots idle, measured 0.92-0.93x at 16-bit 50257 /
// 200000: branch v40, RESULTS.md "v40".)
enum class BwdVersion { kV35, kV37, kV38, kV39, kV41, kV42 };

BwdVersion bwd_version() {
  static const BwdVersion v = env_choice("JAX_MEMOPS_SOFTMAX_BWD",
                                         {{"v35", BwdVersion::kV35}, {"v37", BwdVersion::kV37},
                                          {"v38", BwdVersion::kV38}, {"v39", BwdVersion::kV39},
                                          {"v41", BwdVersion::kV41}, {"v9", BwdVersion::kV35},
                                          {"v9-1024", BwdVersion::kV35}},
                                         BwdVersion::kV42);
  return v;
}

// launch_auto's register-cluster order for the backward: v2's (16 CTAs of 512 threads before 8 of 1024) again
// since v12; "v9": v9's order (8 of 1024 before 16 of 512); "v9-1024": 1024-thread CTAs (1 per SM, half the
// cluster size) before 512-thread ones.
ClusterOrder bwd_cluster_order() {
  static const ClusterOrder order = env_choice(
      "JAX_MEMOPS_SOFTMAX_BWD", {{"v9-1024", ClusterOrder::kFullFirst}, {"v9", ClusterOrder::kV9}}, ClusterOrder::kV2);
  return order;
}

// One register cluster of the backward: k CTAs of `block` threads, `packs` packs of y and of dy per thread (of y
// alone where !hold_dy: v39).
struct BwdCluster {
  int block, packs;
  int64_t k;
  bool hold_dy = true;
};

template <typename T>
BwdCluster bwd_cluster(int64_t cols, int block, int packs) {
  return {block, packs, ceil_div(cols, int64_t{packs} * kVec<T> * block)};
}

// v39's cluster of `block`-thread CTAs holding kBwdYPacks packs of y per thread, dy read twice (the second time
// from L2: the rows in flight, 14 clusters of 16 x 512 threads at f32 262144, hold 14 MB of dy); nullopt past 16
// CTAs. Why: v38's clusters of 1024 threads (f32 C > 163840, 16-bit 327680) read 65-75% of the copy, 7 of them
// resident (112 of 132 SMs, 1 CTA per SM: nothing overlaps a row's merge; its 512-thread clusters of 16 use the same
// SMs, 2 CTAs each, at 86%); these are 512-thread CTAs up to f32 C = 262144 (16-bit 524288), and on 1024 threads up to
// twice that where v38 has none (the stream class). Measured against v38 (RESULTS.md "v39", device timing, % of the
// copy): f32 196608 / 256000 / 262144 74 / 70 / 71% -> 88 / 87 / 88%, 524288 59 -> 73%; bf16 524288 66 -> 75%,
// 1000003 44 -> 63%; the rows v39 leaves to v38 within 1%.
template <typename T>
std::optional<BwdCluster> bwd_y_held(int64_t cols, int block) {
  BwdCluster c = bwd_cluster<T>(cols, block, smx::kBwdYPacks);
  c.hold_dy = false;
  if (c.k > kMaxClusterNonPortable) return std::nullopt;
  return c;
}

// v38's choice between a row's clusters of 4 packs per thread (kBwdPacks, launch_auto's) and of 5 (kBwdWidePacks)
// for CTAs of one size; nullopt: neither fits 16 CTAs. The wide one where the narrow one does not fit, or where
// it has fewer thread slots for the row (less of the cluster idle: k x packs smaller) without giving up the merge by
// messages (k >= bwd_push_min_cluster()) that the narrow one has. Measured (RESULTS.md "v37"): wide, fewer slots, the
// same merge: f32 16385 +10%, 50257 +1%, bf16 100000 +4%, 131073 +5%; wide where the narrow cluster has fewer
// slots (f32 65536, 131072; bf16 131072, 262144): -2 to -3%; bf16 50257, wide on 3 CTAs merged by the barrier
// against 4 by messages: -7% (both by messages since v38: +0.3%, RESULTS.md "v38").
template <typename T>
std::optional<BwdCluster> bwd_v38_choice(int64_t cols, int block) {
  const BwdCluster narrow = bwd_cluster<T>(cols, block, smx::kBwdPacks);
  const BwdCluster wide = bwd_cluster<T>(cols, block, smx::kBwdWidePacks);
  if (wide.k > kMaxClusterNonPortable) return std::nullopt;
  if (narrow.k > kMaxClusterNonPortable) return wide;
  const bool fewer_slots = wide.k * wide.packs < narrow.k * narrow.packs;
  const bool keeps_merge = wide.k >= bwd_push_min_cluster() || narrow.k < bwd_push_min_cluster();
  return wide.k >= 2 && fewer_slots && keeps_merge ? wide : narrow;
}

// Rows in flight under a cluster plan holding y and dy: its kernel's resident clusters, merging by messages (k >= 2).
template <typename T>
int bwd_rows_in_flight(const DeviceInfo& dev, const BwdCluster& c) {
  const int k = static_cast<int>(c.k);
  if (c.packs == smx::kBwdWidePacks) {
    return active_clusters<smx::softmax_bwd_rows_kernel<T, true, true, smx::kBwdWidePacks>>(dev, c.block, k);
  }
  return active_clusters<smx::softmax_bwd_rows_kernel<T, true, true>>(dev, c.block, k);
}

// v41 / v42: `plan` (v38's cluster of 512-thread CTAs, k >= 2), or the cluster of CTAs of any multiple of 32 threads,
// 128..512, with 4 or 5 packs of y and dy per thread, that keeps the most rows in flight (resident clusters, from the
// occupancy API) where that is at least kV41Gain times plan's; v42 (keep_ctas) only on CTAs of another size than
// plan's (v38's rule sets the packs of 512-thread CTAs) and on at least as many resident CTAs (clusters x k). Why: the
// data a cluster plan keeps on chip is its resident clusters times a row, and CTAs of 512 threads at 64 registers fit
// 2 per SM: a row whose k CTAs leave slots idle (bf16 50257: 6283 packs on 3 x 512 x 5 slots, 18% idle) or whose
// clusters pack the GPCs badly holds less. Measured (RESULTS.md "v41", "v42", % of the copy): v41 gained 1-5% where
// its CTAs were smaller or its clusters many more (bf16 16385 / 32768 / 50257 / 150001: 82 / 89 / 84 / 80% -> 85 /
// 92 / 86 / 84%) and lost 4% where it traded 30 clusters of 8 x 512 threads, 4 packs, for 32 of 7 x 480, 5 packs (f32
// 65536, bf16 131072: 224 resident CTAs against 240), and 0.7% re-packing f32 40000's 512-thread CTAs; v42 declines
// both trades.
constexpr double kV41Gain = 1.04;
constexpr int kV41MinBlock = 128;

template <typename T>
BwdCluster bwd_v41_choice(const DeviceInfo& dev, int64_t cols, const BwdCluster& plan, bool keep_ctas) {
  BwdCluster best = plan;
  const int base = bwd_rows_in_flight<T>(dev, plan);
  int best_rows = base;
  for (const int packs : {smx::kBwdPacks, smx::kBwdWidePacks}) {
    for (int64_t k = 2; k <= kMaxClusterNonPortable; ++k) {
      const int64_t block = 32 * ceil_div(cols, k * packs * kVec<T> * 32);
      if (block < kV41MinBlock || block > kMaxBlock / 2) continue;
      const BwdCluster c = bwd_cluster<T>(cols, static_cast<int>(block), packs);  // its k may be below the k tried
      if (c.k < 2 || (keep_ctas && c.block == plan.block)) continue;  // v42: plan's packs for its CTAs by v38's rule
      const int rows = bwd_rows_in_flight<T>(dev, c);
      const bool ctas_kept = !keep_ctas || rows * c.k >= base * plan.k;
      if (rows > best_rows && rows >= base * kV41Gain && ctas_kept) {
        best = c;
        best_rows = rows;
      }
    }
  }
  return best;
}

// The plan log's name of launch_bwd_v38's launches (JAX_MEMOPS_SOFTMAX_PLAN_LOG=1; the tests read it).
const char* bwd_plan_name(BwdVersion version, const BwdCluster& plan) {
  switch (version) {
    case BwdVersion::kV37: return "softmax_bwd v37";
    case BwdVersion::kV38: return "softmax_bwd v38";
    case BwdVersion::kV39: return plan.hold_dy ? "softmax_bwd v39" : "softmax_bwd v39 y-held";
    case BwdVersion::kV41: return plan.hold_dy ? "softmax_bwd v41" : "softmax_bwd v41 y-held";
    default: return plan.hold_dy ? "softmax_bwd v42" : "softmax_bwd v42 y-held";
  }
}

// The long rows' register clusters before launch_auto (which runs where *launched stays false):
//   v38: CTAs of 512 threads (2 per SM), 4 or 5 packs per thread by bwd_v38_choice, k <= 16 (where that is
//        launch_auto's narrow cluster, launch_auto runs it); past 16 x 512 threads' reach, CTAs of 1024 threads
//        (1 per SM) by the same choice, k <= 16 (f32 C <= 327680, 16-bit 655360), which launch_auto never tries
//        (its capacity is 8 x 1024 = 16 x 512): those rows took the stream class, two passes over y and dy from HBM
//        (5 tensor passes; f32 131073 / 262144 measured 58-59% of the copy, v37).
//   v39: v38, but bwd_y_held's cluster of 512 threads before v38's of 1024, and of 1024 threads where
//        v38's fits none (f32 C <= 524288, 16-bit 1048576).
//   v42 (the default), v41 (A/B): v39, but v38's clusters of 512 threads (k >= 2) by bwd_v41_choice.
//   v37: the wide cluster of 512-thread CTAs wherever it takes fewer CTAs than the narrow one (k >= 2).
template <typename T>
ffi::Error launch_bwd_v38(cudaStream_t stream, RowShape s, BwdVersion version, const T* yp, const T* dyp, T* dxp,
                          bool* launched) {
  *launched = false;
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure() || dev.cc_major < 9) return err;  // clusters: sm_90+
  constexpr int kHalf = kMaxBlock / 2;
  std::optional<BwdCluster> plan;
  if (version == BwdVersion::kV37) {
    const BwdCluster narrow = bwd_cluster<T>(s.cols, kHalf, smx::kBwdPacks);
    const BwdCluster wide = bwd_cluster<T>(s.cols, kHalf, smx::kBwdWidePacks);
    if (wide.k >= 2 && wide.k < narrow.k && wide.k <= kMaxClusterNonPortable) plan = wide;
  } else {
    const bool y_held = version != BwdVersion::kV38;
    const bool odd_ctas = version == BwdVersion::kV41 || version == BwdVersion::kV42;
    plan = bwd_v38_choice<T>(s.cols, kHalf);
    if (plan && plan->k >= 2 && odd_ctas) {
      plan = bwd_v41_choice<T>(dev, s.cols, *plan, version == BwdVersion::kV42);
    }
    if (!plan && y_held) plan = bwd_y_held<T>(s.cols, kHalf);
    if (!plan) plan = bwd_v38_choice<T>(s.cols, kMaxBlock);
    if (!plan && y_held) plan = bwd_y_held<T>(s.cols, kMaxBlock);
  }
  if (!plan || (plan->hold_dy && plan->block == kHalf && plan->packs == smx::kBwdPacks)) return ffi::Error::Success();
  const std::initializer_list<ClusterShape> shapes = {{plan->block, kMaxClusterNonPortable}};
  const char* what = bwd_plan_name(version, *plan);
  const auto run = [&](auto packs, auto hold_dy) {
    constexpr int kN = decltype(packs)::value;
    constexpr bool kHold = decltype(hold_dy)::value;
    return launch_cluster_rows<smx::softmax_bwd_rows_kernel<T, true, false, kN, kHold>,
                               smx::softmax_bwd_rows_kernel<T, true, true, kN, kHold>>(
        dev, stream, s, smx::bwd_elems_per_thread<T, kN>(), shapes, launched, what, yp, dyp, dxp);
  };
  using std::integral_constant;
  if (!plan->hold_dy) return run(integral_constant<int, smx::kBwdYPacks>{}, std::false_type{});
  if (plan->packs == smx::kBwdWidePacks) return run(integral_constant<int, smx::kBwdWidePacks>{}, std::true_type{});
  return run(integral_constant<int, smx::kBwdPacks>{}, std::true_type{});
}

ffi::Error SoftmaxBwd(cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer dy,
                      ffi::Result<ffi::AnyBuffer> dx) {
  RowShape s;
  if (auto err = first_error({row_shape(y, "y", &s), check_same(y, dy, "dy"), check_same(y, *dx, "dx")});
      err.failure()) {
    return err;
  }
  if (s.size() == 0) return ffi::Error::Success();
  return dispatch_float(y.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* yp = static_cast<const T*>(y.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx->untyped_data());
    if (bwd_version() != BwdVersion::kV35 && same_alignment({yp, dyp, dxp})) {
      bool launched = false;
      if (auto err = launch_bwd_v38(stream, s, bwd_version(), yp, dyp, dxp, &launched); err.failure() || launched) {
        return err;
      }
    }
    // Register clusters of k >= bwd_push_min_cluster() CTAs merge each row's sum by messages (kMail).
    return launch_auto<smx::softmax_bwd_rows_kernel<T, false>, smx::softmax_bwd_rows_kernel<T, true>,
                       smx::softmax_bwd_stream_kernel<T, kVec<T>>, smx::softmax_bwd_stream_kernel<T, 1>,
                       Grid::kFull, smx::softmax_bwd_rows_kernel<T, true, true>>(
        stream, s, smx::bwd_elems_per_thread<T>(), kVec<T>, same_alignment({yp, dyp, dxp}), bwd_cluster_order(),
        "softmax_bwd", yp, dyp, dxp);
  });
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxBwdCuda, jm::cuda::SoftmaxBwd,
                              jm::bind::softmax_bwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
