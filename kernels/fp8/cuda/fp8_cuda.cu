// CUDA fp8 kernels: amax, fused scale + saturating cast (+ amax), row-wise scales, one-thread scale updates.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "autocastgen/kernels/fp8_cuda.h"
#include "autocastgen/kernels/fp8_element.h"
#include "autocastgen/kernels/fp8_scale.h"

namespace autocastgen::kernels::fp8::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops: enough blocks to fill an H100/H200 several times over, few enough that the
// per-block atomicMax of the amax is negligible.
constexpr std::int64_t kMaxBlocks = 4096;

// The warp's max of `v`, in every lane: one redux instruction on sm_80 and later; a butterfly of
// shuffles on the older GPUs the wheel's parts build for too (a release's PyPI wheel may target
// sm_50 on), with the same result, since an unsigned max is order-free.
__device__ __forceinline__ std::uint32_t warp_max_bits(std::uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
#endif
}

// Combines the block's amax bits and lets one thread fold them into *amax_bits. Magnitude bits
// order like the floats they encode and NaN is above +inf (Note [amax]), so an unsigned
// atomicMax is the exact, NaN-propagating float max.
__device__ void block_amax_to_global(std::uint32_t local, unsigned int* amax_bits) {
  __shared__ std::uint32_t warp_max[kThreads / 32];
  local = warp_max_bits(local);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    std::uint32_t v = threadIdx.x < kThreads / 32 ? warp_max[threadIdx.x] : 0u;
    v = warp_max_bits(v);
    if (threadIdx.x == 0 && v != 0) atomicMax(amax_bits, v);
  }
}

template <DType D>
struct Storage;
template <>
struct Storage<DType::Float32> {
  using T = float;
};
template <>
struct Storage<DType::BFloat16> {
  using T = std::uint16_t;
};
template <>
struct Storage<DType::Float16> {
  using T = std::uint16_t;
};

// One 16-byte load, seen as the elements it holds.
template <class S>
union Vector {
  uint4 raw;
  S elements[16 / sizeof(S)];
};

// Output bytes of one 16-byte input vector: 4 (float32) or 8 (16-bit types).
template <int N>
struct Codes;
template <>
struct Codes<4> {
  using T = std::uint32_t;
};
template <>
struct Codes<8> {
  using T = uint2;
};

// One 16-byte vector of the source: its elements' magnitudes folded into `acc`, and its elements
// quantised with `scale` into kPer packed codes (with kAmax, also folding magnitudes into `acc`).
template <DType D>
__device__ __forceinline__ std::uint32_t vector_amax(const uint4 raw, std::uint32_t acc) {
  using W = ScalarWords;
  Vector<typename Storage<D>::T> x;
  x.raw = raw;
#pragma unroll
  for (int k = 0; k < static_cast<int>(16 / sizeof(typename Storage<D>::T)); ++k) {
    acc = W::max(acc, magnitude_bits<W>(widen_element<D>(x.elements, k)));
  }
  return acc;
}

template <Fp8Format Fmt, bool kAmax, DType D>
__device__ __forceinline__ typename Codes<16 / sizeof(typename Storage<D>::T)>::T vector_codes(const uint4 raw, float scale,
                                                                                              std::uint32_t& acc) {
  using S = typename Storage<D>::T;
  constexpr int kPer = 16 / sizeof(S);
  Vector<S> x;
  x.raw = raw;
  union {
    typename Codes<kPer>::T packed;
    std::uint8_t bytes[kPer];
  } codes;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    codes.bytes[k] =
        static_cast<std::uint8_t>(quantize_element<Fmt, kAmax, ScalarWords>(widen_element<D>(x.elements, k), scale, acc));
  }
  return codes.packed;
}

// The source is read 16 bytes at a time when both it and the output are aligned for that (always,
// for tensors from PyTorch's allocators; then the scalar loop only takes the tail).
template <DType D>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* src, std::int64_t n, unsigned int* amax_bits) {
  using S = typename Storage<D>::T;
  constexpr int kPer = 16 / sizeof(S);
  using W = ScalarWords;
  std::uint32_t acc = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  std::int64_t scalar_begin = 0;
  if ((reinterpret_cast<std::uintptr_t>(src) & 15u) == 0) {
    const std::int64_t vectors = n / kPer;
    const uint4* pv = static_cast<const uint4*>(src);
    for (std::int64_t v = tid; v < vectors; v += stride) acc = vector_amax<D>(pv[v], acc);
    scalar_begin = vectors * kPer;
  }
  for (std::int64_t i = scalar_begin + tid; i < n; i += stride) {
    acc = W::max(acc, magnitude_bits<W>(widen_element<D>(src, i)));
  }
  block_amax_to_global(acc, amax_bits);
}

