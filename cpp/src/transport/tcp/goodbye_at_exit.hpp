// A process that ends without destroying a communicator still says goodbye to its tcp peers: the
// Python module keeps init()'s communicator until the interpreter is gone (its objects are never
// freed then), and NCCL programs may skip ncclCommDestroy. Without a goodbye its peers would take
// its sockets closing for a death and poison the job, even those that no longer need it (a rank
// that finished its last call while others are still in theirs). Each live TcpTransport is listed
// here; an atexit handler says goodbye for those this process made (a forked child made none).
#pragma once

namespace forestcc::tcp {

class TcpTransport;

void sayGoodbyeAtExit(TcpTransport* transport);
// Before the transport goes: the handler never touches it after this returns.
void forgetAtExit(TcpTransport* transport);

}  // namespace forestcc::tcp
