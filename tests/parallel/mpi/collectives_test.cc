// Collectives of MpiCommunicator on the groups of a dp2 × tp2 × pp2 mesh of
// 8 ranks. Inputs are formulas in the world rank, so every result is exact.
// The groups' warm-up also runs on meshes of 3 to 8 ranks (pp from 2 to 8),
// and the check that no two ranks of a node share a GPU on made-up ids.
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/host_sync.h"
#include "framework/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/device_groups.h"
#include "parallel/mesh.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tracing_communicator.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

struct NamedGroup {
  std::string name;
  Communicator* comm;
  std::vector<int> members;  // world ranks, in group-rank order
};

class CollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<MpiRuntime>(nullptr, nullptr);
    ASSERT_EQ(runtime_->world_size(), 8) << "run with 8 ranks";
    absl::StatusOr<Mesh> mesh = Mesh::Create(8, 2, 2, 2);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    absl::StatusOr<ParallelContext> context =
        ParallelContext::Create(*runtime_, *mesh);
    ASSERT_TRUE(context.ok()) << context.status();
    context_ = std::make_unique<ParallelContext>(std::move(*context));
    const int r = rank();
    const ProcessGroups& g = context_->groups();
    std::vector<int> all(8);
    std::iota(all.begin(), all.end(), 0);
    groups_ = {{"world", g.world, all},
               {"tp", g.tp, mesh->TpGroup(r)},
               {"dp", g.dp, mesh->DpGroup(r)},
               {"pp", g.pp, mesh->PpGroup(r)},
               {"embed", g.embed, mesh->EmbedGroup(r)}};
  }

  int rank() const { return runtime_->world_rank(); }

  std::unique_ptr<MpiRuntime> runtime_;
  std::unique_ptr<ParallelContext> context_;
  std::vector<NamedGroup> groups_;
};

template <typename T>
Tensor Filled(int64_t n, T (*value)(int64_t)) {
  Tensor t = Tensor::Empty({n}, DTypeOf<T>());
  for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = value(i);
  return t;
}

TEST_F(CollectivesTest, AllReduceSumAvgMaxOnEveryGroup) {
  constexpr int n = 5;
  for (const NamedGroup& g : groups_) {
    SCOPED_TRACE(g.name);
    ASSERT_NE(g.comm, nullptr);
    const int size = static_cast<int>(g.members.size());
    ASSERT_EQ(g.comm->size(), size);
    int member_sum = 0, member_max = 0;
    for (int m : g.members)
      member_sum += m, member_max = std::max(m, member_max);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      Tensor x = Tensor::Empty({n}, DType::kF32);
      Tensor y = Tensor::Empty({n}, DType::kF64);
      for (int i = 0; i < n; ++i) {
        x.data<float>()[i] = 10.0f * rank() + i;
        y.data<double>()[i] = 10.0 * rank() - i;
      }
      g.comm->AllReduce(x, op);
      g.comm->AllReduce(y, op);
      for (int i = 0; i < n; ++i) {
        const double sum_x = 10.0 * member_sum + size * i;
        const double sum_y = 10.0 * member_sum - size * i;
        const double want_x = op == ReduceOp::kSum   ? sum_x
                              : op == ReduceOp::kAvg ? sum_x / size
                                                     : 10.0 * member_max + i;
        const double want_y = op == ReduceOp::kSum   ? sum_y
                              : op == ReduceOp::kAvg ? sum_y / size
                                                     : 10.0 * member_max - i;
        EXPECT_EQ(x.data<float>()[i], want_x) << "op " << int(op) << " i " << i;
        EXPECT_EQ(y.data<double>()[i], want_y)
            << "op " << int(op) << " i " << i;
      }
    }
  }
}

