// The cuDNN algorithm each convolution shape runs with on the GPU, shared by every backend of the
// process and optionally kept in a file (`kiln train --timing-cache FILE`, and a checkpoint
// folder's timing_cache.json). The GPU backend measures cuDNN's deterministic algorithms once per
// shape and keeps the fastest; measurements vary from run to run, so two runs can pick different
// algorithms of about equal speed and then differ in the last bits. Runs that share the cache pick
// the same ones: with a file, separate runs (and every resume) train to the same bits.
//
// Keys name the GPU, the cuDNN version, the direction, the element type, the shapes and the
// geometry; values are cuDNN's algorithm numbers. The file is JSON, rewritten atomically (temp file
// and rename) whenever an algorithm is added.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace kiln::train {

class AlgorithmCache {
 public:
  static AlgorithmCache& instance();

  // Reads `path` if it exists (throws kiln::Error naming it if it is damaged) and writes every
  // later addition to it.
  void use_file(const std::filesystem::path& path);
  std::optional<int64_t> find(const std::string& key) const;
  void put(const std::string& key, int64_t algorithm);
  const std::filesystem::path& file() const { return path_; }

 private:
  void write() const;

  mutable std::mutex mu_;
  std::map<std::string, int64_t> entries_;
  std::filesystem::path path_;
};

}  // namespace kiln::train
