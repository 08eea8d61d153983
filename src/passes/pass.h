// One pass per file. A pass rewrites the graph in place and returns how many changes it made.
// build/pipeline.cpp holds the one ordered list of passes, with the reason for each position.
#pragma once

#include <string>
#include <vector>

#include "build/options.h"
#include "graph/graph.h"

namespace kiln::passes {

using build::BuildOptions;

struct PassResult {
  int changes = 0;
  std::string detail;  // shown by `kiln optimize -v`
};

using PassFn = PassResult (*)(graph::Graph& g, const BuildOptions& options);

struct Pass {
  const char* name;
  bool required;  // required passes cannot be disabled: the engine cannot be built without them
  PassFn run;
};

PassResult bind_inputs(graph::Graph& g, const BuildOptions& options);
PassResult infer_and_fold(graph::Graph& g, const BuildOptions& options);
PassResult remove_noop(graph::Graph& g, const BuildOptions& options);
PassResult merge_transpose_reshape(graph::Graph& g, const BuildOptions& options);
PassResult fuse_layernorm(graph::Graph& g, const BuildOptions& options);
PassResult fuse_gelu(graph::Graph& g, const BuildOptions& options);
PassResult fuse_attention(graph::Graph& g, const BuildOptions& options);
PassResult fold_pad(graph::Graph& g, const BuildOptions& options);
PassResult fold_batchnorm(graph::Graph& g, const BuildOptions& options);
PassResult fold_scale_shift(graph::Graph& g, const BuildOptions& options);
PassResult remove_identity(graph::Graph& g, const BuildOptions& options);
PassResult conv_patches(graph::Graph& g, const BuildOptions& options);
PassResult fuse_epilogue(graph::Graph& g, const BuildOptions& options);
PassResult fuse_siblings(graph::Graph& g, const BuildOptions& options);
PassResult pad_gemm_columns(graph::Graph& g, const BuildOptions& options);  // GPU targets
PassResult remove_dead_nodes(graph::Graph& g, const BuildOptions& options);
PassResult fuse_qdq(graph::Graph& g, const BuildOptions& options);
PassResult fuse_qresidual(graph::Graph& g, const BuildOptions& options);
PassResult to_fp16(graph::Graph& g, const BuildOptions& options);
PassResult channels_last(graph::Graph& g, const BuildOptions& options);  // GPU --fp16/--int8, CPU float32 with oneDNN
PassResult to_channels_last(graph::Graph& g);  // channels_last's rewrite, for any target (tests)
PassResult fuse_conv_input(graph::Graph& g, const BuildOptions& options);
PassResult fuse_conv_quantize(graph::Graph& g, const BuildOptions& options);
PassResult fuse_conv_pool(graph::Graph& g, const BuildOptions& options);
PassResult materialize_outputs(graph::Graph& g, const BuildOptions& options);

// The inputs whose values determine shapes in g (directly or through shape computations), i.e.
// the inputs that must be frozen with BuildOptions::constant_inputs.
std::vector<std::string> shape_determining_inputs(const graph::Graph& g);

}  // namespace kiln::passes
