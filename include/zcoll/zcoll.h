/*
 * zcoll.h - the zcoll C ABI.
 *
 * NCCL-shaped: code written for NCCL ports by renaming nccl* to zcoll*. Buffers may be host memory
 * or, where zcoll is built with CUDA and a GPU is present (or ZCOLL_DEVICE=emulated), device memory.
 *
 * Contracts that hold for every function below unless its comment says otherwise:
 * - Every function returns a zcollResult_t; on failure it sets a thread-local message that
 *   zcollGetLastError() returns, naming the offending argument. Outputs are written only on success.
 * - No C++ exception ever crosses this boundary.
 * - Thread-safety: a communicator may be used by one thread at a time. zcollCommAbort,
 *   zcollCommGetAsyncError, zcollCommCount and zcollCommUserRank may be called from any thread at
 *   any time while the communicator exists.
 * - Ordering: all ranks of a communicator issue the same collectives, in the same order, with
 *   matching arguments (as in NCCL and MPI). Point-to-point calls between a pair are matched in order.
 * - Host buffers and a NULL stream: the call blocks until the operation is complete and the buffers
 *   may be reused. The *Async forms return at once with a request, completed by zcollWait/zcollTest;
 *   the buffers belong to zcoll until then.
 * - Device buffers (detected per buffer; both buffers of a call must be of one kind): the call is
 *   ordered on `stream` as in NCCL - the operation starts after the work queued on the stream before
 *   the call, work queued after it waits for it, and the calling thread does not block. NULL is the
 *   default stream. Failures then surface through zcollCommGetAsyncError (whose message
 *   zcollGetLastError returns after it), and the stream still moves on. The *Async forms take device
 *   buffers too, ordered by their request instead of a stream. Within a group, device send/recv of one
 *   communicator must share one stream. A stream with host buffers is an invalid argument.
 * - Every wait inside zcoll is bounded by the communicator's timeout (zcollConfig_t.timeoutMs,
 *   ZCOLL_TIMEOUT_S); a peer that stops answering makes the call fail with zcollTimeout.
 */
#ifndef ZCOLL_ZCOLL_H_
#define ZCOLL_ZCOLL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZCOLL_MAJOR 0
#define ZCOLL_MINOR 1
#define ZCOLL_PATCH 0
/** Version as an integer: major * 10000 + minor * 100 + patch (NCCL's encoding). */
#define ZCOLL_VERSION_CODE (ZCOLL_MAJOR * 10000 + ZCOLL_MINOR * 100 + ZCOLL_PATCH)

/** Opaque communicator. Created by zcollCommInit*, released by zcollCommDestroy or zcollCommAbort. */
typedef struct zcollComm* zcollComm_t;
/** Opaque handle of one nonblocking operation; owned by zcoll, released by zcollWait or by the
 *  zcollTest call that reports it done. */
typedef struct zcollRequest* zcollRequest_t;
/** A CUDA stream (cudaStream_t) or NULL (the default stream). With host buffers it must be NULL. */
typedef void* zcollStream_t;

#define ZCOLL_UNIQUE_ID_BYTES 128
/** Identifies one communicator being created: the root's address and port and a 128-bit random
 *  secret. Plain bytes: copy it to every rank (broadcast it over MPI, a file, a store...).
 *  Keep it private: anyone holding it can join the rendezvous. */
typedef struct {
  char internal[ZCOLL_UNIQUE_ID_BYTES]; /**< opaque: magic, version, address, port, secret, checksum */
} zcollUniqueId;

typedef enum {
  zcollSuccess = 0,
  zcollUnhandledCudaError = 1, /**< a CUDA (or emulated device) call failed; the message has its error */
  zcollSystemError = 2,   /**< an OS call failed (socket, mmap, memfd...); the message has errno */
  zcollInternalError = 3, /**< a bug in zcoll */
  zcollInvalidArgument = 4,
  zcollInvalidUsage = 5,  /**< valid arguments, wrong moment (e.g. a destroyed communicator) */
  zcollRemoteError = 6,   /**< a peer failed or sent something unexpected */
  zcollInProgress = 7,    /**< nonblocking: not finished yet */
  zcollTimeout = 8,       /**< a wait ran past the communicator's timeout */
  zcollAborted = 9,       /**< the communicator was aborted while the call ran */
  zcollNotSupported = 10, /**< no algorithm or transport can serve this call */
  zcollNumResults = 11
} zcollResult_t;