TEST_F(CollectivesTest, IntegerTypesReduce) {
  const NamedGroup& world = groups_[0];
  Tensor i32 = Tensor::Empty({2}, DType::kI32);
  Tensor i64 = Tensor::Empty({2}, DType::kI64);
  Tensor u16 = Tensor::Empty({2}, DType::kU16);
  Tensor u32 = Tensor::Empty({2}, DType::kU32);
  for (int i = 0; i < 2; ++i) {
    i32.data<int32_t>()[i] = -rank() - i;
    i64.data<int64_t>()[i] = (int64_t{1} << 40) * rank() + i;
    u16.data<uint16_t>()[i] = static_cast<uint16_t>(1000 * rank() + i);
    u32.data<uint32_t>()[i] = (1u << 28) + rank() * 3 + i;
  }
  world.comm->AllReduce(i32, ReduceOp::kSum);
  world.comm->AllReduce(i64, ReduceOp::kSum);
  world.comm->AllReduce(u16, ReduceOp::kMax);
  world.comm->AllReduce(u32, ReduceOp::kSum);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(i32.data<int32_t>()[i], -28 - 8 * i);
    EXPECT_EQ(i64.data<int64_t>()[i], (int64_t{1} << 40) * 28 + 8 * i);
    EXPECT_EQ(u16.data<uint16_t>()[i], 7000 + i);
    EXPECT_EQ(u32.data<uint32_t>()[i], 8 * (1u << 28) + 3 * 28 + 8 * i);
  }
}

TEST_F(CollectivesTest, ReduceScatterGivesEachRankItsBlock) {
  constexpr int n = 3;
  for (const NamedGroup& g : groups_) {
    SCOPED_TRACE(g.name);
    const int size = g.comm->size();
    int member_sum = 0;
    for (int m : g.members) member_sum += m;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      Tensor in = Tensor::Empty({size * n}, DType::kF32);
      for (int j = 0; j < size * n; ++j)
        in.data<float>()[j] = 100.0f * rank() + j;
      Tensor out = Tensor::Empty({n}, DType::kF32);
      g.comm->ReduceScatter(in, out, op);
      // In place: the output is this rank's block of the input.
      Tensor own = in.Narrow(g.comm->rank() * n, n);
      g.comm->ReduceScatter(in, own, op);
      for (int i = 0; i < n; ++i) {
        const double sum = 100.0 * member_sum + size * (g.comm->rank() * n + i);
        const double want = op == ReduceOp::kSum ? sum : sum / size;
        EXPECT_EQ(out.data<float>()[i], want) << "i " << i;
        EXPECT_EQ(own.data<float>()[i], want) << "i " << i;
      }
    }
  }
}

TEST_F(CollectivesTest, AllGatherConcatenatesInGroupOrder) {
  constexpr int n = 4;
  for (const NamedGroup& g : groups_) {
    SCOPED_TRACE(g.name);
    const int size = g.comm->size();
    Tensor in = Tensor::Empty({n}, DType::kI32);
    for (int i = 0; i < n; ++i) in.data<int32_t>()[i] = 10 * rank() + i;
    Tensor out = Tensor::Zeros({size * n}, DType::kI32);
    g.comm->AllGather(in, out);
    // In place: this rank's block already holds its input.
    Tensor in_place = Tensor::Zeros({size * n}, DType::kI32);
    Tensor own = in_place.Narrow(g.comm->rank() * n, n);
    own.CopyFrom(in);
    g.comm->AllGather(own, in_place);
    for (int k = 0; k < size; ++k) {
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(out.data<int32_t>()[k * n + i], 10 * g.members[k] + i);
        EXPECT_EQ(in_place.data<int32_t>()[k * n + i], 10 * g.members[k] + i);
      }
    }
  }
}

TEST_F(CollectivesTest, BroadcastFromEveryRoot) {
  for (const NamedGroup& g : groups_) {
    SCOPED_TRACE(g.name);
    for (int root = 0; root < g.comm->size(); ++root) {
      Tensor x = Tensor::Empty({3}, DType::kF64);
      for (int i = 0; i < 3; ++i) x.data<double>()[i] = rank() + 0.5 * i;
      g.comm->Broadcast(x, root);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(x.data<double>()[i], g.members[root] + 0.5 * i);
      }
    }
  }
}

TEST_F(CollectivesTest, SendRecvRing) {
  for (const NamedGroup& g : groups_) {
    const int size = g.comm->size();
    if (size == 1) continue;
    SCOPED_TRACE(g.name);
    const int me = g.comm->rank();
    const int to = (me + 1) % size, from = (me + size - 1) % size;
    Tensor out = Tensor::Empty({6}, DType::kF32);
    for (int i = 0; i < 6; ++i) out.data<float>()[i] = 100.0f * rank() + i;
    Tensor in = Tensor::Zeros({6}, DType::kF32);
    std::unique_ptr<Request> recv = g.comm->Recv(in, from, 7);
    std::unique_ptr<Request> send = g.comm->Send(out, to, 7);
    recv->Wait();
    send->Wait();
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(in.data<float>()[i], 100.0f * g.members[from] + i);
    }
  }
}