template <Fp8Format Fmt, bool kAmax, DType D>
__global__ void __launch_bounds__(kThreads) cast_kernel(const void* src, std::int64_t n, const float* scale_ptr,
                                                        std::uint8_t* out, unsigned int* amax_bits) {
  using S = typename Storage<D>::T;
  constexpr int kPer = 16 / sizeof(S);
  using C = typename Codes<kPer>::T;
  using W = ScalarWords;
  const float scale = *scale_ptr;
  std::uint32_t acc = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  std::int64_t scalar_begin = 0;
  if ((reinterpret_cast<std::uintptr_t>(src) & 15u) == 0 && (reinterpret_cast<std::uintptr_t>(out) % kPer) == 0) {
    const std::int64_t vectors = n / kPer;
    const uint4* pv = static_cast<const uint4*>(src);
    C* po = reinterpret_cast<C*>(out);
    for (std::int64_t v = tid; v < vectors; v += stride) po[v] = vector_codes<Fmt, kAmax, D>(pv[v], scale, acc);
    scalar_begin = vectors * kPer;
  }
  for (std::int64_t i = scalar_begin + tid; i < n; i += stride) {
    out[i] = static_cast<std::uint8_t>(quantize_element<Fmt, kAmax, W>(widen_element<D>(src, i), scale, acc));
  }
  if constexpr (kAmax) block_amax_to_global(acc, amax_bits);
}

__global__ void scale_from_amax_kernel(const float* amax, float fp8_max, std::int32_t margin, float* scale,
                                       float* inv_scale) {
  const float s = fp8::scale_from_amax(*amax, fp8_max, margin, 1.0f);
  *scale = s;
  *inv_scale = inverse_scale(s);
}

__global__ void delayed_update_kernel(float* ring, std::int32_t length, std::int32_t next, std::int32_t count,
                                      const float* amax, float* scale, float* pass_inv_scale, float fp8_max,
                                      std::int32_t margin) {
  const float a = *amax;
  const float used = *scale;
  *pass_inv_scale = dequant_scale_for_pass(used, a);
  *scale = delayed_record_and_rescale(ring, length, next, count, a, used, fp8_max, margin);
}

void check_launch(const char* who) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": kernel launch failed: " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
  }
}

