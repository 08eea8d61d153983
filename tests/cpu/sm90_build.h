// Builds an engine for sm_90 without a GPU: the build pipeline's passes (build/pipeline.cpp) for a
// GPU target, channels-last included for float16, written without timing tactics.
#pragma once

#include <cstdint>
#include <vector>

#include "build/engine_writer.h"
#include "passes/pass.h"
#include "build/view_plan.h"
#include "onnx_model_util.h"

namespace kiln::test {

inline std::vector<uint8_t> build_sm90(const OnnxModel& m, bool fp16) {
  graph::Graph g = m.import();
  build::BuildOptions o;
  o.target = "sm_90";
  o.fp16 = fp16;
  using passes::PassFn;
  for (PassFn pass : {passes::bind_inputs, passes::infer_and_fold, passes::remove_noop, passes::merge_transpose_reshape,
                      passes::fuse_layernorm, passes::fuse_gelu, passes::fold_pad, passes::fold_batchnorm,
                      passes::fold_scale_shift, passes::remove_identity, passes::fuse_epilogue, passes::fuse_siblings,
                      passes::remove_dead_nodes, passes::to_fp16, passes::channels_last, passes::fuse_conv_input, passes::materialize_outputs}) {
    pass(g, o);
    graph::verify(g, pass != passes::bind_inputs);
  }
  return build::write_engine(build::plan_views(g, o), o.target, {}, nullptr);
}

}  // namespace kiln::test