typedef enum {
  zcollInt8 = 0,
  zcollChar = 0,
  zcollUint8 = 1,
  zcollInt32 = 2,
  zcollInt = 2,
  zcollUint32 = 3,
  zcollInt64 = 4,
  zcollUint64 = 5,
  zcollFloat16 = 6,
  zcollHalf = 6,
  zcollFloat32 = 7,
  zcollFloat = 7,
  zcollFloat64 = 8,
  zcollDouble = 8,
  zcollBfloat16 = 9,
  zcollNumTypes = 10,
  /* Not types: they make every int a valid value of the enum, so that C callers may pass any int
   * and get zcollInvalidArgument instead of undefined behaviour. */
  zcollDataTypeEnumMin_ = -0x7fffffff - 1,
  zcollDataTypeEnumMax_ = 0x7fffffff
} zcollDataType_t;

/** Reduction operators. fp16 and bf16 are reduced in fp32 and rounded once per step.
 *  zcollAvg is the sum divided by the rank count (integer division for integer types). */
typedef enum {
  zcollSum = 0,
  zcollProd = 1,
  zcollMax = 2,
  zcollMin = 3,
  zcollAvg = 4,
  zcollNumOps = 5,
  zcollRedOpEnumMin_ = -0x7fffffff - 1, /* as for zcollDataType_t: any int is a value */
  zcollRedOpEnumMax_ = 0x7fffffff
} zcollRedOp_t;

/* ---------------------------------------------------------------------------------------------
 * Configuration. Fields left at their ZCOLL_CONFIG_UNDEF_* value take the default; ZCOLL_*
 * environment variables override both (see docs/configuration.md).
 * ------------------------------------------------------------------------------------------- */
#define ZCOLL_CONFIG_UNDEF_INT INT32_MIN
#define ZCOLL_CONFIG_UNDEF_PTR NULL
#define ZCOLL_CONFIG_MAGIC 0x7a636f6cu /* "zcol" */

/** Options of zcollCommInitRankConfig / zcollCommInitFromEnv. Initialise with
 *  ZCOLL_CONFIG_INITIALIZER, then set the fields you want; the rest keep their defaults. */
typedef struct {
  size_t size;          /**< sizeof(zcollConfig_t), set by ZCOLL_CONFIG_INITIALIZER */
  unsigned int magic;   /**< ZCOLL_CONFIG_MAGIC */
  unsigned int version; /**< ZCOLL_VERSION_CODE of the header the caller compiled against */
  int timeoutMs;        /**< bound on every wait, in milliseconds (default 300000) */
  int chunkBytes;       /**< pipelining chunk (shared-memory slot) size in bytes (default 262144) */
  int fifoSlots;        /**< slots per peer FIFO, at least 2 (default 4) */
  const char* algo;     /**< algorithm override, same syntax as ZCOLL_ALGO (default: automatic) */
  const char* transports; /**< transport list, same syntax as ZCOLL_TRANSPORTS (default: automatic) */
} zcollConfig_t;

#define ZCOLL_CONFIG_INITIALIZER                                                              \
  {                                                                                           \
    sizeof(zcollConfig_t), ZCOLL_CONFIG_MAGIC, ZCOLL_VERSION_CODE, ZCOLL_CONFIG_UNDEF_INT,    \
        ZCOLL_CONFIG_UNDEF_INT, ZCOLL_CONFIG_UNDEF_INT, ZCOLL_CONFIG_UNDEF_PTR,               \
        ZCOLL_CONFIG_UNDEF_PTR                                                                \
  }

/* ---------------------------------------------------------------------------------------------
 * Library and errors
 * ------------------------------------------------------------------------------------------- */

/** Writes ZCOLL_VERSION_CODE of the library into *version. Thread-safe. */
zcollResult_t zcollGetVersion(int* version);

/** A static, human-readable name of a result code. Never NULL. Thread-safe. */
const char* zcollGetErrorString(zcollResult_t result);

/** The message of the last failed zcoll call made by this thread ("" if none). The pointer is valid
 *  until the next zcoll call on this thread. */
