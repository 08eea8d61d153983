// ONNX -> Graph. Opsets 7 to 21 of the default domain; older models import where their ops'
// early semantics are covered by a rule (onnx_import_rules.cpp) or unchanged. Older forms are rewritten to the newest
// (attributes that became inputs become constant inputs), so the rest of Kiln sees one form per op. Every problem is
// collected, and one kiln::Error names each unsupported op type with the nodes that use it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor_file.h"

namespace onnx {
class ModelProto;
}

namespace kiln::graph {

inline constexpr int64_t kMinOpset = 1;
inline constexpr int64_t kMaxOpset = 23;

// What the importer needs beyond the file: the length of each sequence the graph takes as an
// input. Each such input becomes that many tensor inputs, sequence_element(name, i), and each
// sequence the graph outputs that many tensor outputs (`kiln run` reads and writes them as ONNX
// SequenceProto files).
// And the values of inputs that decide what the importer unrolls or keeps: a Loop's trip count
// and condition, the condition of an If whose branches give sequences, a sequence position. Such
// an input with a value here becomes a constant (as `--const` freezes one after import); `kiln
// run` gives its data.
// An optional input (ONNX's optional type) is present or not, as `optional_present` says: present,
// it is the tensor or sequence input it holds; absent, no input at all.
struct ImportOptions {
  std::map<std::string, int64_t> sequence_lengths;
  std::map<std::string, bool> optional_present;
  std::map<std::string, HostTensor> input_values;
};
std::string sequence_element(const std::string& sequence, int64_t i);  // "NAME[i]"

// Reads a model file; external data files are looked up next to it.
Graph import_onnx(const std::filesystem::path& path, const ImportOptions& options = {});
// Parses a model held in memory. `origin` names it in messages; external data is resolved against
// base_dir (empty: external data is refused).
Graph import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& origin,
                        const std::filesystem::path& base_dir, const ImportOptions& options = {});

// A model's graph inputs (initializers left out) and outputs in order, each with whether it is a
// sequence and whether it is optional.
struct OnnxIoValue {
  std::string name;
  bool sequence = false, optional = false;
};
struct OnnxIo {
  std::vector<OnnxIoValue> inputs, outputs;
};

// A model file parsed once: its inputs and outputs before the import (what `kiln run` needs to
// read its data and fill ImportOptions), then the import itself, which consumes the parse.
class OnnxFile {
 public:
  explicit OnnxFile(const std::filesystem::path& path);
  ~OnnxFile();
  const OnnxIo& io() const { return io_; }
  Graph import(const ImportOptions& options = {});  // once

 private:
  std::filesystem::path path_;
  std::unique_ptr<onnx::ModelProto> model_;
  OnnxIo io_;
};

// Every ONNX op type the importer accepts (the op table's names plus Constant, renamed legacy
// ops such as Upsample, the function ops and the lowered ops below), sorted.
std::vector<std::string> importable_op_types();
// The op types Kiln imports as the function body ONNX's schemas define for them (at the newest
// opset Kiln reads), each with the op types of its body, all of which Kiln imports natively.
// Any op type ONNX or the model defines by a function is expanded at import; these are the
// ones known to import whole.
std::map<std::string, std::vector<std::string>> function_op_types();
// The op types Kiln rewrites at import into others where what they depend on is known then, each
// with how: sequences of a known length at constant positions (onnx_sequences.cpp), Scan of a
// known length (onnx_scan.cpp).
const std::map<std::string, std::string>& lowered_op_types();

}  // namespace kiln::graph
