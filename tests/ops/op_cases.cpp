#include <set>

#include "ops/op_case.h"

namespace kiln::optest {

namespace {
std::vector<OpCase> collect() {
  std::vector<OpCase> all;
  for (auto family : {elementwise_cases, reduce_cases, pool_norm_resize_cases, tensor_cases, conv_gemm_cases,
                      fused_cases, nhwc_cases, rnn_cases, quant_cases, qfused_cases, loss_cases})
    for (OpCase& c : family()) all.push_back(std::move(c));
  std::set<std::string> names;
  std::string twice;
  for (const OpCase& c : all)
    if (!names.insert(c.name).second) twice += " " + c.name;
  if (!twice.empty()) throw Error("tests/ops: op case names used twice:" + twice);
  return all;
}
}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> all = collect();
  return all;
}

const OpCase& find_case(std::string_view name) {
  for (const OpCase& c : op_cases())
    if (c.name == name) return c;
  throw Error("tests/ops: no op case named " + std::string(name));
}

}  // namespace kiln::optest