const char* zcollGetLastError(zcollComm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Communicator lifecycle
 * ------------------------------------------------------------------------------------------- */

/** Creates a new unique id and starts, in this process, the rendezvous service that the ranks of
 *  the communicator meet at (a thread listening on a TCP port; on ZCOLL_SOCKET_IFNAME's address,
 *  else loopback). The service ends once every rank's communicator is created (it names a rank that
 *  leaves before that to the others), or after the timeout: the process must live until then.
 *  Call it on one process and pass the id to all ranks. Thread-safe. */
zcollResult_t zcollGetUniqueId(zcollUniqueId* uniqueId);

/** Creates the communicator of rank `rank` among `nranks`. Collective: blocks until all nranks ranks
 *  have called it with the same id, or the timeout passes (zcollTimeout). On failure nothing is left
 *  behind (no thread, socket or shared mapping) and *comm is not written. */
zcollResult_t zcollCommInitRank(zcollComm_t* comm, int nranks, zcollUniqueId commId, int rank);

/** As zcollCommInitRank, with a configuration (NULL means all defaults). config->size and
 *  config->magic must come from ZCOLL_CONFIG_INITIALIZER. The struct is read during the call only. */
zcollResult_t zcollCommInitRankConfig(zcollComm_t* comm, int nranks, zcollUniqueId commId, int rank,
                                      const zcollConfig_t* config);

/** Creates a communicator from a launcher's environment: rank and size from torchrun (RANK,
 *  WORLD_SIZE, LOCAL_RANK), Open MPI (OMPI_COMM_WORLD_*), PMI (PMI_RANK, PMI_SIZE) or Slurm
 *  (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); the rendezvous at MASTER_ADDR:MASTER_PORT or
 *  ZCOLL_COMM_ID=host:port, which rank 0 serves. Collective like zcollCommInitRank. config may be
 *  NULL. */
zcollResult_t zcollCommInitFromEnv(zcollComm_t* comm, const zcollConfig_t* config);

/** Releases the communicator after its pending operations finish (bounded by the timeout). Not
 *  collective: peers are not waited for. The handle is invalid afterwards. */
zcollResult_t zcollCommDestroy(zcollComm_t comm);

/** Stops the communicator at once: operations in flight on other threads return zcollAborted
 *  within a second, then everything is released. Callable from any thread. The handle is invalid
 *  afterwards. */
zcollResult_t zcollCommAbort(zcollComm_t comm);

/** The first error an asynchronous part of the communicator met (zcollSuccess if none), written to
 *  *asyncError. Callable from any thread. */
zcollResult_t zcollCommGetAsyncError(zcollComm_t comm, zcollResult_t* asyncError);

/** The number of ranks, written to *count. */
zcollResult_t zcollCommCount(const zcollComm_t comm, int* count);

/** This rank's index, written to *rank. */
zcollResult_t zcollCommUserRank(const zcollComm_t comm, int* rank);

/** Registers [buff, buff + size) with the communicator (ncclCommRegister): later operations may send
 *  from it without copying it first. With the ib transport, host memory is registered with the NIC
 *  (pinned; one memory region per distinct page range, shared by overlapping registrations) and
 *  chunks of point-to-point sends and of out-of-place collectives' sendbuff go out by RDMA straight
 *  from it; elsewhere registration only records the buffer, and device memory is always staged.
 *  Register before using the buffer in operations and keep it allocated until deregistered.
 *  *handle is for zcollCommDeregister; registrations left are released by zcollCommDestroy.
 *  Errors: a NULL buff or handle, size 0 (zcollInvalidArgument); the NIC refusing (zcollSystemError,
 *  for example past the locked-memory limit, `ulimit -l`). */
zcollResult_t zcollCommRegister(const zcollComm_t comm, void* buff, size_t size, void** handle);

/** Allocates size bytes of host memory that the other processes of this host can map (ncclMemAlloc's
 *  counterpart for host buffers): page-aligned, zero-filled, backed by its own memfd. On a one-host
 *  communicator, an all-reduce whose sendbuff and recvbuff lie in such memory on every rank, a
 *  reduce-scatter or all-gather whose sendbuff does, and a broadcast whose root's sendbuff does, run
 *  zero-copy from ZCOLL_ZERO_COPY bytes up (default 1 MiB): the ranks read each other's buffers in
 *  place instead of moving the data twice through shared-memory slots. Other buffers and other
 *  communicators work as usual.
 *  Errors: NULL ptr, size 0 (zcollInvalidArgument); the system refusing (zcollSystemError). */
zcollResult_t zcollMemAlloc(void** ptr, size_t size);

/** Frees memory of zcollMemAlloc (ptr as it returned it). Peers that mapped it drop their mappings
 *  at their next zero-copy operation with this process. Any other pointer is zcollInvalidArgument. */
zcollResult_t zcollMemFree(void* ptr);

/** Releases a registration of zcollCommRegister. Operations issued after it no longer read the buffer
 *  in place. A handle that is not a live registration of comm is zcollInvalidArgument. */
zcollResult_t zcollCommDeregister(const zcollComm_t comm, void* handle);

/* ---------------------------------------------------------------------------------------------
 * Collectives (NCCL's argument order). count is in elements. In-place: sendbuff == recvbuff for
 * all-reduce, broadcast and reduce; sendbuff == recvbuff + rank * recvcount for all-gather;
 * recvbuff == sendbuff + rank * recvcount for reduce-scatter.
 * ------------------------------------------------------------------------------------------- */

/** recvbuff[i] = op over ranks of sendbuff[i], on every rank. */
zcollResult_t zcollAllReduce(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                             zcollRedOp_t op, zcollComm_t comm, zcollStream_t stream);

/** recvbuff[r * sendcount + i] = sendbuff of rank r [i]. recvbuff holds nranks * sendcount. */
zcollResult_t zcollAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, zcollDataType_t datatype,
                             zcollComm_t comm, zcollStream_t stream);

