// gpu_engine_timing A.kiln B.kiln: how the builder's engine timing (build/engine_timing.h, used by
// the close calls of build/close_calls.h) ranks two engines, measured several ways, for comparing
// with `kiln bench` on the same files (bench/experiments/b1_close_call.sh):
//   alternating  both engines alive, rounds of R runs each, alternated (the builder's way);
//   warm         the same, each round after W runs not counted;
//   alone        one engine alive at a time, a long round after a long warm-up.
// Prints one line per way: the medians (over rounds) of each engine's round medians, in ms.
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "build/engine_timing.h"

using kiln::build::median;
using kiln::build::TimedEngine;

namespace {

std::vector<uint8_t> read(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void alternating(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int rounds, int runs, int warm,
                 const char* name) {
  TimedEngine ea(a), eb(b);
  std::vector<double> ma, mb;
  for (int r = 0; r < rounds; ++r) {
    if (warm) ea.median_ms(warm);
    ma.push_back(ea.median_ms(runs));
    if (warm) eb.median_ms(warm);
    mb.push_back(eb.median_ms(runs));
  }
  fmt::print("{:<44} A {:.4f}  B {:.4f}  B-A {:+.4f} ms\n", name, median(ma), median(mb), median(mb) - median(ma));
}

double alone(const std::vector<uint8_t>& e, int warm, int runs) {
  TimedEngine t(e);
  t.median_ms(warm);
  return t.median_ms(runs);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fmt::print(stderr, "usage: gpu_engine_timing A.kiln B.kiln\n");
    return 2;
  }
  const std::vector<uint8_t> a = read(argv[1]), b = read(argv[2]);
  try {
    for (int rep = 0; rep < 2; ++rep) {
      alternating(a, b, 5, 20, 0, "alternating, 5 rounds of 20 (the builder)");
      alternating(a, b, 5, 20, 200, "alternating, 5 rounds of 20 after 200");
      alternating(a, b, 5, 400, 0, "alternating, 5 rounds of 400");
      const double xa = alone(a, 2000, 2000), xb = alone(b, 2000, 2000);
      fmt::print("{:<44} A {:.4f}  B {:.4f}  B-A {:+.4f} ms\n", "alone, 2000 after 2000", xa, xb, xb - xa);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpu_engine_timing: {}\n", e.what());
    return 1;
  }
  return 0;
}
