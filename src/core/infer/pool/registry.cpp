// The pool family's registry: the entries of its groups window.cpp, global.cpp and nhwc.cpp.
#include "core/infer/pool/pool_internal.h"

namespace kiln {

namespace {

constexpr InferEntry kEntries[] = {
    // window.cpp
    {OpKind::kAveragePool, nn::infer_pool},
    {OpKind::kMaxPool, nn::infer_pool},
    // global.cpp
    {OpKind::kGlobalAveragePool, nn::infer_global_pool},
    {OpKind::kGlobalMaxPool, nn::infer_global_pool},
    // nhwc.cpp
    {OpKind::kNhwcAveragePool, nn::infer_nhwc_pool},
    {OpKind::kNhwcMaxPool, nn::infer_nhwc_pool},
};

}  // namespace

std::span<const InferEntry> pool_infer_entries() { return kEntries; }

}  // namespace kiln