/** recvbuff[i] = op over ranks of sendbuff[rank * recvcount + i]. sendbuff holds nranks * recvcount. */
zcollResult_t zcollReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 zcollDataType_t datatype, zcollRedOp_t op, zcollComm_t comm,
                                 zcollStream_t stream);

/** recvbuff = root's sendbuff on every rank (sendbuff is read on the root only). */
zcollResult_t zcollBroadcast(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                             int root, zcollComm_t comm, zcollStream_t stream);

/** root's recvbuff[i] = op over ranks of sendbuff[i]; recvbuff is not touched on other ranks. */
zcollResult_t zcollReduce(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                          zcollRedOp_t op, int root, zcollComm_t comm, zcollStream_t stream);

/** Root's recvbuff[r * count + i] = sendbuff of rank r [i] (NCCL 2.28's ncclGather). recvbuff holds
 *  nranks * count and is used at the root only. In place at the root: sendbuff == recvbuff + root * count. */
zcollResult_t zcollGather(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype, int root,
                          zcollComm_t comm, zcollStream_t stream);

/** recvbuff[i] = root's sendbuff[rank * count + i] (ncclScatter). sendbuff holds nranks * count and is
 *  read at the root only. In place at the root: recvbuff == sendbuff + root * count. */
zcollResult_t zcollScatter(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype, int root,
                           zcollComm_t comm, zcollStream_t stream);

/** recvbuff[r * count + i] = sendbuff of rank r [rank * count + i] (ncclAlltoAll): count elements to and
 *  from every rank. Both buffers hold nranks * count; they must not overlap. */
zcollResult_t zcollAlltoAll(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                            zcollComm_t comm, zcollStream_t stream);

/** Returns once every rank has entered the barrier (or fails after the timeout). Inside a group it
 *  is queued like any other call. */
zcollResult_t zcollBarrier(zcollComm_t comm, zcollStream_t stream);

/** Sends count elements to peer. Outside a group it blocks until the matching zcollRecv on peer has
 *  taken the data; a send to oneself needs its zcollRecv in the same group. */
zcollResult_t zcollSend(const void* sendbuff, size_t count, zcollDataType_t datatype, int peer,
                        zcollComm_t comm, zcollStream_t stream);

/** Receives count elements from peer (matched in order with peer's zcollSend calls to this rank). */
zcollResult_t zcollRecv(void* recvbuff, size_t count, zcollDataType_t datatype, int peer, zcollComm_t comm,
                        zcollStream_t stream);