// Every rank sends to the next while receiving from the previous one and
// sends a second message back. Under kRendezvous (each send waits for its
// receive, batches complete in order) this completes only because each
// rank's transfers go in one batch; counts stay per transfer, and without
// tags messages between two ranks pair up in posting order.
TEST_F(CollectivesTest, BatchSendRecvRingInBothModes) {
  for (MpiP2P p2p : {MpiP2P::kEager, MpiP2P::kRendezvous}) {
    for (const NamedGroup& g : groups_) {
      const int size = g.comm->size();
      if (size == 1) continue;
      SCOPED_TRACE(g.name + (p2p == MpiP2P::kRendezvous ? " rendezvous" : ""));
      MPI_Comm dup;
      ASSERT_EQ(
          MPI_Comm_dup(dynamic_cast<MpiCommunicator&>(*g.comm).comm(), &dup),
          MPI_SUCCESS);
      MpiCommunicator comm(g.name, dup, /*owned=*/true, p2p);
      const int me = comm.rank();
      const int next = (me + 1) % size, prev = (me + size - 1) % size;
      Tensor forward = Tensor::Empty({6}, DType::kF32);
      Tensor backward = Tensor::Empty({3}, DType::kF32);
      forward.Fill(100.0 * rank());
      backward.Fill(-1.0 * rank());
      Tensor from_prev = Tensor::Zeros({6}, DType::kF32);
      Tensor from_next = Tensor::Zeros({3}, DType::kF32);
      using T = P2POp::Type;
      std::vector<std::unique_ptr<Request>> requests =
          comm.BatchSendRecv({P2POp{T::kSend, forward, next, 1},
                              P2POp{T::kSend, backward, prev, 2},
                              P2POp{T::kRecv, from_prev, prev, 1},
                              P2POp{T::kRecv, from_next, next, 2}});
      ASSERT_EQ(requests.size(), 4u);
      for (auto& request : requests) request->Wait();
      EXPECT_EQ(from_prev.data<float>()[5], 100.0f * g.members[prev]);
      EXPECT_EQ(from_next.data<float>()[2], -1.0f * g.members[next]);
      EXPECT_EQ(comm.stats().Calls(CommOp::kSend), 2);
      EXPECT_EQ(comm.stats().Calls(CommOp::kRecv), 2);
      EXPECT_EQ(comm.stats().Bytes(CommOp::kSend), (6 + 3) * 4);
      // Lone transfers are batches of one: in an order that cannot wait on
      // itself (one rank sends first, the other receives first) they pass.
      if (size == 2) {
        const int peer = 1 - me;
        std::vector<std::unique_ptr<Request>> lone;
        for (int k = 0; k < 2; ++k) {
          lone.push_back((k == me) ? comm.Send(forward, peer, 5)
                                   : comm.Recv(from_prev, peer, 5));
        }
        for (auto& request : lone) request->Wait();
        EXPECT_EQ(from_prev.data<float>()[0], 100.0f * g.members[peer]);
      }
    }
  }
}

TEST_F(CollectivesTest, MessagesOnOneTagArriveInOrder) {
  Communicator& pp = *context_->groups().pp;
  const int peer = 1 - pp.rank();
  std::vector<Tensor> in, out;
  std::vector<std::unique_ptr<Request>> requests;
  for (int k = 0; k < 4; ++k) {
    in.push_back(Tensor::Zeros({2}, DType::kI64));
    out.push_back(Tensor::Empty({2}, DType::kI64));
    out.back().Fill(1000 * rank() + k);
    requests.push_back(pp.Send(out.back(), peer, 3));
  }
  for (int k = 0; k < 4; ++k) requests.push_back(pp.Recv(in[k], peer, 3));
  for (auto& request : requests) request->Wait();
  const int peer_world = context_->mesh().PpGroup(rank())[peer];
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(in[k].data<int64_t>()[1], 1000 * peer_world + k);
  }
}

