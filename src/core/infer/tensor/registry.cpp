// The tensor family's registry: the entries of its groups view.cpp, layout.cpp, depth_space.cpp,
// index.cpp, gen.cpp and select.cpp.
#include "core/infer/tensor/tensor_internal.h"

namespace kiln {

namespace {

using namespace tensor_infer;

constexpr InferEntry kEntries[] = {
    // view.cpp
    {OpKind::kReshape, infer_reshape},
    {OpKind::kFlatten, infer_flatten},
    {OpKind::kSqueeze, infer_squeeze},
    {OpKind::kUnsqueeze, infer_unsqueeze},
    {OpKind::kShape, infer_shape},
    {OpKind::kSize, infer_size},
    // layout.cpp
    {OpKind::kTranspose, infer_transpose},
    {OpKind::kSlice, infer_slice},
    {OpKind::kTile, infer_tile},
    {OpKind::kExpand, infer_expand},
    {OpKind::kConcat, infer_concat},
    {OpKind::kSplit, infer_split},
    {OpKind::kPad, infer_pad},
    // depth_space.cpp
    {OpKind::kDepthToSpace, infer_depth_space},
    {OpKind::kSpaceToDepth, infer_depth_space},
    // index.cpp
    {OpKind::kGather, infer_gather},
    {OpKind::kGatherElements, infer_gather_elements},
    {OpKind::kGatherND, infer_gather_nd},
    {OpKind::kScatterElements, infer_scatter_elements},
    {OpKind::kScatterND, infer_scatter_nd},
    // gen.cpp
    {OpKind::kConstantOfShape, infer_constant_of_shape},
    {OpKind::kEyeLike, infer_eye_like},
    {OpKind::kOneHot, infer_one_hot},
    {OpKind::kRange, infer_range},
    {OpKind::kTrilu, infer_trilu},
    // select.cpp
    {OpKind::kNonZero, infer_nonzero},
    {OpKind::kNonMaxSuppression, infer_nms},
    {OpKind::kSelectBranch, infer_select_branch},
};

}  // namespace

std::span<const InferEntry> tensor_infer_entries() { return kEntries; }

}  // namespace kiln
