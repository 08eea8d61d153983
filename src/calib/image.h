// Images for calibration: PNG (libpng) and JPEG (libjpeg) decoding to 8-bit RGB, and the
// preprocessing `--calib-preprocess` describes, e.g. (items separated by spaces or semicolons)
//   "resize=256 mean=0.485,0.456,0.406 std=0.229,0.224,0.225 layout=nchw color=rgb scale=1/255"
//   resize=S   shorter side to S (bilinear), then the centre crop of the model's H x W; without it
//              the image is resized straight to H x W
//   scale=F    pixel values 0..255 are multiplied by F first (default 1/255: values in [0, 1])
//   mean, std  per channel (one value: every channel): v = (v * scale - mean) / std
//   layout     nchw or nhwc; default: nchw when the input's dimension 1 is 1 or 3, else nhwc
//   color      rgb or bgr channel order; a 1-channel input takes the luma 0.299 R + 0.587 G + 0.114 B
// The defaults give torchvision's ToTensor() without normalization.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::calib {

struct Image {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3, row-major
};

// Decodes a PNG or JPEG file (chosen by its signature, not its extension). Throws kiln::Error
// naming the file when it cannot be read or decoded.
Image decode_image(const std::filesystem::path& path);

struct Preprocess {
  int64_t resize = 0;
  double scale = 1.0 / 255.0;
  std::vector<float> mean{0.0f}, stdev{1.0f};
  enum class Layout { kAuto, kNchw, kNhwc } layout = Layout::kAuto;
  bool bgr = false;
};

// Parses --calib-preprocess; throws kiln::Error naming the bad item and the accepted ones.
Preprocess parse_preprocess(const std::string& spec);

// The model-side geometry of one image sample: channels (1 or 3), height, width and layout.
struct ImageShape {
  int64_t channels = 3, height = 0, width = 0;
  bool nhwc = false;
};
// From an input's per-sample shape ([C, H, W] or [H, W, C]); throws kiln::Error naming the input.
ImageShape image_shape(const std::vector<int64_t>& sample_shape, const Preprocess& p, const std::string& input);

// Resizes, crops, normalizes and lays out `img` into out (channels * height * width floats).
void preprocess_image(const Image& img, const Preprocess& p, const ImageShape& s, float* out);

}  // namespace kiln::calib