unsigned blocks_for(std::int64_t n, std::int64_t per_thread) {
  const std::int64_t threads_needed = (n + per_thread - 1) / per_thread;
  return static_cast<unsigned>(std::clamp<std::int64_t>((threads_needed + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <Fp8Format Fmt, bool kAmax>
void launch_cast(const Fp8Source& src, const float* scale, std::uint8_t* out, unsigned int* amax_bits,
                 cudaStream_t s) {
  const unsigned blocks = blocks_for(src.numel, src.dtype == DType::Float32 ? 4 : 8);
  switch (src.dtype) {
    case DType::Float32:
      cast_kernel<Fmt, kAmax, DType::Float32><<<blocks, kThreads, 0, s>>>(src.data, src.numel, scale, out, amax_bits);
      break;
    case DType::BFloat16:
      cast_kernel<Fmt, kAmax, DType::BFloat16><<<blocks, kThreads, 0, s>>>(src.data, src.numel, scale, out, amax_bits);
      break;
    case DType::Float16:
      cast_kernel<Fmt, kAmax, DType::Float16><<<blocks, kThreads, 0, s>>>(src.data, src.numel, scale, out, amax_bits);
      break;
    case DType::Float64:
      break;  // refused by validate_fp8_source
  }
}

void clear_amax(float* amax_out, cudaStream_t s, const char* who) {
  const cudaError_t err = cudaMemsetAsync(amax_out, 0, sizeof(float), s);
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": cudaMemsetAsync failed: " + cudaGetErrorString(err));
  }
}

}  // namespace

void amax(const Fp8Source& src, float* amax_out, void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::cuda::amax";
  validate_fp8_source(src, kWho);
  if (amax_out == nullptr) throw_invalid_argument(std::string(kWho) + ": amax_out must not be null");
  auto s = static_cast<cudaStream_t>(stream);
  clear_amax(amax_out, s, kWho);
  if (src.numel == 0) return;
  auto* bits = reinterpret_cast<unsigned int*>(amax_out);
  const unsigned blocks = blocks_for(src.numel, src.dtype == DType::Float32 ? 4 : 8);
  switch (src.dtype) {
    case DType::Float32: amax_kernel<DType::Float32><<<blocks, kThreads, 0, s>>>(src.data, src.numel, bits); break;
    case DType::BFloat16: amax_kernel<DType::BFloat16><<<blocks, kThreads, 0, s>>>(src.data, src.numel, bits); break;
    case DType::Float16: amax_kernel<DType::Float16><<<blocks, kThreads, 0, s>>>(src.data, src.numel, bits); break;
    case DType::Float64: break;
  }
  check_launch(kWho);
}

void scale_cast(const Fp8Source& src, const float* scale, Fp8Format format, std::uint8_t* out, float* amax_out,
                void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::cuda::scale_cast";
  validate_fp8_source(src, kWho);
  if (scale == nullptr) throw_invalid_argument(std::string(kWho) + ": scale must not be null");
  if (src.numel > 0 && out == nullptr) throw_invalid_argument(std::string(kWho) + ": null output pointer");
  auto s = static_cast<cudaStream_t>(stream);
  if (amax_out != nullptr) clear_amax(amax_out, s, kWho);
  if (src.numel == 0) return;
  auto* bits = reinterpret_cast<unsigned int*>(amax_out);
  const bool e4m3 = format == Fp8Format::E4M3FN;
  if (amax_out != nullptr) {
    e4m3 ? launch_cast<Fp8Format::E4M3FN, true>(src, scale, out, bits, s)
         : launch_cast<Fp8Format::E5M2, true>(src, scale, out, bits, s);
  } else {
    e4m3 ? launch_cast<Fp8Format::E4M3FN, false>(src, scale, out, nullptr, s)
         : launch_cast<Fp8Format::E5M2, false>(src, scale, out, nullptr, s);
  }
  check_launch(kWho);
}

// Note [fp8 rowwise kernels]
// Row-wise scales (Note [fp8 power-of-two scale] in fp8_scale.h), the element logic of the
// tensorwise kernels with one scale per slice:
// - per row: one block per row. Its threads take the row's amax (16-byte loads where the row and
//   its output are aligned for them), the block reduces it, thread 0 computes the row's scale and
//   inverse, and the block casts the row (a second read, mostly from L2).
// - per column: three launches. column_amax_kernel: blocks of 32 columns x 8 rows of threads,
//   each block a strip of rows (grid-stride in y), one atomicMax per column and block into the
//   workspace (magnitude bits, Note [amax]); column_scale_kernel: one thread per column turns its
//   amax into the scale (in place) and the inverse; column_cast_kernel: the same tiling, each
//   thread casting its column's elements of the strip. A warp reads 32 consecutive elements of a
//   row and writes 32 consecutive bytes.
// A slice with a NaN scale is written as kNanScaleCode (Note [fp8 NaN scale] in fp8_element.h).
namespace {

constexpr int kColumnTile = 32;
constexpr int kColumnRowThreads = kThreads / kColumnTile;  // 8
constexpr std::int64_t kColumnRowsPerBlock = 256;

// The block's max of `local` (magnitude bits), returned to every thread.
__device__ std::uint32_t block_max_bits(std::uint32_t local) {
  __shared__ std::uint32_t warp_max[kThreads / 32];
  __shared__ std::uint32_t result;
  local = warp_max_bits(local);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    std::uint32_t v = threadIdx.x < kThreads / 32 ? warp_max[threadIdx.x] : 0u;
    v = warp_max_bits(v);
    if (threadIdx.x == 0) result = v;
  }
  __syncthreads();
  return result;
}

template <Fp8Format Fmt, DType D>
__global__ void __launch_bounds__(kThreads) row_cast_kernel(const void* src, std::int64_t cols, std::int32_t margin,
                                                            std::uint8_t* out, float* inv_scales) {
  using S = typename Storage<D>::T;
  constexpr int kPer = 16 / sizeof(S);
  using C = typename Codes<kPer>::T;
  using W = ScalarWords;
  const std::int64_t row = blockIdx.x;
  const S* x = static_cast<const S*>(src) + row * cols;
  std::uint8_t* o = out + row * cols;
  const bool vectorised =
      (reinterpret_cast<std::uintptr_t>(x) & 15u) == 0 && (reinterpret_cast<std::uintptr_t>(o) % kPer) == 0;
  const std::int64_t vectors = vectorised ? cols / kPer : 0;
  const uint4* pv = reinterpret_cast<const uint4*>(x);

  std::uint32_t acc = 0;
  for (std::int64_t v = threadIdx.x; v < vectors; v += kThreads) acc = vector_amax<D>(pv[v], acc);
  for (std::int64_t i = vectors * kPer + threadIdx.x; i < cols; i += kThreads) {
    acc = W::max(acc, magnitude_bits<W>(widen_element<D>(x, i)));
  }
  __shared__ float row_scale;
  const std::uint32_t amax = block_max_bits(acc);
  if (threadIdx.x == 0) {
    const float s = power_of_two_scale(float_of(amax), Fp8Traits<Fmt>::kMax, margin);
    row_scale = s;
    inv_scales[row] = inverse_scale(s);
  }
  __syncthreads();
  const float scale = row_scale;
  if (!is_finite_float(scale)) {  // Note [fp8 NaN scale]
    for (std::int64_t i = threadIdx.x; i < cols; i += kThreads) o[i] = kNanScaleCode;
    return;
  }

  std::uint32_t unused = 0;
  C* po = reinterpret_cast<C*>(o);
  for (std::int64_t v = threadIdx.x; v < vectors; v += kThreads) po[v] = vector_codes<Fmt, false, D>(pv[v], scale, unused);
  for (std::int64_t i = vectors * kPer + threadIdx.x; i < cols; i += kThreads) {
    o[i] = static_cast<std::uint8_t>(quantize_element<Fmt, false, W>(widen_element<D>(x, i), scale, unused));
  }
}

template <DType D>
__global__ void __launch_bounds__(kThreads) column_amax_kernel(const void* src, std::int64_t rows, std::int64_t cols,
                                                               unsigned int* amax_bits) {
  using W = ScalarWords;
  __shared__ std::uint32_t partial[kColumnRowThreads][kColumnTile + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  std::uint32_t acc = 0;
  if (c < cols) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.y) * kColumnRowThreads;
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kColumnRowThreads + threadIdx.y; r < rows; r += stride) {
      acc = W::max(acc, magnitude_bits<W>(widen_element<D>(src, r * cols + c)));
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
#pragma unroll
    for (int k = 1; k < kColumnRowThreads; ++k) acc = W::max(acc, partial[k][threadIdx.x]);
    if (acc != 0) atomicMax(amax_bits + c, acc);
  }
}

