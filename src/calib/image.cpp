// PNG/JPEG decoding and image preprocessing for calibration (see image.h). libpng's simplified API
// reads any PNG (palette, gray, 16-bit, alpha) as 8-bit RGB. libjpeg reports errors through a
// callback that must not return; it longjmps back to decode_jpeg, whose C++ state is all owned by
// the caller, so nothing is skipped. Files are untrusted: sizes are checked before allocating.
#include "calib/image.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <png.h>

#include <fstream>
#include <sstream>

#include "kiln/types.h"

namespace kiln::calib {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxPixels = int64_t{1} << 28;         // 16k x 16k
constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 30;  // 1 GiB

std::vector<uint8_t> read_file(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw Error(path.string() + ": cannot read the image (" + ec.message() + ")");
  if (size > kMaxFileBytes) throw Error(path.string() + ": image file larger than 1 GiB");
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> b(static_cast<size_t>(size));
  if (!f || !f.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size())))
    throw Error(path.string() + ": cannot read the image");
  return b;
}

Image decode_png(const fs::path& path, const std::vector<uint8_t>& bytes) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    throw Error(path.string() + ": damaged PNG image (" + image.message + ")");
  if (static_cast<int64_t>(image.width) * image.height > kMaxPixels || image.width == 0 || image.height == 0) {
    png_image_free(&image);
    throw Error(path.string() + ": PNG image of " + std::to_string(image.width) + " x " + std::to_string(image.height) +
                " pixels is empty or too large");
  }
  image.format = PNG_FORMAT_RGB;
  Image out;
  out.width = image.width;
  out.height = image.height;
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    const std::string msg = image.message;
    png_image_free(&image);
    throw Error(path.string() + ": damaged PNG image (" + msg + ")");
  }
  return out;
}

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}
void jpeg_quiet(j_common_ptr) {}  // warnings (e.g. extraneous bytes) are not errors

// Decodes into *out; false with msg set on failure. All C++ objects live in the caller.
bool decode_jpeg(const std::vector<uint8_t>& bytes, Image* out, char* msg) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.output_message = jpeg_quiet;
  if (setjmp(err.jump)) {
    std::memcpy(msg, err.message, JMSG_LENGTH_MAX);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > kMaxPixels) {
    std::snprintf(msg, JMSG_LENGTH_MAX, "image of %u x %u pixels is too large", cinfo.image_width, cinfo.image_height);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  out->width = cinfo.output_width;
  out->height = cinfo.output_height;
  out->rgb.resize(static_cast<size_t>(out->width * out->height * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->rgb.data() + static_cast<size_t>(cinfo.output_scanline) * out->width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

std::vector<float> parse_floats(const std::string& key, const std::string& v) {
  std::vector<float> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      out.push_back(std::stof(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error("--calib-preprocess " + key + "=" + v + ": expected numbers separated by commas");
    }
  }
  if (out.empty()) throw Error("--calib-preprocess " + key + "=: expected numbers separated by commas");
  return out;
}

// "0.5" or "1/255"
double parse_number(const std::string& key, const std::string& v) {
  try {
    const size_t slash = v.find('/');
    size_t used = 0;
    if (slash == std::string::npos) {
      const double d = std::stod(v, &used);
      if (used == v.size()) return d;
    } else {
      const std::string num = v.substr(0, slash), den = v.substr(slash + 1);
      size_t used2 = 0;
      const double a = std::stod(num, &used), b = std::stod(den, &used2);
      if (used == num.size() && used2 == den.size() && b != 0) return a / b;
    }
  } catch (const std::exception&) {
  }
  throw Error("--calib-preprocess " + key + "=" + v + ": expected a number such as 0.5 or 1/255");
}

float channel_value(const std::vector<float>& v, int64_t c) { return v.size() == 1 ? v[0] : v[static_cast<size_t>(c)]; }

}  // namespace

Image decode_image(const fs::path& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return decode_png(path, bytes);
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    Image img;
    char msg[JMSG_LENGTH_MAX] = {};
    if (!decode_jpeg(bytes, &img, msg)) throw Error(path.string() + ": damaged JPEG image (" + msg + ")");
    return img;
  }
  throw Error(path.string() + ": not a PNG or JPEG image (unknown file signature)");
}

Preprocess parse_preprocess(const std::string& spec) {
  Preprocess p;
  std::string s = spec;
  std::replace(s.begin(), s.end(), ';', ' ');
  std::stringstream ss(s);
  std::string item;
  while (ss >> item) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), v = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos || v.empty())
      throw Error("--calib-preprocess: '" + item +
                  "' is not KEY=VALUE (keys: resize, scale, mean, std, layout, color)");
    if (key == "resize") {
      const double r = parse_number(key, v);
      if (r < 1 || r != std::floor(r) || r > 65536) throw Error("--calib-preprocess resize=" + v + ": expected pixels");
      p.resize = static_cast<int64_t>(r);
    } else if (key == "scale") {
      p.scale = parse_number(key, v);
    } else if (key == "mean") {
      p.mean = parse_floats(key, v);
    } else if (key == "std") {
      p.stdev = parse_floats(key, v);
      for (float f : p.stdev)
        if (!(f != 0)) throw Error("--calib-preprocess std=" + v + ": a standard deviation of 0");
    } else if (key == "layout") {
      if (v == "nchw")
        p.layout = Preprocess::Layout::kNchw;
      else if (v == "nhwc")
        p.layout = Preprocess::Layout::kNhwc;
      else
        throw Error("--calib-preprocess layout=" + v + ": expected nchw or nhwc");
    } else if (key == "color") {
      if (v != "rgb" && v != "bgr") throw Error("--calib-preprocess color=" + v + ": expected rgb or bgr");
      p.bgr = v == "bgr";
    } else {
      throw Error("--calib-preprocess: unknown key '" + key + "' (keys: resize, scale, mean, std, layout, color)");
    }
  }
  return p;
}

