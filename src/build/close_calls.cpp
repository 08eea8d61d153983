#include "build/close_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "kiln/types.h"
#include "build/engine_timing.h"
#include "build/stopwatch.h"

namespace kiln::build {

namespace {

constexpr int kRounds = 5;         // alternating rounds per comparison
constexpr double kMargin = 0.003;  // a rival must make the engine this much faster to be kept
// A comparison whose difference is under kClear is made again with both engines in new contexts,
// up to kMaxPairs pairs, and decided on the mean: the same engine measured 0.2501 and 0.2520 ms in
// two contexts of one process (its memory placed elsewhere), close to what two tactics differ by.
constexpr double kClear = 0.01;
constexpr int kMaxPairs = 3;

}  // namespace

CloseCall close_call(const std::string& key, int32_t best, double best_ms,
                     std::vector<std::pair<int32_t, double>> timed) {
  constexpr size_t kMaxRivals = 2;
  CloseCall c;
  c.key = key;
  c.chosen = best;
  c.chosen_ms = best_ms;
  if (best < 0) return c;
  const double margin = best_ms > kShortLayerMs ? kCloseLong : kClose;
  std::stable_sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  for (const auto& [tactic, ms] : timed)
    if (tactic != best && ms <= best_ms * (1 + margin) && c.rivals.size() < kMaxRivals) c.rivals.emplace_back(tactic, ms);
  return c;
}

void decide_in_engine(std::vector<CloseCall>& calls, std::vector<int32_t>& tactics, const EngineWriter& write,
                      double budget_s, double long_budget_s) {
  std::stable_sort(calls.begin(), calls.end(), [](const CloseCall& a, const CloseCall& b) {
    return a.chosen_ms * static_cast<double>(a.nodes.size()) > b.chosen_ms * static_cast<double>(b.nodes.size());
  });
  // One finding more in a call's verdict.
  auto note = [](CloseCall& c, const std::string& text) { c.verdict += (c.verdict.empty() ? "" : "; ") + text; };
  const Stopwatch total;
  std::unique_ptr<TimedEngine> incumbent;
  int runs = 3;
  try {
    incumbent = std::make_unique<TimedEngine>(write(tactics));
    // Rounds of about 5 ms (3 to 20 runs): long enough to take a median, short enough that the
    // engines alternate before the GPU's clocks drift.
    runs = std::clamp(static_cast<int>(5.0 / std::max(incumbent->median_ms(5), 1e-3)), 3, 20);
  } catch (const std::exception& e) {
    for (CloseCall& c : calls) c.verdict = std::string("not timed in the engine: ") + e.what();
    return;
  }
  double long_s = 0;  // spent on the calls of long layers
  for (CloseCall& c : calls) {
    size_t compared = 0;
    const bool long_layer = c.chosen_ms > kShortLayerMs;
    const Stopwatch this_call;
    for (const auto& [rival, rival_ms] : c.rivals) {
      if (total.seconds() > budget_s) {
        note(c, fmt::format("{}: not timed in the engine (its {:.0f} s were spent)", rival, budget_s));
        continue;
      }
      if (long_layer && long_s + this_call.seconds() >= long_budget_s) {
        note(c, fmt::format("{}: not timed in the engine (the {:.0f} s for long layers were spent)", rival,
                            long_budget_s));
        continue;
      }
      std::vector<int32_t> trial = tactics;
      for (size_t k : c.nodes) trial[k] = rival;
      std::unique_ptr<TimedEngine> engine;
      double ma = 0, mb = 0, sum = 0;
      int pairs = 0;
      std::string each;
      try {
        // A long layer: one pair. At batch 256 the contexts' placement moves an engine by less than
        // such a tie does (1.3% for ResNet-50's layer3 tiles), and each pair takes seconds.
        while (pairs < (long_layer ? 1 : kMaxPairs) && (pairs == 0 || std::abs(sum / pairs) < kClear)) {
          engine.reset();  // at most the two engines compared in memory
          if (pairs > 0) incumbent = std::make_unique<TimedEngine>(write(tactics));
          engine = std::make_unique<TimedEngine>(write(trial));
          std::vector<double> a, b;
          for (int r = 0; r < kRounds; ++r) {
            a.push_back(incumbent->median_ms(runs));
            b.push_back(engine->median_ms(runs));
          }
          ma = median(a), mb = median(b);
          if (!(ma > 0)) throw Error("the engine timed 0 ms");
          sum += (mb - ma) / ma;
          each += fmt::format("{}{:+.1f}%", pairs ? ", " : "", 100 * (mb - ma) / ma);
          ++pairs;
        }
      } catch (const std::exception& e) {
        note(c, fmt::format("{}: failed in the engine ({})", rival, e.what()));
        // The engine as chosen is made again, in case its context was what failed.
        engine.reset();
        try {
          incumbent = std::make_unique<TimedEngine>(write(tactics));
        } catch (const std::exception& e2) {
          note(c, fmt::format("the engine as chosen failed too ({}): no more close calls timed", e2.what()));
          for (CloseCall& later : calls)
            if (later.verdict.empty()) later.verdict = "not timed in the engine (the engine as chosen failed)";
          return;
        }
        continue;
      }
      ++compared;
      const double mean = sum / pairs;
      const bool keep = mean < -kMargin;
      note(c, fmt::format("engine {:.4f} ms with {}, {:.4f} ms with {} ({}{}){}", ma, c.chosen, mb, rival,
                          pairs > 1 ? fmt::format("{} pairs of contexts, mean {:+.1f}%: ", pairs, 100 * mean) : "",
                          each, keep ? fmt::format(": took {}", rival) : std::string()));
      if (keep) {
        tactics = std::move(trial);
        c.chosen = rival;
        c.chosen_ms = rival_ms;
        incumbent = std::move(engine);
      }
    }
    c.decided = compared == c.rivals.size();
    if (long_layer) long_s += this_call.seconds();
  }
}

}  // namespace kiln::build
