// IDX reading (see idx.h). Decompression goes through zlib's gzFile, which reads plain files too.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kiln/types.h"

namespace kiln::data {

namespace {

namespace fs = std::filesystem;

// A gzFile (zlib reads plain files through it too) closed on every path.
class GzReader {
 public:
  explicit GzReader(const fs::path& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (!f_) throw Error(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  }
  ~GzReader() { gzclose(f_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      int chunk = gzread(f_, dst + got, static_cast<unsigned>(std::min<size_t>(n - got, 1 << 20)));
      if (chunk < 0) {
        int code = 0;
        throw Error(path_.string() + ": damaged gzip data (" + gzerror(f_, &code) + "); download the file again");
      }
      if (chunk == 0) break;
      got += chunk;
    }
    return got;
  }

 private:
  fs::path path_;
  gzFile f_;
};

uint32_t be32(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }

}  // namespace

HostTensor read_idx(const fs::path& path) {
  constexpr size_t kLimit = size_t{4} << 30;  // 4 GiB: far above any IDX dataset
  const std::string where = path.string() + ": ";
  GzReader in(path);
  uint8_t magic[4];
  if (in.read(magic, 4) != 4 || magic[0] != 0 || magic[1] != 0)
    throw Error(where + "not an IDX file (bad magic number; expected 00 00 TYPE NDIMS)");
  HostTensor t;
  size_t elem = 0;
  switch (magic[2]) {
    case 0x08: t.dtype = DataType::kUInt8, elem = 1; break;
    case 0x09: t.dtype = DataType::kInt8, elem = 1; break;
    case 0x0B: t.dtype = DataType::kInt16, elem = 2; break;
    case 0x0C: t.dtype = DataType::kInt32, elem = 4; break;
    case 0x0D: t.dtype = DataType::kFloat32, elem = 4; break;
    case 0x0E: t.dtype = DataType::kFloat64, elem = 8; break;
    default: throw Error(where + "unknown IDX element type code " + std::to_string(magic[2]));
  }
  const size_t ndims = magic[3];
  if (ndims == 0) throw Error(where + "IDX header has no dimensions");
  std::vector<uint8_t> dims(4 * ndims);
  if (in.read(dims.data(), dims.size()) != dims.size()) throw Error(where + "truncated IDX header");
  size_t bytes = elem;
  for (size_t i = 0; i < ndims; ++i) {
    uint32_t d = be32(dims.data() + 4 * i);
    t.shape.push_back(d);
    if (d > kLimit || bytes * d > kLimit) throw Error(where + "IDX header describes more data than any dataset holds");
    bytes *= d;
  }
  // Grow with the data actually read, so that a damaged header cannot make us allocate gigabytes.
  size_t got = 0;
  while (got < bytes) {
    size_t want = std::min<size_t>(bytes - got, 16 << 20);
    t.data.resize(got + want);
    size_t n = in.read(t.data.data() + got, want);
    got += n;
    if (n < want) break;
  }
  uint8_t extra;
  if (got != bytes || in.read(&extra, 1) != 0)
    throw Error(where + "IDX header says " + std::to_string(bytes) + " bytes of data, the file has " +
                (got == bytes ? "more" : std::to_string(got)) + "; the file is truncated or damaged");
  t.name = path.stem().string();
  if (path.extension() == ".gz") t.name = fs::path(t.name).stem().string();
  if (elem > 1)  // big-endian -> little-endian
    for (size_t i = 0; i < bytes; i += elem) std::reverse(t.data.begin() + i, t.data.begin() + i + elem);
  return t;
}

IdxSplit find_idx_split(const fs::path& dir, const std::string& split) {
  auto find = [&](const std::string& stem) {
    for (const char* ext : {"", ".gz"}) {
      fs::path p = dir / (stem + ext);
      if (fs::exists(p)) return p;
    }
    throw Error(dir.string() + ": no " + stem + "[.gz]; expected an MNIST-layout folder (" + split +
                "-images-idx3-ubyte and " + split + "-labels-idx1-ubyte, optionally gzipped)");
  };
  return {find(split + "-images-idx3-ubyte"), find(split + "-labels-idx1-ubyte")};
}

LabelledImages read_idx_images(const IdxSplit& split) {
  HostTensor images = read_idx(split.images);
  HostTensor labels = read_idx(split.labels);
  if (images.dtype != DataType::kUInt8 || images.shape.size() != 3)
    throw Error(split.images.string() + ": expected uint8 images [N, H, W] in an IDX image file");
  if (labels.dtype != DataType::kUInt8 || labels.shape.size() != 1)
    throw Error(split.labels.string() + ": expected uint8 labels [N] in an IDX label file");
  if (labels.shape[0] != images.shape[0])
    throw Error(split.labels.string() + ": " + std::to_string(labels.shape[0]) + " labels for " +
                std::to_string(images.shape[0]) + " images in " + split.images.string() +
                "; the files belong to different sets");
  LabelledImages out;
  out.images.name = images.name;
  out.images.dtype = DataType::kFloat32;
  out.images.shape = {images.shape[0], 1, images.shape[1], images.shape[2]};
  out.images.data.resize(images.data.size() * sizeof(float));
  auto* dst = reinterpret_cast<float*>(out.images.data.data());
  for (size_t i = 0; i < images.data.size(); ++i) dst[i] = images.data[i] / 255.0f;
  out.labels.assign(labels.data.begin(), labels.data.end());
  for (int32_t l : out.labels) out.num_classes = std::max(out.num_classes, l + 1);
  return out;
}

}  // namespace kiln::data
