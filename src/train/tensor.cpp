// Training tensors (see tensor.h).
#include "train/tensor.h"

namespace kiln::train {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor::Tensor(DataType dtype, Shape shape, std::shared_ptr<Buffer> buffer)
    : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)) {
  if (buffer_ && bytes() > buffer_->bytes)
    throw Error("tensor " + shape_string(shape_) + " is larger than its buffer (" + std::to_string(buffer_->bytes) +
                " bytes)");
}

int64_t Tensor::numel() const { return numel_of(shape_); }

Tensor Tensor::view(Shape shape) const { return Tensor(dtype_, std::move(shape), buffer_); }

Tensor Tensor::with_batch(int64_t n) const {
  Shape s = shape_;
  s.at(0) = n;
  return view(std::move(s));
}

}  // namespace kiln::train
