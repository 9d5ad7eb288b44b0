// forestcc from C++: join the job forestcc-run started, run all_reduce, all_gather and broadcast
// on the C++ collective API, check every result, and exit non-zero on a wrong answer. Uses only
// the public headers and libforestcc.so.
//
//   forestcc-run -n 4 forestcc-example-all-reduce            # prints "OK <rank>" on every rank
//   forestcc-run -n 2 forestcc-example-all-reduce --bad-root # shows a refused argument
//   forestcc-run -n 2 forestcc-example-all-reduce --huge-count  # a count no memory holds, refused
//   forestcc-run -n 2 forestcc-example-all-reduce --bad-op      # (also --bad-dtype, --null-x) refused
//   forestcc-run -n 4 forestcc-example-all-reduce --algo ring_ar.json  # all_reduce by a plan file
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "forestcc/bootstrap.hpp"
#include "forestcc/collective_api.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/error.hpp"

using forestcc::DataType;
using forestcc::ReduceOp;
using forestcc::Tensor;

namespace {

int wrong = 0;

void expect(bool ok, const char* what, int rank, size_t index, double got, double want) {
  if (ok) return;
  if (wrong++ < 5) std::fprintf(stderr, "rank %d: %s[%zu] = %g, expected %g\n", rank, what, index, got, want);
}

}  // namespace

int main(int argc, char** argv) {
  const bool badRoot = argc > 1 && std::strcmp(argv[1], "--bad-root") == 0;
  const bool hugeCount = argc > 1 && std::strcmp(argv[1], "--huge-count") == 0;
  // Values no enum has (a cast, an integer from another ABI) and a NULL buffer: refused too.
  const char* badValue = argc > 1 && (std::strcmp(argv[1], "--bad-op") == 0 || std::strcmp(argv[1], "--bad-dtype") == 0 ||
                                      std::strcmp(argv[1], "--null-x") == 0)
                             ? argv[1]
                             : nullptr;
  // all_reduce's algorithm: "auto", a built-in name or a plan file (in place, for this job's ranks)
  const char* algo = argc > 2 && std::strcmp(argv[1], "--algo") == 0 ? argv[2] : "auto";
  try {
    auto comm = std::make_shared<forestcc::Communicator>(forestcc::Bootstrap::fromEnvironment(60.0));
    forestcc::Collectives coll(comm);
    const int rank = coll.rank(), n = coll.size();

    if (badRoot) {
      // Refused before anything is sent: the error names the argument and the valid range.
      std::vector<float> x(4, 1.0f);
      coll.broadcast(Tensor(x.data(), x.size(), DataType::Float32), n);
      std::fprintf(stderr, "rank %d: broadcast to root %d was not refused\n", rank, n);
      return 1;
    }
    if (hugeCount) {
      // 2**62 + 1 floats: their bytes wrap around 64 bits to 4, which would pass for a small buffer.
      std::vector<float> x(4, 1.0f);
      const Tensor huge(x.data(), (size_t(1) << 62) + 1, DataType::Float32);
      coll.allReduce(huge, huge, forestcc::ReduceOp::Sum);
      std::fprintf(stderr, "rank %d: an all_reduce of 2**62 + 1 floats was not refused\n", rank);
      return 1;
    }
    if (badValue) {
      std::vector<float> x(4, 1.0f), y(4, 0.0f);
      const bool op = std::strcmp(badValue, "--bad-op") == 0, dtype = std::strcmp(badValue, "--bad-dtype") == 0;
      const Tensor in(dtype || op ? x.data() : nullptr, x.size(), dtype ? static_cast<DataType>(99) : DataType::Float32);
      const Tensor out(y.data(), y.size(), dtype ? static_cast<DataType>(99) : DataType::Float32);
      coll.allReduce(in, out, op ? static_cast<forestcc::ReduceOp>(42) : forestcc::ReduceOp::Sum);
      std::fprintf(stderr, "rank %d: an all_reduce with %s was not refused\n", rank, badValue);
      return 1;
    }

    // all_reduce in place: element i of rank r holds r + i; the sum is n*i + n(n-1)/2.
    const size_t count = 1000;
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(rank + i);
    Tensor t(x.data(), count, DataType::Float32);
    coll.allReduce(t, t, ReduceOp::Sum, {algo});
    for (size_t i = 0; i < count; ++i) {
      const double want = static_cast<double>(n) * i + n * (n - 1) / 2.0;
      expect(x[i] == want, "all_reduce", rank, i, x[i], want);
    }

    // all_gather, queued: block r of the output is rank r's input.
    std::vector<int64_t> mine(3, rank * 10), all(3 * n, -1);
    auto work = coll.allGather(Tensor(mine.data(), mine.size(), DataType::Int64),
                               Tensor(all.data(), all.size(), DataType::Int64), {"auto", /*async=*/true});
    work->wait();
    for (size_t i = 0; i < all.size(); ++i) expect(all[i] == int64_t(i / 3) * 10, "all_gather", rank, i, all[i], (i / 3) * 10);

    // broadcast from the last rank, with a built-in algorithm chosen by name.
    std::vector<double> b(5, rank == n - 1 ? 2.5 : 0.0);
    coll.broadcast(Tensor(b.data(), b.size(), DataType::Float64), n - 1, {"ring"});
    for (size_t i = 0; i < b.size(); ++i) expect(b[i] == 2.5, "broadcast", rank, i, b[i], 2.5);

    coll.barrier();
    if (wrong) {
      std::fprintf(stderr, "rank %d: %d wrong elements\n", rank, wrong);
      return 1;
    }
    std::printf("OK %d\n", rank);
    return 0;
  } catch (const forestcc::Error& e) {
    std::fprintf(stderr, "forestcc error (%s): %s\n", forestcc::errorCodeName(e.code()), e.what());
    return 2;
  }
}
