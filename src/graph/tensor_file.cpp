#include "graph/tensor_file.h"

#include <onnx/onnx-data.pb.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Both formats store little-endian bytes, and we copy them straight into memory.
static_assert(std::endian::native == std::endian::little, "Kiln's tensor files assume a little-endian host");

constexpr uint64_t kMaxNpyHeader = 1 << 20;  // numpy headers are ~100 bytes; anything near this is junk
constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyAlign = 64;  // numpy pads the header so data starts on a 64-byte boundary

std::string quoted(const fs::path& p) {
  std::string s(1, '\'');  // appended piecewise: "'" + string trips a GCC 12 -Wrestrict false positive
  s += p.string();
  s += '\'';
  return s;
}

// ONNX's names, including codes newer than the installed onnx.proto (float8, int4, ...).
std::string onnx_dtype_name(int64_t code) {
  static constexpr const char* kNames[] = {"UNDEFINED",      "FLOAT",    "UINT8",        "INT8",           "UINT16",
                                           "INT16",          "INT32",    "INT64",        "STRING",         "BOOL",
                                           "FLOAT16",        "DOUBLE",   "UINT32",       "UINT64",         "COMPLEX64",
                                           "COMPLEX128",     "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                           "FLOAT8E5M2FNUZ", "UINT4",    "INT4",         "FLOAT4E2M1"};
  if (code >= 0 && code < static_cast<int64_t>(std::size(kNames))) return kNames[code];
  return "unknown type code " + std::to_string(code);
}

// Element count of shape. Rejects negative dims, and also products of the non-zero dims that
// overflow int64: later code multiplies shapes without checks, so such a shape must never get in.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) throw Error(where + ": shape " + shape_string(shape) + " has a negative dimension; the file is corrupt");
    if (d == 0) {
      zero = true;
    } else if (__builtin_mul_overflow(n, d, &n)) {
      throw Error(where + ": shape " + shape_string(shape) +
                  " has too many elements to address (overflows 64 bits); the file is corrupt");
    }
  }
  return zero ? 0 : n;
}

uint64_t checked_bytes(int64_t numel, DataType dt, const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(dt), &bytes) ||
      bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw Error(where + ": shape " + shape_string(shape) + " of " + std::string(dtype_name(dt)) +
                " is too large to address; the file is corrupt");
  return bytes;
}

// C++ bool must hold 0 or 1; a file byte of 2 would make kernels read an invalid bool.
void normalize_bools(HostTensor& t) {
  if (t.dtype != DataType::kBool) return;
  for (uint8_t& b : t.data) b = b ? 1 : 0;
}

void read_exact(std::ifstream& in, void* dst, uint64_t n, const fs::path& path) {
  if (n == 0) return;
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
  if (!in || static_cast<uint64_t>(in.gcount()) != n)
    throw Error("tensor file " + quoted(path) + ": read failed or the file shrank while being read");
}

uint64_t file_size_or_throw(const fs::path& path, const std::string& where) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw Error(where + ": no such file (or it is not a regular file); check the path");
  uint64_t size = fs::file_size(path, ec);
  if (ec) throw Error(where + ": cannot get the size of " + quoted(path) + ": " + ec.message());
  return size;
}

std::ifstream open_or_throw(const fs::path& path, const std::string& where) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + ": cannot open " + quoted(path) + " for reading: " + std::strerror(errno));
  return in;
}

// ---- ONNX TensorProto ---------------------------------------------------------------------------

