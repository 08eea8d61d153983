// What `kiln train` shows and writes about a run: the live progress line, the summary table, the
// metrics file (CSV or JSON) and the SVG picture of the training and validation curves.
#pragma once

#include <filesystem>
#include <string>

#include "train/trainer.h"

namespace kiln::cli {

// The live line while a step runs ("epoch 2/10  step 300/843  loss ..."), and the line printed
// when an epoch ends.
std::string progress_line(const train::Progress& p);
std::string epoch_line(const train::Progress& p);

// The per-epoch table and a closing line (best validation accuracy, parameters, time).
std::string summary_table(const train::History& h, int64_t parameters, double seconds);

// Writes the history as CSV (one row per StepRecord and per EpochRecord, told apart by `kind`) or
// JSON, chosen by the extension (.csv or .json).
void write_metrics(const std::filesystem::path& path, const train::History& h);
// Two panels (loss, accuracy) over epochs: training every log interval, validation every epoch.
void write_plot_svg(const std::filesystem::path& path, const train::History& h, const std::string& title);

// "12,346" for 12345.6.
std::string grouped(double v);
// "1m05s", "3.2s", "2h01m".
std::string duration_string(double seconds);

}  // namespace kiln::cli
