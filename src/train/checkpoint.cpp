// Checkpoint files (see checkpoint.h). POSIX calls do the writing: fsync of the file and of its
// folder is what makes the rename durable, and std::ofstream offers neither.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

namespace kiln::train {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxFile = uint64_t{16} << 30;

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void put_bytes(std::vector<uint8_t>& out, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + n);
}

// Reads from a byte range, throwing "truncated" instead of reading past its end.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& b, size_t end, std::string where) : b_(b), end_(end), where_(std::move(where)) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  const uint8_t* take(size_t n) {
    if (n > end_ - pos_) throw Error(where_ + ": truncated checkpoint (a record runs past the end)");
    const uint8_t* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<uint8_t>& b_;
  size_t end_;
  size_t pos_ = 0;
  std::string where_;
};

void write_all(int fd, const std::vector<uint8_t>& bytes, const std::string& where) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(where + ": cannot write (" + std::strerror(errno) + ")");
    done += static_cast<size_t>(n);
  }
}

}  // namespace

fs::path checkpoint_path(const fs::path& dir) { return dir / "latest.ckpt"; }

void write_checkpoint(const fs::path& dir, const std::string& header, Backend& be,
                      const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<uint8_t> out;
  put_bytes(out, kMagic, sizeof(kMagic));
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  put<uint64_t>(out, header.size());
  put_bytes(out, header.data(), header.size());
  std::vector<uint8_t> data;
  for (const auto& [name, t] : tensors) {
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    put_bytes(out, name.data(), name.size());
    put<uint8_t>(out, static_cast<uint8_t>(t.dtype()));
    put<uint8_t>(out, static_cast<uint8_t>(t.rank()));
    for (int64_t d : t.shape()) put<int64_t>(out, d);
    put<uint64_t>(out, t.bytes());
    data.resize(t.bytes());
    be.download(t, data.data());
    put_bytes(out, data.data(), data.size());
  }
  put<uint64_t>(out, XXH64(out.data(), out.size(), 0));

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("--checkpoint " + dir.string() + ": cannot create the folder (" + ec.message() + ")");
  const fs::path final_path = checkpoint_path(dir), tmp = final_path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(tmp.string() + ": cannot create (" + std::strerror(errno) + ")");
  try {
    write_all(fd, out, tmp.string());
    if (::fsync(fd) != 0) throw Error(tmp.string() + ": cannot flush to disk (" + std::strerror(errno) + ")");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    throw Error(final_path.string() + ": cannot replace (" + std::strerror(errno) + ")");
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // makes the rename durable; some file systems refuse, and the data is safe anyway
    ::close(dfd);
  }
}

Checkpoint read_checkpoint(const fs::path& dir) {
  const fs::path path = checkpoint_path(dir);
  const std::string where = path.string();
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw Error("--resume " + dir.string() + ": no checkpoint (" + where + ": " + ec.message() + ")");
  if (size > kMaxFile) throw Error(where + ": larger than any checkpoint Kiln writes");
  std::vector<uint8_t> b(size);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(size)))
    throw Error(where + ": cannot read");
  if (size < sizeof(kMagic) || std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0)
    throw Error(where + ": not a Kiln checkpoint (bad magic)");
  if (size < sizeof(kMagic) + 24) throw Error(where + ": truncated checkpoint");
  uint64_t stored;
  std::memcpy(&stored, b.data() + size - 8, 8);
  if (XXH64(b.data(), size - 8, 0) != stored)
    throw Error(where + ": damaged checkpoint (checksum mismatch); resume from an older copy or start again");

  Reader r(b, size - 8, where);
  r.take(sizeof(kMagic));
  const uint32_t version = r.get<uint32_t>();
  if (version != kVersion)
    throw Error(where + ": checkpoint format " + std::to_string(version) + ", this Kiln reads format " +
                std::to_string(kVersion));
  const uint32_t count = r.get<uint32_t>();
  const uint64_t header_bytes = r.get<uint64_t>();
  Checkpoint c;
  const auto* h = r.take(header_bytes);
  c.header.assign(reinterpret_cast<const char*>(h), header_bytes);
  for (uint32_t i = 0; i < count; ++i) {
    CheckpointTensor t;
    const uint32_t name_bytes = r.get<uint32_t>();
    const auto* n = r.take(name_bytes);
    t.name.assign(reinterpret_cast<const char*>(n), name_bytes);
    const uint8_t dtype = r.get<uint8_t>(), rank = r.get<uint8_t>();
    if (!dtype_valid(dtype)) throw Error(where + ": tensor '" + t.name + "' has an unknown dtype");
    t.dtype = static_cast<DataType>(dtype);
    uint64_t numel = 1;
    for (uint8_t k = 0; k < rank; ++k) {
      const int64_t d = r.get<int64_t>();
      if (d < 0 || static_cast<uint64_t>(d) > kMaxFile)
        throw Error(where + ": tensor '" + t.name + "' has a bad shape");
      t.shape.push_back(d);
      numel *= static_cast<uint64_t>(d);
      if (numel > kMaxFile) throw Error(where + ": tensor '" + t.name + "' has a bad shape");
    }
    const uint64_t bytes = r.get<uint64_t>();
    if (bytes != numel * dtype_size(t.dtype)) throw Error(where + ": tensor '" + t.name + "' has the wrong size");
    const auto* d = r.take(bytes);
    t.bytes.assign(d, d + bytes);
    c.tensors.push_back(std::move(t));
  }
  if (r.pos() != size - 8) throw Error(where + ": unexpected bytes after the last tensor");
  return c;
}

void load_tensors(const Checkpoint& c, Backend& be, const std::vector<std::pair<std::string, Tensor>>& into,
                  const std::string& where) {
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : c.tensors) by_name[t.name] = &t;
  for (const auto& [name, t] : into) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw Error(where + ": the checkpoint has no tensor '" + name + "'");
    const CheckpointTensor& s = *it->second;
    if (s.dtype != t.dtype() || s.shape != t.shape())
      throw Error(where + ": tensor '" + name + "' is " + std::string(dtype_name(s.dtype)) + shape_string(s.shape) +
                  " in the checkpoint, " + std::string(dtype_name(t.dtype())) + shape_string(t.shape()) + " here");
    be.upload(s.bytes.data(), t);
  }
}

}  // namespace kiln::train