std::optional<uint64_t> parse_u64(const std::string& s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::vector<uint8_t> read_external(const onnx::TensorProto& proto, const fs::path& base_dir, uint64_t expected,
                                   const std::string& what) {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      auto v = parse_u64(kv.value());
      if (!v)
        throw Error(what + ": external data '" + kv.key() + "' is '" + kv.value() +
                    "', not a non-negative integer; the model file is corrupt");
      if (kv.key() == "offset")
        offset = *v;
      else
        length = *v;
    }  // "checksum" and unknown keys are optional hints; ignoring them is what ONNX Runtime does
  }
  if (location.empty())
    throw Error(what + ": data_location is EXTERNAL but external_data has no 'location'; the model file is corrupt");
  if (base_dir.empty())
    throw Error(what +
                ": uses external data, which cannot be resolved for a model given as bytes; load the model "
                "from its file so that '" +
                location + "' can be found next to it");
  if (location.find('\0') != std::string::npos)
    throw Error(what + ": external data location contains a NUL byte; the model file is corrupt");
  fs::path rel(location);
  if (rel.is_absolute() || rel.has_root_path())
    throw Error(what + ": external data location '" + location +
                "' is an absolute path; ONNX requires paths relative to the model's directory. Re-save the "
                "model with onnx.save_model(..., save_as_external_data=True)");
  // Lexical check only: symlinks inside the model directory are allowed (model caches use them).
  for (const auto& part : rel) {
    if (part == "..")
      throw Error(what + ": external data location '" + location +
                  "' escapes the model's directory with '..'; move the data file next to the model");
  }
  fs::path full = base_dir / rel;
  uint64_t file_size = file_size_or_throw(full, what + ": external data file " + quoted(full));
  if (length && (offset > file_size || *length > file_size - offset))
    throw Error(what + ": external data file " + quoted(full) + " is " + std::to_string(file_size) +
                " bytes, too short for offset " + std::to_string(offset) + " + length " + std::to_string(*length) +
                "; the data file is truncated or belongs to another model");
  if (offset > file_size)
    throw Error(what + ": external data offset " + std::to_string(offset) + " is past the end of " + quoted(full) +
                " (" + std::to_string(file_size) + " bytes); the data file is truncated");
  uint64_t len = length.value_or(file_size - offset);
  if (len != expected)
    throw Error(what + ": external data in " + quoted(full) + " is " + std::to_string(len) + " bytes but the shape " +
                shape_string({proto.dims().begin(), proto.dims().end()}) + " needs " + std::to_string(expected) +
                "; the data file is truncated or belongs to another model");
  std::ifstream in = open_or_throw(full, what);
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<uint8_t> out(len);
  read_exact(in, out.data(), len, full);
  return out;
}

size_t typed_value_count(const onnx::TensorProto& p) {
  return static_cast<size_t>(p.float_data_size() + p.int32_data_size() + p.int64_data_size() + p.double_data_size() +
                             p.uint64_data_size() + p.string_data_size());
}

}  // namespace

