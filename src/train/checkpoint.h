// Checkpoint files: a JSON header (what the trainer needs to resume and to refuse a different run)
// and named tensors, with an XXH64 checksum at the end. Writing is atomic: the file is written to
// DIR/latest.ckpt.tmp, flushed to disk (fsync), renamed over DIR/latest.ckpt and the folder is
// flushed, so a kill at any moment leaves either the previous checkpoint or the new one. Reading
// checks magic, version, bounds and checksum before trusting anything.
//
// Layout (little-endian): "KILNCKPT", u32 version, u32 tensor count, u64 header bytes, header; per
// tensor: u32 name bytes, name, u8 dtype (ONNX code), u8 rank, rank x i64 dims, u64 data bytes,
// data; then u64 XXH64 of everything before it.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "train/backend.h"

namespace kiln::train {

struct CheckpointTensor {
  std::string name;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;
};

struct Checkpoint {
  std::string header;  // JSON
  std::vector<CheckpointTensor> tensors;
};

std::filesystem::path checkpoint_path(const std::filesystem::path& dir);  // DIR/latest.ckpt

// Downloads `tensors` from the backend and writes DIR/latest.ckpt atomically (creating DIR).
void write_checkpoint(const std::filesystem::path& dir, const std::string& header, Backend& be,
                      const std::vector<std::pair<std::string, Tensor>>& tensors);
Checkpoint read_checkpoint(const std::filesystem::path& dir);
// Uploads the checkpoint's tensors into `into`, by name; every tensor of `into` must be present
// with its dtype and shape.
void load_tensors(const Checkpoint& c, Backend& be, const std::vector<std::pair<std::string, Tensor>>& into,
                  const std::string& where);

}  // namespace kiln::train
