/* A stand-in for a real NCCL library, for testing the shim's forwarding on a machine without a
 * GPU (FORESTCC_NCCL_FALLBACK=fake_nccl.so). Each call prints what it received and marks the
 * buffers it was given, so the test sees which library ran which operation. Not an NCCL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

struct ncclComm {
  int rank, nranks;
};

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof *id);
  strcpy(id->internal, "fake-nccl-id");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (strcmp(id.internal, "fake-nccl-id") != 0) return ncclInvalidArgument; /* the id travelled intact */
  *comm = malloc(sizeof **comm);
  (*comm)->rank = rank;
  (*comm)->nranks = nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  free(comm);
  return ncclSuccess;
}

const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "fake-nccl has no errors";
}

ncclResult_t ncclGroupStart(void) {
  printf("fake-nccl ncclGroupStart\n");
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  printf("fake-nccl ncclGroupEnd\n");
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff; (void)op; (void)stream;
  printf("fake-nccl ncclAllReduce rank %d of %d count %zu\n", comm->rank, comm->nranks, count);
  if (datatype == ncclFloat32)
    for (size_t i = 0; i < count; ++i) ((float*)recvbuff)[i] = 4242;
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff; (void)root; (void)stream;
  printf("fake-nccl ncclBroadcast rank %d\n", comm->rank);
  if (datatype == ncclFloat32)
    for (size_t i = 0; i < count; ++i) ((float*)recvbuff)[i] = 4343;
  return ncclSuccess;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  (void)buff; (void)size; (void)winFlags;
  printf("fake-nccl ncclCommWindowRegister rank %d\n", comm->rank);
  *win = (ncclWindow_t)0x5151;
  return ncclSuccess;
}