__global__ void column_scale_kernel(float* amax_then_scale, std::int64_t cols, float fp8_max, std::int32_t margin,
                                    float* inv_scales) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  const float s = power_of_two_scale(amax_then_scale[c], fp8_max, margin);
  amax_then_scale[c] = s;
  inv_scales[c] = inverse_scale(s);
}

template <Fp8Format Fmt, DType D>
__global__ void __launch_bounds__(kThreads) column_cast_kernel(const void* src, std::int64_t rows, std::int64_t cols,
                                                               const float* scales, std::uint8_t* out) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  if (c >= cols) return;
  const float scale = scales[c];
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.y) * kColumnRowThreads;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kColumnRowThreads + threadIdx.y; r < rows; r += stride) {
    const std::int64_t i = r * cols + c;
    out[i] = quantize_slice_element<Fmt>(widen_element<D>(src, i), scale);
  }
}

// Column tiles across x; strips of about kColumnRowsPerBlock rows across y, at most enough blocks
// in all to fill a GPU several times over (kMaxBlocks) and at most 65535 strips.
dim3 column_grid(std::int64_t rows, std::int64_t cols) {
  const std::int64_t tiles = (cols + kColumnTile - 1) / kColumnTile;
  const std::int64_t strips_cap = std::clamp<std::int64_t>(kMaxBlocks / tiles, 1, 65535);
  const std::int64_t strips = std::clamp<std::int64_t>((rows + kColumnRowsPerBlock - 1) / kColumnRowsPerBlock, 1, strips_cap);
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(strips));
}

