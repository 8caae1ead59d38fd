#include "dtrain/dist/tensor_parallel/parallelize.h"

#include "dist/tensor_parallel/owned_ids.h"

#include "dtrain/core/error.h"
#include "dtrain/dist/tensor_parallel/tensor_parallel_ops.h"
#include "dtrain/layers/embedding.h"
#include "dtrain/layers/linear.h"

#include <fmt/format.h>

#include <map>
#include <numeric>

namespace dtrain::dist {

namespace {

using Hooks = nn::Module::ForwardHooks;

// "1.attn.c_attn" against "*.attn.c_attn": component by component, "*" matching any one.
bool matches(const std::string& pattern, const std::string& path) {
  std::size_t p = 0, q = 0;
  for (;;) {
    const std::size_t pe = pattern.find('.', p), qe = path.find('.', q);
    const std::string_view a =
        std::string_view(pattern).substr(p, pe == std::string::npos ? std::string::npos : pe - p);
    const std::string_view b = std::string_view(path).substr(q, qe == std::string::npos ? std::string::npos : qe - q);
    if (a != "*" && a != b) return false;
    if (pe == std::string::npos || qe == std::string::npos) return pe == qe;
    p = pe + 1;
    q = qe + 1;
  }
}

void collect_modules(nn::Module& m, const std::string& path, std::vector<std::pair<std::string, nn::Module*>>& out) {
  out.emplace_back(path, &m);
  for (const auto& [name, child] : m.children()) collect_modules(*child, path.empty() ? name : path + "." + name, out);
}

Variable own_parameter(nn::Module& m, const std::string& name) {
  for (const auto& [n, p] : m.own_parameters()) {
    if (n == name) return p;
  }
  return {};
}

class PrepareInputHooks final : public Hooks {
 public:
  PrepareInputHooks(CommunicatorPtr group, std::string path, bool sequence)
      : group_(std::move(group)), path_(std::move(path)), sequence_(sequence) {}
  Variable input(nn::Module&, Variable x) override {
    return sequence_ ? gather_sequence(x, group_, path_) : copy_to_tensor_parallel(x, group_, path_);
  }
  bool transforms_input() const override { return true; }

 private:
  CommunicatorPtr group_;
  std::string path_;
  bool sequence_;
};

class RowwiseHooks final : public Hooks {
 public:
  RowwiseHooks(CommunicatorPtr group, std::string path, bool sequence, Variable bias)
      : group_(std::move(group)), path_(std::move(path)), sequence_(sequence), bias_(std::move(bias)) {}
  Variable after(nn::Module&, Variable y) override {
    y = sequence_ ? reduce_scatter_sequence(y, group_, path_) : reduce_from_tensor_parallel(y, group_, path_);
    return bias_.defined() ? add(y, bias_) : y;
  }

 private:
  CommunicatorPtr group_;
  std::string path_;
  bool sequence_;
  Variable bias_;
};

class VocabEmbeddingHooks final : public Hooks {
 public:
  VocabEmbeddingHooks(CommunicatorPtr group, std::string path, std::int64_t begin, std::int64_t size)
      : group_(std::move(group)), path_(std::move(path)), begin_(begin), size_(size) {}
  Variable input(nn::Module&, Variable ids) override {
    detail::OwnedIds mine = detail::owned_ids(ids.data(), begin_, size_);
    mask_ = mine.owned.unsqueeze(-1);  // (..., 1): the rows this rank looked up
    return Variable(mine.index);
  }
  bool transforms_input() const override { return true; }
  Variable after(nn::Module&, Variable y) override {
    Variable masked = mul(y, Variable(mask_.to(y.dtype())));
    mask_ = Tensor();
    return reduce_from_tensor_parallel(masked, group_, path_);
  }

