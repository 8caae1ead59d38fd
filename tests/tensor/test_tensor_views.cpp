// The structural Tensor API: factories, views that share storage, copies that do not,
// dtype conversion, broadcasting copy_, host access, and the errors for bad shapes.
#include "support/test_support.h"

#include <vector>

namespace dtrain {
namespace {

// 0, 1, 2, ... as f32 in the given shape.
Tensor iota(const Shape& shape) { return Tensor::arange(0, static_cast<double>(shape_numel(shape)), 1).reshape(shape); }

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

}  // namespace

TEST_CASE("factories fill shapes and dtypes", "[cpu][tensor]") {
  Tensor z = Tensor::zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.strides() == Strides{3, 1});
  CHECK(z.dtype() == DType::f32);
  CHECK(values(z) == std::vector<float>(6, 0));
  CHECK(values(Tensor::ones({4})) == std::vector<float>(4, 1));
  CHECK(Tensor::full({2}, 7, {DType::i64}).to_vector<std::int64_t>() == std::vector<std::int64_t>{7, 7});
  Tensor s = Tensor::scalar(2.5, {DType::f64});
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 2.5);

  CHECK(values(Tensor::arange(0, 1, 0.25)) == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(values(Tensor::arange(3, 0, -1)) == std::vector<float>{3, 2, 1});
  CHECK(Tensor::arange(5, 2, 1).numel() == 0);
  CHECK_THROWS_WITH(Tensor::arange(0, 1, 0), Catch::Contains("arange: step must be nonzero"));

  CHECK_THROWS_WITH(Tensor::from_vector<float>({1, 2, 3}, {2, 2}),
                    Catch::Contains("3 values do not fill shape [2, 2]"));
  CHECK_THROWS_WITH(Tensor::empty({2, -1}), Catch::Contains("negative dimension"));
  Tensor blob = Tensor::from_blob(std::vector<std::int32_t>{4, 5}.data(), {2}, DType::i32);
  CHECK(blob.to_vector<std::int32_t>() == std::vector<std::int32_t>{4, 5});
}

TEST_CASE("metadata accessors take negative dims and check types", "[cpu][tensor]") {
  Tensor x = Tensor::zeros({2, 3, 4});
  CHECK(x.size(-1) == 4);
  CHECK(x.stride(-3) == 12);
  CHECK(x.nbytes() == 96);
  CHECK_THROWS_WITH(x.size(3), Catch::Contains("dim 3 out of range for a 3-d tensor"));
  CHECK_THROWS_WITH(x.data<double>(), Catch::Contains("tensor has dtype f32, accessed as f64"));
  CHECK_FALSE(Tensor().defined());
  CHECK_THROWS_WITH(Tensor().reshape({1}), Catch::Contains("undefined"));
  CHECK(Tensor::from_vector<float>({1, 2}, {2}).str() == "Tensor([2], f32, cpu, [1, 2])");
}

TEST_CASE("reshape views contiguous data and infers -1", "[cpu][tensor]") {
  Tensor x = iota({2, 3, 4});
  Tensor r = x.reshape({6, -1});
  CHECK(r.shape() == Shape{6, 4});
  CHECK(r.same_storage(x));
  CHECK(values(r) == values(x));
  r.select(0, 0).fill_(-1);  // writes through the view
  CHECK(values(x)[3] == -1);
  CHECK(x.reshape({-1}).shape() == Shape{24});
  CHECK(x.reshape({2, 1, 12, 1}).strides()[2] == 1);
  CHECK(x.view({4, 6}).same_storage(x));

  CHECK_THROWS_WITH(x.reshape({-1, -1}), Catch::Contains("at most one dimension may be -1"));
  CHECK_THROWS_WITH(x.reshape({5, 5}), Catch::Contains("reshape [2, 3, 4] -> [5, 5]: 24 elements do not fit"));
  CHECK_THROWS_WITH(x.reshape({7, -1}), Catch::Contains("do not fit"));
}

