// CPU kernels of the tensor family's data-dependent ops: NonZero and NonMaxSuppression. Each packs
// its result at the actual shape at the start of output 0 (whose view has the upper bound's shape)
// and writes the actual extent into output 1, the extent slot (decision 56). NonMaxSuppression
// follows onnxruntime's: candidates above score_threshold by score (ties: the lower index first),
// greedy, a box dropped when its IoU with a kept one exceeds iou_threshold; boxes with no area never
// suppress or get suppressed. A NaN score is never selected. And SelectBranch, an If's outputs: a
// copy of the chosen branch's, whose shapes the runtime inferred from the condition's value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/shape_infer.h"
#include "runtime/cpu/tensor/tensor_internal.h"

namespace kiln::cpu::tensor_ops {

namespace {

void nonzero(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const TensorView& x = in[0];
  // A scalar is one element of one coordinate (0), as in onnxruntime.
  const std::vector<int64_t> shape =
      x.rank() == 0 ? std::vector<int64_t>{1} : std::vector<int64_t>(x.shape.begin(), x.shape.end());
  const int64_t n = x.numel(), rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> hits;
  dispatch_all(x.dtype, "NonZero", [&]<class T>(Tag<T>) {
    const T* p = x.as<T>();
    for (int64_t i = 0; i < n; ++i)
      if (p[i] != T(0)) hits.push_back(i);
  });
  const auto count = static_cast<int64_t>(hits.size());
  // [rank, count], packed: row d holds coordinate d of every hit.
  auto* y = out[0].as<int64_t>();
  const std::vector<int64_t> strides = strides_of(shape);
  for (int64_t k = 0; k < count; ++k) {
    int64_t rest = hits[static_cast<size_t>(k)];
    for (int64_t d = 0; d < rank; ++d) {
      y[d * count + k] = rest / strides[static_cast<size_t>(d)];
      rest %= strides[static_cast<size_t>(d)];
    }
  }
  *out[1].as<int64_t>() = count;
}

struct Box {
  float x0, y0, x1, y1;  // x0 <= x1, y0 <= y1
  float area() const { return (x1 - x0) * (y1 - y0); }
};

Box box_at(const float* b, bool center) {
  if (center) {
    const float hw = b[2] / 2, hh = b[3] / 2;
    return {b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh};
  }
  return {std::min(b[1], b[3]), std::min(b[0], b[2]), std::max(b[1], b[3]), std::max(b[0], b[2])};
}

bool suppresses(const Box& a, const Box& b, float iou_threshold) {
  const float ix0 = std::max(a.x0, b.x0), ix1 = std::min(a.x1, b.x1);
  const float iy0 = std::max(a.y0, b.y0), iy1 = std::min(a.y1, b.y1);
  if (ix1 <= ix0 || iy1 <= iy0) return false;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  const float area_a = a.area(), area_b = b.area(), uni = area_a + area_b - inter;
  if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > iou_threshold;
}

void nms(OpKind, const Attrs& attrs, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const TensorView &boxes = in[0], &scores = in[1];
  const int64_t batches = scores.shape[0], classes = scores.shape[1], n = scores.shape[2];
  const bool center = std::get<NmsAttrs>(attrs).center_point_box == 1;
  auto present = [&](size_t i) { return in.size() > i && in[i].exists; };
  const int64_t max_per_class = present(2) ? std::clamp<int64_t>(*in[2].as<int64_t>(), 0, n) : 0;
  const float iou_threshold = present(3) ? *in[3].as<float>() : 0.0f;
  if (!(iou_threshold >= 0 && iou_threshold <= 1))
    throw Error("NonMaxSuppression: iou_threshold must be in [0, 1], got " + std::to_string(iou_threshold));
  const bool by_score = present(4);
  const float score_threshold = by_score ? *in[4].as<float>() : 0.0f;
  const int64_t bound = out[0].shape[0];
  auto* y = out[0].as<int64_t>();
  int64_t rows = 0;
  std::vector<int64_t> order;
  std::vector<Box> kept;
  for (int64_t b = 0; b < batches; ++b) {
    const float* bx = boxes.as<float>() + b * n * 4;
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = scores.as<float>() + (b * classes + c) * n;
      order.clear();
      for (int64_t i = 0; i < n; ++i)
        if (!std::isnan(s[i]) && (!by_score || s[i] > score_threshold)) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return s[i] > s[j]; });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        const Box cand = box_at(bx + i * 4, center);
        if (std::any_of(kept.begin(), kept.end(), [&](const Box& k) { return suppresses(k, cand, iou_threshold); }))
          continue;
        kept.push_back(cand);
        if (rows >= bound) throw Error("NonMaxSuppression: more selections than the engine's bound");
        y[rows * 3] = b;
        y[rows * 3 + 1] = c;
        y[rows * 3 + 2] = i;
        ++rows;
      }
    }
  }
  *out[1].as<int64_t>() = rows;
}

void select_branch(OpKind, const Attrs&, std::span<const TensorView> in, std::span<const TensorView> out, KernelEnv&) {
  const size_t n = out.size();
  const size_t first = *in[0].as<bool>() ? 1 : 1 + n;
  for (size_t i = 0; i < n; ++i) {
    const TensorView& from = in[first + i];
    if (out[i].bytes() != from.bytes())
      throw Error("If: output " + std::to_string(i) + " has " + std::to_string(out[i].bytes()) +
                  " bytes, its branch's " + std::to_string(from.bytes()));
    if (from.bytes() != 0 && out[i].data != from.data) std::memcpy(out[i].data, from.data, from.bytes());
  }
}

constexpr KernelEntry kEntries[] = {
    {OpKind::kNonZero, nonzero},
    {OpKind::kNonMaxSuppression, nms},
    {OpKind::kSelectBranch, select_branch},
};

}  // namespace

std::span<const KernelEntry> select_kernel_entries() { return kEntries; }

}  // namespace kiln::cpu::tensor_ops
