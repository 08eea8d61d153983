// The training tensor: a dtype, a shape and shared memory owned by a backend (host memory for the
// CPU backend, device memory for the GPU one). Layers and the network pass tensors to Backend ops
// and never read their memory; only backends call data<T>(). A tensor is a handle: copying it
// shares the memory, and `const Tensor&` makes the handle const, not the elements.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/types.h"

namespace kiln::train {

using Shape = std::vector<int64_t>;

enum class Device { kCpu, kGpu };

// Memory allocated by a backend, freed through `release` when the last tensor sharing it goes.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::kCpu;
  std::function<void(void*)> release;

  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (release) release(data);
  }
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DataType dtype, Shape shape, std::shared_ptr<Buffer> buffer);

  bool defined() const { return buffer_ != nullptr; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return buffer_ ? buffer_->device : Device::kCpu; }
  // True when both handles share one buffer (a flatten aliases its input, for instance).
  bool same_memory(const Tensor& other) const { return buffer_ == other.buffer_; }

  // The same memory seen with another shape of at most as many elements: a flatten, or a smaller
  // batch of a tensor allocated for the largest one (the rows are the leading elements).
  Tensor view(Shape shape) const;
  // view() with the leading dimension set to n.
  Tensor with_batch(int64_t n) const;

  // Backends only: the first element.
  template <class T>
  T* data() const {
    return static_cast<T*>(buffer_->data);
  }

 private:
  DataType dtype_ = DataType::kFloat32;
  Shape shape_;
  std::shared_ptr<Buffer> buffer_;
};

int64_t numel_of(const Shape& shape);

}  // namespace kiln::train
