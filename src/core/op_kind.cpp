#include "core/op_kind.h"

#include <algorithm>

namespace kiln {

std::optional<OpKind> op_kind_from_name(std::string_view name) {
  // The ONNX rows of kOpTable are sorted by name (the enum is alphabetical): a binary search suffices.
  const OpInfo* end = std::begin(kOpTable) + kOnnxOpCount;
  auto it = std::lower_bound(std::begin(kOpTable), end, name,
                             [](const OpInfo& info, std::string_view n) { return info.name < n; });
  if (it == end || it->name != name) return std::nullopt;
  return it->kind;
}

namespace {
template <size_t... I>
Attrs attrs_by_index(size_t index, std::index_sequence<I...>) {
  Attrs out;
  (void)((index == I ? (out = std::variant_alternative_t<I, Attrs>{}, true) : false) || ...);
  return out;
}
}  // namespace

Attrs default_attrs(OpKind kind) {
  return attrs_by_index(op_info(kind).attrs_index, std::make_index_sequence<std::variant_size_v<Attrs>>{});
}

}  // namespace kiln
