// Tensor order in the file: engine inputs, then weights and activations in order of first use (a
// view's root just before the view). Everything is derived from the program's order, so the same
// graph always gives the same bytes. A root and its views get one lifetime in the memory plan: from
// the first step that writes any of them to the last that reads any of them. On a GPU, a side step's
// (runtime/side_steps.h) tensors live across its whole window, from the step after its fork to the
// step before its join, so that the steps it runs beside use other bytes.
#include "build/engine_writer.h"

#include <engine_schema_generated.h>

#include "build/memory_plan.h"
#include "core/attrs_codec.h"
#include "kiln/engine.h"
#include "runtime/cuda/device.h"
#include "runtime/engine_format.h"
#include "runtime/side_steps.h"

namespace kiln::build {

namespace {

// Stretches the lifetimes (per root value) of each side step's tensors over its window. io: each
// step's activations read and written (value ids).
void keep_side_steps_apart(const EngineProgram& p, const std::vector<detail::StepIo>& io, std::vector<int>* first,
                           std::vector<int>* last) {
  const graph::Graph& g = p.graph;
  detail::TensorPlace place;
  place.root.resize(g.values.size());
  place.pinned.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) {
    place.root[v] = static_cast<int32_t>(p.root[v]);
    place.pinned[v] = g.is_graph_output(static_cast<graph::ValueId>(v));
  }
  for (const detail::SideStep& s : detail::find_side_steps(io, place)) {
    const detail::StepIo& x = io[static_cast<size_t>(s.step)];
    for (graph::ValueId v : x.reads) {
      int& l = (*last)[static_cast<size_t>(p.root[static_cast<size_t>(v)])];
      l = std::max(l, s.join - 1);
    }
    for (graph::ValueId v : x.writes) {  // from the step after the fork, and kept until the join
      const size_t r = static_cast<size_t>(p.root[static_cast<size_t>(v)]);
      (*first)[r] = std::min((*first)[r], s.fork + 1);
      (*last)[r] = std::max((*last)[r], s.join - 1);
    }
  }
}

}  // namespace

std::vector<uint8_t> engine_file(std::span<const uint8_t> toc, const std::vector<uint8_t>& weights) {
  format::EngineHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.format_version = format::kVersion;
  h.header_bytes = sizeof h;
  h.toc_offset = sizeof h;
  h.toc_bytes = toc.size();
  h.weights_offset = format::align_up(h.toc_offset + h.toc_bytes, format::kWeightAlign);
  h.weights_bytes = weights.size();
  std::vector<uint8_t> file(h.weights_offset + h.weights_bytes, 0);
  std::memcpy(file.data() + h.toc_offset, toc.data(), h.toc_bytes);
  if (!weights.empty()) std::memcpy(file.data() + h.weights_offset, weights.data(), weights.size());
  std::memcpy(file.data(), &h, sizeof h);  // checksum field still zero: the checksum covers the header too
  h.checksum = format::checksum(file);
  std::memcpy(file.data(), &h, sizeof h);
  return file;
}

