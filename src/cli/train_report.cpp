// Progress lines, the summary table, metrics files and the SVG plot of `kiln train`. The SVG is
// written by hand (a few dozen elements): axes with round-number ticks, a polyline per series.
#include "cli/train_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

std::string percent(double v) { return std::isnan(v) ? "-" : fmt::format("{:.2f}%", 100 * v); }
std::string loss_str(double v) { return std::isnan(v) ? "-" : fmt::format("{:.4f}", v); }

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) throw Error(path.string() + ": cannot write");
}

// Round-number ticks covering [lo, hi]: steps of 1, 2 or 5 times a power of ten, about five.
std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5, mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double i = std::ceil(lo / step - 1e-9); i * step <= hi + 1e-9 * step; ++i) t.push_back(i == 0 ? 0.0 : i * step);
  return t;
}

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;  // (epoch, value); NaNs are skipped
  bool markers = false;
};

// One panel at (x0, y0) of size w x h; percent: values are fractions shown as percentages.
std::string panel(double x0, double y0, double w, double h, const std::string& title, double x_max,
                  const std::vector<Series>& series, bool percent_axis) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : series)
    for (auto [x, y] : s.points)
      if (std::isfinite(y)) lo = std::min(lo, y), hi = std::max(hi, y);
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (percent_axis) {
    hi = 1;
    lo = std::max(0.0, std::floor((lo - 0.02) * 20) / 20);  // down to a multiple of 5%
  } else {
    lo = 0;
    hi = hi > 0 ? hi * 1.05 : 1;
  }
  if (hi - lo < 1e-9) hi = lo + 1;
  auto sx = [&](double x) { return x0 + w * x / x_max; };
  auto sy = [&](double y) { return y0 + h - h * (y - lo) / (hi - lo); };
  std::string s = fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", x0,
                              y0 - 12, title);
  for (double t : ticks(lo, hi)) {
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>\n", x0, sy(t),
                     x0 + w, sy(t));
    std::string label = percent_axis ? fmt::format("{:g}%", std::round(t * 1000) / 10) : fmt::format("{:g}", t);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"11\">{}</text>\n", x0 - 6,
                     sy(t) + 4, label);
  }
  for (double t : ticks(0, x_max)) {
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#999\"/>\n", sx(t), y0 + h,
                     sx(t), y0 + h + 4);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"11\">{:g}</text>\n", sx(t),
                     y0 + h + 17, t);
  }
  s += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#999\"/>\n", x0, y0, w,
      h);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"12\">epoch</text>\n", x0 + w / 2,
                   y0 + h + 34);
  for (const Series& ser : series) {
    std::string pts;
    for (auto [x, y] : ser.points)
      if (std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", sx(x), sy(std::clamp(y, lo, hi)));
    if (pts.empty()) continue;
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"/>\n", pts, ser.color);
    if (ser.markers)
      for (auto [x, y] : ser.points)
        if (std::isfinite(y))
          s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", sx(x),
                           sy(std::clamp(y, lo, hi)), ser.color);
  }
  return s;
}

}  // namespace

