// A file a build stage reads and writes (a timing cache): the user's, or a temporary file of its
// own, made empty here and removed with this object. Without a temporary directory it can write
// (TMPDIR naming none, say), the path is empty and the stage runs without the file.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace kiln::build {

struct ScratchFile {
  std::string path;
  bool temporary = false;
  ScratchFile(const std::string& user, const char* stem) : path(user) {
    if (!path.empty()) return;
    try {
      std::error_code ec;
      const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
      if (ec) return;
      std::random_device rd;
      const std::filesystem::path p = dir / fmt::format("{}-{:08x}{:08x}.json", stem, rd(), rd());
      if (std::filesystem::exists(p, ec) || ec || !std::ofstream(p)) return;  // taken, or cannot be written
      path = p.string();
      temporary = true;
    } catch (const std::exception&) {  // no random device: no file either
      path.clear();
    }
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() {
    std::error_code ec;
    if (temporary) std::filesystem::remove(path, ec);
  }
};

}  // namespace kiln::build
