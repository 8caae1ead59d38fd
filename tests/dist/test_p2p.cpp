// Point-to-point messages (isend/irecv/batch_isend_irecv) at any world size: 1 (the local
// communicator: no peer, but a batch to itself) and 2 or 4 under mpirun. As in
// test_communicator.cpp, every message of a test is exchanged before its checks, so that a
// failing check on one rank cannot leave another waiting.
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/peer_recovery.h"
#include "support/test_support.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

using namespace dtrain;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::Matches;
using dist::CommunicatorPtr;
using dist::P2POp;

namespace {

using test::error_of;

CommunicatorPtr comm() {
  static CommunicatorPtr c = dist::world({.timeout = std::chrono::seconds(60)});
  return c;
}

// What `rank` sends with `tag`: its length depends on the tag, so that a message that met
// the wrong receive would fail on its size, and its values on both.
Tensor payload(int rank, int tag, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = static_cast<float>(rank * 1000 + tag * 10 + i % 7);
  }
  return Tensor::from_vector(v, {n});
}

std::int64_t length_for(int tag) { return 3 + 2 * tag; }

void require_equal(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.shape() == expected.shape());
  std::vector<float> a = actual.to_vector<float>(), b = expected.to_vector<float>();
  auto [pa, pb] = std::mismatch(a.begin(), a.end(), b.begin());
  if (pa != a.end()) FAIL("element " << (pa - a.begin()) << " of " << a.size() << ": " << *pa << " vs " << *pb);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The timeout of the OnTimeout::Throw tests' communicators, and the upper bound on how long
// their failure takes, in timeouts. Measured (release build, 2 cores, mpirun -np 2 and -np 4):
// 1.000-1.004 s for the 1 s timeout, the irecv and the all-reduce alike. kSlack timeouts
// (5 s) still tell a report at the deadline from one that waits for something else (the
// peer, a later deadline), and leave 4 s for 4 ranks on a loaded 2-core machine or a
// sanitizer build to notice it, where it took at most 4 ms.
constexpr auto kFragileTimeout = 1s;
constexpr double kSlack = 5;
constexpr double kFragileTimeoutSeconds = std::chrono::duration<double>(kFragileTimeout).count();

}  // namespace

TEST_CASE("isend and irecv pair up by tag, in whatever order they are issued and waited on", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size();
  if (n == 1) {
    Tensor t = Tensor::zeros({3});
    CHECK_THROWS_WITH(c->isend(t, 0), Contains("isend: no peer"));
    CHECK_THROWS_WITH(c->irecv(t, dist::kAnySource), Contains("irecv: no peer"));
    return;
  }
  const int right = (c->rank() + 1) % n, left = (c->rank() + n - 1) % n;
  constexpr int kTags = 6;
  constexpr int kRepeated = 7;  // a tag sent three times: those must arrive in order
  std::vector<Tensor> received(kTags);
  std::vector<dist::RecvWorkPtr> receives(kTags);
  // Receives in reverse tag order, sends in tag order, then three messages with one tag.
  for (int tag = kTags - 1; tag >= 0; --tag) {
    received[static_cast<std::size_t>(tag)] = Tensor::zeros({length_for(tag)});
    receives[static_cast<std::size_t>(tag)] = c->irecv(received[static_cast<std::size_t>(tag)], left, tag);
  }
  std::vector<dist::WorkPtr> sends;
  std::vector<Tensor> outgoing;  // alive until the sends are waited on
  for (int tag = 0; tag < kTags; ++tag) {
    outgoing.push_back(payload(c->rank(), tag, length_for(tag)));
    sends.push_back(c->isend(outgoing.back(), right, tag));
  }
  std::vector<Tensor> repeated;
  std::vector<dist::RecvWorkPtr> repeated_receives;
  for (int k = 0; k < 3; ++k) {
    outgoing.push_back(payload(c->rank(), k, 4));
    sends.push_back(c->isend(outgoing.back(), right, kRepeated));
    repeated.push_back(Tensor::zeros({4}));
    repeated_receives.push_back(c->irecv(repeated.back(), left, kRepeated));
  }
  // Waited on in yet another order: odd tags first.
  for (int tag = 1; tag < kTags; tag += 2) receives[static_cast<std::size_t>(tag)]->wait();
  for (int tag = 0; tag < kTags; tag += 2) receives[static_cast<std::size_t>(tag)]->wait();
  for (auto it = repeated_receives.rbegin(); it != repeated_receives.rend(); ++it) (*it)->wait();
  for (auto& s : sends) s->wait();

  for (int tag = 0; tag < kTags; ++tag) {
    INFO("tag " << tag);
    const auto& work = receives[static_cast<std::size_t>(tag)];
    CHECK(work->source() == left);
    CHECK(work->tag() == tag);
    require_equal(received[static_cast<std::size_t>(tag)], payload(left, tag, length_for(tag)));
  }
  for (int k = 0; k < 3; ++k) {
    INFO("message " << k << " with tag " << kRepeated);
    require_equal(repeated[static_cast<std::size_t>(k)], payload(left, k, 4));
  }
}

