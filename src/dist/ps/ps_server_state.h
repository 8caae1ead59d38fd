// The state a PsServer keeps per piece, per worker and per posted receive (private to
// the ps folder): shared by ps_server.cpp (the loop, pushes, values) and
// ps_server_workers.cpp (server 0's batch queue, the stretch's end, lost workers).
#pragma once

#include "dist/ps/ps_server.h"

#include <deque>

namespace dtrain::dist {

struct PsServer::Piece {
  std::size_t id = 0;  // in the layout (its messages' tag is kPieceTag + id)
  std::int64_t length = 0;
  Tensor value;                    // flat
  std::vector<Variable> segments;  // views of `value`, end to end, one per layout segment: the optimizer's parameters
  std::unique_ptr<optim::Optimizer> optimizer;
  // Sync: the sum of this step's gradients so far, from `contributors` (who wait for the update).
  Tensor sum;
  std::vector<int> contributors;
  bool skip = false;
  double lr = 0;             // sync: of the latest contribution
  std::int64_t updates = 0;  // sync: steps applied
};

struct PsServer::Worker {
  enum class State : std::uint8_t { Idle, Waiting, InFlight };
  State state = State::Idle;
  std::int64_t read = 0;     // the version its gradient is computed from
  std::size_t pushed = 0;    // pieces of its current push received
  std::int64_t waiting = 0;  // its place in the queue for parameters (ssp)
  std::int64_t pushes = 0;   // completed here
  bool stopped = false;
  // Its last push or grant here: where its step times start.
  Clock::time_point last_push = Clock::now();
  bool reported = false;       // as stalled
  std::vector<WorkPtr> sends;  // values in flight to it
  std::vector<Tensor> sent;    // delay compensation: the values of each piece last sent to it
  // Sync: of each piece, the updates applied when its values were last sent to the worker
  // (its next gradient belongs to the update after those, or comes too late).
  std::vector<std::int64_t> piece_read;
  // The rollback generation of the values its latest push was computed from (the oldest
  // over every server's pieces, which the push carries): a push, or a Restore, from values
  // of an earlier generation (before a rollback) is dropped.
  std::int64_t computed_from = 0;
  bool late = false;  // sync: a piece of its current push came too late
  // Its Join and Leave messages here: it trains stretch `joins` (1-based) of the run, and
  // has left it when leaves == joins.
  std::int64_t joins = 0, leaves = 0;
  std::int64_t push_batches = 0;     // claimed batches its current push trains
  bool left = false;                 // server 0: left, waiting for the others to
  bool lost = false;                 // dropped: silent past lost_after
  std::deque<std::int64_t> claimed;  // server 0: batches handed to it and not yet pushed, in order
  // Server 0, ssp with several servers: what server s reported of it, at [s - 1].
  struct Elsewhere {
    std::int64_t pushes = 0;
    bool held = false;       // its bound holds the worker's values
    Clock::time_point at{};  // of the report
  };
  std::vector<Elsewhere> elsewhere;
};

// A copy of the server's pieces for rollback (Control::Copy): values and optimizer states.
struct PsServer::Copy {
  std::int64_t id = 0;
  std::vector<Tensor> values;
  std::vector<optim::NamedTensors> states;
  std::vector<std::int64_t> pushes;  // each worker's completed pushes here when it was taken
};

// What a Slot's receive is for, besides a piece of this server (local >= 0).
namespace ps_slot {
inline constexpr std::ptrdiff_t kControl = -1;
inline constexpr std::ptrdiff_t kLostNotice = -2;  // server 0's "worker w was lost", on the other servers
inline constexpr std::ptrdiff_t kProgress = -3;    // a server's progress report, on server 0
// How often server 0 looks at the clock while no message comes (async and ssp).
inline constexpr std::chrono::milliseconds kWatchPoll{100};
}  // namespace ps_slot

struct PsServer::Slot {
  int worker = 0;             // the sender's rank: a worker's, or a server's (kLostNotice, kProgress)
  std::ptrdiff_t local = -1;  // a piece of this server, kControl, kLostNotice or kProgress
  Tensor buffer;
  WorkPtr work;
};

}  // namespace dtrain::dist
