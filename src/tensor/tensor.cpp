// The structural side of Tensor: factories, views and copies. Math is in ops_*.cpp.
#include "dtrain/tensor/tensor.h"

#include "dtrain/tensor/ops.h"
#include "tensor/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace dtrain {

void check_defined(const Tensor& t, const char* op) {
  DTRAIN_CHECK(t.defined(), "{}: the tensor is undefined (default-constructed)", op);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, std::int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {}

Tensor Tensor::as_view(Shape shape, Strides strides, std::int64_t offset) const {
  return Tensor(storage_, std::move(shape), std::move(strides), offset, dtype_);
}

// ---- factories ---------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) {
  for (auto d : shape) DTRAIN_CHECK(d >= 0, "Tensor::empty: negative dimension in shape {}", shape_str(shape));
  std::size_t nbytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(opts.dtype);
  auto storage = std::make_shared<Storage>(nbytes, opts.device, opts.pinned);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, opts.dtype);
}

Tensor Tensor::zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0, opts); }
Tensor Tensor::ones(const Shape& shape, TensorOptions opts) { return full(shape, 1, opts); }

Tensor Tensor::full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = empty(shape, opts);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, TensorOptions opts) { return full({}, value, opts); }

Tensor Tensor::arange(double start, double end, double step, TensorOptions opts) {
  DTRAIN_CHECK(step != 0, "arange: step must be nonzero");
  auto n = static_cast<std::int64_t>(std::ceil((end - start) / step));
  n = std::max<std::int64_t>(n, 0);
  if (is_half(opts.dtype)) return arange(start, end, step, {DType::f32, opts.device}).to(opts.dtype);
  Tensor host = empty({n}, {opts.dtype, Device::cpu()});
  dispatch_dtype(opts.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = host.data<T>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return host.to(opts.device);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  DTRAIN_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
               "Tensor::from_vector: {} values do not fill shape {}", values.size(), shape_str(shape));
  return from_blob(values.data(), shape, dtype_v<T>).to(device);
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<std::int64_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<std::int32_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<std::uint8_t>&, const Shape&, Device);

Tensor Tensor::from_blob(const void* data, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, {dtype, Device::cpu()});
  if (t.nbytes()) std::memcpy(t.raw_data(), data, t.nbytes());
  return t;
}

// ---- metadata ----------------------------------------------------------------

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