std::vector<uint8_t> write_engine(const EngineProgram& p, const std::string& target,
                                  const std::vector<int32_t>& tactics, BuildReport* report) {
  const graph::Graph& g = p.graph;
  struct Rec {
    graph::ValueId value;
    fb::TensorKind kind;
    uint64_t offset = 0;
    int32_t base = -1;
  };
  std::vector<Rec> recs;
  std::vector<int32_t> index(g.values.size(), -1);
  auto add = [&](graph::ValueId v, fb::TensorKind kind) {
    index[static_cast<size_t>(v)] = static_cast<int32_t>(recs.size());
    recs.push_back({v, kind});
  };
  for (graph::ValueId in : g.inputs) add(in, fb::TensorKind::Input);
  auto root_of = [&](graph::ValueId v) { return p.root[static_cast<size_t>(v)]; };
  // An activation, output or view, with its root first.
  auto add_activation = [&](graph::ValueId v) {
    if (index[static_cast<size_t>(v)] >= 0) return;
    const graph::ValueId r = root_of(v);
    if (r != v && index[static_cast<size_t>(r)] < 0)
      add(r, g.is_graph_output(r) ? fb::TensorKind::Output : fb::TensorKind::Activation);
    add(v, g.is_graph_output(v) ? fb::TensorKind::Output : fb::TensorKind::Activation);
    if (r != v) {
      recs.back().base = index[static_cast<size_t>(r)];
      recs.back().offset = p.offset[static_cast<size_t>(v)];
    }
  };

  // Weights in order of first use, packed 64-byte aligned; each root's first writer and last reader.
  std::vector<uint8_t> weights;
  const int nsteps = static_cast<int>(g.nodes.size());
  std::vector<int> first(g.values.size(), -1), last(g.values.size(), -1);
  std::vector<detail::StepIo> io(static_cast<size_t>(nsteps));  // activations read and written, per step
  for (int s = 0; s < nsteps; ++s) {
    const graph::Node& n = g.nodes[static_cast<size_t>(s)];
    for (graph::ValueId in : n.inputs) {
      if (in == graph::kNoValue) continue;
      const graph::Value& v = g.value(in);
      if (v.is_constant()) {
        if (index[static_cast<size_t>(in)] >= 0) continue;
        add(in, fb::TensorKind::Weight);
        weights.resize(format::align_up(weights.size(), format::kTensorAlign), 0);
        recs.back().offset = weights.size();
        weights.insert(weights.end(), v.data->begin(), v.data->end());
        continue;
      }
      const bool is_input = index[static_cast<size_t>(in)] >= 0 &&
                            recs[static_cast<size_t>(index[static_cast<size_t>(in)])].kind == fb::TensorKind::Input;
      if (is_input) continue;
      const auto r = static_cast<size_t>(root_of(in));
      if (first[r] < 0) throw Error("internal: '" + v.name + "' is read but never written");
      add_activation(in);
      last[r] = std::max(last[r], s);
      io[static_cast<size_t>(s)].reads.push_back(in);
    }
    for (graph::ValueId out : n.outputs) {
      if (out == graph::kNoValue) continue;
      add_activation(out);
      io[static_cast<size_t>(s)].writes.push_back(out);
      const auto r = static_cast<size_t>(root_of(out));
      if (first[r] < 0) first[r] = s;
      last[r] = std::max(last[r], s);
    }
  }
  if (target != "cpu") keep_side_steps_apart(p, io, &first, &last);  // the CPU runs steps in order
  std::vector<Lifetime> lifetimes;
  std::vector<size_t> lifetime_rec;
  for (size_t k = 0; k < recs.size(); ++k) {
    const graph::ValueId v = recs[k].value;
    const bool own =
        recs[k].base < 0 && (recs[k].kind == fb::TensorKind::Activation || recs[k].kind == fb::TensorKind::Output);
    if (!own) continue;
    lifetimes.push_back({g.value(v).view().bytes(), first[static_cast<size_t>(v)],
                         g.is_graph_output(v) ? nsteps : last[static_cast<size_t>(v)]});
    lifetime_rec.push_back(k);
  }
  MemoryPlan plan = plan_memory(lifetimes);
  for (size_t l = 0; l < lifetimes.size(); ++l) recs[lifetime_rec[l]].offset = plan.offsets[l];

  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  fbb.ForceDefaults(true);
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const Rec& r : recs) {
    const graph::Value& v = g.value(r.value);
    tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(v.name), static_cast<uint8_t>(v.dtype),
                                       fbb.CreateVector(v.shape), r.kind, r.offset, r.base));
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
    steps.push_back(fb::CreateStep(
        fbb, static_cast<uint16_t>(n.kind), fbb.CreateString(n.origin.empty() ? n.name : n.origin),
        fbb.CreateVector(ins), fbb.CreateVector(outs), fbb.CreateVector(attrs), k < tactics.size() ? tactics[k] : -1));
  }
  std::vector<int32_t> in_ids, out_ids;
  for (graph::ValueId v : g.inputs) in_ids.push_back(index[static_cast<size_t>(v)]);
  for (graph::ValueId v : g.outputs) out_ids.push_back(index[static_cast<size_t>(v)]);
  const gpu::LibraryVersions libs = target == "cpu" ? gpu::LibraryVersions{} : gpu::library_versions();
  auto root = fb::CreateEngine(fbb, fbb.CreateString("kiln " + std::string(kiln_version())), fbb.CreateString(target),
                               fbb.CreateString(g.name), fbb.CreateVector(tensors), fbb.CreateVector(steps),
                               fbb.CreateVector(in_ids), fbb.CreateVector(out_ids), plan.arena_bytes, 0, 0, libs.cuda,
                               libs.cudnn, libs.cublaslt, target == "cpu" ? 0 : gpu::kernel_arch_limit());
  fbb.Finish(root);
  std::vector<uint8_t> file = engine_file(std::span<const uint8_t>(fbb.GetBufferPointer(), fbb.GetSize()), weights);
  if (report) {
    report->weight_bytes = weights.size();
    report->arena_bytes = plan.arena_bytes;
    report->peak_live_bytes = plan.peak_live_bytes;
    report->activation_bytes = 0;
    for (const Lifetime& l : lifetimes) report->activation_bytes += l.bytes;
    report->steps = g.nodes.size();
  }
  return file;
}

}  // namespace kiln::build
