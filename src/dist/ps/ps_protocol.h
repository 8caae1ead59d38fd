// The messages between parameter-server workers and servers (private to dist). Each
// ParameterServer talks over its own communicator, so these tags meet nothing else.
//   worker -> server  control (kControlTag): f64[kControlWords] = {Control, a, b, 0}
//   worker -> server  push of piece p (kPieceTag + p): the piece's gradient, then the
//                     learning rate, a skip flag, the number of claimed batches the
//                     push trains and the rollback generation of the values it was
//                     computed from, the oldest over every server's pieces (kPushTrailer
//                     elements), in the parameters' dtype
//   server -> worker  values of piece p (kPieceTag + p): after a push (async: each piece
//                     as soon as it is applied; sync: when every worker's is in, or with
//                     backup workers the first workers - b, and at once to a late one;
//                     ssp: when the bound allows), a join or a fetch; then the server's
//                     rollback generation (kValuesTrailer elements), in the same dtype
//   server 0 -> worker  a claimed batch (kClaimTag): f64[1], -1 when none is left;
//                     staleness (kStatsTag): f64[kStatsWords], the counts, max, dropped,
//                     batches handed out again, batches a lost worker left untrained;
//                     every worker has left (kLeaveTag, the answer to Leave): f64[workers],
//                     1 for each worker lost so far;
//                     you were dropped (kDroppedTag): f64[1], to a worker found lost
//   server 0 -> server s  worker w was lost (kLostTag): f64[1] = {w}
//   server s -> server 0  ssp with several servers (kProgressTag): f64[3] = {w, the pushes
//                     of w completed at s, 1 if s has granted w values to compute from
//                     or 0 if its bound holds w}, after each push and grant; {-1, 0, 0}
//                     when s is done, the last
//   server -> worker 0  a checkpoint share taken (kSaveTag): f64[1]
//   server -> worker  a copy of the shard kept (kCopyTag): f64[1]; a rollback's answer
//                     (kRestoreTag): f64[4] = {1 if this request restored a copy, 0 if
//                     another worker's had since the values the worker's latest push was
//                     computed from, the copy's id, the worker's pushes since the copy,
//                     the generation the servers are to reach}
// Worker w is rank w of the communicator; server s is rank workers + s.
#pragma once

#include <cstdint>

namespace dtrain::dist::ps {

inline constexpr int kControlTag = 1;
inline constexpr int kClaimTag = 2;
inline constexpr int kStatsTag = 3;
inline constexpr int kSaveTag = 4;
inline constexpr int kLeaveTag = 5;
inline constexpr int kDroppedTag = 6;
inline constexpr int kLostTag = 7;
inline constexpr int kProgressTag = 8;
inline constexpr int kCopyTag = 9;
inline constexpr int kRestoreTag = 10;
inline constexpr int kPieceTag = 16;

inline constexpr std::int64_t kControlWords = 4;
inline constexpr std::int64_t kPushTrailer = 4;
inline constexpr std::int64_t kValuesTrailer = 1;
inline constexpr std::int64_t kStalenessBins = 64;
inline constexpr std::int64_t kStatsWords = kStalenessBins + 4;

enum class Control : std::int64_t {
  Join = 1,  // send me parameters to start from (ssp: once the bound allows)
  Leave,     // I push no more this epoch (server 0 answers once every live worker has)
  Fetch,     // send me the current parameters now (I do not count as computing)
  Claim,     // server 0: the next batch of epoch a among b
  Stats,     // server 0: the staleness histogram since the last request
  Stop,      // I am done; serve() returns when every worker is
  Save,      // hand your share to the checkpoint of global step a, then answer (worker 0)
  Copy,      // keep a copy of your shard (values, optimizer state) as copy a, then answer
  Restore,   // return to copy a (server 0: where no longer kept, or a < 0, the latest
             // or the older of the two latest), unless another worker's Restore did since
             // generation c, of the oldest values the losses that found the trouble came
             // from; answer. Sent to server 0 first, then to the others with b = server 0's
             // generation and the copy it named (they follow without that check).
};

}  // namespace dtrain::dist::ps