TEST_CASE("reshape copies when the layout cannot be viewed; view refuses", "[cpu][tensor]") {
  Tensor x = iota({3, 4});
  Tensor t = x.t();  // (4, 3)
  Tensor flat = t.reshape({12});
  CHECK_FALSE(flat.same_storage(x));
  CHECK(values(flat) == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK_THROWS_WITH(t.view({12}), Catch::Contains("view [4, 3] -> [12]") && Catch::Contains("use reshape"));
  // Splitting a dim of a transposed tensor is still a view.
  Tensor split = t.view({2, 2, 3});
  CHECK(split.same_storage(x));
  CHECK(values(split) == values(t));
  // A stepped slice keeps contiguous rows, so merging within a row is a view.
  Tensor rows = iota({4, 6}).slice(0, 0, 4, 2);
  CHECK(rows.view({2, 2, 3}).same_storage(rows));
  CHECK(values(rows.reshape({12})) == std::vector<float>{0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17});
}

TEST_CASE("permute and transpose move strides, not data", "[cpu][tensor]") {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Strides{1, 12, 4});
  CHECK(p.same_storage(x));
  CHECK_FALSE(p.is_contiguous());
  auto pv = values(p), xv = values(x);
  for (std::int64_t k = 0; k < 4; ++k)
    for (std::int64_t i = 0; i < 2; ++i)
      for (std::int64_t j = 0; j < 3; ++j) CHECK(pv[(k * 2 + i) * 3 + j] == xv[(i * 3 + j) * 4 + k]);
  CHECK(x.transpose(0, -1).shape() == Shape{4, 3, 2});
  CHECK(values(x.transpose(1, 2).transpose(1, 2)) == xv);
  CHECK_THROWS_WITH(x.permute({0, 1}), Catch::Contains("permute: 2 dims given for a 3-d tensor"));
  CHECK_THROWS_WITH(x.permute({0, 1, 1}), Catch::Contains("permute: dim 1 repeated"));
}

