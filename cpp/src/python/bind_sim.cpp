#include <pybind11/stl.h>

#include "python/module.hpp"
#include "sim/event_loop.hpp"

namespace py = pybind11;

namespace forestcc::python {

void bindSim(py::module_& m) {
  m.def(
      "simulate_events",
      [](std::vector<double> linkBandwidth, std::vector<int64_t> channelLinkStart,
         std::vector<int64_t> channelLinks, std::vector<double> channelLatency,
         std::vector<int64_t> partner, std::vector<int64_t> workerOpStart, std::vector<int64_t> ops,
         int64_t count, int64_t chunksPerBlock, std::vector<int64_t> smallBytes, std::vector<int64_t> bigBytes, double memBandwidth) {
        sim::SimInput in{std::move(linkBandwidth), std::move(channelLinkStart),
                         std::move(channelLinks),  std::move(channelLatency),
                         std::move(partner),       std::move(workerOpStart),
                         std::move(ops),           count,
                         chunksPerBlock,           std::move(smallBytes),
                         std::move(bigBytes),      memBandwidth};
        sim::SimOutput out;
        {
          py::gil_scoped_release release;
          out = sim::runEvents(in);
        }
        return py::make_tuple(out.timeUs, out.transfers, out.stuck);
      },
      py::arg("link_bandwidth"), py::arg("channel_link_start"), py::arg("channel_links"),
      py::arg("channel_latency"), py::arg("partner"), py::arg("worker_op_start"), py::arg("ops"),
      py::arg("count"), py::arg("chunks_per_block"), py::arg("small_bytes"), py::arg("big_bytes"), py::arg("mem_bandwidth"),
      "The plan simulator's event loop on flat arrays (forestcc.plan.simulator builds them): "
      "(time in microseconds, transfers, [(worker, op, slice) of workers that never finished]). "
      "Invalid input raises ValueError.");
}

}  // namespace forestcc::python
