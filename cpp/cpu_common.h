// CPU side of the dtype dispatch: 16-bit float storage types with exact conversions to and from float
// (round to nearest even), so the CPU handlers need no compiler extension or CUDA header.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "ffi_common.h"
#include "host_math.h"

namespace jm::cpu {

// ---- Parallel work on XLA's intra-op thread pool ---------------------------------------------------------

// The CPU handlers' binding: XLA's intra-op thread pool first, then the op's buffers and attributes
// (bindings.h).
inline auto cpu_binding() { return ffi::Ffi::Bind().Ctx<ffi::ThreadPool>(); }

// Elements per piece of parallel work: about 32K (128 KB of f32), at least one row. Fixed by the shape alone,
// so the pieces, and every result, are the same whatever the number of threads.
inline constexpr int64_t kPieceElems = int64_t{1} << 15;

// Rows per piece for rows of `cols` elements.
inline int64_t piece_rows(int64_t cols) { return std::max<int64_t>(1, kPieceElems / std::max<int64_t>(1, cols)); }

// fn(begin, end) over [0, n) in pieces of `grain` (the last one shorter), run by the pool's threads and the
// calling thread together: each takes the next piece until none is left, and the caller then waits for the
// pieces others took. A pool whose threads are all busy, or none (Schedule then runs the task in place),
// cannot stall it, and a task that starts after the last piece was taken returns at once (it keeps the shared
// counter alive; `fn` is touched only for a taken piece, all of which end before this returns).
// The caller spins on the count of finished pieces for up to kSpinNs before it sleeps: a helper's last piece then
// ends the call when it ends, not a scheduler wake-up later (tens of µs on a virtual machine, where a piece takes
// ~20 µs).
inline constexpr int64_t kSpinNs = 50'000;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// The CPUs this process may run on (on Linux its affinity mask, which taskset sets), read once.
inline int usable_cpus() {
  static const int n = [] {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

template <class F>
void parallel_for(ffi::ThreadPool& pool, int64_t n, int64_t grain, const F& fn) {
  const int64_t pieces = n <= 0 ? 0 : (n + grain - 1) / grain;
  // On one CPU (taskset, a cpuset) helpers only take turns with the caller: the pieces run in it alone.
  const int64_t helpers = usable_cpus() > 1 ? std::min<int64_t>(pool.num_threads(), pieces - 1) : 0;
  if (helpers <= 0) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0}, done{0};
    std::mutex m;
    std::condition_variable cv;
  };
  auto st = std::make_shared<State>();
  const F* body = &fn;
  auto work = [st, body, pieces, n, grain] {
    for (int64_t i; (i = st->next.fetch_add(1)) < pieces;) {
      (*body)(i * grain, std::min(n, (i + 1) * grain));
      if (st->done.fetch_add(1) + 1 == pieces) {
        std::lock_guard<std::mutex> lock(st->m);  // a waiter checks `done` under the lock: no lost wake-up
        st->cv.notify_all();
      }
    }
  };
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule(decltype(work)(work));  // a copy: Schedule takes F&&
  work();
  const auto finished = [&] { return st->done.load() == pieces; };
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 1; !finished(); ++spins) {
    cpu_relax();
    if (spins % 64 == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::nanoseconds(kSpinNs)) break;
  }
  std::unique_lock<std::mutex> lock(st->m);
  st->cv.wait(lock, finished);
}

// A row of `cols` elements in balanced column tiles of at most `width` (+16) columns, each starting at a multiple of
// 16 (one tile where the row fits in one). Fixed by the row's length alone.
struct ColumnTiles {
  int64_t cols, n;
  explicit ColumnTiles(int64_t c, int64_t width = kPieceElems)
      : cols(c), n(std::max<int64_t>(1, (c + width - 1) / width)) {}
  int64_t begin(int64_t t) const { return t == n ? cols : t * cols / n / 16 * 16; }
};