std::int64_t Tensor::size(std::int64_t d) const { return shape_[normalize_dim(d, dim(), "Tensor::size")]; }
std::int64_t Tensor::stride(std::int64_t d) const { return strides_[normalize_dim(d, dim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  check_defined(*this, "Tensor::raw_data");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

template <class T>
T* Tensor::data() const {
  DTRAIN_CHECK(dtype_ == dtype_v<T>, "Tensor::data: tensor has dtype {}, accessed as {}", dtype_name(dtype_),
               dtype_name(dtype_v<T>));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template std::int64_t* Tensor::data<std::int64_t>() const;
template std::int32_t* Tensor::data<std::int32_t>() const;
template std::uint8_t* Tensor::data<std::uint8_t>() const;
template Half* Tensor::data<Half>() const;
template BFloat16* Tensor::data<BFloat16>() const;

// ---- views ---------------------------------------------------------------------

namespace {
Shape infer_shape(Shape shape, std::int64_t numel, const Shape& from) {
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DTRAIN_CHECK(infer < 0, "reshape {} -> {}: at most one dimension may be -1", shape_str(from), shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      DTRAIN_CHECK(shape[i] >= 0, "reshape {} -> {}: negative dimension", shape_str(from), shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    DTRAIN_CHECK(known != 0 && numel % known == 0, "reshape {} -> {}: {} elements do not fit", shape_str(from),
                 shape_str(shape), numel);
    shape[infer] = numel / known;
  }
  DTRAIN_CHECK(shape_numel(shape) == numel, "reshape {} -> {}: {} elements do not fit", shape_str(from),
               shape_str(shape), numel);
  return shape;
}

// Strides for viewing (shape, strides) as `target` without copying, if possible
// (the algorithm of numpy's _attempt_nocopy_reshape): empty when impossible.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& target) {
  Strides out(target.size());
  if (shape_numel(shape) == 0) return contiguous_strides(target);
  // Drop size-1 dims of the source.
  Shape s;
  Strides st;
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  std::size_t oi = 0, oj = 1, ni = 0, nj = 1;
  std::size_t on = s.size(), nn = target.size();
  while (ni < nn && oi < on) {
    std::int64_t np = target[ni], op = s[oi];
    while (np != op) {
      if (np < op) np *= target[nj++];
      else op *= s[oj++];
    }
    for (std::size_t k = oi; k + 1 < oj; ++k)
      if (st[k] != s[k + 1] * st[k + 1]) return std::nullopt;
    out[nj - 1] = st[oj - 1];
    for (std::size_t k = nj - 1; k > ni; --k) out[k - 1] = out[k] * target[k];
    ni = nj++;
    oi = oj++;
  }
  // Remaining target dims are size 1.
  for (std::size_t k = ni; k < nn; ++k) out[k] = 1;
  return out;
}
}  // namespace

Tensor Tensor::reshape(Shape shape) const {
  check_defined(*this, "reshape");
  shape = infer_shape(std::move(shape), numel(), shape_);
  if (auto st = view_strides(shape_, strides_, shape)) return as_view(shape, *st, offset_);
  return contiguous().view(shape);
}

Tensor Tensor::view(Shape shape) const {
  check_defined(*this, "view");
  shape = infer_shape(std::move(shape), numel(), shape_);
  auto st = view_strides(shape_, strides_, shape);
  DTRAIN_CHECK(st.has_value(), "view {} -> {}: the layout is not viewable that way; use reshape",
               shape_str(shape_), shape_str(shape));
  return as_view(shape, *st, offset_);
}

Tensor Tensor::flatten(std::int64_t start_dim, std::int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int s = normalize_dim(start_dim, dim(), "flatten");
  int e = normalize_dim(end_dim, dim(), "flatten");
  DTRAIN_CHECK(s <= e, "flatten: start_dim {} after end_dim {}", start_dim, end_dim);
  Shape shape(shape_.begin(), shape_.begin() + s);
  std::int64_t n = 1;
  for (int i = s; i <= e; ++i) n *= shape_[i];
  shape.push_back(n);
  shape.insert(shape.end(), shape_.begin() + e + 1, shape_.end());
  return reshape(shape);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  DTRAIN_CHECK(static_cast<std::int64_t>(dims.size()) == dim(), "permute: {} dims given for a {}-d tensor",
               dims.size(), dim());
  Shape shape(dims.size());
  Strides strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    int d = normalize_dim(dims[i], dim(), "permute");
    DTRAIN_CHECK(!seen[d], "permute: dim {} repeated", d);
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return as_view(shape, strides, offset_);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  int a = normalize_dim(d0, dim(), "transpose");
  int b = normalize_dim(d1, dim(), "transpose");
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return as_view(shape, strides, offset_);
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step) const {
  int k = normalize_dim(d, dim(), "slice");
  DTRAIN_CHECK(step > 0, "slice: step must be positive, got {}", step);
  std::int64_t n = shape_[k];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, start, n);
  Shape shape = shape_;
  Strides strides = strides_;
  shape[k] = (end - start + step - 1) / step;
  strides[k] *= step;
  return as_view(shape, strides, offset_ + start * strides_[k]);
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  int k = normalize_dim(d, dim(), "narrow");
  DTRAIN_CHECK(start >= 0 && length >= 0 && start + length <= shape_[k],
               "narrow: [{}, {}) out of range for dim {} of size {}", start, start + length, k, shape_[k]);
  return slice(k, start, start + length);
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  int k = normalize_dim(d, dim(), "select");
  std::int64_t n = shape_[k];
  if (index < 0) index += n;
  DTRAIN_CHECK(index >= 0 && index < n, "select: index {} out of range for dim {} of size {}", index, k, n);
  Shape shape = shape_;
  Strides strides = strides_;
  std::int64_t off = offset_ + index * strides_[k];
  shape.erase(shape.begin() + k);
  strides.erase(strides.begin() + k);
  return as_view(shape, strides, off);
}

Tensor Tensor::expand(const Shape& shape) const {
  DTRAIN_CHECK(shape.size() >= shape_.size(), "expand {} -> {}: target has fewer dims", shape_str(shape_),
               shape_str(shape));
  std::size_t lead = shape.size() - shape_.size();
  Strides strides(shape.size(), 0);
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    std::int64_t target = shape[lead + i];
    if (shape_[i] == target) {
      strides[lead + i] = strides_[i];
    } else {
      DTRAIN_CHECK(shape_[i] == 1, "expand {} -> {}: dim {} of size {} cannot become {}", shape_str(shape_),
                   shape_str(shape), i, shape_[i], target);
    }
  }
  return as_view(shape, strides, offset_);
}

Tensor Tensor::squeeze(std::int64_t d) const {
  int k = normalize_dim(d, dim(), "squeeze");
  DTRAIN_CHECK(shape_[k] == 1, "squeeze: dim {} has size {}, expected 1", k, shape_[k]);
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + k);
  strides.erase(strides.begin() + k);
  return as_view(shape, strides, offset_);
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  int k = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape shape = shape_;
  Strides strides = strides_;
  std::int64_t st = k < dim() ? strides_[k] * shape_[k] : 1;
  shape.insert(shape.begin() + k, 1);
  strides.insert(strides.begin() + k, st);
  return as_view(shape, strides, offset_);
}

// ---- copies --------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  check_defined(*this, "contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  check_defined(*this, "clone");
  Tensor out = empty(shape_, options());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  check_defined(*this, "to");
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, {dtype_, device});
  if (non_blocking && is_pinned() && device.is_cuda() && is_contiguous()) {
    // The storage rides along with the copy, so that it is not reused before the copy is done.
    detail::backend(device).copy_from_host_async(raw_data(), out.raw_data(), nbytes(), storage_);
    return out;
  }
  out.copy_(*this);
  return out;
}