TEST_CASE("a receive from kAnySource reports who sent the message and with which tag", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size();
  if (n == 1) return;  // no sender: the local communicator refuses (see above)
  if (c->rank() != 0) {
    c->send(Tensor::full({5}, c->rank()), 0, 100 + c->rank());
    c->barrier();
    return;
  }
  // Rank 0 serves the others, in whatever order their messages come.
  std::vector<Tensor> inbox;
  std::vector<dist::RecvWorkPtr> works;
  for (int k = 1; k < n; ++k) {
    inbox.push_back(Tensor::zeros({5}));
    works.push_back(c->irecv(inbox.back(), dist::kAnySource, dist::kAnyTag));
  }
  for (auto& w : works) w->wait();
  c->barrier();

  std::set<int> senders;
  for (std::size_t k = 0; k < works.size(); ++k) {
    const int source = works[k]->source();
    INFO("message " << k << " from " << source);
    senders.insert(source);
    CHECK(works[k]->tag() == 100 + source);
    require_equal(inbox[k], Tensor::full({5}, source));
  }
  std::set<int> expected;
  for (int r = 1; r < n; ++r) expected.insert(r);
  CHECK(senders == expected);
}

TEST_CASE("a posted receive takes its message while nobody waits on it", "[cpu][dist]") {
  // A message far above MPI's eager limit: its send completes only once the receive has
  // matched it. Rank 1 waits in a barrier, not on its receive; if the receive were only
  // matched by wait(), rank 0's blocking send would never return and the barrier would
  // time out.
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  constexpr std::int64_t kLength = 1 << 20;  // 4 MB
  Tensor inbox = Tensor::zeros({kLength});
  dist::RecvWorkPtr pending;
  if (c->rank() == 1) pending = c->irecv(inbox, 0, 3);
  if (c->rank() == 0) c->send(payload(0, 3, kLength), 1, 3);
  c->barrier();
  if (pending) pending->wait();
  if (c->rank() == 1) require_equal(inbox, payload(0, 3, kLength));
}

TEST_CASE("test() tells a message in flight from one that is done, without waiting", "[cpu][dist]") {
  // Rank 1's receive cannot be done before rank 0 sends, which it does only after the
  // barrier; once rank 1 has waited for it, test() says done, as it does for the send.
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  Tensor inbox = Tensor::zeros({6});
  dist::RecvWorkPtr receive;
  if (c->rank() == 1) {
    receive = c->irecv(inbox, 0, 4);
    CHECK_FALSE(receive->test());
  }
  c->barrier();
  if (c->rank() == 0) {
    dist::WorkPtr send = c->isend(payload(0, 4, 6), 1, 4);
    send->wait();
    CHECK(send->test());
  }
  if (c->rank() == 1) {
    receive->wait();
    CHECK(receive->test());
    require_equal(inbox, payload(0, 4, 6));
  }
}