TEST_F(CollectivesTest, AsyncAllReduceOverlapsOtherWork) {
  const ProcessGroups& g = context_->groups();
  Tensor grads = Tensor::Empty({1 << 16}, DType::kF32);
  grads.Fill(rank());
  std::unique_ptr<Request> pending =
      g.dp->AllReduceAsync(grads, ReduceOp::kAvg);
  // Meanwhile: a blocking all-reduce on another group, and local work.
  Tensor other = Tensor::Empty({4}, DType::kF32);
  other.Fill(1.0);
  g.tp->AllReduce(other, ReduceOp::kSum);
  double local = 0.0;
  for (int i = 0; i < 100000; ++i) local += i % 7;
  pending->Wait();
  pending->Wait();  // a second wait is a no-op
  const std::vector<int> dp = context_->mesh().DpGroup(rank());
  const float mean = (dp[0] + dp[1]) / 2.0f;
  for (int64_t i = 0; i < grads.numel(); i += 4097) {
    ASSERT_EQ(grads.data<float>()[i], mean) << i;
  }
  EXPECT_EQ(other.data<float>()[0], 2.0f);
  EXPECT_GT(local, 0.0);
}

TEST_F(CollectivesTest, CountsCallsAndBytesPerGroup) {
  const ProcessGroups& g = context_->groups();
  for (const Communicator* c : context_->communicators()) {
    EXPECT_EQ(c->stats().Calls(CommOp::kAllReduce), 0) << c->name();
  }
  Tensor x = Tensor::Zeros({10}, DType::kF32);
  g.tp->AllReduce(x, ReduceOp::kSum);
  g.tp->AllReduce(x, ReduceOp::kMax);
  g.dp->AllReduceAsync(x, ReduceOp::kSum)->Wait();
  Tensor gathered = Tensor::Zeros({20}, DType::kF32);
  g.pp->AllGather(x, gathered);
  g.pp->ReduceScatter(gathered, x, ReduceOp::kSum);
  g.world->Broadcast(x, 0);
  g.world->Barrier();
  EXPECT_EQ(g.tp->stats().Calls(CommOp::kAllReduce), 2);
  EXPECT_EQ(g.tp->stats().Bytes(CommOp::kAllReduce), 80);
  EXPECT_EQ(g.dp->stats().Calls(CommOp::kAllReduce), 1);
  EXPECT_EQ(g.dp->stats().Bytes(CommOp::kAllReduce), 40);
  EXPECT_EQ(g.pp->stats().Calls(CommOp::kAllGather), 1);
  EXPECT_EQ(g.pp->stats().Bytes(CommOp::kAllGather), 80);
  EXPECT_EQ(g.pp->stats().Bytes(CommOp::kReduceScatter), 80);
  EXPECT_EQ(g.pp->stats().Calls(CommOp::kAllReduce), 0);
  EXPECT_EQ(g.world->stats().Calls(CommOp::kBroadcast), 1);
  EXPECT_EQ(g.world->stats().Calls(CommOp::kBarrier), 1);
  EXPECT_EQ(g.embed->stats().Calls(CommOp::kAllReduce), 0);
  g.tp->ResetStats();
  EXPECT_EQ(g.tp->stats().Calls(CommOp::kAllReduce), 0);
}

TEST_F(CollectivesTest, WarmUpRunsOneCollectivePerGroupAndPipelineTransfers) {
  // Every model-parallel group (all of two ranks here) connects with one
  // all-reduce; the pp group also sends to and receives from its one
  // neighbour. The world carries no warm-up.
  ResetHostWaits();
  WarmUpGroups(context_->groups(), Device::Cpu());
  EXPECT_EQ(HostWaits(), 1);  // the final wait for the device
  for (const NamedGroup& g : groups_) {
    SCOPED_TRACE(g.name);
    const CommStats& s = g.comm->stats();
    const bool warmed = g.name != "world";
    for (int op = 0; op < static_cast<int>(CommOp::kCount); ++op) {
      const CommOp kind = static_cast<CommOp>(op);
      const bool transfer = kind == CommOp::kSend || kind == CommOp::kRecv;
      const bool expected = warmed && (kind == CommOp::kAllReduce ||
                                       (transfer && g.name == "pp"));
      EXPECT_EQ(s.Calls(kind), expected ? 1 : 0) << CommOpName(kind);
      EXPECT_EQ(s.Bytes(kind), expected ? 4 : 0) << CommOpName(kind);
    }
  }
  // Groups of one rank have nothing to connect.
  ParallelContext single = ParallelContext::Single();
  WarmUpGroups(single.groups(), Device::Cpu());
  for (Communicator* c :
       {single.groups().tp, single.groups().dp, single.groups().pp}) {
    for (int op = 0; op < static_cast<int>(CommOp::kCount); ++op) {
      EXPECT_EQ(c->stats().Calls(static_cast<CommOp>(op)), 0) << c->name();
    }
  }
}

