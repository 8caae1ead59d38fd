#include "dist/ps/ps_push_exchange.h"

#include "dist/ps/ps_protocol.h"
#include "dtrain/core/error.h"

#include <map>

namespace dtrain::dist {

PsPushExchange::PsPushExchange(Communicator& comm, int workers, const PsLayout& layout, std::vector<std::string> names,
                               DType dtype)
    : comm_(comm), workers_(workers), layout_(layout), names_(std::move(names)) {
  for (const PsPiece& piece : layout_.pieces)
    push_.push_back(Tensor::empty({piece.length + ps::kPushTrailer}, {dtype}));
}

void PsPushExchange::plan(const std::vector<BucketLayout>& buckets) {
  DTRAIN_CHECK(buckets.size() == layout_.buckets.size(), "parameter server: the reducer made {} buckets, the layout {}",
               buckets.size(), layout_.buckets.size());
  piece_start_.assign(layout_.pieces.size(), -1);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    std::map<std::string, std::int64_t> offset;  // parameter name -> first element in the bucket
    for (const BucketLayout::Member& m : buckets[b].members) offset[m.name] = m.offset;
    for (std::size_t i : layout_.bucket_pieces[b]) {
      const PsPiece& piece = layout_.pieces[i];
      for (const PsSegment& s : piece.segments) {
        const auto it = offset.find(names_[s.param]);
        DTRAIN_CHECK(it != offset.end(), "parameter server: '{}' is in bucket {} of the layout, not of the reducer",
                     names_[s.param], b);
        const std::int64_t at = it->second + s.offset;  // where the segment lies in the bucket
        if (s.at == 0) piece_start_[i] = at;
        DTRAIN_CHECK(at == piece_start_[i] + s.at, "parameter server: piece {} is not one run of bucket {}", i, b);
      }
    }
  }
}

WorkPtr PsPushExchange::start(std::size_t index, Tensor& buffer) {
  std::vector<WorkPtr> sends;
  for (std::size_t i : layout_.bucket_pieces[index]) {
    const PsPiece& piece = layout_.pieces[i];
    Tensor& push = push_[i];
    push.narrow(0, 0, piece.length).copy_(buffer.narrow(0, piece_start_[i], piece.length));
    push.narrow(0, piece.length, 1).fill_(lr_);
    push.narrow(0, piece.length + 1, 1).fill_(skip_ ? 1 : 0);
    push.narrow(0, piece.length + 2, 1).fill_(static_cast<double>(batches_));
    push.narrow(0, piece.length + 3, 1).fill_(static_cast<double>(generation_));
    sends.push_back(comm_.isend(push, workers_ + piece.server, ps::kPieceTag + static_cast<int>(i)));
  }
  return when_all(std::move(sends));  // every send of the bucket
}

}  // namespace dtrain::dist