template <Fp8Format Fmt, DType D>
void launch_rowwise(const Fp8Source& src, std::int64_t rows, std::int64_t cols, Fp8Slices slices, std::int32_t margin,
                    std::uint8_t* out, float* inv_scales, float* workspace, cudaStream_t s) {
  if (slices == Fp8Slices::Rows) {
    row_cast_kernel<Fmt, D><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(src.data, cols, margin, out, inv_scales);
    return;
  }
  const dim3 grid = column_grid(rows, cols);
  const dim3 block(kColumnTile, kColumnRowThreads);
  column_amax_kernel<D><<<grid, block, 0, s>>>(src.data, rows, cols, reinterpret_cast<unsigned int*>(workspace));
  column_scale_kernel<<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      workspace, cols, Fp8Traits<Fmt>::kMax, margin, inv_scales);
  column_cast_kernel<Fmt, D><<<grid, block, 0, s>>>(src.data, rows, cols, workspace, out);
}

template <Fp8Format Fmt>
void launch_rowwise_for_dtype(const Fp8Source& src, std::int64_t rows, std::int64_t cols, Fp8Slices slices,
                              std::int32_t margin, std::uint8_t* out, float* inv_scales, float* workspace,
                              cudaStream_t s) {
  switch (src.dtype) {
    case DType::Float32: launch_rowwise<Fmt, DType::Float32>(src, rows, cols, slices, margin, out, inv_scales, workspace, s); break;
    case DType::BFloat16: launch_rowwise<Fmt, DType::BFloat16>(src, rows, cols, slices, margin, out, inv_scales, workspace, s); break;
    case DType::Float16: launch_rowwise<Fmt, DType::Float16>(src, rows, cols, slices, margin, out, inv_scales, workspace, s); break;
    case DType::Float64: break;  // refused by validate_fp8_source
  }
}

}  // namespace

void rowwise_cast(const Fp8Source& src, std::int64_t rows, std::int64_t cols, Fp8Slices slices, Fp8Format format,
                  std::int32_t margin, std::uint8_t* out, float* inv_scales, float* workspace, void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::cuda::rowwise_cast";
  validate_fp8_source(src, kWho);
  if (rows < 0 || cols < 0 || rows * cols != src.numel) {
    throw_invalid_argument(std::string(kWho) + ": rows * cols must equal the source's numel");
  }
  if (margin < 0 || margin > 64) throw_invalid_argument(std::string(kWho) + ": margin must be in [0, 64]");
  if (src.numel == 0) return;
  if (out == nullptr || inv_scales == nullptr || (slices == Fp8Slices::Columns && workspace == nullptr)) {
    throw_invalid_argument(std::string(kWho) + ": null output or workspace pointer");
  }
  if (slices == Fp8Slices::Rows && rows > 0x7fffffff) throw_invalid_argument(std::string(kWho) + ": more than 2^31 - 1 rows");
  auto s = static_cast<cudaStream_t>(stream);
  if (slices == Fp8Slices::Columns) {
    const cudaError_t err = cudaMemsetAsync(workspace, 0, static_cast<std::size_t>(cols) * sizeof(float), s);
    if (err != cudaSuccess) throw std::runtime_error(std::string(kWho) + ": cudaMemsetAsync failed: " + cudaGetErrorString(err));
  }
  format == Fp8Format::E4M3FN
      ? launch_rowwise_for_dtype<Fp8Format::E4M3FN>(src, rows, cols, slices, margin, out, inv_scales, workspace, s)
      : launch_rowwise_for_dtype<Fp8Format::E5M2>(src, rows, cols, slices, margin, out, inv_scales, workspace, s);
  check_launch(kWho);
}