// fn(u, r, c0, c1) over every tile u = r * tiles.n + t of rows [0, s.rows), one tile a piece of the pool's work.
template <class F>
void for_each_tile(ffi::ThreadPool& pool, RowShape s, const ColumnTiles& tiles, const F& fn) {
  parallel_for(pool, s.rows * tiles.n, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t r = u / tiles.n, t = u % tiles.n;
      fn(u, r, tiles.begin(t), tiles.begin(t + 1));
    }
  });
}

// Row r's total of its tiles' values (part: for_each_tile's u order, tiles.n a row), added in tile order.
inline double tiles_total(const std::vector<double>& part, const ColumnTiles& tiles, int64_t r) {
  double sum = 0.0;
  for (int64_t t = 0; t < tiles.n; ++t) sum += part[r * tiles.n + t];
  return sum;
}

// fn(r0, r1, c0, c1) over an elementwise op's rows [r0, r1) x columns [c0, c1), in pieces of about kPieceElems:
// several whole rows a piece where a row fits in one, else one column tile a piece (ColumnTiles), so that a few long
// rows (a 1-D x) still spread over the pool. Fixed by the shape alone.
template <class F>
void parallel_tiles(ffi::ThreadPool& pool, RowShape s, const F& fn) {
  if (s.cols <= kPieceElems) {
    parallel_for(pool, s.rows, piece_rows(s.cols), [&](int64_t r0, int64_t r1) { fn(r0, r1, int64_t{0}, s.cols); });
    return;
  }
  for_each_tile(pool, s, ColumnTiles(s.cols),
                [&](int64_t, int64_t r, int64_t c0, int64_t c1) { fn(r, r + 1, c0, c1); });
}

// Rows longer than kLongRow elements are reduced by their column tiles (ColumnTiles): a row's sums are its tiles' sums
// added in tile order (row_sum), so that the pool may share a few long rows' tiles and give the bits of one thread
// (softmax v91, the norms v92).
inline constexpr int64_t kLongRow = int64_t{1} << 16;

// Whether the pool shares the long rows' tiles: where whole rows, one a thread, would leave some of its threads idle,
// and the rows are long enough to repay the passes' extra work and the pool's wake-ups (kShareCols: on two cores
// 1 x 131072 ties and 1 x 2^20 gains 1.35-2x; 1 x 50257's softmax backward, shared, took 2x as long; RESULTS.md
// "v91"). Chosen by the threads, not the shape alone: either way gives the same bits. min_work: the least row length
// times threads at which an op shares (the norms' passes are light: 2^20, RESULTS.md "v92").
inline constexpr int64_t kShareCols = int64_t{1} << 17;
inline bool share_long_rows(ffi::ThreadPool& pool, RowShape s, int64_t min_work = 0) {
  const int64_t threads = usable_cpus() > 1 ? std::min<int64_t>(pool.num_threads(), usable_cpus()) : 1;
  return s.cols >= kShareCols && s.rows < threads && s.cols * threads >= min_work;
}

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline float to_float(float v) { return v; }
inline float to_float(bf16 v) { return bits_float(uint32_t(v.bits) << 16); }
// The f16 conversions compute every case and pick one (no branch: loops over elements vectorize, as bf16's). Both
// equal the branching forms before them for all 2^16 halves / 2^32 floats, with and without FTZ / DAZ (RESULTS.md
// "The CPU handlers, v25").
inline float to_float(f16 v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  const uint32_t shifted = uint32_t(v.bits & 0x7fffu) << 13;  // exponent and mantissa in a float's places
  const uint32_t exp = shifted & 0x0f800000u;
  // The exponent rebased by 127 - 15 (inf / NaN: to 255, the payload kept).
  const uint32_t normal = shifted + pick_bits(exp == 0x0f800000u, 0x70000000u, 0x38000000u);
  const float sub = bits_float(shifted + 0x38800000u) - bits_float(0x38800000u);  // subnormal or zero: man * 2^-24
  return bits_float(pick_bits(exp == 0, float_bits(sub), normal) | sign);
}

template <typename T>
T from_float(float v);

template <>
inline float from_float<float>(float v) {
  return v;
}