TEST_CASE("slice, narrow and select pick sub-ranges in place", "[cpu][tensor]") {
  Tensor x = iota({4, 5});
  Tensor s = x.slice(1, 1, 5, 2);
  CHECK(s.shape() == Shape{4, 2});
  CHECK(values(s) == std::vector<float>{1, 3, 6, 8, 11, 13, 16, 18});
  CHECK(values(x.slice(0, -2, 4)) == std::vector<float>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  CHECK(x.slice(1, 3, 100).shape() == Shape{4, 2});  // clamped
  CHECK(x.slice(1, 4, 2).numel() == 0);
  CHECK_THROWS_WITH(x.slice(1, 0, 5, 0), Catch::Contains("slice: step must be positive"));

  CHECK(values(x.narrow(0, 1, 2)) == std::vector<float>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  CHECK_THROWS_WITH(x.narrow(1, 3, 3), Catch::Contains("narrow: [3, 6) out of range for dim 1 of size 5"));

  Tensor col = x.select(1, -1);
  CHECK(col.shape() == Shape{4});
  CHECK(values(col) == std::vector<float>{4, 9, 14, 19});
  CHECK(col.same_storage(x));
  CHECK_THROWS_WITH(x.select(0, 4), Catch::Contains("select: index 4 out of range for dim 0 of size 4"));
}

TEST_CASE("expand broadcasts with zero strides", "[cpu][tensor]") {
  Tensor v = iota({3});
  Tensor e = v.expand({2, 3});
  CHECK(e.strides() == Strides{0, 1});
  CHECK(values(e) == std::vector<float>{0, 1, 2, 0, 1, 2});
  Tensor c = iota({2, 1}).expand({2, 4});
  CHECK(values(c) == std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(values(Tensor::scalar(5).expand({2})) == std::vector<float>{5, 5});
  CHECK_THROWS_WITH(iota({2, 3}).expand({3, 3}),
                    Catch::Contains("expand [2, 3] -> [3, 3]: dim 0 of size 2 cannot become 3"));
  CHECK_THROWS_WITH(iota({2, 3}).expand({3}), Catch::Contains("target has fewer dims"));
}

TEST_CASE("squeeze, unsqueeze and flatten reshape without copying", "[cpu][tensor]") {
  Tensor x = iota({2, 1, 3});
  CHECK(x.squeeze(1).shape() == Shape{2, 3});
  CHECK(x.squeeze(-2).same_storage(x));
  CHECK_THROWS_WITH(x.squeeze(0), Catch::Contains("squeeze: dim 0 has size 2, expected 1"));
  Tensor u = x.squeeze(1).unsqueeze(0);
  CHECK(u.shape() == Shape{1, 2, 3});
  CHECK(u.is_contiguous());
  CHECK(x.squeeze(1).unsqueeze(-1).shape() == Shape{2, 3, 1});
  CHECK(values(x.squeeze(1).t().unsqueeze(1)) == std::vector<float>{0, 3, 1, 4, 2, 5});

  Tensor y = iota({2, 3, 4, 5});
  CHECK(y.flatten().shape() == Shape{120});
  CHECK(y.flatten(1).shape() == Shape{2, 60});
  CHECK(y.flatten(1, 2).shape() == Shape{2, 12, 5});
  CHECK(y.flatten(1, 2).same_storage(y));
  CHECK(Tensor::scalar(1).flatten().shape() == Shape{1});
  CHECK_THROWS_WITH(y.flatten(2, 1), Catch::Contains("flatten: start_dim 2 after end_dim 1"));
}

TEST_CASE("contiguous and clone copy only as documented", "[cpu][tensor]") {
  Tensor x = iota({3, 4});
  Tensor same = x.contiguous();
  CHECK(same.same_storage(x));
  CHECK(same.offset() == x.offset());
  Tensor tc = x.t().contiguous();
  CHECK_FALSE(tc.same_storage(x));
  CHECK(tc.is_contiguous());
  CHECK(values(tc) == values(x.t()));
  CHECK(iota({2, 3}).unsqueeze(1).is_contiguous());  // size-1 dims do not count

  Tensor c = x.clone();
  CHECK_FALSE(c.same_storage(x));
  c.fill_(9);
  CHECK(values(x)[0] == 0);
  Tensor e = Tensor::scalar(3).expand({2, 2}).clone();
  CHECK(e.strides() == Strides{2, 1});
  CHECK(values(e) == std::vector<float>(4, 3));
}

TEST_CASE("to(dtype) converts values and keeps the tensor when the dtype matches", "[cpu][tensor]") {
  Tensor x = Tensor::from_vector<float>({1.75f, -2.5f, 3}, {3});
  Tensor d = x.to(DType::f64);
  CHECK(d.dtype() == DType::f64);
  CHECK(d.to_vector<double>() == std::vector<double>{1.75, -2.5, 3});
  CHECK(x.to(DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -2, 3});
  CHECK(x.to(DType::f32).same_storage(x));
  CHECK(x.to(Device::cpu()).same_storage(x));
  Tensor tf = iota({2, 3}).t().to(DType::i32);  // converts through strides
  CHECK(tf.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("copy_ broadcasts, converts and writes through views", "[cpu][tensor]") {
  Tensor dst = Tensor::zeros({2, 3});
  dst.copy_(Tensor::from_vector<double>({1, 2, 3}, {3}));
  CHECK(values(dst) == std::vector<float>{1, 2, 3, 1, 2, 3});
  dst.copy_(Tensor::scalar(4, {DType::i32}));
  CHECK(values(dst) == std::vector<float>(6, 4));
  Tensor m = Tensor::zeros({3, 2});
  m.t().copy_(iota({2, 3}));  // the transposed view is the destination
  CHECK(values(m) == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor big = Tensor::zeros({4, 4});
  big.narrow(0, 1, 2).narrow(1, 1, 2).copy_(Tensor::ones({2, 2}));
  CHECK(values(big) == std::vector<float>{0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0});
  CHECK_THROWS_WITH(dst.copy_(Tensor::zeros({4})), Catch::Contains("expand [4] -> [2, 3]"));
}

TEST_CASE("item and to_vector read values on the host", "[cpu][tensor]") {
  CHECK(Tensor::full({1, 1}, 6).item() == 6);
  CHECK(Tensor::full({1}, 6, {DType::i32}).item<int>() == 6);
  CHECK_THROWS_WITH(Tensor::zeros({2}).item(), Catch::Contains("item: tensor of shape [2] has 2 elements, expected 1"));
  CHECK(iota({2, 2}).t().to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2, 1, 3});
}

TEST_CASE("a released storage refuses its views' reads until reallocated", "[cpu][tensor]") {
  Tensor whole = Tensor::arange(0, 6, 1);
  Tensor view = whole.narrow(0, 2, 3);
  whole.storage()->release("layer 'fc' is sharded here");
  CHECK(whole.storage()->released());
  CHECK_THROWS_WITH(view.clone(), Catch::Matchers::Contains("layer 'fc' is sharded here"));
  CHECK_THROWS_WITH(whole.fill_(1), Catch::Matchers::Contains("layer 'fc' is sharded here"));
  whole.storage()->reallocate();  // fresh bytes: the views see what is written now
  CHECK_FALSE(whole.storage()->released());
  whole.copy_(Tensor::arange(10, 16, 1));
  CHECK(values(view) == std::vector<float>{12, 13, 14});
  whole.storage()->reallocate();  // nothing to do when the bytes are there
  CHECK(values(view) == std::vector<float>{12, 13, 14});
}

}  // namespace dtrain