TensorView HostTensor::view() {
  TensorView v;
  v.dtype = dtype;
  v.shape = std::span<const int64_t>(shape);
  v.data = data.data();
  return v;
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor tensor_from_proto(const onnx::TensorProto& proto, const fs::path& base_dir, const std::string& what) {
  const int32_t code = proto.data_type();
  if (code < 0 || !dtype_valid(static_cast<uint32_t>(code)))
    throw Error(what + ": element type " + onnx_dtype_name(code) +
                " is not supported by Kiln (supported: float32/16, bfloat16, float64, int8-64, uint8-64, bool); "
                "convert the tensor, e.g. with a Cast in the exporting framework");
  if (proto.has_segment())
    throw Error(what + ": segmented tensors (TensorProto.segment) are not supported; save the tensor whole");

  HostTensor t;
  t.name = proto.name();
  t.dtype = static_cast<DataType>(code);
  t.shape.assign(proto.dims().begin(), proto.dims().end());
  const int64_t numel = checked_numel(t.shape, what);
  const uint64_t bytes = checked_bytes(numel, t.dtype, t.shape, what);
  const std::string dt(dtype_name(t.dtype));

  if (proto.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    if (proto.has_raw_data() || typed_value_count(proto) != 0)
      throw Error(what + ": data_location is EXTERNAL but the tensor also has inline data; the model file is corrupt");
    t.data = read_external(proto, base_dir, bytes, what);
    normalize_bools(t);
    return t;
  }

  if (proto.has_raw_data()) {
    if (typed_value_count(proto) != 0)
      throw Error(what + ": the tensor has both raw_data and typed data fields; the file is corrupt");
    if (proto.raw_data().size() != bytes)
      throw Error(what + ": raw_data is " + std::to_string(proto.raw_data().size()) + " bytes but shape " +
                  shape_string(t.shape) + " of " + dt + " needs " + std::to_string(bytes) +
                  "; the file is truncated or corrupt");
    t.data.assign(proto.raw_data().begin(), proto.raw_data().end());
    normalize_bools(t);
    return t;
  }

  // Typed fields, per onnx.proto: each dtype lives in one field; narrow ints and the 16-bit
  // patterns of float16/bfloat16 travel in int32_data. Values outside the dtype's range
  // (a uint8 carrying 300) mean a corrupt file; wrapping them silently would hide that.
  auto take = [&](auto tag, const auto& src, const char* field, int64_t lo = 0, int64_t hi = 0) {
    using T = typename decltype(tag)::type;
    // Counts are compared before converting anything, so a huge shape over a tiny field fails fast.
    if (static_cast<uint64_t>(src.size()) != static_cast<uint64_t>(numel)) {
      if (src.empty() && typed_value_count(proto) != 0)
        throw Error(what + ": a " + dt + " tensor must store its values in " + field +
                    " or raw_data, but they are in another field; the exporter wrote an invalid tensor");
      throw Error(what + ": " + field + " has " + std::to_string(src.size()) + " values but shape " +
                  shape_string(t.shape) + " needs " + std::to_string(numel) + "; the file is truncated or corrupt");
    }
    t.data.resize(bytes);
    for (int i = 0; i < src.size(); ++i) {
      auto v = src.Get(i);
      if constexpr (std::is_integral_v<T> && sizeof(T) < sizeof(v)) {
        if (static_cast<int64_t>(v) < lo || static_cast<int64_t>(v) > hi)
          throw Error(what + ": " + field + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                      " is out of range for " + dt + "; the file is corrupt");
      }
      T x = static_cast<T>(v);
      std::memcpy(t.data.data() + i * sizeof(T), &x, sizeof(T));
    }
  };
  switch (t.dtype) {
    case DataType::kFloat32: take(Tag<float>{}, proto.float_data(), "float_data"); break;
    case DataType::kFloat64: take(Tag<double>{}, proto.double_data(), "double_data"); break;
    case DataType::kInt64: take(Tag<int64_t>{}, proto.int64_data(), "int64_data"); break;
    case DataType::kUInt32: take(Tag<uint32_t>{}, proto.uint64_data(), "uint64_data", 0, UINT32_MAX); break;
    case DataType::kUInt64: take(Tag<uint64_t>{}, proto.uint64_data(), "uint64_data"); break;
    case DataType::kInt32: take(Tag<int32_t>{}, proto.int32_data(), "int32_data"); break;
    case DataType::kInt16: take(Tag<int16_t>{}, proto.int32_data(), "int32_data", INT16_MIN, INT16_MAX); break;
    case DataType::kInt8: take(Tag<int8_t>{}, proto.int32_data(), "int32_data", INT8_MIN, INT8_MAX); break;
    case DataType::kUInt8: take(Tag<uint8_t>{}, proto.int32_data(), "int32_data", 0, UINT8_MAX); break;
    case DataType::kBool: take(Tag<uint8_t>{}, proto.int32_data(), "int32_data", 0, 1); break;
    case DataType::kUInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16: take(Tag<uint16_t>{}, proto.int32_data(), "int32_data", 0, UINT16_MAX); break;
  }
  return t;
}

void tensor_to_proto(const HostTensor& t, onnx::TensorProto* proto) {
  proto->Clear();
  proto->set_name(t.name);
  proto->set_data_type(static_cast<int32_t>(t.dtype));
  for (int64_t d : t.shape) proto->add_dims(d);
  proto->set_raw_data(t.data.data(), t.data.size());
}

// ---- .npy -----------------------------------------------------------------------------------------

namespace {

// Parses the Python dict literal numpy writes, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// Only the literal forms numpy produces are accepted; nothing is evaluated.
class NpyHeaderParser {
 public:
  NpyHeaderParser(std::string_view text, std::string where) : s_(text), where_(std::move(where)) {}

  void parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = parse_string();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[') fail("has a structured dtype (a list of fields); save a plain numeric array instead");
        *descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        *fortran = parse_bool();
        have_fortran = true;
      } else if (key == "shape") {
        *shape = parse_shape();
        have_shape = true;
      } else {
        fail("has an unexpected header key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',')
        ++pos_;
      else if (peek() != '}')
        fail("has a malformed header (expected ',' or '}')");
    }
    if (!have_descr || !have_fortran || !have_shape)
      fail("has a header that lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(where_ + " " + msg + "; re-save the array with numpy.save");
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("has a malformed header (expected '") + c + "')");
    ++pos_;
  }
  std::string parse_string() {
    skip_ws();
    char q = peek();
    if (q != '\'' && q != '"') fail("has a malformed header (expected a quoted string)");
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("has a malformed header (unterminated string)");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool parse_bool() {
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("has a malformed header ('fortran_order' must be True or False)");
  }
  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(');
    while (true) {
      skip_ws();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      if (peek() == '-') fail("has a negative dimension in its shape");
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("has a malformed shape in its header");
      int64_t v = 0;
      auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), v);
      if (ec != std::errc()) fail("has a dimension too large to address in its shape");
      pos_ = static_cast<size_t>(end - s_.data());
      if (peek() == 'L') ++pos_;  // Python 2 numpy wrote long ints as "3L"
      shape.push_back(v);
      skip_ws();
      if (peek() == ',')
        ++pos_;
      else if (peek() != ')')
        fail("has a malformed shape in its header");
    }
    return shape;
  }

  std::string_view s_;
  std::string where_;
  size_t pos_ = 0;
};

DataType npy_dtype(const std::string& descr, const std::string& where) {
  auto unsupported = [&](const std::string& why) -> DataType {
    throw Error(where + ": numpy dtype '" + descr + "' " + why +
                "; supported are float16/32/64, int8-64, uint8-64 and bool (e.g. save a.astype(numpy.float32))");
  };
  if (descr.size() < 3) return unsupported("is not understood");
  const char order = descr[0];
  const char kind = descr[1];
  const std::string size = descr.substr(2);
  if (order != '<' && order != '|' && order != '=' && order != '>') return unsupported("is not understood");
  if (kind == 'c') return unsupported("is complex, which Kiln does not support");
  if (kind == 'U' || kind == 'S' || kind == 'a' || kind == 'O')
    return unsupported("is a string or object type, which Kiln does not support");
  if (kind == 'V')
    return unsupported("is raw bytes (ml_dtypes bfloat16 is saved like this; use a .pb file for bfloat16)");
  static const struct {
    char kind;
    const char* size;
    DataType dt;
  } kTable[] = {{'f', "2", DataType::kFloat16}, {'f', "4", DataType::kFloat32}, {'f', "8", DataType::kFloat64},
                {'i', "1", DataType::kInt8},    {'i', "2", DataType::kInt16},   {'i', "4", DataType::kInt32},
                {'i', "8", DataType::kInt64},   {'u', "1", DataType::kUInt8},   {'u', "2", DataType::kUInt16},
                {'u', "4", DataType::kUInt32},  {'u', "8", DataType::kUInt64},  {'b', "1", DataType::kBool}};
  for (const auto& e : kTable) {
    if (e.kind != kind || size != e.size) continue;
    if (order == '>' && dtype_size(e.dt) > 1)
      return unsupported("is big-endian; save a.astype(a.dtype.newbyteorder('<')) instead");
    return e.dt;
  }
  return unsupported("is not supported");
}

HostTensor read_npy(const fs::path& path) {
  const std::string where = "tensor file " + quoted(path);
  const uint64_t file_size = file_size_or_throw(path, where);
  std::ifstream in = open_or_throw(path, where);
  uint8_t pre[12] = {};
  if (file_size < 10)
    throw Error(where + " is " + std::to_string(file_size) + " bytes, too short for a .npy file (truncated?)");
  read_exact(in, pre, 10, path);
  if (std::memcmp(pre, kNpyMagic, 6) != 0)
    throw Error(where + " is not a .npy file (bad magic bytes); write it with numpy.save or fix its extension");
  const int major = pre[6], minor = pre[7];
  uint64_t header_len = 0, header_start = 0;
  if (major == 1 && minor == 0) {
    header_len = pre[8] | (uint64_t{pre[9]} << 8);
    header_start = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (file_size < 12) throw Error(where + " is truncated inside its .npy preamble");
    read_exact(in, pre + 10, 2, path);
    header_len = pre[8] | (uint64_t{pre[9]} << 8) | (uint64_t{pre[10]} << 16) | (uint64_t{pre[11]} << 24);
    header_start = 12;
  } else {
    throw Error(where + " has .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                ", which Kiln does not read (1.0, 2.0 and 3.0 are supported); re-save with numpy.save");
  }
  if (header_len > kMaxNpyHeader)
    throw Error(where + ": .npy header claims " + std::to_string(header_len) + " bytes (limit " +
                std::to_string(kMaxNpyHeader) + "); the file is corrupt");
  if (header_start + header_len > file_size)
    throw Error(where + " is truncated inside its .npy header (" + std::to_string(file_size) + " bytes)");
  std::string header(header_len, '\0');
  read_exact(in, header.data(), header_len, path);

  std::string descr;
  bool fortran = false;
  HostTensor t;
  NpyHeaderParser(header, where).parse(&descr, &fortran, &t.shape);
  t.dtype = npy_dtype(descr, where);
  if (fortran && t.shape.size() > 1)
    throw Error(where +
                " is stored in Fortran (column-major) order, which Kiln does not read; re-save it with "
                "numpy.save(path, numpy.ascontiguousarray(a))");
  const int64_t numel = checked_numel(t.shape, where);
  const uint64_t bytes = checked_bytes(numel, t.dtype, t.shape, where);
  // Checked against the real file size before allocating, so a header claiming 10^12 elements fails here.
  const uint64_t have = file_size - header_start - header_len;
  if (have != bytes)
    throw Error(where + ": header says shape " + shape_string(t.shape) + " of " + std::string(dtype_name(t.dtype)) +
                " (" + std::to_string(bytes) + " bytes) but the file holds " + std::to_string(have) +
                " bytes of data; the file is truncated or corrupt");
  t.name = path.stem().string();
  t.data.resize(bytes);
  read_exact(in, t.data.data(), bytes, path);
  normalize_bools(t);
  return t;
}

// The bytes of a .pb file, at most 2 GB (protobuf's limit).
std::string read_pb_bytes(const fs::path& path, const std::string& where) {
  const uint64_t file_size = file_size_or_throw(path, where);
  if (file_size > static_cast<uint64_t>(INT_MAX))
    throw Error(where +
                " is larger than 2 GB, which protobuf cannot parse; store the tensor as .npy or with "
                "external data");
  std::ifstream in = open_or_throw(path, where);
  std::string bytes(file_size, '\0');
  read_exact(in, bytes.data(), file_size, path);
  return bytes;
}

HostTensor read_pb(const fs::path& path) {
  const std::string where = "tensor file " + quoted(path);
  const std::string bytes = read_pb_bytes(path, where);
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes))
    throw Error(where +
                " is not a valid ONNX TensorProto (protobuf parse failed); the file is corrupt or not a .pb "
                "tensor (write one with onnx.numpy_helper.from_array(a).SerializeToString())");
  return tensor_from_proto(proto, path.parent_path(), where);
}

