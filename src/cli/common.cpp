#include "cli/common.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "build/range_build.h"
#include "core/shape_range.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/device_memory.h"

namespace kiln::cli {

bool is_onnx(const std::filesystem::path& p) { return p.extension() == ".onnx"; }

std::pair<std::string, std::string> split_assignment(const std::string& s, const char* option) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw Error(std::string(option) + " " + s + ": expected NAME=VALUE");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

build::BuildOptions build_options(const ModelOptions& m) {
  build::BuildOptions o;
  if (!m.batch.empty()) {
    o.batch_range = parse_dim_range(m.batch, "--batch");
    if (o.batch_range.lo < 1) throw Error("--batch must be at least 1");
    o.batch = o.batch_range.hi;
  }
  for (const std::string& s : m.shapes) {
    auto [name, dims] = split_assignment(s, "--shape");
    ShapeRange r = parse_shape_range(dims, "--shape " + name);
    if (std::all_of(r.begin(), r.end(), [](const DimRange& d) { return d.fixed(); })) {
      std::vector<int64_t> fixed;
      for (const DimRange& d : r) fixed.push_back(d.lo);
      o.input_shapes[name] = fixed;
    } else {
      o.shape_ranges[name] = r;
    }
  }
  if (!m.buckets.empty()) {
    o.buckets = parse_buckets(m.buckets, "--buckets");
    if (!build::has_ranges(o)) throw Error("--buckets is for range engines: give --batch LO..HI or a --shape range");
  }
  for (const std::string& c : m.consts) {
    auto [name, file] = split_assignment(c, "--const");
    o.constant_inputs[name] = read_tensor_file(file);
  }
  o.disabled_passes = m.disabled;
  const std::string device = resolve_device(m.device, "building");
  if (device == "gpu") {
    // Engines are built for the GPU that is here: the builder times kernels on it.
    try {
      o.target = gpu::gpu_target();
    } catch (const Error& e) {
      throw Error(std::string("--device gpu needs the GPU the engine is for: ") + e.what());
    }
  } else {
    o.target = "cpu";
    if (!m.timing_cache.empty()) throw Error("--timing-cache is for GPU builds (--device gpu)");
    if (!m.target_arch.empty())
      throw Error("--target-arch is for GPU builds (--device gpu); a CPU engine uses this CPU's kernels");
    if (!m.memory_limit.empty())
      throw Error("--memory-limit is for GPU builds (--device gpu); a CPU engine's memory is its arena (kiln inspect)");
  }
  if (!m.memory_limit.empty()) o.memory_limit = gpu::parse_bytes(m.memory_limit, "--memory-limit");
  if (!m.target_arch.empty()) {
    const int arch = gpu::parse_arch(m.target_arch);
    if (arch == 0)
      throw Error("--target-arch " + m.target_arch +
                  ": expected a GPU architecture such as sm_87 (Jetson Orin) or sm_110 (Jetson Thor)");
    if (arch < 80)
      throw Error("--target-arch " + m.target_arch + ": Kiln's GPU kernels need compute capability 8.0 or later " +
                  "(cp.async, ldmatrix, mma.sync)" +
                  (arch == 72 ? "; Jetson Xavier (sm_72) is not supported by CUDA 13 either" : ""));
    // The device's own architecture needs no limit.
    o.kernel_arch = arch == gpu::parse_arch(o.target) ? 0 : arch;
  }
  o.fp16 = m.fp16 || m.best;
  o.int8 = m.int8 || m.best;
  if (m.force_int8 && !o.int8) throw Error("--force-int8 is for INT8 builds: add --int8 (or --best)");
  o.force_int8 = m.force_int8;
  if (!o.int8 && (!m.calib.empty() || !m.calib_cache.empty()))
    throw Error("--calib and --calib-cache are for INT8 builds: add --int8 (or --best)");
  if (m.calib_batches < 0) throw Error("--calib-batches must be at least 1");
  o.calib.data = m.calib;
  o.calib.method = calib::parse_method(m.calib_method);
  o.calib.batches = m.calib_batches;
  o.calib.percentile = m.calib_percentile;
  o.calib.cache = m.calib_cache;
  o.calib.preprocess = m.calib_preprocess;
  o.calib.progress = progress_bar("calibrating");
  if ((m.accuracy_budget >= 0) != !m.validate.empty())
    throw Error("--accuracy-budget and --validate go together: the budget is measured on the validation data");
  if (!m.validate.empty() && !o.int8) throw Error("--accuracy-budget and --validate are for INT8 builds: add --int8");
  o.calib.accuracy_budget = m.accuracy_budget;
  o.calib.validate = m.validate;
  o.calib.report = [](const std::string& s) { fmt::print("{}\n", s); };
  o.timing_cache = m.timing_cache;
  if (m.verbose) o.log = [](const std::string& m) { fmt::print(stderr, "  {}\n", m); };
  o.progress = build_progress();
  return o;
}

std::string resolve_device(const std::string& device, const char* what) {
  if (device == "cpu" || device == "gpu") return device;
  if (device != "auto") throw Error("--device " + device + ": expected cpu or gpu");
  if (gpu::gpu_available()) {
    fmt::print(stderr, "{} for the GPU ({}; --device cpu for the CPU)\n", what, gpu::gpu_target());
    return "gpu";
  }
  fmt::print(stderr, "{} for the CPU (no GPU found)\n", what);
  return "cpu";
}

std::shared_ptr<const Engine> load_engine(const std::filesystem::path& path, const ModelOptions& m) {
  if (m.device != "cpu" && m.device != "gpu" && m.device != "auto")
    throw Error("--device " + m.device + ": expected cpu or gpu");
  std::shared_ptr<const Engine> e = Engine::load(path);
  if (m.device == "gpu" && !e->is_gpu())
    throw Error(path.string() +
                " is a CPU engine; --device gpu needs an engine built for the GPU (kiln optimize "
                "MODEL.onnx --device gpu), or leave out --device to run this one on the CPU");
  if (m.device == "cpu" && e->is_gpu())
    throw Error(path.string() +
                " is a GPU engine; --device cpu needs an engine built for the CPU (kiln optimize "
                "MODEL.onnx --device cpu), or leave out --device to run this one on the GPU");
  return e;
}

std::map<std::string, std::vector<int64_t>> engine_input_shapes(const Engine& e, const ModelOptions& m) {
  std::map<std::string, std::vector<int64_t>> shapes;
  if (!m.batch.empty()) {
    const DimRange b = parse_dim_range(m.batch, "--batch");
    if (!b.fixed())
      throw Error("--batch " + m.batch + ": a range is for building; an engine runs one size at a time (--batch N)");
    // The range named "batch" (--batch LO..HI made it); else those over the inputs' leading axes.
    bool named_batch = false;
    for (const ShapeRangeInfo& r : e.ranges()) named_batch = named_batch || r.name == "batch";
    auto leading = [](const ShapeRangeInfo& r) {
      return std::all_of(r.inputs.begin(), r.inputs.end(), [](const auto& in) { return in.second == 0; });
    };
    bool ranged = false;
    for (const ShapeRangeInfo& r : e.ranges())
      for (const auto& [name, axis] : r.inputs)
        if (axis == 0 && (named_batch ? r.name == "batch" : leading(r))) {
          std::vector<int64_t> dims = shapes.count(name) ? shapes[name] : std::vector<int64_t>{};
          for (const TensorInfo& t : e.inputs())
            if (t.name == name && dims.empty()) dims = t.shape;
          dims[0] = b.lo;
          shapes[name] = dims;
          ranged = true;
        }
    if (!ranged && !e.inputs().empty() && (e.inputs()[0].shape.empty() || e.inputs()[0].shape[0] != b.lo))
      throw Error(
          fmt::format("--batch {}: the engine has a fixed shape (input '{}' {}); build one for a range of "
                      "batches with kiln optimize --batch LO..HI",
                      m.batch, e.inputs()[0].name, shape_string(e.inputs()[0].shape)));
  }
  for (const std::string& s : m.shapes) {
    auto [name, text] = split_assignment(s, "--shape");
    std::vector<int64_t> dims;
    for (const DimRange& d : parse_shape_range(text, "--shape " + name)) {
      if (!d.fixed()) throw Error("--shape " + s + ": a range is for building; an engine runs one shape at a time");
      dims.push_back(d.lo);
    }
    shapes[name] = dims;
  }
  return shapes;
}

std::vector<TensorInfo> current_inputs(const Engine& e, const Context& ctx) {
  std::vector<TensorInfo> r = e.inputs();
  for (TensorInfo& t : r) t.shape = ctx.input_shape(t.name);
  return r;
}

std::function<void(const build::BuildProgress&)> build_progress() {
  struct State {
    bool tty = isatty(fileno(stderr)) != 0;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last{};
    bool drawn = false;
  };
  auto st = std::make_shared<State>();
  return [st](const build::BuildProgress& p) {
    using namespace std::chrono;
    const auto now = steady_clock::now();
    const double s = duration<double>(now - st->start).count();
    const bool finished = p.done >= p.total;
    if (finished) {
      if (st->tty && st->drawn) fmt::print(stderr, "\r\033[K");
      st->drawn = false;
      return;
    }
    if (s < 1.0 || now - st->last < (st->tty ? milliseconds(100) : seconds(5))) return;
    st->last = now;
    const std::string line =
        fmt::format("{}: {}/{} steps, {:.1f} s{}{}", p.stage, p.done, p.total, s, p.step.empty() ? "" : ", ", p.step);
    if (st->tty) {
      fmt::print(stderr, "\r\033[K{}", line.substr(0, 160));
      st->drawn = true;
    } else {
      fmt::print(stderr, "{}\n", line);
    }
  };
}

std::function<void(int, int)> progress_bar(const std::string& what) {
  const bool tty = isatty(fileno(stderr));
  auto start = std::chrono::steady_clock::now();
  return [what, tty, start](int done, int total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tty) {
      constexpr int kWidth = 30;
      const int fill = total > 0 ? done * kWidth / total : kWidth;
      fmt::print(stderr, "\r{} [{}{}] {}/{} batches, {:.1f} s", what, std::string(fill, '#'),
                 std::string(kWidth - fill, '.'), done, total, s);
      if (done == total) fmt::print(stderr, "\n");
    } else if (done == total) {
      fmt::print(stderr, "{}: {} batch{} in {:.1f} s\n", what, done, done == 1 ? "" : "es", s);
    }
  };
}

std::string human_bytes(uint64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < (1u << 20)) return fmt::format("{:.1f} KiB", b / 1024.0);
  if (b < (1u << 30)) return fmt::format("{:.1f} MiB", b / 1048576.0);
  return fmt::format("{:.2f} GiB", b / 1073741824.0);
}

}  // namespace kiln::cli