TEST_CASE("a receive from one rank and a later one from kAnySource take that rank's messages in order", "[cpu][dist]") {
  // Rank 0 posts irecv(from 1) and then irecv(from any rank), both with tag 0; rank 1 sends
  // two tag-0 messages. The first receive must take the first message, whether the
  // messages arrive after the receives are posted or were already there when they were.
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  for (const bool sent_first : {false, true}) {
    INFO((sent_first ? "messages sent before the receives" : "receives posted before the messages"));
    const Tensor first = payload(1, 1, 6), second = payload(1, 2, 6);
    Tensor from_one = Tensor::zeros({6}), from_any = Tensor::zeros({6});
    dist::RecvWorkPtr specific, any;
    std::vector<dist::WorkPtr> sends;
    auto post_receives = [&] {
      specific = c->irecv(from_one, 1, 0);
      any = c->irecv(from_any, dist::kAnySource, 0);
    };
    auto send = [&] {
      sends.push_back(c->isend(first, 0, 0));
      sends.push_back(c->isend(second, 0, 0));
    };
    if (c->rank() == 0 && !sent_first) post_receives();
    if (c->rank() == 1 && sent_first) send();
    c->barrier();
    if (c->rank() == 0 && sent_first) post_receives();
    if (c->rank() == 1 && !sent_first) send();
    if (specific) specific->wait();
    if (any) any->wait();
    for (auto& w : sends) w->wait();
    c->barrier();
    if (c->rank() == 0) {
      require_equal(from_one, first);
      require_equal(from_any, second);
      CHECK(any->source() == 1);
    }
  }
}

TEST_CASE("batch_isend_irecv passes large messages around a ring without deadlock", "[cpu][dist]") {
  // Every rank sends right and receives left, messages far above the eager limit: with
  // blocking sends issued first this deadlocks; as one batch it completes. A rank's
  // message to itself is part of the batch too (at one rank, the whole ring).
  CommunicatorPtr c = comm();
  const int n = c->size(), rank = c->rank();
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  constexpr std::int64_t kLength = 1 << 19;  // 2 MB
  const Tensor to_right = payload(rank, 1, kLength), to_self = payload(rank, 2, 9);
  Tensor from_left = Tensor::zeros({kLength}), from_self = Tensor::zeros({9});
  std::vector<P2POp> ops = {P2POp::send(to_right, right, 1), P2POp::recv(from_left, left, 1),
                            P2POp::recv(from_self, rank, 2), P2POp::send(to_self, rank, 2)};
  std::vector<dist::WorkPtr> works = c->batch_isend_irecv(ops);
  REQUIRE(works.size() == ops.size());
  for (auto& w : works) w->wait();
  CHECK(c->batch_isend_irecv({}).empty());

  require_equal(from_left, payload(left, 1, kLength));
  require_equal(from_self, to_self);
}

TEST_CASE("irecv of a message of the wrong size fails naming both sizes and leaves the tensor", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  Tensor small = Tensor::full({4}, -1.0);
  Tensor next = Tensor::zeros({4});
  std::string error;
  if (c->rank() == 0) {
    c->send(Tensor::zeros({5}), 1, 9);
    c->send(Tensor::full({4}, 6.0), 1, 9);  // the one after it still arrives
  }
  if (c->rank() == 1) {
    auto wrong = c->irecv(small, 0, 9);
    error = error_of([&] { wrong->wait(); });
    c->recv(next, 0, 9);
  }
  c->barrier();
  if (c->rank() == 1) {
    CHECK_THAT(error, Contains("irecv: expected 16 bytes (4 x f32) from rank 0 with tag 9, got 20 bytes"));
    require_equal(small, Tensor::full({4}, -1.0));
    require_equal(next, Tensor::full({4}, 6.0));
  }
}

