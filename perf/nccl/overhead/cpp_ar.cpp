// 8-byte in-place all_reduce through the C++ collective API, timed per call (mean of N).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include "forestcc/bootstrap.hpp"
#include "forestcc/collective_api.hpp"
#include "forestcc/communicator.hpp"
int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 5000;
  auto comm = std::make_shared<forestcc::Communicator>(forestcc::Bootstrap::fromEnvironment(60));
  forestcc::Collectives coll(comm);
  float x[2] = {1, 2};
  forestcc::Tensor t(x, 2, forestcc::DataType::Float32);
  for (int i = 0; i < 500; ++i) coll.allReduce(t, t, forestcc::ReduceOp::Sum);
  auto a = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) coll.allReduce(t, t, forestcc::ReduceOp::Sum);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count() / iters;
  if (coll.rank() == 0) printf("cpp %.2f us\n", us);
}
