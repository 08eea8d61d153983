// Calibration cache files (format in cache.h). Reading treats the file as untrusted: every missing
// or mistyped field is an error naming the file and the field.
#include "calib/cache.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/attrs_codec.h"
#include "kiln/engine.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::calib {

namespace {

constexpr const char* kFormat = "kiln calibration cache";

// Fields are gathered in a buffer; large blocks (weights) enter it as their own XXH64. The digest
// is the XXH64 of the buffer.
class Hasher {
 public:
  void bytes(const void* p, size_t n) {
    put(static_cast<uint64_t>(n));
    if (n < 256)
      buf_.append(static_cast<const char*>(p), n);
    else
      put(XXH64(p, n, 0));
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void put(uint64_t v) { buf_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  uint64_t digest() const { return XXH64(buf_.data(), buf_.size(), 0); }

 private:
  std::string buf_;
};

}  // namespace

std::string graph_hash(const graph::Graph& g) {
  Hasher h;
  auto value = [&](graph::ValueId id) {
    if (id == graph::kNoValue) {
      h.str("");
      return;
    }
    const graph::Value& v = g.value(id);
    h.str(v.name);
    h.put(static_cast<uint64_t>(v.dtype));
    if (!v.is_constant()) return;  // activation shapes follow the batch size: left out
    h.bytes(v.shape.data(), v.shape.size() * sizeof(int64_t));
    h.bytes(v.data->data(), v.data->size());
  };
  for (graph::ValueId id : g.inputs) value(id);
  for (graph::ValueId id : g.outputs) value(id);
  for (const graph::Node& n : g.nodes) {
    h.put(static_cast<uint64_t>(n.kind));
    const std::vector<uint8_t> a = encode_attrs(n.attrs);
    h.bytes(a.data(), a.size());
    for (graph::ValueId id : n.inputs) value(id);
    for (graph::ValueId id : n.outputs) value(id);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
  return hex;
}

void write_cache(const std::filesystem::path& path, const Cache& c) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kCacheVersion;
  j["kiln"] = std::string(kiln_version());
  j["model"] = c.model;
  j["graph_hash"] = c.graph_hash;
  j["method"] = std::string(method_name(c.method));
  j["samples"] = c.samples;
  nlohmann::ordered_json t = nlohmann::ordered_json::object();
  for (const auto& [name, r] : c.tensors)
    t[name] = {{"amax", r.amax}, {"scale", int8_scale(r.amax)}, {"min", r.min}, {"max", r.max}};
  j["tensors"] = std::move(t);
  std::ofstream f(path);
  if (!(f << j.dump(1) << "\n"))
    throw Error(path.string() + ": cannot write the calibration cache (is the folder writable?)");
}

Cache read_cache(const std::filesystem::path& path) {
  const std::string where = path.string() + ": ";
  std::ifstream f(path);
  if (!f) throw Error(where + "cannot open the calibration cache");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "not a calibration cache (not JSON: " + e.what() + "); delete it to recalibrate");
  }
  if (!j.is_object() || j.value("format", "") != kFormat)
    throw Error(where + "not a Kiln calibration cache (no \"format\": \"" + kFormat + "\"); delete it to recalibrate");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kCacheVersion)
    throw Error(where + "calibration cache format version " + (j.contains("version") ? j["version"].dump() : "?") +
                ", this Kiln reads version " + std::to_string(kCacheVersion) + "; delete it to recalibrate");
  auto field = [&](const char* name, nlohmann::json::value_t type) -> const nlohmann::json& {
    if (!j.contains(name) || j[name].type() != type)
      throw Error(where + "calibration cache field \"" + name + "\" is missing or has the wrong type");
    return j[name];
  };
  Cache c;
  c.model = field("model", nlohmann::json::value_t::string).get<std::string>();
  c.graph_hash = field("graph_hash", nlohmann::json::value_t::string).get<std::string>();
  try {
    c.method = parse_method(field("method", nlohmann::json::value_t::string).get<std::string>());
  } catch (const Error& e) {
    throw Error(where + "calibration cache: " + e.what());
  }
  if (!j.contains("samples") || !j["samples"].is_number_integer())
    throw Error(where + "calibration cache field \"samples\" is missing or not an integer");
  c.samples = j["samples"].get<int64_t>();
  for (const auto& [name, t] : field("tensors", nlohmann::json::value_t::object).items()) {
    if (!t.is_object() || !t.contains("amax") || !t["amax"].is_number())
      throw Error(where + "calibration cache tensor \"" + name + "\" has no numeric \"amax\"");
    TensorRange r;
    r.amax = t["amax"].get<double>();
    if (!std::isfinite(r.amax) || r.amax < 0)
      throw Error(where + "calibration cache tensor \"" + name + "\" has amax " + t["amax"].dump() +
                  "; it must be finite and not negative");
    if (t.contains("min") && t["min"].is_number()) r.min = t["min"].get<double>();
    if (t.contains("max") && t["max"].is_number()) r.max = t["max"].get<double>();
    c.tensors[name] = r;
  }
  return c;
}

void check_cache(const std::filesystem::path& path, const Cache& c, const std::string& hash, Method method) {
  if (c.graph_hash != hash)
    throw Error(path.string() + ": this calibration cache was made for another model (model '" + c.model +
                "', graph hash " + c.graph_hash + "; this graph's hash is " + hash +
                "), or with other build options; delete it or give another --calib-cache file to recalibrate");
  if (c.method != method)
    throw Error(path.string() + ": this calibration cache was made with --calib-method " +
                std::string(method_name(c.method)) + ", not " + std::string(method_name(method)) +
                "; pass --calib-method " + std::string(method_name(c.method)) + " or delete the file to recalibrate");
}

}  // namespace kiln::calib