TEST_CASE("messages pass while an all-reduce waits for them on the communication thread", "[cpu][dist]") {
  // Rank 0 starts a large all-reduce, which runs on its communication thread and waits for
  // rank 1; rank 1 joins it only after a round trip of messages with rank 0. Were messages
  // queued behind the all-reduce (one FIFO thread), rank 0's send would never go out and
  // both ranks would wait until the timeout.
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  constexpr std::int64_t kLength = 1 << 21;  // 8 MB
  Tensor big = Tensor::full({kLength}, c->rank() + 1.0);
  Tensor ping = Tensor::full({3}, 42.0), pong = Tensor::zeros({3});
  if (c->rank() == 0) {
    dist::WorkPtr reduction = c->all_reduce_async(big);
    c->isend(ping, 1, 5)->wait();
    c->irecv(pong, 1, 6)->wait();
    reduction->wait();
  } else if (c->rank() == 1) {
    c->recv(pong, 0, 5);
    Tensor doubled = mul(pong, 2.0);
    c->send(doubled, 0, 6);
    c->all_reduce(big);
  } else {
    c->all_reduce(big);
  }
  const int n = c->size();
  require_equal(big.slice(0, 0, 5), Tensor::full({5}, n * (n + 1) / 2.0));
  require_equal(pong, Tensor::full({3}, c->rank() == 0 ? 84.0 : c->rank() == 1 ? 42.0 : 0.0));
}

TEST_CASE("point-to-point refuses bad peers, tags and tensors naming the operation", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size(), rank = c->rank();
  Tensor v = Tensor::zeros({3});
  if (n == 1) {
    CHECK_THROWS_WITH(c->batch_isend_irecv({P2POp::send(v, 0, 1)}),
                      Contains("batch_isend_irecv: the send with tag 1 has no receive with that tag"));
    Tensor wide = Tensor::zeros({4});
    CHECK_THROWS_WITH(c->batch_isend_irecv({P2POp::send(v, 0), P2POp::recv(wide, 0)}),
                      Contains("batch_isend_irecv: expected 16 bytes (4 x f32) from rank 0 with tag 0, got 12 bytes"));
    return;
  }
  const int other = (rank + 1) % n;
  CHECK_THROWS_WITH(c->isend(v, rank), Contains("isend: dst " + std::to_string(rank) + " is this rank"));
  CHECK_THROWS_WITH(c->irecv(v, n), Contains("irecv: src " + std::to_string(n) + " is out of range"));
  CHECK_THROWS_WITH(c->isend(v, dist::kAnySource), Contains("isend: dst kAnySource is only for irecv and recv"));
  CHECK_THROWS_WITH(c->isend(v, other, dist::kAnyTag), Contains("isend: tag must be >= 0, got -1"));
  CHECK_THROWS_WITH(c->irecv(v, other, -5), Contains("irecv: tag must be >= 0 or kAnyTag, got -5"));
  CHECK_THROWS_WITH(c->batch_isend_irecv({P2POp::recv(v, dist::kAnySource)}),
                    Contains("batch_isend_irecv: src kAnySource is only for irecv and recv"));
  Tensor transposed = Tensor::zeros({3, 4}).t();
  CHECK_THROWS_WITH(c->isend(transposed, other), Contains("isend: expected a contiguous tensor"));
}

// OnTimeout::Throw, with a communicator of its own: the failure leaves it unusable, and the
// tests' communicator goes on.

TEST_CASE("under OnTimeout::Throw an irecv whose sender never comes fails with the timeout", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;  // a single rank has nothing to wait for
  CommunicatorPtr fragile = dist::world(
      {.timeout = kFragileTimeout, .all_reduce = dist::AllReduceAlgorithm::Mpi, .on_timeout = dist::OnTimeout::Throw});
  std::string error, later;
  double waited = 0;
  if (c->rank() == 0) {
    Tensor t = Tensor::zeros({4});
    const auto start = std::chrono::steady_clock::now();
    auto work = fragile->irecv(t, 1, 77);  // rank 1 never sends it
    error = error_of([&] { work->wait(); });
    waited = seconds_since(start);
    later = error_of([&] { fragile->barrier(); });
  }
  c->barrier();
  if (c->rank() == 0) {
    CHECK_THAT(error, Matches(R"(irecv \(16 bytes, tag 77\) waited [0-9.]+ s for rank 1; )"
                              R"(the communicator is now unusable.*)"));
    CHECK(waited >= kFragileTimeoutSeconds);
    CHECK(waited < kSlack * kFragileTimeoutSeconds);
    CHECK_THAT(later, Contains("barrier: the communicator is unusable: irecv (16 bytes, tag 77) waited"));
  }
}