Tensor Tensor::pin_memory() const {
  check_defined(*this, "pin_memory");
  if (is_pinned()) return *this;
  DTRAIN_CHECK(device().is_cpu(), "pin_memory: expected a CPU tensor, got one on {}", device().str());
  Tensor out = empty(shape_, {dtype_, Device::cpu(), /*pinned=*/true});
  out.copy_(*this);
  return out;
}

bool Tensor::is_pinned() const { return defined() && storage_->pinned(); }

Tensor Tensor::to(DType dtype) const {
  check_defined(*this, "to");
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, {dtype, device()});
  out.copy_(*this);
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined(*this, "copy_");
  check_defined(src, "copy_");
  Tensor s = src.expand(shape_);
  if (s.device() == device()) {
    detail::backend(device()).copy(s, *this);
    return *this;
  }
  // Across devices, through host memory: the source as a host tensor, then into this
  // tensor (a CPU copy converts dtype and layout; a device upload needs a contiguous
  // host buffer of this dtype and, for a strided destination, a contiguous staging copy).
  Tensor host = s;
  if (!s.device().is_cpu()) {
    Tensor dev = s.contiguous();
    host = empty(shape_, {s.dtype(), Device::cpu()});
    detail::backend(s.device()).copy_to_host(dev.raw_data(), host.raw_data(), dev.nbytes());
  }
  detail::Backend& dst = detail::backend(device());
  if (device().is_cpu()) {
    dst.copy(host, *this);
    return *this;
  }
  Tensor upload = host.to(dtype_).contiguous();
  Tensor target = is_contiguous() ? *this : empty(shape_, options());
  dst.copy_from_host(upload.raw_data(), target.raw_data(), upload.nbytes());
  if (!target.same_storage(*this)) dst.copy(target, *this);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_defined(*this, "fill_");
  detail::backend(device()).fill(*this, value);
  return *this;
}

// ---- host access -------------------------------------------------------------

double Tensor::item() const {
  check_defined(*this, "item");
  DTRAIN_CHECK(numel() == 1, "item: tensor of shape {} has {} elements, expected 1", shape_str(shape_), numel());
  return to_vector<double>()[0];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_defined(*this, "to_vector");
  Tensor host = to(Device::cpu()).to(dtype_v<T>).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<std::int64_t> Tensor::to_vector() const;
template std::vector<std::int32_t> Tensor::to_vector() const;
template std::vector<std::uint8_t> Tensor::to_vector() const;

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = fmt::format("Tensor({}, {}, {}", shape_str(shape_), dtype_name(dtype_), device().str());
  if (numel() <= 16) {
    auto v = to_vector<double>();
    s += ", [";
    for (std::size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
    s += "]";
  }
  return s + ")";
}

}  // namespace dtrain