template <>
inline bf16 from_float<bf16>(float v) {
  const uint32_t u = float_bits(v);
  const uint32_t nan = (u >> 16) | 0x40;                         // quiet NaN
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest, ties to even
  return bf16{uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};  // a select: loops stay vectorizable
}

template <>
inline f16 from_float<f16>(float v) {
  const uint32_t u = float_bits(v);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t special = pick_bits(a > 0x7f800000u, 0x7e00u, 0x7c00u);  // NaN (quiet), or inf and |v| >= 2^16
  // Below 2^-14 a subnormal half: v + 0.5f rounds v to units of 2^-24 (ties to even) in the low mantissa bits.
  const uint32_t sub = float_bits(bits_float(a) + 0.5f) - 0x3f000000u;
  // Else the mantissa rounded to 10 bits (ties to even), the exponent rebased by -112; 65520 <= |v| < 2^16 carries
  // into inf.
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  return f16{uint16_t(pick_bits(a >= 0x47800000u, special, pick_bits(a < 0x38800000u, sub, normal)) | sign)};
}

// ---- Rows as floats ---------------------------------------------------------------------------------------
// The kernels' loops read f16 rows from float buffers: a row is converted once into floats (to_floats), and a row of
// results computed there once into the output (from_floats); f32 and bf16 rows are read and written in place (row_t
// below). GCC vectorizes the f16 conversions above as some 20 integer operations per element, and does not vectorize
// _Float16's conversions at all; the builds with F16C (the AVX2 and AVX-512 ones) convert by the hardware's
// vcvtph2ps / vcvtps2ph, 8 or 16 elements an instruction, which give the same bits: the same rounding (to nearest,
// ties to even, whatever MXCSR says), and NaNs made the software's quiet NaN below (benchmarks/f16_convert_check.cc
// compares them for every half and every float, with and without FTZ / DAZ). (The hardware's f16 -> float quiets a
// signaling NaN, which the software keeps: every kernel computes on its inputs before it stores, and the arithmetic
// quiets it alike.) v56: f16 forwards 1.3-2x faster on one core in the AVX-512 build (RESULTS.md "The CPU handlers,
// v56").

// dst[i] = to_float(src[i]), i < n.
template <typename T>
void to_floats(const T* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, f16>) {
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    }
#endif
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
  }
#endif
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

#if defined(__F16C__)
// Halves from vcvtps2ph with every NaN made from_float<f16>'s (the sign and 0x7e00; the hardware keeps the payload's
// top bits): 8 of them, and 16 (AVX2).
inline __m128i quiet_nans(__m128i h) {
  const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
  const __m128i canonical = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(int16_t(0x8000))), _mm_set1_epi16(0x7e00));
  return _mm_blendv_epi8(h, canonical, nan);
}
#if defined(__AVX2__)
inline __m256i quiet_nans(__m256i h) {
  const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00));
  const __m256i canonical =
      _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(int16_t(0x8000))), _mm256_set1_epi16(0x7e00));
  return _mm256_blendv_epi8(h, canonical, nan);
}
#endif
#endif

// dst[i] = from_float<T>(src[i]), i < n.
template <typename T>
void from_floats(const float* src, T* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, f16>) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kNearest);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), quiet_nans(h));
    }
#endif
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kNearest);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), quiet_nans(h));
    }
  }
#endif
  for (; i < n; ++i) dst[i] = from_float<T>(src[i]);
}

// Floats a row of n elements needs beside it as floats (floats_of): 0 for f32, else n.
template <typename T>
size_t floats_buffer(int64_t n) {
  return std::is_same_v<T, float> ? 0 : static_cast<size_t>(n);
}

// A row of n elements as floats: the row itself for f32, else its conversion into buf (of at least n floats).
template <typename T>
const float* floats_of(const T* row, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return row;
  } else {
    to_floats(row, buf, n);
    return buf;
  }
}

// The element type in which the kernels' loops read and write a row of T: T itself for f32 and bf16 (bf16's
// conversions, a shift and a rounding, stay inline in the loops: converting bf16 rows in bulk made the training
// steps up to 1.5x slower, v56), float for f16, whose rows pass through float buffers. The loops read
// to_float(r[c]) and write r[c] = from_float<row_t<T>>(v) either way.
template <typename T>
using row_t = std::conditional_t<std::is_same_v<T, f16>, float, T>;