TEST_CASE("a receive nobody waits on outlives the timeout: its clock starts at its first wait()", "[cpu][dist]") {
  // A mailbox: rank 0 posts a receive from any rank long before the message comes. It is
  // not timed while nobody waits on it, so it takes its message after the timeout.
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  CommunicatorPtr fragile = dist::world(
      {.timeout = kFragileTimeout, .all_reduce = dist::AllReduceAlgorithm::Mpi, .on_timeout = dist::OnTimeout::Throw});
  Tensor inbox = Tensor::zeros({4});
  const Tensor letter = Tensor::full({4}, 3.0);
  std::string error;
  dist::RecvWorkPtr mailbox;
  if (c->rank() == 0) mailbox = fragile->irecv(inbox, dist::kAnySource, 11);
  if (c->rank() == 1) {
    std::this_thread::sleep_for(2 * kFragileTimeout);
    fragile->send(letter, 0, 11);
  }
  c->barrier();  // rank 0 waits here for rank 1, not on its receive
  if (mailbox) {
    error = error_of([&] { mailbox->wait(); });
  }
  c->barrier();
  if (c->rank() == 0) {
    CHECK(error == "");
    require_equal(inbox, letter);
  }
}

TEST_CASE("wait_any returns the message that completes first and does not time out a mailbox", "[cpu][dist]") {
  // Rank 0 posts a receive from every other rank and one that nothing answers yet; rank 1
  // sends after twice the timeout, so wait_any waits that long without failing, and the
  // other ranks' messages come first.
  CommunicatorPtr c = comm();
  if (c->size() == 1) {
    CHECK_THAT(error_of([&] { dist::peer_recovery(*c, "wait_any").wait_any({nullptr}); }),
               Contains("wait_any: the local backend cannot serve several peers from one thread"));
    return;
  }
  CommunicatorPtr fragile = dist::world(
      {.timeout = kFragileTimeout, .all_reduce = dist::AllReduceAlgorithm::Mpi, .on_timeout = dist::OnTimeout::Throw});
  std::vector<int> order;  // the senders, in the order wait_any returned their messages
  std::vector<Tensor> inboxes(static_cast<std::size_t>(c->size()), Tensor::zeros({2}));
  Tensor later = Tensor::zeros({2});
  dist::RecvWorkPtr unanswered;
  std::string error;
  if (c->rank() == 0) {
    std::vector<dist::WorkPtr> works;
    std::vector<int> from;
    for (int r = 1; r < c->size(); ++r) {
      inboxes[static_cast<std::size_t>(r)] = Tensor::zeros({2});
      works.push_back(fragile->irecv(inboxes[static_cast<std::size_t>(r)], r, 5));
      from.push_back(r);
    }
    unanswered = fragile->irecv(later, 1, 6);
    works.push_back(unanswered);
    from.push_back(-1);
    error = error_of([&] {
      while (works.size() > 1) {
        const std::size_t i = dist::peer_recovery(*fragile, "test").wait_any(works);
        works[i]->wait();
        order.push_back(from[i]);
        works.erase(works.begin() + static_cast<std::ptrdiff_t>(i));
        from.erase(from.begin() + static_cast<std::ptrdiff_t>(i));
      }
    });
  } else {
    if (c->rank() == 1) std::this_thread::sleep_for(2 * kFragileTimeout);
    fragile->send(Tensor::full({2}, c->rank()), 0, 5);
  }
  c->barrier();
  if (c->rank() == 1) fragile->send(Tensor::full({2}, 9.0), 0, 6);
  if (unanswered) unanswered->wait();
  c->barrier();
  if (c->rank() == 0) {
    CHECK(error == "");
    REQUIRE(order.size() == static_cast<std::size_t>(c->size() - 1));
    CHECK(order.back() == 1);  // rank 1's message came last
    CHECK(inboxes[1].to_vector<float>() == std::vector<float>{1, 1});
    CHECK(later.to_vector<float>() == std::vector<float>{9, 9});
  }
}

