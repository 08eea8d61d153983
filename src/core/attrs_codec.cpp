#include "core/attrs_codec.h"

#include <cstring>
#include <sstream>

namespace kiln {

namespace {

constexpr uint32_t kMaxCount = 1u << 20;  // no attribute list or string is longer in practice

class Writer {
 public:
  std::vector<uint8_t> out;
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void put(int64_t v) { raw(&v, 8); }
  void put(float v) { raw(&v, 4); }
  void put(DataType v) { out.push_back(static_cast<uint8_t>(v)); }
  void put(const Scalar& s) {
    put(s.dtype);
    raw(s.bytes.data(), 8);
  }
  void put(const std::string& s) {
    count(s.size());
    raw(s.data(), s.size());
  }
  template <class T>
  void put(const std::vector<T>& v) {
    count(v.size());
    for (const T& x : v) put(x);
  }
  template <AttrEnum E>
  void put(E e) {
    out.push_back(static_cast<uint8_t>(e));
  }

 private:
  void count(size_t n) {
    auto c = static_cast<uint32_t>(n);
    raw(&c, 4);
  }
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : bytes_(b) {}
  void get(int64_t& v) { raw(&v, 8); }
  void get(float& v) { raw(&v, 4); }
  void get(DataType& v) {
    uint8_t b = byte();
    if (!dtype_valid(b)) throw Error("invalid element type code " + std::to_string(b));
    v = static_cast<DataType>(b);
  }
  void get(Scalar& s) {
    get(s.dtype);
    raw(s.bytes.data(), 8);
  }
  void get(std::string& s) {
    uint32_t n = count();
    need(n);
    s.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
  }
  template <class T>
  void get(std::vector<T>& v) {
    uint32_t n = count();
    need(static_cast<size_t>(n) * sizeof(T) / 2);  // cheap plausibility check before allocating
    v.resize(n);
    for (T& x : v) get(x);
  }
  template <AttrEnum E>
  void get(E& e) {
    uint8_t b = byte();
    if (b >= kEnumNames<E>.size()) throw Error("invalid enum value " + std::to_string(b));
    e = static_cast<E>(b);
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  void need(size_t n) {
    if (n > bytes_.size() - pos_) throw Error("attribute record is truncated");
  }
  void raw(void* p, size_t n) {
    need(n);
    std::memcpy(p, bytes_.data() + pos_, n);
    pos_ += n;
  }
  uint8_t byte() {
    uint8_t b;
    raw(&b, 1);
    return b;
  }
  uint32_t count() {
    uint32_t c;
    raw(&c, 4);
    if (c > kMaxCount) throw Error("attribute list length " + std::to_string(c) + " is implausible");
    return c;
  }
};

void print(std::ostream& os, int64_t v) { os << v; }
void print(std::ostream& os, float v) { os << v; }
void print(std::ostream& os, DataType v) { os << dtype_name(v); }
void print(std::ostream& os, const std::string& v) { os << '"' << v << '"'; }
void print(std::ostream& os, const Scalar& v) {
  os << dtype_name(v.dtype) << ":";
  for (int i = 7; i >= 0; --i) os << std::hex << static_cast<int>(v.bytes[static_cast<size_t>(i)]) << std::dec;
}
template <AttrEnum E>
void print(std::ostream& os, E e) {
  os << kEnumNames<E>[static_cast<size_t>(e)];
}
template <class T>
void print(std::ostream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ',';
    print(os, v[i]);
  }
  os << ']';
}

}  // namespace

std::vector<uint8_t> encode_attrs(const Attrs& attrs) {
  Writer w;
  std::visit([&](const auto& s) { for_each_field(s, [&](const char*, const auto& m) { w.put(m); }); }, attrs);
  return std::move(w.out);
}

Attrs decode_attrs(OpKind kind, std::span<const uint8_t> bytes) {
  Attrs attrs = default_attrs(kind);
  Reader r(bytes);
  std::visit([&](auto& s) { for_each_field(s, [&](const char*, auto& m) { r.get(m); }); }, attrs);
  if (!r.done()) throw Error("attribute record has trailing bytes");
  return attrs;
}

std::string describe_attrs(const Attrs& attrs) {
  std::ostringstream os;
  bool first = true;
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        const S defaults{};
        std::apply(
            [&](auto... f) {
              auto one = [&](auto field) {
                if (s.*(field.member) == defaults.*(field.member)) return;
                os << (first ? "" : ", ") << field.name << "=";
                print(os, s.*(field.member));
                first = false;
              };
              (one(f), ...);
            },
            S::kFields);
      },
      attrs);
  return os.str();
}

}  // namespace kiln