std::string lower_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

[[noreturn]] void bad_extension(const fs::path& path) {
  throw Error("tensor file " + quoted(path) + ": unknown extension '" + path.extension().string() +
              "'; use .npy (numpy) or .pb (ONNX TensorProto)");
}

const char* npy_descr(DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return "<f4";
    case DataType::kFloat64: return "<f8";
    case DataType::kFloat16: return "<f2";
    case DataType::kInt8: return "|i1";
    case DataType::kUInt8: return "|u1";
    case DataType::kInt16: return "<i2";
    case DataType::kUInt16: return "<u2";
    case DataType::kInt32: return "<i4";
    case DataType::kUInt32: return "<u4";
    case DataType::kInt64: return "<i8";
    case DataType::kUInt64: return "<u8";
    case DataType::kBool: return "|b1";
    case DataType::kBFloat16: return nullptr;
  }
  return nullptr;
}

std::string npy_bytes_header(const HostTensor& t) {
  std::string dict = "{'descr': '" + std::string(npy_descr(t.dtype)) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape.size(); ++i) dict += std::to_string(t.shape[i]) + (i + 1 < t.shape.size() ? ", " : "");
  dict += t.shape.size() == 1 ? ",), }" : "), }";
  // Version 1.0 when the header length fits 16 bits, as numpy does; pad with spaces so the data
  // starts 64-byte aligned, and end with '\n'.
  const bool v1 = dict.size() + 1 + 10 < 65536 - kNpyAlign;
  const size_t pre = v1 ? 10 : 12;
  size_t total = pre + dict.size() + 1;
  total = (total + kNpyAlign - 1) / kNpyAlign * kNpyAlign;
  const size_t header_len = total - pre;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kNpyMagic, 6);
  out += static_cast<char>(v1 ? 1 : 2);
  out += '\0';
  for (size_t i = 0; i < pre - 8; ++i) out += static_cast<char>((header_len >> (8 * i)) & 0xff);
  return out + dict;
}

}  // namespace