TEST_CASE("under OnTimeout::Throw a stalled all-reduce fails its wait() and the communicator refuses more",
          "[cpu][dist]") {
  // Rank 0's all-reduce waits for the others, which join only after it has failed (so that
  // it then ends, and its communicator can be shut down).
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  CommunicatorPtr fragile = dist::world(
      {.timeout = kFragileTimeout, .all_reduce = dist::AllReduceAlgorithm::Mpi, .on_timeout = dist::OnTimeout::Throw});
  Tensor t = Tensor::ones({4});
  std::string error, later;
  double waited = 0;
  if (c->rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    auto work = fragile->all_reduce_async(t);
    error = error_of([&] { work->wait(); });
    waited = seconds_since(start);
    later = error_of([&] { fragile->isend(t, 1); });
  }
  c->barrier();
  if (c->rank() != 0) fragile->all_reduce(t);  // ends rank 0's stalled MPI_Allreduce
  c->barrier();
  if (c->rank() == 0) {
    CHECK_THAT(error, Matches(R"(all_reduce \(#1, 16 bytes\) waited [0-9.]+ s for all ranks; )"
                              R"(the communicator is now unusable.*)"));
    CHECK(waited >= kFragileTimeoutSeconds);
    CHECK(waited < kSlack * kFragileTimeoutSeconds);
    CHECK_THAT(later, Contains("isend: the communicator is unusable: all_reduce (#1, 16 bytes) waited"));
  } else {
    require_equal(t, Tensor::full({4}, static_cast<double>(c->size())));
  }
}

TEST_CASE("wait_any_for returns after its limit when nothing arrives and the message once it does", "[cpu][dist]") {
  // Rank 0 waits 50 ms for a receive that rank 1 answers only after the barrier: the first
  // wait ends empty-handed (works.size()), not before the limit; the second returns it.
  CommunicatorPtr c = comm();
  if (c->size() == 1) {
    CHECK_THAT(error_of([&] { dist::peer_recovery(*c, "wait_any_for").wait_any_for({nullptr}, 1ms); }),
               Contains("wait_any_for: the local backend cannot"));
    return;
  }
  Tensor inbox = Tensor::zeros({3});
  if (c->rank() == 0) {
    const std::vector<dist::WorkPtr> works{c->irecv(inbox, 1, 7)};
    const auto start = std::chrono::steady_clock::now();
    CHECK(dist::peer_recovery(*c, "test").wait_any_for(works, 50ms) == 1);
    CHECK(std::chrono::steady_clock::now() - start >= 50ms);
    c->barrier();
    CHECK(dist::peer_recovery(*c, "test").wait_any_for(works, std::chrono::minutes(1)) == 0);
    works.front()->wait();
    CHECK(inbox.to_vector<float>() == std::vector<float>{7, 7, 7});
  } else {
    c->barrier();
    if (c->rank() == 1) c->send(Tensor::full({3}, 7.0), 0, 7);
  }
  c->barrier();
}

TEST_CASE("subgroup makes a communicator of some ranks while the others call nothing", "[cpu][dist]") {
  // The last rank stays out (as a lost rank would); the others reduce over their group,
  // numbered in the order given. The local backend has no such groups.
  CommunicatorPtr c = comm();
  if (c->size() == 1) {
    CHECK_THAT(error_of([&] { dist::peer_recovery(*c, "subgroup").subgroup({0}); }),
               Contains("subgroup: the local backend cannot"));
    return;
  }
  std::vector<int> members;
  for (int r = 0; r + 1 < c->size(); ++r) members.push_back(r);
  if (c->rank() + 1 < c->size()) {
    CHECK_THAT(error_of([&] { dist::peer_recovery(*c, "test").subgroup({c->rank() == 0 ? 1 : 0}); }),
               Contains("this rank (" + std::to_string(c->rank()) + ") among them"));
    CommunicatorPtr group = dist::peer_recovery(*c, "test").subgroup(members);
    REQUIRE(group->size() == c->size() - 1);
    CHECK(group->rank() == c->rank());
    Tensor t = Tensor::full({2}, static_cast<double>(c->rank() + 1));
    group->all_reduce(t);
    const float expected = static_cast<float>((c->size() - 1) * c->size() / 2);
    CHECK(t.to_vector<float>() == std::vector<float>{expected, expected});
  }
  c->barrier();
}
