// The quant family's CUDA kernel table: the entries of quantize.cu (QuantizeLinear,
// DequantizeLinear, DynamicQuantizeLinear), conv.cu (ConvInteger, QLinearConv, QConv, NhwcQConv)
// and matmul.cu (MatMulInteger, QLinearMatMul, QMatMul), joined once.
#include <vector>

#include "runtime/cuda/quant/quant_internal.cuh"

namespace kiln::gpu {

std::span<const GpuKernelEntry> quant_gpu_kernels() {
  static const std::vector<GpuKernelEntry> all = [] {
    std::vector<GpuKernelEntry> v;
    for (auto part : {quant::quantize_entries(), quant::conv_entries(), quant::matmul_entries()})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  }();
  return all;
}

}  // namespace kiln::gpu
