// The engine timing behind the GPU builder's INT8-or-float choice (passes/int8_choice.h). The
// choice itself needs a GPU; the timing runs any engine, so it is checked here on CPU engines: it
// must bind every input itself (an engine refuses to run with an input unset) and return a time.
#include <gtest/gtest.h>

#include "onnx_model_util.h"
#include "passes/build.h"
#include "passes/int8_choice.h"

namespace kiln::passes {
namespace {

using namespace kiln::test;

TEST(Int8Choice, TimesAnEngineWithTwoInputs) {
  OnnxModel m("two_inputs");
  m.input("a", {4, 8});
  m.input("b", {8, 3});
  m.node("MatMul", "mm", {"a", "b"}, {"y"});
  m.output("y");
  graph::Graph g = m.import();
  const std::vector<uint8_t> engine = build_engine(g, BuildOptions{});
  const double ms = median_run_ms(engine, 5);
  EXPECT_GT(ms, 0.0);
  EXPECT_LT(ms, 1000.0);
}

}  // namespace
}  // namespace kiln::passes
