// _C.plan.compile_trees: the C++ tree compiler (cpp/src/plan/tree_compiler.cpp) for
// python/forestcc/algorithms/tree_plan.py, returning what PlanBuilder holds (channels and op
// dicts per worker) so that the plan is built, validated and written as before.
//
// The op dicts come from OpDicts (python/op_dicts.hpp), as planToDict's do.
#include <Python.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "forestcc/plan.hpp"
#include "plan/tree_compiler.hpp"
#include "python/module.hpp"
#include "python/op_dicts.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

py::object steal(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

std::vector<plan::TreeInput> treesOf(const py::sequence& trees) {
  std::vector<plan::TreeInput> out(trees.size());
  for (size_t t = 0; t < out.size(); ++t) {
    py::tuple spec = trees[t].cast<py::tuple>();
    if (spec.size() != 5) throw std::invalid_argument("compile_trees: a tree is (root, first, count, arcs, route ids)");
    plan::TreeInput& tree = out[t];
    tree.root = spec[0].cast<int>();
    tree.first = spec[1].cast<int64_t>();
    tree.count = spec[2].cast<int64_t>();
    tree.arcs = spec[3].cast<std::vector<std::pair<int, int>>>();
    if (!spec[4].is_none()) tree.routes = spec[4].cast<std::vector<int>>();
    if (!tree.routes.empty() && tree.routes.size() != tree.arcs.size()) {
      throw std::invalid_argument("compile_trees: tree " + std::to_string(t) + " has " +
                                  std::to_string(tree.arcs.size()) + " arcs but " +
                                  std::to_string(tree.routes.size()) + " route ids");
    }
  }
  return out;
}

}  // namespace

void bindTreeCompiler(py::module_& plan) {
  plan.def(
      "compile_trees",
      [](const std::string& collective, int nranks, int64_t k, bool compact, bool inPlace,
         int maxChannelsPerPeer, const py::sequence& trees, std::vector<int> reverseRoutes,
         std::vector<int> directRoutes) {
        plan::TreeCompileOptions options;
        if (!plan::parse(collective, options.collective)) {
          throw py::value_error("collective: unknown collective '" + collective + "'");
        }
        options.nranks = nranks;
        options.chunksPerBlock = k;
        options.compact = compact;
        options.inPlace = inPlace;
        options.maxChannelsPerPeer = maxChannelsPerPeer;
        options.reverseRoute = std::move(reverseRoutes);
        options.directRoute = std::move(directRoutes);
        std::vector<plan::TreeInput> inputs = treesOf(trees);
        plan::TreeCompileResult result;
        {
          py::gil_scoped_release unlocked;
          result = plan::compileTrees(inputs, options);
        }
        std::vector<plan::TreeInput>().swap(inputs);
        OpDicts dicts;
        py::list channels(result.ranks.size()), workers(result.ranks.size());
        for (size_t r = 0; r < result.ranks.size(); ++r) {
          plan::RankProgram& rank = result.ranks[r];
          py::list chans(rank.channels.size());
          for (size_t c = 0; c < rank.channels.size(); ++c) {
            py::object peer = dicts.integer(rank.channels[c].peer);
            PyList_SET_ITEM(chans.ptr(), c,
                            steal(PyTuple_Pack(2, peer.ptr(), dicts.transport(rank.channels[c].transport).ptr()))
                                .release().ptr());
          }
          PyList_SET_ITEM(channels.ptr(), r, chans.release().ptr());
          py::list lists(rank.workers.size());
          for (size_t w = 0; w < rank.workers.size(); ++w) {
            std::vector<plan::Op>& ops = rank.workers[w].ops;
            py::list list(ops.size());
            for (size_t i = 0; i < ops.size(); ++i) PyList_SET_ITEM(list.ptr(), i, dicts.op(ops[i]).release().ptr());
            std::vector<plan::Op>().swap(ops);  // the dicts replace it: peak at one form of the plan
            PyList_SET_ITEM(lists.ptr(), w, list.release().ptr());
          }
          PyList_SET_ITEM(workers.ptr(), r, lists.release().ptr());
        }
        return py::make_tuple(channels, workers, py::cast(result.channelRoutes), result.scratchChunks);
      },
      py::arg("collective"), py::arg("nranks"), py::arg("chunks_per_block"), py::arg("compact"),
      py::arg("in_place"), py::arg("max_channels_per_peer"), py::arg("trees"), py::arg("reverse_routes"),
      py::arg("direct_routes") = std::vector<int>{},
      "tree_plan.py's op emission in C++. trees: (root, first, count, arcs, route ids or None) per "
      "tree (valid: tree_plan._check_tiling first); reverse_routes[i]: the id of route i reversed; "
      "direct_routes[i]: 1 when route i is a single link (its worker pairs may take lanes). "
      "Returns (channels: [[(peer, transport)] per rank], workers: [[[op dict]] per rank], "
      "channel_routes: [[route id or -1 per channel] per rank], scratch chunks the ops reach).");
}

}  // namespace forestcc::python