HostTensor read_tensor_file(const fs::path& path) {
  const std::string ext = lower_extension(path);
  if (ext == ".npy") return read_npy(path);
  if (ext == ".pb") return read_pb(path);
  bad_extension(path);
}

namespace {

std::vector<HostTensor> sequence_from_proto(const onnx::SequenceProto& proto, const fs::path& path,
                                            const std::string& where) {
  if (proto.elem_type() != onnx::SequenceProto::TENSOR && !(proto.elem_type() == 0 && proto.tensor_values_size() == 0))
    throw Error(where + " holds a sequence of " +
                (proto.elem_type() == onnx::SequenceProto::SEQUENCE ? std::string("sequences")
                 : proto.elem_type() == onnx::SequenceProto::MAP
                     ? std::string("maps")
                     : "element type " + std::to_string(proto.elem_type())) +
                "; Kiln reads sequences of tensors");
  std::vector<HostTensor> out;
  for (int i = 0; i < proto.tensor_values_size(); ++i)
    out.push_back(
        tensor_from_proto(proto.tensor_values(i), path.parent_path(), where + ", element " + std::to_string(i)));
  return out;
}

}  // namespace

namespace {

// A .pb file holding one message of type Proto (`what`, e.g. "SequenceProto", written as `how`),
// for a `kind` of value ("a sequence").
template <class Proto>
Proto read_pb_message(const fs::path& path, const std::string& where, const std::string& kind, const char* what,
                      const char* how) {
  if (lower_extension(path) != ".pb")
    throw Error(where + ": " + kind + " is read from a .pb file holding an ONNX " + what);
  Proto proto;
  if (!proto.ParseFromString(read_pb_bytes(path, where)))
    throw Error(where + " is not a valid ONNX " + what + " (protobuf parse failed); write one with " + how);
  return proto;
}

}  // namespace

