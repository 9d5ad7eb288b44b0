// Which eager plans can move their data as packets (packets.hpp; schedules/README.md, "Packets"),
// decided once per plan when it is compiled, from the whole plan, so every rank decides alike.
#pragma once

#include <vector>

#include "forestcc/plan.hpp"

namespace forestcc::executor {

// True when every put_signal of the plan lands in its peer's scratch bank and each one is waited
// for by exactly one wait of the peer (the k-th put_signal on a channel pair and the k-th wait
// on it, each channel used by one worker on each side), there are no other signals, puts or
// gets and no loopback channels, the plan is not sliced and every rank is on one node
// (`nodeOf`: packets are stores into mapped banks). Then `rank`'s waits in `workers` (its
// compiled ops) are marked kPacketWait, with dst and count of the put_signal they wait for.
bool markPacketWaits(const plan::Plan& p, int rank, const std::vector<int>& nodeOf,
                     std::vector<std::vector<plan::Op>>& workers);

}  // namespace forestcc::executor