// Note [byte transpose]
// A 64 x 64 tile of bytes per block of 16 x 16 threads. Loading, thread (x, y) reads the 4-byte
// word x of tile rows y, y + 16, y + 32, y + 48 (a half-warp reads 64 contiguous bytes of one
// row) into a shared tile of words padded to 17 per row. Storing, the same thread assembles output
// word x of tile columns y, y + 16, ...: byte k of it is byte `column` of tile row 4x + k, so the
// output rows are written 64 contiguous bytes at a time too. Dimensions are multiples of 4, so a
// word is wholly inside the matrix or wholly outside (edge tiles check words, not bytes).
namespace {

constexpr int kTile = 64;
constexpr int kTileWords = kTile / 4;
constexpr int kTileThreads = 16;

__global__ void __launch_bounds__(kTileThreads * kTileThreads)
    transpose_bytes_kernel(const std::uint32_t* src, std::uint32_t* dst, std::int64_t rows, std::int64_t cols) {
  __shared__ std::uint32_t tile[kTile][kTileWords + 1];
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t src_words = cols / 4, dst_words = rows / 4;
  const int x = threadIdx.x, y = threadIdx.y;
  for (int r = y; r < kTile; r += kTileThreads) {
    const std::int64_t row = row0 + r, col = col0 + 4 * x;
    if (row < rows && col < cols) tile[r][x] = src[row * src_words + col / 4];
  }
  __syncthreads();
  for (int c = y; c < kTile; c += kTileThreads) {
    const std::int64_t out_row = col0 + c, out_col = row0 + 4 * x;
    if (out_row >= cols || out_col >= rows) continue;
    const int word = c / 4, shift = 8 * (c % 4);
    std::uint32_t out = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) out |= ((tile[4 * x + k][word] >> shift) & 0xFFu) << (8 * k);
    dst[out_row * dst_words + out_col / 4] = out;
  }
}

}  // namespace

void transpose_bytes(const std::uint8_t* src, std::uint8_t* dst, std::int64_t rows, std::int64_t cols,
                     void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::cuda::transpose_bytes";
  if (rows < 0 || cols < 0 || rows % 4 != 0 || cols % 4 != 0) {
    throw_invalid_argument(std::string(kWho) + ": both dimensions must be non-negative multiples of 4");
  }
  if (rows == 0 || cols == 0) return;
  if (src == nullptr || dst == nullptr || (reinterpret_cast<std::uintptr_t>(src) & 3u) != 0 ||
      (reinterpret_cast<std::uintptr_t>(dst) & 3u) != 0) {
    throw_invalid_argument(std::string(kWho) + ": source and destination must be non-null and 4-byte aligned");
  }
  const std::int64_t row_tiles = (rows + kTile - 1) / kTile;
  if (row_tiles > 65535) throw_invalid_argument(std::string(kWho) + ": more than 65535 * 64 rows");
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>(row_tiles));
  const dim3 block(kTileThreads, kTileThreads);
  transpose_bytes_kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const std::uint32_t*>(src), reinterpret_cast<std::uint32_t*>(dst), rows, cols);
  check_launch(kWho);
}

void scale_from_amax(const float* amax, float fp8_max, std::int32_t margin, float* scale, float* inv_scale,
                     void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::cuda::scale_from_amax";
  if (amax == nullptr || scale == nullptr || inv_scale == nullptr) {
    throw_invalid_argument(std::string(kWho) + ": amax, scale and inv_scale must not be null");
  }
  scale_from_amax_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(amax, fp8_max, margin, scale, inv_scale);
  check_launch(kWho);
}

void delayed_update(float* amax_ring, std::int32_t length, std::int32_t next, std::int32_t count, const float* amax,
                    float* scale, float* pass_inv_scale, float fp8_max, std::int32_t margin, void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::cuda::delayed_update";
  if (amax_ring == nullptr || amax == nullptr || scale == nullptr || pass_inv_scale == nullptr) {
    throw_invalid_argument(std::string(kWho) + ": amax_ring, amax, scale and pass_inv_scale must not be null");
  }
  if (length < 1 || next < 0 || next >= length || count < 0) {
    throw_invalid_argument(std::string(kWho) + ": need length >= 1, 0 <= next < length and count >= 0");
  }
  delayed_update_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(amax_ring, length, next, count, amax, scale,
                                                                        pass_inv_scale, fp8_max, margin);
  check_launch(kWho);
}

}  // namespace autocastgen::kernels::fp8::cuda