std::vector<HostTensor> read_sequence_file(const fs::path& path) {
  const std::string where = "sequence file " + quoted(path);
  const auto proto = read_pb_message<onnx::SequenceProto>(path, where, "a sequence", "SequenceProto",
                                                          "onnx.numpy_helper.from_list([...]).SerializeToString()");
  return sequence_from_proto(proto, path, where);
}

OptionalValue read_optional_file(const fs::path& path) {
  const std::string where = "optional file " + quoted(path);
  const auto proto = read_pb_message<onnx::OptionalProto>(path, where, "an optional", "OptionalProto",
                                                          "onnx.numpy_helper.from_optional(...).SerializeToString()");
  OptionalValue v;
  if (proto.has_tensor_value()) {
    v.present = true;
    v.values.push_back(tensor_from_proto(proto.tensor_value(), path.parent_path(), where));
  } else if (proto.has_sequence_value()) {
    v.present = v.sequence = true;
    v.values = sequence_from_proto(proto.sequence_value(), path, where);
  } else if (proto.has_sparse_tensor_value() || proto.has_map_value() || proto.has_optional_value()) {
    throw Error(where + " holds a sparse tensor, a map or an optional; Kiln reads optionals of tensors and sequences");
  } else {
    v.sequence = proto.elem_type() == onnx::OptionalProto::SEQUENCE;
  }
  return v;
}

void write_tensor_file(const fs::path& path, const HostTensor& t) {
  const std::string where = "cannot write tensor '" + t.name + "' to " + quoted(path);
  const std::string ext = lower_extension(path);
  if (ext != ".npy" && ext != ".pb") bad_extension(path);
  if (!dtype_valid(static_cast<uint32_t>(t.dtype))) throw Error(where + ": it has an invalid element type");
  const int64_t numel = checked_numel(t.shape, where);
  const uint64_t bytes = checked_bytes(numel, t.dtype, t.shape, where);
  if (t.data.size() != bytes)
    throw Error(where + ": it holds " + std::to_string(t.data.size()) + " bytes but shape " + shape_string(t.shape) +
                " of " + std::string(dtype_name(t.dtype)) + " needs " + std::to_string(bytes) + " (internal error)");
  std::string header;
  if (ext == ".npy") {
    if (t.dtype == DataType::kBFloat16)
      throw Error(where + ": .npy has no standard bfloat16 type; write a .pb file instead (or convert to float32)");
    header = npy_bytes_header(t);
  } else {
    if (bytes > static_cast<uint64_t>(INT_MAX) - 4096)
      throw Error(where + ": protobuf cannot hold tensors over 2 GB; write a .npy file instead");
    onnx::TensorProto proto;
    tensor_to_proto(t, &proto);
    header = proto.SerializeAsString();  // the whole file; small enough by the check above
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(where + ": cannot open for writing: " + std::strerror(errno));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (ext == ".npy") out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) throw Error(where + ": write failed (disk full?): " + std::strerror(errno));
}

}  // namespace kiln