// Warms up `context`'s groups with its pp group replaced by one whose
// transfers rendezvous as NCCL's do (a send completes once its receive is
// posted, tags are ignored, a batch waits for the previous one), so a
// warm-up that could deadlock on GPUs hangs here, and traced, so each
// transfer's peer is known. Checks that the pp group sent to and received
// from both neighbours once (the one neighbour when pp = 2) and that the
// other groups only all-reduced.
void CheckWarmUp(const ParallelContext& context) {
  ProcessGroups groups = context.groups();
  const auto* mpi_pp = dynamic_cast<const MpiCommunicator*>(groups.pp);
  ASSERT_NE(mpi_pp, nullptr);
  MPI_Comm dup = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_dup(mpi_pp->comm(), &dup), MPI_SUCCESS);
  MpiCommunicator rendezvous("pp", dup, /*owned=*/true, MpiP2P::kRendezvous);
  TraceRecorder recorder(context.rank());
  recorder.set_active(true);
  TracingCommunicator pp(rendezvous, recorder, /*lane=*/0);
  groups.pp = &pp;
  WarmUpGroups(groups, Device::Cpu());

  const int n = pp.size(), r = pp.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  std::multiset<int> sent_to, received_from;
  for (const TraceSpan& span : recorder.spans()) {
    for (const auto& [key, value] : span.args) {
      if (key != "peer") continue;
      if (span.name == "wait send") sent_to.insert(static_cast<int>(value));
      if (span.name == "wait recv") {
        received_from.insert(static_cast<int>(value));
      }
    }
  }
  const std::multiset<int> neighbours =
      n == 2 ? std::multiset<int>{next} : std::multiset<int>{next, prev};
  EXPECT_EQ(sent_to, neighbours) << "stage " << r << " of " << n;
  EXPECT_EQ(received_from, neighbours) << "stage " << r << " of " << n;
  EXPECT_EQ(pp.stats().Calls(CommOp::kAllReduce), 1);
  for (const Communicator* c : {groups.tp, groups.dp, groups.embed}) {
    if (c == nullptr) continue;  // a middle stage is in no embed group
    EXPECT_EQ(c->stats().Calls(CommOp::kAllReduce), c->size() > 1 ? 1 : 0)
        << c->name();
    EXPECT_EQ(c->stats().Calls(CommOp::kSend), 0) << c->name();
    EXPECT_EQ(c->stats().Calls(CommOp::kRecv), 0) << c->name();
  }
}

TEST_F(CollectivesTest, WarmUpConnectsBothPipelineDirections) {
  struct Layout {
    int ranks, dp, tp, pp;
  };
  for (const Layout& l :
       {Layout{8, 2, 2, 2}, Layout{3, 1, 1, 3}, Layout{6, 1, 2, 3},
        Layout{8, 2, 1, 4}, Layout{5, 1, 1, 5}, Layout{8, 1, 1, 8}}) {
    SCOPED_TRACE(absl::StrCat("dp=", l.dp, " tp=", l.tp, " pp=", l.pp));
    // The layout runs on the first `ranks` ranks; the others wait at the
    // next split.
    MPI_Comm base = MPI_COMM_NULL;
    ASSERT_EQ(
        MPI_Comm_split(MPI_COMM_WORLD, rank() < l.ranks ? 0 : MPI_UNDEFINED,
                       rank(), &base),
        MPI_SUCCESS);
    if (base == MPI_COMM_NULL) continue;
    absl::StatusOr<Mesh> mesh = Mesh::Create(l.ranks, l.dp, l.tp, l.pp);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    absl::StatusOr<ParallelContext> context =
        ParallelContext::Create(*runtime_, *mesh, base);
    MPI_Comm_free(&base);
    ASSERT_TRUE(context.ok()) << context.status();
    CheckWarmUp(*context);
  }
}

