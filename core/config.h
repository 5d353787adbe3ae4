// Every environment variable dtensor reads, declared once (Note [Configuration]).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace dt::config {

// Note [Configuration]
// Each variable is one row of DT_CONFIG_VARS: its name, type, default, bounds and one line of help. One validating
// parser reads them all (get_bool / get_int / get_seconds / get_string): each value is parsed once per process, at
// its first use, and a malformed value is an InvalidArgument naming the variable, the form expected and the value
// given (never a silent fallback). `dtrun --help-env` prints the table, and log_settings() (called by
// init_process_group) logs at info every variable that is set. The launch variables (rank, world size, store
// address and secret) are rows too, so that they are documented in the same place; the bootstrap reads them, and the
// aliases other launchers set (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...), through lookup(), the one place that
// reads the process environment.
enum class Type { kBool, kInt, kSeconds, kChoice, kString };

// X(id, name, type, default, min, max, choices, help); min/max bound kInt values, choices lists a kChoice's words.
#define DT_CONFIG_VARS(X)                                                                                              \
  X(kLog, "DT_LOG", kChoice, "warn", 0, 0, "error,warn,warning,info,debug",                                            \
    "log level of the rank-prefixed lines on stderr ([r3] ...); debug prints every collective and plan")               \
  X(kTimeoutS, "DT_TIMEOUT_S", kSeconds, "300", 0, 0, "",                                                              \
    "deadline of every blocking wait (collectives, store) in seconds; a dead or stuck peer becomes an error")          \
  X(kDebugCollectives, "DT_DEBUG_COLLECTIVES", kBool, "0", 0, 0, "",                                                   \
    "every collective first checks that all ranks made the same call; a mismatch is an error naming the ranks")        \
  X(kPoolMaxCachedMb, "DT_POOL_MAX_CACHED_MB", kInt, "4096", 0, int64_t(1) << 40, "",                                  \
    "MiB of freed blocks the host allocator keeps for reuse")                                                          \
  X(kHugePages, "DT_HUGE_PAGES", kBool, "1", 0, 0, "",                                                                 \
    "host tensors in transparent huge pages (Note [Huge pages for host blocks]); 0: plain aligned blocks")             \
  X(kUcxDirect, "DT_UCX_DIRECT", kBool, "1", 0, 0, "",                                                                 \
    "copies straight between processes of one host (process_vm_readv/writev); 0: messages only")                       \
  X(kUcxDirectMinBytes, "DT_UCX_DIRECT_MIN_BYTES", kInt, "16384", -1, int64_t(1) << 50, "",                            \
    "strided blocks of at least this many bytes are read directly from a peer on this host; -1: never")                \
  X(kUcxDirectAllreduceMinBytes, "DT_UCX_DIRECT_ALLREDUCE_MIN_BYTES", kInt, "262144", -1, int64_t(1) << 50, "",        \
    "all-reduces from this size on reduce straight out of the peers' memory when the group is on one host; -1: never") \
  X(kUcxAllreduceSmallBytes, "DT_UCX_ALLREDUCE_SMALL_BYTES", kInt, "262144", -1, int64_t(1) << 50, "",                 \
    "UCX all-reduces up to this size use recursive doubling, larger ones a ring")                                      \
  X(kUcxBroadcastSmallBytes, "DT_UCX_BROADCAST_SMALL_BYTES", kInt, "65536", -1, int64_t(1) << 50, "",                  \
    "UCX broadcasts up to this size use a binomial tree, larger ones a pipelined chain")                               \
  X(kUcxChunkBytes, "DT_UCX_CHUNK_BYTES", kInt, "262144", 1, int64_t(1) << 50, "",                                     \
    "pipelining chunk of the UCX rings and the broadcast chain")                                                       \
  X(kUcxReduceSlots, "DT_UCX_REDUCE_SLOTS", kInt, "4", 1, 1024, "",                                                    \
    "chunk buffers of the last reduce step of a UCX ring")                                                             \
  X(kUcxSpinUs, "DT_UCX_SPIN_US", kInt, "50000", 0, int64_t(1) << 40, "",                                              \
    "microseconds a waiting caller polls the UCX worker after the last progress before it sleeps")                     \
  X(kUcxStallMs, "DT_UCX_STALL_MS", kInt, "1000", 1, int64_t(1) << 40, "",                                             \
    "after this long without progress a UCX call checks its peers for death and for mismatched calls")                 \
  X(kUcxAlgorithm, "DT_UCX_ALGORITHM", kString, "", 0, 0, "",                                                          \
    "UCX algorithms forced by name per collective, e.g. all_reduce:direct,all_gather:ring (default: by size)")         \
  X(kFsdpMapShards, "DT_FSDP_MAP_SHARDS", kBool, "1", 0, 0, "",                                                        \
    "FSDP on one host maps the peers' shards, not gathered copies (Note [Gathering by mapping]); 0: copies")           \
  X(kTrace, "DT_TRACE", kString, "", 0, 0, "",                                                                         \
    "a folder: every rank records a timeline (core/trace.h) and writes DIR/rank-NNNNN.trace.json (dttrace reads "      \
    "them)")                                                                                                           \
  X(kTraceEvents, "DT_TRACE_EVENTS", kInt, "262144", 1024, int64_t(1) << 28, "",                                       \
    "events each rank keeps while tracing (a ring: the last ones are kept, the count of those dropped is written)")    \
  X(kTraceClockSkewNs, "DT_TRACE_CLOCK_SKEW_NS", kInt, "0", -(int64_t(1) << 50), int64_t(1) << 50, "",                 \
    "testing: nanoseconds added to this process's trace clock, which the alignment must then recover")                 \
  X(kFrDir, "DT_FR_DIR", kString, "", 0, 0, "",                                                                        \
    "a folder: a rank whose collective fails or times out writes its flight recorder there, fr-rank-NNNNN.json "       \
    "(default: DT_TRACE's folder; dttrace fr names the rank behind)")                                                  \
  X(kFaultInject, "DT_FAULT_INJECT", kString, "", 0, 0, "",                                                            \
    "testing: fail on purpose, RANK:POINT:N:ACTION, e.g. 2:all_gather:40:kill (Note [Fault injection])")               \
  X(kRank, "DT_RANK", kInt, "", 0, int64_t(1) << 30, "",                                                               \
    "launch: this process's rank (set by dtrun; RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID are read too)")             \
  X(kWorldSize, "DT_WORLD_SIZE", kInt, "", 1, int64_t(1) << 30, "",                                                    \
    "launch: the number of ranks (WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS are read too)")                     \
  X(kLocalRank, "DT_LOCAL_RANK", kInt, "", 0, int64_t(1) << 30, "",                                                    \
    "launch: the rank on this node, which picks the GPU (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID)")      \
  X(kLocalWorldSize, "DT_LOCAL_WORLD_SIZE", kInt, "", 1, int64_t(1) << 30, "",                                         \
    "launch: the ranks on this node (LOCAL_WORLD_SIZE or OMPI_COMM_WORLD_LOCAL_SIZE are read too)")                    \
  X(kNodeRank, "DT_NODE_RANK", kInt, "", 0, int64_t(1) << 30, "", "launch: this node's index (set by dtrun)")          \
  X(kSlot, "DT_SLOT", kInt, "", 0, int64_t(1) << 30, "",                                                               \
    "launch: the slot of this node a rank runs on (set by dtrun; in an elastic job bind a device by it, not by the "   \
    "local rank)")                                                                                                     \
  X(kMasterAddr, "DT_MASTER_ADDR", kString, "127.0.0.1", 0, 0, "",                                                     \
    "launch: the address of the node that hosts rank 0 and the store (MASTER_ADDR is read too)")                       \
  X(kMasterPort, "DT_MASTER_PORT", kInt, "", 1, 65535, "", "launch: the store's port (MASTER_PORT is read too)")       \
  X(kStoreHosted, "DT_STORE_HOSTED", kBool, "0", 0, 0, "",                                                             \
    "launch: the launcher already runs the store (dtrun); otherwise rank 0 hosts it")                                  \
  X(kStoreBindAddr, "DT_STORE_BIND_ADDR", kString, "", 0, 0, "",                                                       \
    "launch: the address rank 0's store listens on (default: the master address)")                                     \
  X(kStoreSecret, "DT_STORE_SECRET", kString, "", 0, 0, "",                                                            \
    "launch: the shared secret that authenticates store clients (HMAC); dtrun makes one per job")                      \
  X(kStoreInsecure, "DT_STORE_INSECURE", kBool, "0", 0, 0, "",                                                         \
    "launch: use a well-known store secret (trusted networks only) when DT_STORE_SECRET is not set")                   \
  X(kRestartCount, "DT_RESTART_COUNT", kInt, "0", 0, int64_t(1) << 30, "",                                             \
    "launch: this generation of an elastic job (set by dtrun; TORCHELASTIC_RESTART_COUNT is read too): its store "     \
    "keys live under gen<N>/")                                                                                         \
  X(kMaxRestarts, "DT_MAX_RESTARTS", kInt, "0", 0, int64_t(1) << 30, "",                                               \
    "launch: dtrun --max-restarts (TORCHELASTIC_MAX_RESTARTS is read too); > 0 makes a job elastic")