 private:
  CommunicatorPtr group_;
  std::string path_;
  std::int64_t begin_, size_;
  Tensor mask_;  // between input() and after() of one forward
};

// The output projection's logits: this rank's columns, or, while `gather` is set (sampling,
// without gradients), every rank's gathered into the whole vocabulary's.
class VocabOutputHooks final : public Hooks {
 public:
  VocabOutputHooks(CommunicatorPtr group, std::int64_t vocab, std::shared_ptr<const bool> gather)
      : group_(std::move(group)), vocab_(vocab), gather_(std::move(gather)) {}
  Variable after(nn::Module&, Variable y) override {
    if (!*gather_) return y;
    const int n = group_->size();
    const std::int64_t widest = split_range(vocab_, n, 0).size;
    Tensor local = y.data().contiguous();
    if (local.size(-1) < widest) {
      Shape pad = local.shape();
      pad.back() = widest - local.size(-1);
      local = cat({local, Tensor::zeros(pad, local.options())}, -1);
    }
    Shape shape{n};
    shape.insert(shape.end(), local.shape().begin(), local.shape().end());
    Tensor all = Tensor::empty(shape, local.options());
    group_->all_gather(local, all);
    std::vector<Tensor> columns;
    for (int r = 0; r < n; ++r) columns.push_back(all.select(0, r).narrow(-1, 0, split_range(vocab_, n, r).size));
    return Variable(cat(columns, -1));
  }

 private:
  CommunicatorPtr group_;
  std::int64_t vocab_;
  std::shared_ptr<const bool> gather_;
};

class ShardSequenceHooks final : public Hooks {
 public:
  ShardSequenceHooks(CommunicatorPtr group, std::string path) : group_(std::move(group)), path_(std::move(path)) {}
  Variable after(nn::Module&, Variable y) override { return split_sequence(y, group_, path_); }

 private:
  CommunicatorPtr group_;
  std::string path_;
};

const char* style_name(ParallelStyle s) {
  switch (s) {
    case ParallelStyle::PrepareInput: return "PrepareInput";
    case ParallelStyle::Colwise: return "Colwise";
    case ParallelStyle::Rowwise: return "Rowwise";
    case ParallelStyle::VocabEmbedding: return "VocabEmbedding";
    case ParallelStyle::VocabOutput: return "VocabOutput";
    case ParallelStyle::SequenceNorm: return "SequenceNorm";
    case ParallelStyle::ShardSequence: return "ShardSequence";
  }
  return "?";
}

// Cuts the parameters and records what was cut.
class Splitter {
 public:
  explicit Splitter(nn::Module& model) {
    for (const auto& [name, p] : model.named_parameters()) names_.emplace(p.id(), name);
  }

  // Keeps rows `pieces` ({begin, size} along `dim`) of p, side by side.
  void cut(Variable p, int dim, const std::vector<SplitRange>& pieces, const std::string& where) {
    const auto done = index_.find(p.id());
    if (done != index_.end()) {
      DTRAIN_CHECK(slices_[done->second].second.dim == dim,
                   "tensor parallel plan: {} splits a parameter already split another way", where);
      return;  // a tied weight: split by the first style that met it
    }
    NoGradGuard no_grad;
    const Tensor whole = p.data();
    std::vector<Tensor> parts;
    ParameterSlice slice{.dim = dim, .whole = whole.shape()};
    for (const SplitRange& r : pieces) {
      parts.push_back(whole.narrow(dim, r.begin, r.size));
      slice.pieces.emplace_back(r.begin, r.size);
    }
    p.set_data(parts.size() == 1 ? parts.front().contiguous().clone() : cat(parts, dim));
    const auto name = names_.find(p.id());
    DTRAIN_CHECK(name != names_.end(), "tensor parallel plan: {} holds a parameter the model does not list", where);
    index_.emplace(p.id(), slices_.size());
    slices_.push_back({name->second, std::move(slice)});
  }
  bool is_cut(const Variable& p) const { return index_.contains(p.id()); }
  const ParameterSlice* slice_of(const Variable& p) const {
    const auto it = index_.find(p.id());
    return it == index_.end() ? nullptr : &slices_[it->second].second;
  }
  std::vector<std::pair<std::string, ParameterSlice>> take_slices() { return std::move(slices_); }
  std::map<const void*, std::size_t> take_index() { return std::move(index_); }

