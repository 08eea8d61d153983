// Shared by the kiln subcommands.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor_file.h"
#include "kiln/engine.h"
#include "cli/commands.h"
#include "passes/build.h"

namespace kiln::cli {

// Exit codes of the kiln command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitMismatch = 1;
inline constexpr int kExitError = 2;

bool is_onnx(const std::filesystem::path& p);
// "NAME=VALUE" -> {NAME, VALUE}; throws naming the option on a malformed value.
std::pair<std::string, std::string> split_assignment(const std::string& s, const char* option);
// "1x3x224x224" -> {1,3,224,224}
std::vector<int64_t> parse_dims(const std::string& s, const char* option);
// Builds options shared by optimize and run from --batch/--shape/--const/--disable-pass.
passes::BuildOptions build_options(const ModelOptions& m);
std::string human_bytes(uint64_t b);
// A progress callback that redraws "what [####......] done/total batches, T s" on a terminal's
// stderr, and prints one line at the end otherwise.
std::function<void(int, int)> progress_bar(const std::string& what);

}  // namespace kiln::cli
