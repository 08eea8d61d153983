// Binary encoding of an op's attribute struct for the engine file. Fields are written in kFields
// order: int64 and float as 8/4 little-endian bytes, vectors and strings with a u32 count, enums
// and DataType as one byte, Scalar as dtype byte + 8 bytes. Decoding checks every length, enum
// and dtype, and throws kiln::Error on anything malformed: the bytes come from an untrusted file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/op_kind.h"

namespace kiln {

std::vector<uint8_t> encode_attrs(const Attrs& attrs);
Attrs decode_attrs(OpKind kind, std::span<const uint8_t> bytes);
// "alpha=0.2, kernel_shape=[3,3]": fields that differ from the struct's defaults, for inspect.
std::string describe_attrs(const Attrs& attrs);

}  // namespace kiln
