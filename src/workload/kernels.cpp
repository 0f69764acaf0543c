// What a kernel's tiles compute beyond the model's FLOPs
// (src/workload/internal.hpp; docs/step.md, "Kernel tiles").

#include "workload/internal.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

namespace shardplan::workload_detail {

double causal_block_ratio(int64_t seq, int64_t block_q, int64_t block_kv) {
  if (seq <= 0 || block_q <= 0 || block_kv <= 0) {
    return 1;
  }
  const int64_t bq = std::min(block_q, seq);
  const int64_t bk = std::min(block_kv, seq);
  // Each q block computes the kv blocks up to the one holding its last
  // row's diagonal.
  double computed = 0;
  for (int64_t start = 0; start < seq; start += bq) {
    const int64_t end = std::min(start + bq, seq);
    const int64_t blocks = (end - 1) / bk + 1;
    computed += static_cast<double>(end - start)
                * static_cast<double>(std::min(blocks * bk, seq));
  }
  const auto s = static_cast<double>(seq);
  return computed / (s * s / 2);
}

double grouped_tile_ratio(int64_t rows, int64_t groups, int64_t tile) {
  if (rows <= 0 || tile <= 0) {
    return 1;
  }
  const int64_t filled = (rows + tile - 1) / tile;
  const auto visited =
      static_cast<double>(filled + std::max<int64_t>(groups - 1, 0));
  return visited * static_cast<double>(tile) / static_cast<double>(rows);
}

namespace {

struct TokamaxEntry {
  int64_t rows, k, n, groups;
  std::array<int64_t, 3> tile_rows;  // forward, dlhs, drhs (tgmm)
};

// tokamax 0.0.10's GMM_TILING_TUNED_LUT, GMM_RHS_TRANSPOSE_TILING_TUNED_LUT
// and TGMM_TILING_TUNED_LUT, unquantized entries: each key's tile_m (the
// last of a key written twice, as a Python dict keeps it).
constexpr std::array<TokamaxEntry, 14> k_tokamax = {{
    {262144, 7168, 2048, 256, {256, 256, 512}},
    {262144, 2048, 7168, 256, {128, 256, 256}},
    {327680, 2880, 2880, 128, {512, 512, 512}},
    {393216, 2048, 768, 128, {512, 1024, 512}},
    {393216, 768, 2048, 128, {1024, 512, 512}},
    {524288, 4096, 1536, 128, {256, 1024, 512}},
    {524288, 1536, 4096, 128, {512, 1024, 512}},
    {262144, 4096, 1536, 128, {256, 512, 512}},
    {262144, 1536, 4096, 128, {256, 1024, 512}},
    {131072, 7168, 2048, 256, {512, 512, 256}},
    {131072, 2048, 7168, 256, {128, 512, 256}},
    {131072, 4096, 1536, 128, {256, 512, 512}},
    {131072, 1536, 4096, 128, {256, 512, 512}},
    {65536, 7168, 2048, 256, {256, 512, 256}},
}};

}  // namespace

int64_t tokamax_tile_rows(
    int pass, int64_t rows, int64_t k, int64_t n, int64_t groups) {
  for (const TokamaxEntry& e : k_tokamax) {
    if (e.rows == rows && e.k == k && e.n == n && e.groups == groups) {
      return e.tile_rows[static_cast<size_t>(std::clamp(pass, 0, 2))];
    }
  }
  return 128;
}

}  // namespace shardplan::workload_detail
