// Plan ops as the dicts of the plan format ({"op", "ch", "src", "dst", "srcs", "remote", "n"}; n
// left out when 1), for planToDict and the tree compiler's output. Made with the C API: the member
// names, buffer names and op names are interned strings made once, and chunk indices and channel
// ids come from one table of int objects, so the millions of dicts of a 1,024-rank plan share them
// (as the plan loader's dicts do).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "forestcc/plan.hpp"

namespace forestcc::python {

// One int object per value below `limit`, made on first use and shared after (the millions of
// chunk indices and channel ids of a large plan's dicts), a new one for other values. The table
// grows as values come (doubling), so a small plan does not pay for `limit` slots.
class SharedInts {
 public:
  explicit SharedInts(int64_t limit) : limit_(limit) {}
  pybind11::object operator()(int64_t value);

 private:
  int64_t limit_;
  std::vector<pybind11::object> ints_;
};

class OpDicts {
 public:
  OpDicts();

  // A new dict for `op`.
  pybind11::object op(const plan::Op& op);
  // A shared int object for values below 2^20, a new one otherwise.
  pybind11::object integer(int64_t value) { return ints_(value); }
  // The interned name of a transport.
  const pybind11::object& transport(plan::Transport t);

 private:
  enum Key { kOp, kCh, kSrc, kDst, kSrcs, kRemote, kN };
  void set(const pybind11::object& d, Key key, PyObject* value);
  pybind11::object ref(const plan::ChunkRef& r);

  std::vector<pybind11::object> keys_, buffers_, codes_, transports_;
  SharedInts ints_{int64_t{1} << 20};
};

}  // namespace forestcc::python