enum class Var : int {
#define DT_CONFIG_ENUM(id, name, type, def, lo, hi, choices, help) id,
  DT_CONFIG_VARS(DT_CONFIG_ENUM)
#undef DT_CONFIG_ENUM
};

struct VarInfo {
  Var id;
  const char* name;
  Type type;
  const char* default_value;  // "" where there is none (launch variables the launcher must set)
  int64_t min, max;           // kInt bounds
  const char* choices;        // kChoice: comma-separated words
  const char* help;
};

std::span<const VarInfo> all_vars();
const VarInfo& info(Var v);

// The parsed value (the default when the variable is unset or empty). Throws InvalidArgument on a malformed value,
// and (get_int) when a variable without a default is unset. The type must match the declaration (internal check).
bool get_bool(Var v);
int64_t get_int(Var v);
double get_seconds(Var v);
std::string get_string(Var v);  // kString and kChoice
bool is_set(Var v);             // set to a non-empty value
// The declared default of a kInt variable, whatever the environment says (for value types whose defaults are the
// table's, e.g. UcxTuning).
int64_t default_int(Var v);

// The process environment, for the launch aliases other launchers set; nullopt when unset.
std::optional<std::string> lookup(const std::string& name);

// The table as `dtrun --help-env` prints it.
std::string help_text();
// Logs at info each declared variable that is set, with its value (a secret's value is not shown).
void log_settings();
// Tests that change the environment call this so that the next get_* parses again.
void reset_for_testing();

}  // namespace dt::config
