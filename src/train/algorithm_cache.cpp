// AlgorithmCache (see algorithm_cache.h).
#include "train/algorithm_cache.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/types.h"

namespace kiln::train {

namespace {

constexpr const char* kFormat = "kiln-train-algorithms";

}  // namespace

AlgorithmCache& AlgorithmCache::instance() {
  static AlgorithmCache cache;
  return cache;
}

void AlgorithmCache::use_file(const std::filesystem::path& path) {
  std::lock_guard<std::mutex> l(mu_);
  path_ = path;
  std::ifstream in(path);
  if (!in) return;  // a new file
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    if (j.at("format") != kFormat) throw Error("not a timing cache of kiln train");
    for (const auto& [key, algo] : j.at("algorithms").items()) entries_[key] = algo.get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": damaged timing cache (" + e.what() + "); delete it to measure afresh");
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what());
  }
}

std::optional<int64_t> AlgorithmCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void AlgorithmCache::put(const std::string& key, int64_t algorithm) {
  std::lock_guard<std::mutex> l(mu_);
  entries_[key] = algorithm;
  if (!path_.empty()) write();
}

void AlgorithmCache::write() const {
  nlohmann::json algos = nlohmann::json::object();
  for (const auto& [key, algo] : entries_) algos[key] = algo;
  const std::filesystem::path tmp = path_.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"format", kFormat}, {"algorithms", algos}}.dump(1) << "\n";
    if (!out) throw Error("cannot write the timing cache " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (ec) throw Error("cannot write the timing cache " + path_.string() + ": " + ec.message());
}

}  // namespace kiln::train
