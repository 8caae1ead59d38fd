#include "dtrain/tensor/storage.h"

#include "tensor/backend.h"

namespace dtrain {

Storage::Storage(std::size_t nbytes, Device device)
    : data_(detail::backend(device).allocate(nbytes)), nbytes_(nbytes), device_(device) {}

Storage::~Storage() { detail::backend(device_).deallocate(data_, nbytes_); }

}  // namespace dtrain
