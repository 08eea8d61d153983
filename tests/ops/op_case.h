// The op-case table: for every op kind of src/core/op_kind.h, cases of shapes, attributes, element
// types and edge values, written once per family in tests/ops/<family>_cases.cpp and run by
//   - op_cases_cpu_test: the CPU kernel in float32 against the same kernel in float64 (the
//     reference), on every machine;
//   - op_cases_gpu_test: the GPU kernel against the CPU kernel through tests/gpu/gpu_harness.h
//     (poisoned outputs, guard bytes, misaligned buffers, stream capture), on the GPU machine;
//   - op_coverage_test: every op has cases here, shape inference, a CPU and a GPU kernel.
// Tests of one kernel's internals (tactics, error flags, sizes past 2^31) stay in tests/gpu and
// tests/cpu and take their inputs from this table where they need a case (find_case).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ops/op_harness.h"

namespace kiln::optest {

using Inputs = std::vector<HostTensor>;

// One run of an op: its attributes and inputs, how many outputs it has, and how close another
// backend's outputs must be to the reference's (a function of the reference output; empty: exact).
struct OpRun {
  Attrs attrs;
  Inputs in;
  size_t n_out = 1;
  ToleranceFn tol = nullptr;  // empty: exact
};
using OpRuns = std::vector<OpRun>;

// How the GPU check runs a case's runs.
enum class GpuModes {
  kEveryRun,    // every run direct, misaligned and captured
  kLargestRun,  // every run direct; the largest (where the vector paths run) also misaligned and captured
};

struct OpCase {
  std::string name;  // unique: the op, then the variant ("Gelu_tanh")
  OpKind kind;
  std::vector<DataType> dtypes;          // one pass of runs() per type; empty: one pass, runs(kMixed)
  std::function<OpRuns(DataType)> runs;  // the runs for one element type (fresh random values)
  GpuModes modes = GpuModes::kEveryRun;
  int direct_runs = 1;   // launches per direct run (2: the second reuses the step state)
  int32_t tactic = -1;   // the tactic the GPU check runs (-1: the kernel's default)
  bool tactics = false;  // the GPU check also runs every tactic the kernel offers
};

// GoogleTest prints a case by its name.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// The type argument of runs() for cases whose inputs mix element types (dtypes empty).
inline constexpr DataType kMixed = DataType::kFloat32;

// Accuracy classes as a tolerance function.
inline ToleranceFn accuracy(Accuracy acc) {
  return [acc](const HostTensor& want) { return tolerance_for(want.dtype, acc); };
}
// Input sets that share attributes, output count and tolerance.
inline OpRuns runs_of(const Attrs& attrs, std::vector<Inputs> sets, size_t n_out, const ToleranceFn& tol) {
  OpRuns r;
  for (Inputs& in : sets) r.push_back(OpRun{attrs, std::move(in), n_out, tol});
  return r;
}

// The element types of a case's passes: its dtypes, or kMixed once.
inline std::vector<DataType> dtypes_of(const OpCase& c) {
  return c.dtypes.empty() ? std::vector<DataType>{kMixed} : c.dtypes;
}

// A case whose input sets mix element types (losses, integer quantization): sets that share
// attributes, an accuracy class and an output count.
struct MixedCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::function<std::vector<Inputs>()> inputs;
  Accuracy acc = Accuracy::kExact;
  size_t n_out = 1;

  OpCase op_case() const {
    return {name, kind, {}, [c = *this](DataType) { return runs_of(c.attrs, c.inputs(), c.n_out, accuracy(c.acc)); }};
  }
};

// A case of one run per element type whose tolerance depends on its inputs (the dot-product ops:
// the number of products summed, their size). Direct runs launch twice: the second reuses the
// step state (no setup) and must give the same result.
inline OpCase one_run_case(std::string name, OpKind kind, Attrs attrs, std::vector<DataType> dtypes,
                           std::function<Inputs(DataType)> inputs, std::function<ToleranceFn(const Inputs&)> tolerance,
                           bool tactics) {
  OpCase c{std::move(name), kind, std::move(dtypes), [attrs, inputs, tolerance](DataType dt) {
             Inputs in = inputs(dt);
             ToleranceFn tol = tolerance(in);
             return OpRuns{{attrs, std::move(in), 1, std::move(tol)}};
           }};
  c.direct_runs = 2;
  c.tactics = tactics;
  return c;
}

// Each family's cases (tests/ops/<family>_cases.cpp).
std::vector<OpCase> elementwise_cases();
std::vector<OpCase> reduce_cases();
std::vector<OpCase> pool_norm_resize_cases();
std::vector<OpCase> tensor_cases();
std::vector<OpCase> conv_gemm_cases();
std::vector<OpCase> fused_cases();
std::vector<OpCase> nhwc_cases();
std::vector<OpCase> rnn_cases();
std::vector<OpCase> quant_cases();
std::vector<OpCase> qfused_cases();
std::vector<OpCase> loss_cases();

// All of them, in that order; names are unique.
const std::vector<OpCase>& op_cases();
// The case named `name`; throws kiln::Error if there is none.
const OpCase& find_case(std::string_view name);

}  // namespace kiln::optest
