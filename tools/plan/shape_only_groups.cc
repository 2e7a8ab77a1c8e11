#include "tools/plan/shape_only_groups.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "framework/status.h"

namespace trellis {
namespace {

// A communicator of a group's size and rank that refuses every call.
class ShapeOnlyCommunicator : public Communicator {
 public:
  ShapeOnlyCommunicator(std::string name, int rank, int size)
      : Communicator(std::move(name), rank, size) {}

 protected:
  std::unique_ptr<Request> DoAllReduce(Tensor&, ReduceOp, bool) override {
    Refuse("all-reduce");
  }
  std::unique_ptr<Request> DoReduceScatter(const Tensor&, Tensor&, ReduceOp,
                                           bool) override {
    Refuse("reduce-scatter");
  }
  std::unique_ptr<Request> DoAllGather(const Tensor&, Tensor&, bool) override {
    Refuse("all-gather");
  }
  void DoBroadcast(Tensor&, int) override { Refuse("broadcast"); }
  std::unique_ptr<Request> DoSend(const Tensor&, int, int) override {
    Refuse("send");
  }
  std::unique_ptr<Request> DoRecv(Tensor&, int, int) override {
    Refuse("receive");
  }
  void DoBarrier() override { Refuse("barrier"); }

 private:
  [[noreturn]] void Refuse(const char* op) const {
    TRELLIS_CHECK(false) << op << " on the planning-only group " << name()
                         << ": a plan never communicates";
    std::abort();
  }
};

}  // namespace

ShapeOnlyGroups::ShapeOnlyGroups(int64_t dp, int64_t cp, int64_t tp, int64_t pp,
                                 MeshCoord coord, int64_t ep) {
  TRELLIS_CHECK(dp >= 1 && cp >= 1 && tp >= 1 && pp >= 1 && ep >= 1);
  auto make = [&](const char* name, int rank, int64_t size) {
    owned_.push_back(std::make_unique<ShapeOnlyCommunicator>(
        name, rank, static_cast<int>(size)));
    return owned_.back().get();
  };
  groups_.world = make("world", 0, dp * cp * tp * pp);
  groups_.tp = make("tp", coord.t, tp);
  groups_.dp = make("dp", coord.d, dp * cp);
  if (cp > 1) groups_.cp = make("cp", coord.d % static_cast<int>(cp), cp);
  if (ep > 1) groups_.ep = make("ep", coord.d % static_cast<int>(ep), ep);
  groups_.pp = make("pp", coord.p, pp);
  const bool ends = coord.p == 0 || coord.p == pp - 1;
  if (ends) {
    groups_.embed = make("embed", coord.p == 0 ? 0 : 1, pp == 1 ? 1 : 2);
  }
}

}  // namespace trellis
