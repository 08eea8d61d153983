// Elapsed wall time, for what `kiln optimize -v` reports about where a build's time goes.
#pragma once

#include <chrono>

namespace kiln::build {

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double ms() const { return seconds() * 1e3; }
  // The seconds since the start or the last lap; the next lap starts now.
  double lap() {
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    start_ = now;
    return s;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
};

}  // namespace kiln::build