/** Receives count elements from whichever other rank's send to this rank arrives first (Gloo's and
 *  torch.distributed's receive from any source; NCCL has none) and writes that rank to *peer. Host
 *  buffers and a NULL stream only, outside groups; blocks until the whole message is in. The sender
 *  calls zcollSend as usual, with the same count; count 0 returns at once with *peer = -1. Sends and
 *  collectives share each pair's queue: while a zcollRecvAny is outstanding, no rank that could be
 *  taken for its source may already have started a later collective (its chunks would be taken as
 *  the message). Errors: a NULL peer (zcollInvalidArgument); inside a
 *  group or on a one-rank communicator (zcollInvalidUsage); device buffers (zcollNotSupported). */
zcollResult_t zcollRecvAny(void* recvbuff, size_t count, zcollDataType_t datatype, int* peer, zcollComm_t comm,
                           zcollStream_t stream);

/** Starts a group: the calls that follow on this thread are only queued, and run together at the
 *  matching zcollGroupEnd (send/recv pairs then cannot deadlock; one thread may drive several
 *  communicators). Groups nest; only the outermost end launches. */
zcollResult_t zcollGroupStart(void);

/** Ends a group: runs every queued call (per communicator, its point-to-point calls as one batch,
 *  then its collectives in call order, whatever the interleaving) and, for host buffers, blocks until
 *  all are complete. Returns the first failure. */
zcollResult_t zcollGroupEnd(void);

/* ---------------------------------------------------------------------------------------------
 * Introspection (for benchmarks and logs; not needed to use the library)
 * ------------------------------------------------------------------------------------------- */

/** Writes the names of the algorithms zcoll has for `collective` ("allreduce", "allgather",
 *  "reducescatter", "broadcast", "reduce", "gather", "scatter", "alltoall", "barrier"), comma-separated
 *  and NUL-terminated, into names (len bytes). Thread-safe. */
zcollResult_t zcollGetAlgorithmNames(const char* collective, char* names, size_t len);

/** Writes the name of the algorithm this communicator would use now for `collective` on `count`
 *  elements of `datatype` (after ZCOLL_ALGO and the measured cost model) into name (len bytes). */
zcollResult_t zcollCommAlgorithmFor(zcollComm_t comm, const char* collective, size_t count, zcollDataType_t datatype,
                                    char* name, size_t len);

/** Writes the name of the algorithm that ran this communicator's most recent operation that
 *  completed without error into name (len bytes): what zcollCommAlgorithmFor predicts, or "zcopy"
 *  when the operation ran zero-copy between the processes of one host (zcollMemAlloc buffers); ""
 *  before the first. Thread-safe; an operation completing meanwhile may or may not be seen. */
zcollResult_t zcollCommLastAlgorithm(zcollComm_t comm, char* name, size_t len);

/* ---------------------------------------------------------------------------------------------
 * Nonblocking forms (host buffers). Each queues the operation on the communicator's progress
 * thread, in call order with the blocking forms, and writes a request to *request. Not allowed
 * inside a group.
 * ------------------------------------------------------------------------------------------- */

zcollResult_t zcollAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                                  zcollRedOp_t op, zcollComm_t comm, zcollRequest_t* request);
zcollResult_t zcollAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  zcollDataType_t datatype, zcollComm_t comm, zcollRequest_t* request);
zcollResult_t zcollReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      zcollDataType_t datatype, zcollRedOp_t op, zcollComm_t comm,
                                      zcollRequest_t* request);
zcollResult_t zcollBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                                  int root, zcollComm_t comm, zcollRequest_t* request);
zcollResult_t zcollReduceAsync(const void* sendbuff, void* recvbuff, size_t count, zcollDataType_t datatype,
                               zcollRedOp_t op, int root, zcollComm_t comm, zcollRequest_t* request);

/** Non-blocking check. Writes 1 to *done when the operation finished, then returns its result and
 *  releases the request; writes 0 and returns zcollSuccess while it runs. A request must be completed
 *  (by zcollWait or a zcollTest that reports it done) before its communicator is destroyed; using a
 *  released request is zcollInvalidUsage while the communicator lives. */
zcollResult_t zcollTest(zcollRequest_t request, int* done);

/** Blocks until the operation finishes, returns its result and releases the request. */
zcollResult_t zcollWait(zcollRequest_t request);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZCOLL_ZCOLL_H_ */
