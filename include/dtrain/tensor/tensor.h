// Tensor: a strided view (shape, strides, offset, dtype) into a reference-counted Storage.
// Copying a Tensor copies the handle, not the data; views (reshape of contiguous data,
// permute, transpose, slice, narrow, expand, squeeze, unsqueeze) share storage.
// The math lives in ops.h as free functions; the methods here are the structural ones.
#pragma once

#include "dtrain/core/device.h"
#include "dtrain/tensor/dtype.h"
#include "dtrain/tensor/shape.h"
#include "dtrain/tensor/storage.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain {

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  // CPU only, CUDA builds only: page-locked host memory, from which to(cuda, true) uploads
  // without waiting (see pin_memory()).
  bool pinned = false;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no storage

  // ---- factories ------------------------------------------------------------
  static Tensor empty(const Shape& shape, TensorOptions opts = {});
  static Tensor zeros(const Shape& shape, TensorOptions opts = {});
  static Tensor ones(const Shape& shape, TensorOptions opts = {});
  static Tensor full(const Shape& shape, double value, TensorOptions opts = {});
  static Tensor scalar(double value, TensorOptions opts = {});
  // [start, end) with step, as f32 unless opts say otherwise.
  static Tensor arange(double start, double end, double step = 1, TensorOptions opts = {});
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor from_blob(const void* data, const Shape& shape, DType dtype);  // copies into new CPU storage

  // ---- metadata -------------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t stride(std::int64_t d) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  TensorOptions options() const { return {dtype_, device()}; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool same_storage(const Tensor& other) const { return storage_ == other.storage_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Pointer to the first element; T must match dtype (checked).
  template <class T> T* data() const;
  void* raw_data() const;

  // ---- views (share storage) -----------------------------------------------
  // reshape returns a view when the layout allows it, a contiguous copy otherwise.
  // One dimension may be -1 (inferred).
  Tensor reshape(Shape shape) const;
  Tensor view(Shape shape) const;  // like reshape, but throws instead of copying
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }  // 2-D only
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;  // removes `dim`
  Tensor expand(const Shape& shape) const;                   // numpy broadcast, stride 0
  Tensor squeeze(std::int64_t dim) const;
  Tensor unsqueeze(std::int64_t dim) const;

  // ---- copies ----------------------------------------------------------------
  Tensor contiguous() const;  // this tensor itself when already contiguous
  Tensor clone() const;       // always a new contiguous copy
  // non_blocking: from pinned host memory (pin_memory()) to a GPU, the upload is queued on
  // the device's stream and to() returns at once; the source's memory stays allocated until
  // the copy is done, but the caller must not write to it before then. Otherwise (and by
  // default) to() returns when the data has arrived.
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;
  // A contiguous copy in page-locked host memory (itself when already pinned). CPU tensors
  // only; throws in a build or on a machine without CUDA.
  Tensor pin_memory() const;
  bool is_pinned() const;
  // Copies src into this tensor (broadcasting src, converting dtype, across devices).
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0); }

  // ---- host access -----------------------------------------------------------
  // The single element as double (numel() must be 1).
  double item() const;
  template <class T> T item() const { return static_cast<T>(item()); }
  // All elements in row-major order converted to T, copied to the host.
  template <class T> std::vector<T> to_vector() const;
  std::string str() const;  // shape, dtype, device and (small tensors) the values

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, std::int64_t offset, DType dtype);
  Tensor as_view(Shape shape, Strides strides, std::int64_t offset) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  std::int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

// Throws naming `op` unless t is defined.
void check_defined(const Tensor& t, const char* op);

}  // namespace dtrain
