// Which clock components each rank's clocks keep (python/forestcc/plan/clocks.py): found by the
// co-access scan (verifier_coaccess.cpp), read by the clock join (verifier_clocks.cpp). A
// 1,024-rank forest all_reduce plan keeps a few thousand components per rank, millions in all:
// sorted arrays here, where Python sets of ints took 70 bytes an entry.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace forestcc::python::verifier {

class KeptComponents {
 public:
  explicit KeptComponents(std::vector<std::vector<uint32_t>> byRank) : byRank_(std::move(byRank)) {
    for (auto& kept : byRank_) {
      std::sort(kept.begin(), kept.end());
      kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
    }
  }

  size_t ranks() const { return byRank_.size(); }
  bool keeps(size_t rank, uint32_t comp) const {
    const std::vector<uint32_t>& kept = of(rank);
    return std::binary_search(kept.begin(), kept.end(), comp);
  }
  const std::vector<uint32_t>& of(size_t rank) const {
    // pybind11 turns this into an IndexError that says what went wrong (vector::at's would not)
    if (rank >= byRank_.size())
      throw std::out_of_range("KeptComponents: rank " + std::to_string(rank) + " is out of range (" +
                              std::to_string(byRank_.size()) + " ranks)");
    return byRank_[rank];
  }

 private:
  std::vector<std::vector<uint32_t>> byRank_;
};

}  // namespace forestcc::python::verifier