ImageShape image_shape(const std::vector<int64_t>& d, const Preprocess& p, const std::string& input) {
  auto bad = [&](const std::string& why) {
    std::string dims;
    for (int64_t x : d) dims += (dims.empty() ? "" : "x") + std::to_string(x);
    return Error("input '" + input + "' takes samples of shape " + dims + ", " + why);
  };
  if (d.size() != 3) throw bad("not an image ([C, H, W] or [H, W, C] per sample)");
  auto is_c = [](int64_t c) { return c == 1 || c == 3; };
  ImageShape s;
  if (p.layout == Preprocess::Layout::kAuto) {
    if (!is_c(d[0]) && !is_c(d[2])) throw bad("with neither 1 nor 3 channels first or last");
    s.nhwc = !is_c(d[0]);
  } else {
    s.nhwc = p.layout == Preprocess::Layout::kNhwc;
  }
  s.channels = s.nhwc ? d[2] : d[0];
  s.height = s.nhwc ? d[0] : d[1];
  s.width = s.nhwc ? d[1] : d[2];
  if (!is_c(s.channels))
    throw bad(std::string("whose ") + (s.nhwc ? "last" : "first") + " dimension is not 1 or 3 channels; check layout=");
  if (s.height < 1 || s.width < 1) throw bad("with an empty image");
  if (p.resize > 0 && p.resize < std::max(s.height, s.width))
    throw bad("larger than the crop of an image resized to resize=" + std::to_string(p.resize) +
              "; resize must be at least " + std::to_string(std::max(s.height, s.width)));
  for (const std::vector<float>* v : {&p.mean, &p.stdev})
    if (v->size() != 1 && static_cast<int64_t>(v->size()) != s.channels)
      throw bad("so mean and std need 1 or " + std::to_string(s.channels) + " values, not " +
                std::to_string(v->size()));
  return s;
}

void preprocess_image(const Image& img, const Preprocess& p, const ImageShape& s, float* out) {
  // Source rectangle: the whole image (stretched to H x W), or the centre crop of the image scaled
  // so that its shorter side is p.resize. Sampling is bilinear at pixel centres (half-pixel).
  double fx = static_cast<double>(img.width) / s.width, fy = static_cast<double>(img.height) / s.height;
  double x0 = 0, y0 = 0;
  if (p.resize > 0) {
    const double k = static_cast<double>(p.resize) / std::min(img.width, img.height);  // image -> resized
    fx = fy = 1.0 / k;
    x0 = (img.width * k - s.width) / 2 / k;
    y0 = (img.height * k - s.height) / 2 / k;
  }
  auto px = [&](int64_t x, int64_t y, int c) {
    x = std::clamp<int64_t>(x, 0, img.width - 1);
    y = std::clamp<int64_t>(y, 0, img.height - 1);
    return static_cast<double>(img.rgb[static_cast<size_t>((y * img.width + x) * 3 + c)]);
  };
  for (int64_t y = 0; y < s.height; ++y) {
    const double sy = y0 + (y + 0.5) * fy - 0.5;
    const auto iy = static_cast<int64_t>(std::floor(sy));
    const double wy = sy - iy;
    for (int64_t x = 0; x < s.width; ++x) {
      const double sx = x0 + (x + 0.5) * fx - 0.5;
      const auto ix = static_cast<int64_t>(std::floor(sx));
      const double wx = sx - ix;
      double rgb[3];
      for (int c = 0; c < 3; ++c)
        rgb[c] = (1 - wy) * ((1 - wx) * px(ix, iy, c) + wx * px(ix + 1, iy, c)) +
                 wy * ((1 - wx) * px(ix, iy + 1, c) + wx * px(ix + 1, iy + 1, c));
      for (int64_t c = 0; c < s.channels; ++c) {
        double v = s.channels == 1 ? 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] : rgb[p.bgr ? 2 - c : c];
        v = (v * p.scale - channel_value(p.mean, c)) / channel_value(p.stdev, c);
        const int64_t at = s.nhwc ? (y * s.width + x) * s.channels + c : (c * s.height + y) * s.width + x;
        out[at] = static_cast<float>(v);
      }
    }
  }
}

}  // namespace kiln::calib