 private:
  std::map<const void*, std::string> names_;
  std::vector<std::pair<std::string, ParameterSlice>> slices_;
  std::map<const void*, std::size_t> index_;  // a cut parameter's Variable -> its entry in slices_
};

// The pieces of `out` features this rank keeps under Colwise.
std::vector<SplitRange> colwise_pieces(const PlanEntry& e, std::int64_t out, int ranks, int rank,
                                       const std::string& path) {
  std::vector<std::int64_t> segments = e.segments.empty() ? std::vector<std::int64_t>{out} : e.segments;
  DTRAIN_CHECK(std::accumulate(segments.begin(), segments.end(), std::int64_t{0}) == out,
               "tensor parallel plan: Colwise segments of '{}' add up to {}, but {} has {} output features", e.pattern,
               std::accumulate(segments.begin(), segments.end(), std::int64_t{0}), path, out);
  std::vector<SplitRange> pieces;
  std::int64_t offset = 0;
  for (std::int64_t s : segments) {
    // Whole granules (heads) must split evenly, so that every rank holds as many query heads
    // per key/value head; single features (an MLP's) may split unevenly.
    DTRAIN_CHECK(e.granule > 0 && s % e.granule == 0 && s / e.granule >= ranks &&
                     (e.granule == 1 || s % (e.granule * ranks) == 0),
                 "tensor parallel plan: {} ({}) has a segment of {} features, which is {} groups of {} (heads) that do "
                 "not split over {} ranks; choose a tensor-parallel size that divides the heads (and the key/value "
                 "heads)",
                 path, e.pattern, s, s / std::max<std::int64_t>(e.granule, 1), e.granule, ranks);
    const SplitRange r = split_range(s, ranks, rank, e.granule);
    pieces.push_back({offset + r.begin, r.size});
    offset += s;
  }
  return pieces;
}

}  // namespace

void TensorParallel::finish_gradients(const std::vector<Variable>& params) {
  // One all-reduce of all of them (a few small tensors per layer) instead of one each.
  std::vector<Tensor> grads;
  for (const Variable& p : params) {
    if (p.has_grad()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  std::vector<Tensor> flat;
  for (const Tensor& g : grads) flat.push_back(g.contiguous().reshape({-1}));
  Tensor sums = cat(flat, 0);
  group_->all_reduce(sums, ReduceOp::Sum);
  std::int64_t at = 0;
  for (Tensor& g : grads) {
    g.copy_(sums.narrow(0, at, g.numel()).view(g.shape()));
    at += g.numel();
  }
}

const ParameterSlice* TensorParallel::slice_of(const Variable& param) const {
  const auto it = slice_index_.find(param.id());
  return it == slice_index_.end() ? nullptr : &slices_[it->second].second;
}

std::function<Variable(const Variable&, const Tensor&)> TensorParallel::loss() const {
  DTRAIN_CHECK(vocab_begin_ >= 0,
               "tensor parallelism: the plan has no VocabOutput module, so the model's output is "
               "not vocabulary-parallel logits");
  return [group = group_, begin = vocab_begin_](const Variable& logits, const Tensor& targets) {
    return vocab_parallel_cross_entropy(logits, targets, begin, group);
  };
}

std::shared_ptr<TensorParallel> parallelize(nn::Module& model, CommunicatorPtr group, const TensorParallelPlan& plan,
                                            TensorParallelOptions options) {
  DTRAIN_CHECK(group != nullptr, "parallelize: no tensor-parallel group given");
  auto tp = std::make_shared<TensorParallel>();
  tp->group_ = group;
  tp->options_ = options;
  const int ranks = group->size(), rank = group->rank();
  const bool sp = options.sequence_parallel;
  std::vector<std::pair<std::string, nn::Module*>> modules;
  collect_modules(model, "", modules);
  Splitter splitter(model);
  std::vector<Variable> partial;
  const auto add_hooks = [&](nn::Module* m, std::shared_ptr<Hooks> h) {
    m->add_forward_hooks(h);
    tp->hooks_.emplace_back(m, std::move(h));
  };
  for (const PlanEntry& e : plan) {
    bool found = false;
    for (const auto& [path, m] : modules) {
      if (path.empty() || !matches(e.pattern, path)) continue;
      found = true;
      const std::string where = fmt::format("{} ('{}', {})", path, e.pattern, style_name(e.style));
      switch (e.style) {
        case ParallelStyle::PrepareInput: add_hooks(m, std::make_shared<PrepareInputHooks>(group, path, sp)); break;
        case ParallelStyle::Colwise: {
          Variable w = own_parameter(*m, "weight");
          DTRAIN_CHECK(w.defined() && w.dim() == 2, "tensor parallel plan: {} has no 2-D \"weight\" to split", where);
          const auto pieces = colwise_pieces(e, w.size(0), ranks, rank, path);
          splitter.cut(w, 0, pieces, where);
          if (Variable b = own_parameter(*m, "bias"); b.defined()) splitter.cut(b, 0, pieces, where);
          break;
        }
        case ParallelStyle::Rowwise: {
          auto* linear = dynamic_cast<nn::Linear*>(m);
          DTRAIN_CHECK(linear != nullptr, "tensor parallel plan: {} is a {}, not a Linear", where, m->describe());
          const std::int64_t in = linear->weight.size(1);
          splitter.cut(linear->weight, 1, {split_range(in, ranks, rank)}, where);
          // The bias is added once, after the ranks' partial products are summed.
          Variable bias = linear->bias;
          linear->bias = Variable();
          if (bias.defined() && sp) partial.push_back(bias);
          add_hooks(m, std::make_shared<RowwiseHooks>(group, path, sp, bias));
          break;
        }
        case ParallelStyle::VocabEmbedding: {
          auto* embedding = dynamic_cast<nn::Embedding*>(m);
          DTRAIN_CHECK(embedding != nullptr, "tensor parallel plan: {} is a {}, not an Embedding", where,
                       m->describe());
          const SplitRange r = split_range(embedding->weight.size(0), ranks, rank);
          splitter.cut(embedding->weight, 0, {r}, where);
          add_hooks(m, std::make_shared<VocabEmbeddingHooks>(group, path, r.begin, r.size));
          break;
        }
        case ParallelStyle::VocabOutput: {
          Variable w = own_parameter(*m, "weight");
          DTRAIN_CHECK(w.defined() && w.dim() == 2, "tensor parallel plan: {} has no 2-D \"weight\" to split", where);
          // A tied weight may be cut already (by VocabEmbedding), by the same rows.
          if (!splitter.is_cut(w)) splitter.cut(w, 0, {split_range(w.size(0), ranks, rank)}, where);
          const ParameterSlice* slice = splitter.slice_of(w);
          DTRAIN_CHECK(slice != nullptr && slice->dim == 0, "tensor parallel plan: {}'s weight is split by columns",
                       where);
          tp->vocab_begin_ = slice->pieces.front().first;
          add_hooks(m, std::make_shared<VocabOutputHooks>(group, slice->whole[0], tp->gather_output_));
          break;
        }
        case ParallelStyle::SequenceNorm:
          if (sp) {
            for (const auto& [name, p] : m->own_parameters()) partial.push_back(p);
          }
          break;
        case ParallelStyle::ShardSequence:
          if (sp) add_hooks(m, std::make_shared<ShardSequenceHooks>(group, path));
          break;
      }
    }
    DTRAIN_CHECK(found, "tensor parallel plan: '{}' ({}) matches no module of the model", e.pattern,
                 style_name(e.style));
  }
  tp->slices_ = splitter.take_slices();
  tp->slice_index_ = splitter.take_index();
  for (const auto& [name, p] : model.named_parameters()) {
    if (tp->slice_of(p) == nullptr) tp->replicated_.push_back(p);
  }
  tp->partial_ = std::move(partial);
  return tp;
}

}  // namespace dtrain::dist
