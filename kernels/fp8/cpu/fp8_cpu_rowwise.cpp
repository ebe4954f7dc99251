// CPU fp8 quantisation with row-wise scales over the span loops: per row, or per column in column blocks.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "autocastgen/kernels/fp8_cpu.h"
#include "autocastgen/kernels/fp8_scale.h"
#include "fp8_span_kernels.h"

namespace autocastgen::kernels::fp8 {
namespace {

// Columns per block of the per-column kernel: each worker keeps this many running amaxes and
// reads this many consecutive elements of every row (a few cache lines).
constexpr std::int64_t kRowwiseColumnBlock = 128;

// Calls body(begin, end) over pieces of [0, units) (`per_piece` units each, the last shorter) on
// the executor's workers, dynamically as the tensorwise kernels do.
template <class Body>
void for_each_rowwise_piece(std::int64_t units, std::int64_t per_piece, std::int64_t elements,
                            const Fp8CpuOptions& options, const Body& body) {
  if (units == 0) return;
  const Executor& executor = options.executor != nullptr ? *options.executor : thread_executor();
  const std::int64_t pieces = (units + per_piece - 1) / per_piece;
  const std::int64_t workers = std::clamp<std::int64_t>(executor.workers_for(elements), 1, pieces);
  std::atomic<std::int64_t> next_piece{0};
  executor.run(workers, [&](std::int64_t) {
    for (std::int64_t p = next_piece.fetch_add(1, std::memory_order_relaxed); p < pieces;
         p = next_piece.fetch_add(1, std::memory_order_relaxed)) {
      body(p * per_piece, std::min(units, (p + 1) * per_piece));
    }
  });
}

// Columns [c0, c1) of every row: the amax of each column, its scale, then the cast, a row segment
// at a time through the span loops.
void rowwise_column_block(const detail::Fp8SpanKernels& k, const Fp8Source& src, std::int64_t rows, std::int64_t cols,
                          std::int64_t c0, std::int64_t c1, Fp8Format format, std::int32_t margin, std::uint8_t* out,
                          float* inv_scales) {
  const int d = static_cast<int>(src.dtype);
  const std::size_t element = dtype_size(src.dtype);
  const auto* bytes = static_cast<const unsigned char*>(src.data);
  const std::int64_t width = c1 - c0;
  std::uint32_t amax[kRowwiseColumnBlock] = {};
  for (std::int64_t r = 0; r < rows; ++r) {
    k.amax_columns[d](bytes + static_cast<std::size_t>(r * cols + c0) * element, width, amax);
  }
  float scale[kRowwiseColumnBlock];
  for (std::int64_t j = 0; j < width; ++j) {
    scale[j] = power_of_two_scale(float_of(amax[j]), fp8_max(format), margin);
    inv_scales[c0 + j] = inverse_scale(scale[j]);
  }
  const detail::CastColumnsSpan cast = k.cast_columns[static_cast<int>(format)][d];
  for (std::int64_t r = 0; r < rows; ++r) {
    cast(bytes + static_cast<std::size_t>(r * cols + c0) * element, width, scale, out + r * cols + c0);
  }
}

}  // namespace

void rowwise_cast_cpu(const Fp8Source& src, std::int64_t rows, std::int64_t cols, Fp8Slices slices,
                      Fp8Format format, std::int32_t margin, std::uint8_t* out, float* inv_scales,
                      const Fp8CpuOptions& options) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::rowwise_cast_cpu";
  validate_fp8_source(src, kWho);
  if (rows < 0 || cols < 0 || rows * cols != src.numel) {
    throw_invalid_argument(std::string(kWho) + ": rows * cols must equal the source's numel");
  }
  if (margin < 0 || margin > 64) throw_invalid_argument(std::string(kWho) + ": margin must be in [0, 64]");
  const std::int64_t slice_count = slices == Fp8Slices::Rows ? rows : cols;
  if ((src.numel > 0 && out == nullptr) || (slice_count > 0 && inv_scales == nullptr)) {
    throw_invalid_argument(std::string(kWho) + ": null output pointer");
  }
  const detail::Fp8SpanKernels& k = detail::fp8_span_kernels_for(options.isa, kWho);
  const std::size_t element = dtype_size(src.dtype);
  const auto* bytes = static_cast<const unsigned char*>(src.data);
  if (slices == Fp8Slices::Rows) {
    const int d = static_cast<int>(src.dtype);
    const detail::AmaxSpan amax = k.amax[d];
    const detail::CastSpan cast = k.cast[static_cast<int>(format)][0][d];
    const float max = fp8_max(format);
    const std::int64_t per_piece = std::max<std::int64_t>(1, kFp8CpuPieceElements / std::max<std::int64_t>(cols, 1));
    for_each_rowwise_piece(rows, per_piece, src.numel, options, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const unsigned char* row = bytes + static_cast<std::size_t>(r * cols) * element;
        const float scale = power_of_two_scale(float_of(amax(row, cols)), max, margin);
        if (is_finite_float(scale)) {
          (void)cast(row, cols, scale, out + r * cols);
        } else {
          std::memset(out + r * cols, kNanScaleCode, static_cast<std::size_t>(cols));  // Note [fp8 NaN scale]
        }
        inv_scales[r] = inverse_scale(scale);
      }
    });
    return;
  }
  const std::int64_t blocks = (cols + kRowwiseColumnBlock - 1) / kRowwiseColumnBlock;
  for_each_rowwise_piece(blocks, 1, src.numel, options, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t c0 = b * kRowwiseColumnBlock;
      rowwise_column_block(k, src, rows, cols, c0, std::min(cols, c0 + kRowwiseColumnBlock), format, margin, out,
                           inv_scales);
    }
  });
}

}  // namespace autocastgen::kernels::fp8