// The device groups route expert parallelism's groups too (their buffers
// live on the device under a GPU run); without ep the dp group serves as
// expert_dp, so no second transport is set up over the dp ranks.
TEST_F(CollectivesTest, DeviceGroupsRouteTheExpertGroups) {
  const ProcessGroups& plain = context_->groups();
  absl::StatusOr<std::unique_ptr<DeviceGroups>> without =
      DeviceGroups::Create(plain, Device::Cpu(), DeviceTransport::kHostStaged);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ((*without)->groups().expert_dp, (*without)->groups().dp);
  EXPECT_EQ((*without)->groups().ep->size(), 1);

  absl::StatusOr<Mesh> mesh = Mesh::Create(8, 4, 2, 1);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  absl::StatusOr<Mesh> expert = mesh->WithExpertParallel(2);
  ASSERT_TRUE(expert.ok()) << expert.status();
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(*runtime_, *expert);
  ASSERT_TRUE(context.ok()) << context.status();
  const ProcessGroups& host = context->groups();
  absl::StatusOr<std::unique_ptr<DeviceGroups>> routed =
      DeviceGroups::Create(host, Device::Cpu(), DeviceTransport::kHostStaged);
  ASSERT_TRUE(routed.ok()) << routed.status();
  const ProcessGroups& g = (*routed)->groups();
  ASSERT_NE(g.ep, host.ep);
  ASSERT_NE(g.expert_dp, host.expert_dp);
  EXPECT_NE(g.expert_dp, g.dp);
  EXPECT_EQ(g.ep->size(), 2);
  EXPECT_EQ(g.expert_dp->size(), 2);
  WarmUpGroups(g, Device::Cpu());
  // Through the routed groups, each reaches the mesh's members of it.
  for (const auto& [group, kind] :
       {std::pair{g.ep, GroupKind::kEp},
        std::pair{g.expert_dp, GroupKind::kExpertDp}}) {
    SCOPED_TRACE(group->name());
    const std::vector<int> members = expert->Group(kind, rank());
    Tensor x = Tensor::Empty({1}, DType::kF32);
    x.data<float>()[0] = static_cast<float>(rank());
    group->AllReduce(x, ReduceOp::kSum);
    EXPECT_EQ(x.data<float>()[0], static_cast<float>(std::accumulate(
                                      members.begin(), members.end(), 0)));
  }
}

TEST_F(CollectivesTest, NodeGpuCheckGathersTheIdsOfEveryRankOfTheNode) {
  // mpirun puts all eight ranks on this one node; the ids stand for the
  // PCI bus ids a GPU run gathers.
  Communicator& world = *context_->groups().world;
  EXPECT_EQ(CheckNodeGpus(world, absl::StrCat("0000:", 10 + rank(), ":00.0")),
            absl::OkStatus());
  // Ranks 3 and 6 on one GPU: every rank of the node reaches one verdict.
  const absl::Status one =
      CheckNodeGpus(world, absl::StrCat("gpu-", rank() == 6 ? 3 : rank()));
  EXPECT_EQ(one.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(one.message(),
              HasSubstr("ranks 3 and 6 of one node share GPU gpu-3;"));
  // Ranks 2k and 2k + 1 in pairs.
  const absl::Status pairs =
      CheckNodeGpus(world, absl::StrCat("gpu-", rank() / 2));
  EXPECT_THAT(pairs.message(),
              HasSubstr("ranks 0 and 1 of one node share GPU gpu-0 (and 3 more "
                        "GPUs are shared);"));
  EXPECT_EQ(AgreeOnStatus(world, pairs).code(),
            absl::StatusCode::kFailedPrecondition);
  // A world that is not MPI's is refused before any communication.
  ParallelContext single = ParallelContext::Single();
  EXPECT_EQ(CheckNodeGpus(*single.groups().world, "gpu-0").code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trellis
