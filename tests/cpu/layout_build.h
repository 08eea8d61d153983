// What the channels-last tests share: a model run through a list of passes, then through the
// channels-last pass as for a GPU target (to_channels_last) if asked, and written as a CPU engine,
// whose kernels take the channels-last ops; so the layout's numbers can be compared on the CPU.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/engine.h"
#include "onnx_model_util.h"
#include "build/build.h"
#include "build/choose_tactics.h"
#include "build/engine_writer.h"
#include "passes/pass.h"
#include "build/view_plan.h"

namespace kiln::test {

// A k x k Conv with random weights and bias, c_in -> c_out channels, `pad` on every side.
inline void add_conv(OnnxModel& m, const std::string& name, const std::string& x, const std::string& y, int64_t c_in,
                     int64_t c_out, int64_t k, int64_t pad, int64_t stride) {
  m.init_rand(name + ".w", {c_out, c_in, k, k}, -0.4f, 0.4f);
  m.init_rand(name + ".b", {c_out}, -0.2f, 0.2f);
  auto* n = m.node("Conv", name, {x, name + ".w", name + ".b"}, {y});
  attr_ints(n, "pads", {pad, pad, pad, pad});
  attr_ints(n, "strides", {stride, stride});
}

struct LayoutBuilt {
  std::vector<uint8_t> engine;
  std::vector<StepInfo> steps;
  passes::PassResult layout;  // what the channels-last pass did (nothing if not asked)
  passes::PassResult after;   // what the last of the `after` passes did
  int count(const std::string& op) const {
    return static_cast<int>(std::count_if(steps.begin(), steps.end(), [&](const StepInfo& s) { return s.op == op; }));
  }
};

// after: passes run after the channels-last pass (if asked); what the last did is in `after`.
inline LayoutBuilt build_layout(const OnnxModel& m, const build::BuildOptions& o,
                                std::initializer_list<passes::PassFn> pipeline, bool channels_last,
                                std::initializer_list<passes::PassFn> after = {}) {
  graph::Graph g = m.import();
  for (passes::PassFn pass : pipeline) {
    pass(g, o);
    graph::verify(g, pass != passes::bind_inputs);
  }
  LayoutBuilt b;
  if (channels_last) {
    b.layout = passes::to_channels_last(g);
    graph::verify(g, true);
    for (passes::PassFn pass : after) {
      b.after = pass(g, o);
      graph::verify(g, true);
    }
  }
  passes::materialize_outputs(g, o);
  const build::EngineProgram program = build::plan_views(g, o);
  b.engine = build::write_engine(program, "cpu", build::choose_tactics(program.graph, o), nullptr);
  b.steps = Engine::from_bytes(b.engine)->summary().steps;
  return b;
}

}  // namespace kiln::test