// Floats an f16 row of n elements needs beside it (in_row, out_row); 0 for the others.
template <typename T>
size_t row_buffer(int64_t n) {
  return std::is_same_v<T, f16> ? static_cast<size_t>(n) : 0;
}

// A row to read: f16 rows converted into buf (row_buffer's floats), the others in place.
template <typename T>
const row_t<T>* in_row(const T* row, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, f16>) {
    to_floats(row, buf, n);
    return buf;
  } else {
    return row;
  }
}

// A row to write: for f16 rows buf, which finish_row then converts into the row; the others in place.
template <typename T>
row_t<T>* out_row(T* row, float* buf) {
  if constexpr (std::is_same_v<T, f16>) {
    return buf;
  } else {
    return row;
  }
}
template <typename T>
void finish_row(const float* buf, T* row, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) from_floats(buf, row, n);
}

template <ffi::DataType D>
struct Elem;
template <>
struct Elem<ffi::DataType::F32> {
  using type = float;
};
template <>
struct Elem<ffi::DataType::BF16> {
  using type = bf16;
};
template <>
struct Elem<ffi::DataType::F16> {
  using type = f16;
};

// The CPU element type of a dispatch tag: `using T = elem_t<decltype(tag)>;`
template <typename Tag>
using elem_t = typename Elem<Tag::value>::type;

// max v[0 .. n) (-inf for n = 0), and whether some v[i] is NaN. Integer maxima, which GCC vectorizes (a float
// max reduction it vectorizes only under -ffinite-math-only): of the bits mapped so that integer order is float
// order (negative floats' magnitude bits flipped), and of the magnitude bits, above +inf's only for a NaN.
inline float max_of(const float* v, int64_t n, bool* any_nan) {
  const auto key = [](uint32_t b) { return static_cast<int32_t>(b ^ ((0u - (b >> 31)) >> 1)); };
  int32_t top = key(float_bits(-INFINITY)), mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = float_bits(v[i]);
    const int32_t k = key(b), a = static_cast<int32_t>(b & 0x7fffffffu);
    top = k > top ? k : top;
    mag = a > mag ? a : mag;
  }
  *any_nan = mag > 0x7f800000;
  return bits_float(static_cast<uint32_t>(key(static_cast<uint32_t>(top))));
}

// Σ term(i) for i in [0, n), float terms, as a double. 16 interleaved float partial sums (fixed by n alone: the same
// result every run and in every build) so that the additions overlap and vectorize at the float width; every 16
// terms a partial is added into a double sum of its own and starts again, so that no float partial holds more than
// 16 terms: the result is within ~16 float roundings of the terms' magnitudes, where summing every term in double
// was within one. The double form ran at half the vector width with a conversion per term (v54: the norms'
// forward 1.3-1.5x faster on one core without it).
template <class F>
inline double sum_in_lanes(int64_t n, F term) {
  constexpr int kLanes = 16, kDepth = 16;  // a block: kDepth terms per lane
  double total[kLanes] = {};
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes * kDepth <= n; i += kLanes * kDepth) {
    for (int d = 0; d < kDepth; ++d) {
      for (int l = 0; l < kLanes; ++l) part[l] += term(i + d * kLanes + l);
    }
    for (int l = 0; l < kLanes; ++l) {
      total[l] += part[l];
      part[l] = 0.0f;
    }
  }
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += term(i + l);
  }
  for (int l = 0; i < n; ++i, ++l) part[l] += term(i);
  double sum = 0.0;
  for (int l = 0; l < kLanes; ++l) sum += total[l] + double(part[l]);
  return sum;
}

// Σ v[0 .. n) (sum_in_lanes).
inline double sum_of(const float* v, int64_t n) {
  return sum_in_lanes(n, [v](int64_t i) { return v[i]; });
}

