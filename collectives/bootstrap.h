// Bootstrap: who am I (rank, world size, ...) and where is the store, read from the environment that dtrun, torchrun,
// mpirun (OpenMPI) or srun (Slurm) set up; then a connected store.
//
// Rules (every variable is optional unless said otherwise; an empty value counts as unset):
// - Each field takes the first variable that is set, in this order:
//     rank              DT_RANK, RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID               (required)
//     world_size        DT_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS   (required)
//     local_rank        DT_LOCAL_RANK, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID   (-1 if unknown)
//     local_world_size  DT_LOCAL_WORLD_SIZE, LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE      (-1 if unknown)
//     master_addr       DT_MASTER_ADDR, MASTER_ADDR; else 127.0.0.1, which is refused when the job spans several
//                       nodes (local_world_size < world_size, or SLURM_NNODES > 1)
//     master_port       DT_MASTER_PORT, MASTER_PORT; else kDefaultMasterPort (29500)
//   Integers are plain decimal; non-numeric, negative or out-of-range values, rank >= world_size,
//   local_rank >= local_world_size, local_world_size > world_size are dt::InvalidArgument naming the variable.
// - When a DT_ variable and its torchrun twin (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) are both set they must
//   agree. DT_MASTER_ADDR/DT_MASTER_PORT simply override MASTER_ADDR/MASTER_PORT (under torchrun its own agent may
//   already listen on MASTER_PORT: give the dtensor store another port with DT_MASTER_PORT).
// - The secret (Note [store authentication] in collectives/store/store_protocol.h): DT_STORE_SECRET (dtrun generates
//   one per job). Without it: DT_STORE_INSECURE=1 selects the well-known kInsecureDefaultSecret (anyone who can reach
//   the port can then use the store: for trusted machines only); a single-process job (world_size 1, no launcher
//   store) gets a random one; anything else is an error. Under mpirun pass one to every rank, e.g.
//   `mpirun -x DT_STORE_SECRET=$(openssl rand -hex 32) -x DT_MASTER_PORT=29511 ...`.
// - Who hosts the store: DT_STORE_HOSTED=1 (set by dtrun) means the launcher already serves it at
//   master_addr:master_port and every rank, rank 0 included, only connects. Otherwise rank 0 hosts it in-process
//   (connect_store()), listening on DT_STORE_BIND_ADDR if set, else on master_addr, port master_port (port 0, a free
//   one, for a single-process job); the other ranks connect to master_addr:master_port, retrying until the deadline
//   since rank 0 may start later. Rank 0 must then outlive the others' last store call (end with a barrier).
// - Deadlines: DT_TIMEOUT_S (see default_store_timeout()) unless connect_store() is given one.
// init_from_env() only reads; it does not set the log rank (call dt::set_process_rank(env.rank) for that).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace dt {

class Store;  // collectives/store/store.h

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr const char* kInsecureDefaultSecret = "dtensor-insecure-well-known-store-secret";

struct BootstrapEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;        // -1: unknown
  int local_world_size = -1;  // -1: unknown
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;
  std::string secret;
  bool insecure_secret = false;  // the secret is kInsecureDefaultSecret (DT_STORE_INSECURE=1)
  bool store_hosted = false;     // DT_STORE_HOSTED=1: the launcher hosts the store
  std::string bind_addr;         // where rank 0 hosts the store when it does: DT_STORE_BIND_ADDR or master_addr
  std::string launcher;          // where the rank came from: "dtrun", "torchrun", "openmpi" or "slurm"
  // Note [Generations]: DT_RESTART_COUNT (or TORCHELASTIC_RESTART_COUNT); -1 when neither is set.
  int restart_count = -1;
  int max_restarts = 0;  // DT_MAX_RESTARTS (or TORCHELASTIC_MAX_RESTARTS): > 0 in an elastic job
};

// Returns the value of an environment variable, nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Reads the process environment.
BootstrapEnv init_from_env();
// Reads through `lookup` (tests, or an embedding application with its own configuration).
BootstrapEnv init_from_env(const EnvLookup& lookup);

// Connects to the job's store, hosting it first when this is rank 0 and the launcher does not (see the rules above).
// The returned store owns the in-process server, if any (and so do its clones). timeout: the store's default deadline
// and how long to retry connecting; nullopt = DT_TIMEOUT_S or 300 s.
// Returns a TcpStore (collectives/store/tcp_store.h), or, in a generation of an elastic job (restart_count >= 0), a
// PrefixStore over it with the prefix generation_prefix(restart_count).
//
// Note [Generations]
// An elastic launcher (dtrun --max-restarts, torchrun) restarts a failed job as a new generation whose ranks all
// get the restart count. The launcher's store outlives generations, so every key of generation g lives under
// "gen<g>/": a late write of a rank of generation g (one that was stopped, not dead, and resumed) lands where no
// rank of generation g + 1 reads, and the backends' endpoint addresses, exchanged through the store, are only ever
// those of the same generation, so no message of an old generation reaches a new one.
std::shared_ptr<Store> connect_store(const BootstrapEnv& env,
                                     std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// "gen<restart_count>": a generation's key space in the job's store (Note [Generations]).
std::string generation_prefix(int restart_count);

}  // namespace dt
