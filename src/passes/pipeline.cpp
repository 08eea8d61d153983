#include <chrono>
#include <set>

#include "passes/choose_tactics.h"
#include "passes/engine_writer.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {

// The pipeline, in order.
constexpr Pass kPipeline[] = {
    // Shapes must be static before anything else: symbolic batch dims get --batch, frozen inputs
    // become constants.
    {"bind-inputs", true, bind_inputs},
    // Types every value and folds nodes whose inputs are all constant (shape computations such as
    // Shape -> Gather -> Concat -> Reshape). Shape operands must be constant to infer what follows,
    // so inference and folding run together, node by node.
    {"infer-and-fold", true, infer_and_fold},
    // Needs the constant BN parameters and static shapes that folding leaves; before the removals.
    {"fold-batchnorm", false, fold_batchnorm},
    // Identity and inference-mode Dropout only copy; after folding, so that folded chains that end
    // in an Identity disappear too.
    {"remove-identity", false, remove_identity},
    // After the folds and removals, so that Conv -> BN -> Relu reads Conv -> Relu and no Identity
    // sits inside a chain; before to-fp16, so that bias constants fold in float32.
    {"fuse-epilogue", false, fuse_epilogue},
    // Last of the rewrites: removes what the passes above left unused.
    {"remove-dead-nodes", false, remove_dead_nodes},
    // Precision last among the rewrites, so that the rewrites above see (and fold) float32
    // constants; only with --fp16.
    {"to-fp16", false, to_fp16},
    // After to-fp16: only float16 convolutions take the channels-last layout (GPU targets only).
    {"channels-last", false, channels_last},
    // Every engine output must be written by a step: outputs that are inputs or constants (or
    // listed twice) get an explicit copy.
    {"materialize-outputs", true, materialize_outputs},
};

}  // namespace

std::vector<uint8_t> build_engine(graph::Graph& g, const BuildOptions& options, BuildReport* report) {
  BuildReport local;
  BuildReport& r = report ? *report : local;
  r.nodes_in = g.nodes.size();
  std::set<std::string> disabled(options.disabled_passes.begin(), options.disabled_passes.end());
  for (const std::string& name : disabled) {
    bool known = false;
    for (const Pass& p : kPipeline) known |= name == p.name;
    if (!known) {
      std::string names;
      for (const Pass& p : kPipeline) names += (names.empty() ? "" : ", ") + std::string(p.name);
      throw Error("--disable-pass " + name + ": no such pass (passes: " + names + ")");
    }
  }
  for (const Pass& p : kPipeline) {
    if (disabled.count(p.name)) {
      if (p.required) throw Error(std::string("pass ") + p.name + " is required and cannot be disabled");
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    PassResult res = p.run(g, options);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.passes.push_back({p.name, res.changes, res.detail});
    if (options.log)
      options.log(std::string(p.name) + ": " + std::to_string(res.changes) + " change" + (res.changes == 1 ? "" : "s") +
                  (res.detail.empty() ? "" : " (" + res.detail + ")") + ", " + std::to_string(static_cast<int>(ms)) +
                  " ms");
    graph::verify(g, p.run != bind_inputs);
  }
  r.nodes_out = g.nodes.size();
  std::vector<uint8_t> bytes = write_engine(g, options.target, choose_tactics(g, options), &r);
  r.engine_bytes = bytes.size();
  return bytes;
}

}  // namespace kiln::passes
