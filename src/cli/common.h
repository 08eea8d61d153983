// Shared by the kiln subcommands.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "build/build.h"
#include "cli/commands.h"
#include "graph/tensor_file.h"
#include "kiln/engine.h"

namespace kiln::cli {

// Exit codes of the kiln command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitMismatch = 1;
inline constexpr int kExitError = 2;

bool is_onnx(const std::filesystem::path& p);
// "NAME=VALUE" -> {NAME, VALUE}; throws naming the option on a malformed value.
std::pair<std::string, std::string> split_assignment(const std::string& s, const char* option);
// --device: "cpu" or "gpu" as given; "auto" becomes "gpu" where the CUDA runtime finds a device,
// else "cpu", and the choice is printed to stderr (with `what`, e.g. "building", "training").
std::string resolve_device(const std::string& device, const char* what);
// Builds options shared by optimize and run from --batch/--shape/--const/--disable-pass.
build::BuildOptions build_options(const ModelOptions& m);
// Loads an engine file for run, bench and eval; a --device given explicitly that is not the
// engine's (a CPU engine with --device gpu, say) is an error naming the rebuild, not a silent run
// on the other device.
std::shared_ptr<const Engine> load_engine(const std::filesystem::path& path, const ModelOptions& m);
// Running an engine file (bench): the input shapes --batch N and --shape NAME=DIMS ask for, to
// give Context::set_input_shape; empty when neither is given. --batch sets the leading dimension
// of every input where a range covers it. Throws for a shape a fixed engine does not have.
std::map<std::string, std::vector<int64_t>> engine_input_shapes(const Engine& e, const ModelOptions& m);
// The engine's inputs at a context's current shapes.
std::vector<TensorInfo> current_inputs(const Engine& e, const Context& ctx);
// The build's progress line (build::BuildOptions::progress): after the first second of a long
// stage, redrawn on a terminal's stderr at most ten times a second, and a line every five seconds
// to a log that is not a terminal.
std::function<void(const build::BuildProgress&)> build_progress();
std::string human_bytes(uint64_t b);
// A progress callback that redraws "what [####......] done/total batches, T s" on a terminal's
// stderr, and prints one line at the end otherwise.
std::function<void(int, int)> progress_bar(const std::string& what);

}  // namespace kiln::cli