// Σ term(c) over a row of n elements (sum_in_lanes); a long row's (kLongRow) by column tiles, their sums added in tile
// order, as a pool sharing its tiles adds them.
template <class F>
inline double row_sum(int64_t n, const F& term) {
  if (n <= kLongRow) return sum_in_lanes(n, term);
  const ColumnTiles tiles(n);
  double sum = 0.0;
  for (int64_t t = 0; t < tiles.n; ++t) {
    const int64_t c0 = tiles.begin(t);
    sum += sum_in_lanes(tiles.begin(t + 1) - c0, [&](int64_t c) { return term(c0 + c); });
  }
  return sum;
}

// ---- Buffers a piece's rows work in -------------------------------------------------------------------------

// A piece's buffers are its thread's, kept across pieces and calls: a row-sized std::vector made (allocated and
// zeroed) per piece cost about a pass over the row where one row filled a piece, and an absent parameter's constant
// row was filled per piece too (the CPU handlers' v85, benchmarks/RESULTS.md). Rows of up to 2^15 floats had their own
// per piece until v90 (a row of 2^15 floats, an elementwise op's column tile, then paid that pass too). Rows longer
// than kKeptFloats take their own, so that a thread keeps at most six buffers of 4 MB.
inline constexpr size_t kKeptFloats = size_t{1} << 20;
inline bool kept_row(size_t n) { return n <= kKeptFloats; }
enum ScratchSlot : int { kScratchA, kScratchB, kScratchC, kScratchD, kScratchSlots };
enum ConstSlot : int { kScaleRow, kBiasRow, kTangentScaleRow, kTangentBiasRow, kConstSlots };

// n floats (contents undefined; n may be 0) from this thread's buffer `slot`, valid until the next RowScratch of that
// slot on this thread.
class RowScratch {
 public:
  RowScratch(ScratchSlot slot, size_t n) {
    if (!kept_row(n)) {
      own_.resize(n);
      p_ = own_.data();
      return;
    }
    thread_local std::vector<float> kept[kScratchSlots];
    std::vector<float>& v = kept[slot];
    if (v.size() < n) v.resize(n);
    p_ = v.data();
  }
  float* data() const { return p_; }

 private:
  std::vector<float> own_;
  float* p_ = nullptr;
};

// The parameter row of row r from column c0 on, or where the parameter is absent a row of its number (this thread's
// constant row `slot`, filled again only when the number changes or a wider row asks): element loops read a row either
// way (no branch per element, which keeps them from vectorizing). `width`: the most columns a caller reads from one
// at(); the constant row is that long, not a whole row (an elementwise op's column tiles of a 1-D x read 2^15).
class ParamRows {
 public:
  ParamRows(const ParamView& p, float value, int64_t cols, ConstSlot slot, int64_t width = -1) : p_(p), cols_(cols) {
    if (p.data) return;
    const size_t n = static_cast<size_t>(width < 0 ? cols : width);
    if (!kept_row(n)) {
      own_.assign(n, value);
      constant_ = own_.data();
      return;
    }
    struct Kept {
      std::vector<float> row;
      size_t filled = 0;  // row[0 .. filled) holds the number whose bits are `bits`
      uint32_t bits = 0;
    };
    thread_local Kept kept[kConstSlots];
    Kept& k = kept[slot];
    if (k.bits != float_bits(value)) k.filled = 0;
    if (k.filled < n) {
      if (k.row.size() < n) k.row.resize(n);
      std::fill(k.row.begin() + static_cast<std::ptrdiff_t>(k.filled), k.row.begin() + static_cast<std::ptrdiff_t>(n),
                value);
      k.filled = n;
      k.bits = float_bits(value);
    }
    constant_ = k.row.data();
  }
  const float* at(int64_t r, int64_t c0) const {
    return p_.data ? p_.data + (r / p_.rows_per_group) * cols_ + c0 : constant_;
  }
  const float* row(int64_t r) const { return at(r, 0); }

 private:
  ParamView p_;
  int64_t cols_;
  std::vector<float> own_;
  const float* constant_ = nullptr;
};

}  // namespace jm::cpu