std::string grouped(double v) {
  std::string digits = fmt::format("{:.0f}", v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

std::string duration_string(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.1f}s", s);
  const auto t = static_cast<int64_t>(std::llround(s));
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
}

std::string progress_line(const train::Progress& p) {
  return fmt::format("epoch {}/{}  step {}/{}  loss {:.4f}  acc {}  lr {:.3g}  {} img/s  eta {}", p.epoch, p.epochs,
                     p.step_in_epoch, p.steps_per_epoch, p.loss, percent(p.accuracy), p.lr, grouped(p.images_per_s),
                     duration_string(p.eta_seconds));
}

std::string epoch_line(const train::Progress& p) {
  const train::EpochRecord& r = *p.epoch_end;
  return fmt::format("epoch {}/{}  train loss {} acc {}  val loss {} acc {}  {} img/s  {}{}", r.epoch, p.epochs,
                     loss_str(r.train_loss), percent(r.train_accuracy), loss_str(r.val_loss), percent(r.val_accuracy),
                     grouped(r.images_per_s), duration_string(r.seconds), p.checkpoint_written ? "  [checkpoint]" : "");
}

std::string summary_table(const train::History& h, int64_t parameters, double seconds) {
  std::string s = fmt::format("{:>6}  {:>10}  {:>9}  {:>9}  {:>8}  {:>10}  {:>8}\n", "epoch", "train loss", "train acc",
                              "val loss", "val acc", "img/s", "time");
  const train::EpochRecord* best = nullptr;
  for (const train::EpochRecord& r : h.epochs) {
    s += fmt::format("{:>6}  {:>10}  {:>9}  {:>9}  {:>8}  {:>10}  {:>8}\n", r.epoch, loss_str(r.train_loss),
                     percent(r.train_accuracy), loss_str(r.val_loss), percent(r.val_accuracy), grouped(r.images_per_s),
                     duration_string(r.seconds));
    if (!std::isnan(r.val_accuracy) && (!best || r.val_accuracy > best->val_accuracy)) best = &r;
  }
  if (best) s += fmt::format("best validation accuracy {} at epoch {}; ", percent(best->val_accuracy), best->epoch);
  s += fmt::format("{} parameters; {} in all\n", grouped(static_cast<double>(parameters)), duration_string(seconds));
  return s;
}

void write_metrics(const fs::path& path, const train::History& h) {
  const std::string ext = path.extension().string();
  if (ext == ".json") {
    nlohmann::json steps = nlohmann::json::array(), epochs = nlohmann::json::array();
    auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    for (const train::StepRecord& r : h.steps)
      steps.push_back({{"step", r.step}, {"epoch", r.epoch}, {"loss", r.loss}, {"accuracy", r.accuracy}, {"lr", r.lr}});
    for (const train::EpochRecord& r : h.epochs)
      epochs.push_back({{"epoch", r.epoch},
                        {"train_loss", r.train_loss},
                        {"train_accuracy", r.train_accuracy},
                        {"val_loss", num(r.val_loss)},
                        {"val_accuracy", num(r.val_accuracy)},
                        {"lr", r.lr},
                        {"seconds", r.seconds},
                        {"images_per_s", r.images_per_s}});
    write_file(path, nlohmann::json{{"steps", steps}, {"epochs", epochs}}.dump(1) + "\n");
    return;
  }
  if (ext != ".csv") throw Error("--metrics " + path.string() + ": expected a .csv or .json file");
  std::string s = "kind,step,epoch,loss,accuracy,val_loss,val_accuracy,lr,seconds,images_per_s\n";
  auto num = [](double v) { return std::isnan(v) ? std::string() : fmt::format("{:.6g}", v); };
  for (const train::StepRecord& r : h.steps)
    s += fmt::format("step,{},{:.4f},{},{},,,{},,\n", r.step, r.epoch, num(r.loss), num(r.accuracy), num(r.lr));
  for (const train::EpochRecord& r : h.epochs)
    s += fmt::format("epoch,,{},{},{},{},{},{},{},{}\n", r.epoch, num(r.train_loss), num(r.train_accuracy),
                     num(r.val_loss), num(r.val_accuracy), num(r.lr), num(r.seconds), num(r.images_per_s));
  write_file(path, s);
}

void write_plot_svg(const fs::path& path, const train::History& h, const std::string& title) {
  Series train_loss{"training", "#1f77b4", {}, false}, val_loss{"validation", "#ff7f0e", {}, true};
  Series train_acc = train_loss, val_acc = val_loss;
  double x_max = 1;
  for (const train::StepRecord& r : h.steps) {
    train_loss.points.emplace_back(r.epoch, r.loss);
    train_acc.points.emplace_back(r.epoch, r.accuracy);
    x_max = std::max(x_max, r.epoch);
  }
  for (const train::EpochRecord& r : h.epochs) {
    val_loss.points.emplace_back(r.epoch, r.val_loss);
    val_acc.points.emplace_back(r.epoch, r.val_accuracy);
    x_max = std::max(x_max, static_cast<double>(r.epoch));
  }
  const double width = 900, height = 360;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"20\" y=\"26\" font-size=\"17\">{2}</text>\n",
      width, height, xml_escape(title));
  s += panel(70, 70, 340, 230, "loss", x_max, {train_loss, val_loss}, false);
  s += panel(520, 70, 340, 230, "accuracy", x_max, {train_acc, val_acc}, true);
  double lx = width - 250;
  for (const Series* ser : {&train_loss, &val_loss}) {
    s += fmt::format("<line x1=\"{:.0f}\" y1=\"21\" x2=\"{:.0f}\" y2=\"21\" stroke=\"{}\" stroke-width=\"2.5\"/>\n", lx,
                     lx + 22, ser->color);
    s += fmt::format("<text x=\"{:.0f}\" y=\"25\" font-size=\"12\">{}</text>\n", lx + 28, ser->name);
    lx += 110;
  }
  write_file(path, s + "</svg>\n");
}

}  // namespace kiln::cli
