// Tensor order in the file: engine inputs, then weights and activations in order of first use.
// Everything is derived from the graph's order, so the same graph always gives the same bytes.
#include "passes/engine_writer.h"

#include <engine_schema_generated.h>

#include "core/attrs_codec.h"
#include "kiln/engine.h"
#include "passes/memory_plan.h"
#include "runtime/engine_format.h"

namespace kiln::passes {

std::vector<uint8_t> write_engine(const graph::Graph& g, const std::string& target, const std::vector<int32_t>& tactics,
                                  BuildReport* report) {
  struct Rec {
    graph::ValueId value;
    fb::TensorKind kind;
    uint64_t offset = 0;
  };
  std::vector<Rec> recs;
  std::vector<int32_t> index(g.values.size(), -1);
  auto add = [&](graph::ValueId v, fb::TensorKind kind) {
    index[static_cast<size_t>(v)] = static_cast<int32_t>(recs.size());
    recs.push_back({v, kind});
  };
  for (graph::ValueId in : g.inputs) add(in, fb::TensorKind::Input);

  // Weights in order of first use, packed 64-byte aligned.
  std::vector<uint8_t> weights;
  std::vector<Lifetime> lifetimes;
  std::vector<size_t> lifetime_rec;
  const int nsteps = static_cast<int>(g.nodes.size());
  for (int s = 0; s < nsteps; ++s) {
    const graph::Node& n = g.nodes[static_cast<size_t>(s)];
    for (graph::ValueId in : n.inputs) {
      if (in == graph::kNoValue || index[static_cast<size_t>(in)] >= 0) continue;
      const graph::Value& v = g.value(in);
      if (!v.is_constant()) throw Error("internal: '" + v.name + "' is read but never written");
      add(in, fb::TensorKind::Weight);
      weights.resize(format::align_up(weights.size(), format::kTensorAlign), 0);
      recs.back().offset = weights.size();
      weights.insert(weights.end(), v.data->begin(), v.data->end());
    }
    for (graph::ValueId out : n.outputs) {
      if (out == graph::kNoValue) continue;
      add(out, g.is_graph_output(out) ? fb::TensorKind::Output : fb::TensorKind::Activation);
      lifetimes.push_back({g.value(out).view().bytes(), s, g.is_graph_output(out) ? nsteps : s});
      lifetime_rec.push_back(recs.size() - 1);
    }
    for (graph::ValueId in : n.inputs) {
      if (in == graph::kNoValue) continue;
      for (size_t l = 0; l < lifetimes.size(); ++l)
        if (recs[lifetime_rec[l]].value == in) lifetimes[l].last = std::max(lifetimes[l].last, s);
    }
  }
  MemoryPlan plan = plan_memory(lifetimes);
  for (size_t l = 0; l < lifetimes.size(); ++l) recs[lifetime_rec[l]].offset = plan.offsets[l];

  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  fbb.ForceDefaults(true);
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const Rec& r : recs) {
    const graph::Value& v = g.value(r.value);
    tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(v.name), static_cast<uint8_t>(v.dtype),
                                       fbb.CreateVector(v.shape), r.kind, r.offset));
  }
  std::vector<flatbuffers::Offset<fb::Step>> steps;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const graph::Node& n = g.nodes[k];
    std::vector<int32_t> ins, outs;
    for (graph::ValueId v : n.inputs) ins.push_back(v == graph::kNoValue ? -1 : index[static_cast<size_t>(v)]);
    for (graph::ValueId v : n.outputs) {
      if (v == graph::kNoValue) throw Error("internal: node '" + n.name + "' has an unnamed output slot");
      outs.push_back(index[static_cast<size_t>(v)]);
    }
    std::vector<uint8_t> attrs = encode_attrs(n.attrs);
    steps.push_back(fb::CreateStep(fbb, static_cast<uint16_t>(n.kind),
                                   fbb.CreateString(n.origin.empty() ? n.name : n.origin), fbb.CreateVector(ins),
                                   fbb.CreateVector(outs), fbb.CreateVector(attrs),
                                   k < tactics.size() ? tactics[k] : -1));
  }
  std::vector<int32_t> in_ids, out_ids;
  for (graph::ValueId v : g.inputs) in_ids.push_back(index[static_cast<size_t>(v)]);
  for (graph::ValueId v : g.outputs) out_ids.push_back(index[static_cast<size_t>(v)]);
  auto root = fb::CreateEngine(fbb, fbb.CreateString("kiln " + std::string(kiln_version())), fbb.CreateString(target),
                               fbb.CreateString(g.name), fbb.CreateVector(tensors), fbb.CreateVector(steps),
                               fbb.CreateVector(in_ids), fbb.CreateVector(out_ids), plan.arena_bytes);
  fbb.Finish(root);

  format::EngineHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.format_version = format::kVersion;
  h.header_bytes = sizeof h;
  h.toc_offset = sizeof h;
  h.toc_bytes = fbb.GetSize();
  h.weights_offset = format::align_up(h.toc_offset + h.toc_bytes, format::kWeightAlign);
  h.weights_bytes = weights.size();
  std::vector<uint8_t> file(h.weights_offset + h.weights_bytes, 0);
  std::memcpy(file.data() + h.toc_offset, fbb.GetBufferPointer(), h.toc_bytes);
  if (!weights.empty()) std::memcpy(file.data() + h.weights_offset, weights.data(), weights.size());
  std::memcpy(file.data(), &h, sizeof h);  // checksum field still zero: the checksum covers the header too
  h.checksum = format::checksum(file);
  std::memcpy(file.data(), &h, sizeof h);
  if (report) {
    report->weight_bytes = weights.size();
    report->arena_bytes = plan.arena_bytes;
    report->peak_live_bytes = plan.peak_live_bytes;
    report->activation_bytes = 0;
    for (const Lifetime& l : lifetimes) report->activation_bytes += l.bytes;
  }
  return file;
}

}  // namespace kiln::passes
