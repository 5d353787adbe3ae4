#include "collectives/bootstrap.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "collectives/store/prefix_store.h"
#include "collectives/store/store_protocol.h"
#include "collectives/store/tcp_store.h"
#include "core/config.h"
#include "core/error.h"

namespace dt {

namespace {

struct Found {
  std::string name;  // the variable that was used; empty when none was set
  std::string value;
};

// The first variable of `names` that is set and non-empty.
Found first_set(const EnvLookup& env, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    auto v = env(n);
    if (v && !v->empty()) return {n, *v};
  }
  return {};
}

int parse_int(const std::string& name, const std::string& value, int min_value) {
  bool digits = !value.empty() && value.size() <= 18;
  size_t start = (!value.empty() && value[0] == '-') ? 1 : 0;
  if (start == 1 && value.size() == 1) digits = false;
  for (size_t i = start; digits && i < value.size(); ++i) digits = value[i] >= '0' && value[i] <= '9';
  DT_CHECK_ARG(digits, name, "='", value, "' is not a decimal integer");
  long long v = std::strtoll(value.c_str(), nullptr, 10);
  DT_CHECK_ARG(v >= min_value, name, "=", value, " must be >= ", min_value);
  DT_CHECK_ARG(v <= INT_MAX, name, "=", value, " is out of range");
  return static_cast<int>(v);
}

bool parse_bool(const std::string& name, const std::optional<std::string>& value) {
  if (!value || value->empty()) return false;
  const std::string& v = *value;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  DT_THROW(InvalidArgument, name, "='", v, "' is not a boolean (use 1 or 0)");
}

// One integer field. `names[0]` is the DT_ variable and `names[1]` its torchrun twin, which must agree when both set.
struct IntField {
  int value = -1;
  std::string name;  // the variable used; empty when unset
};

IntField read_int(const EnvLookup& env, const std::vector<std::string>& names, int min_value) {
  Found f = first_set(env, names);
  if (f.name.empty()) return {};
  IntField out{parse_int(f.name, f.value, min_value), f.name};
  if (f.name == names[0]) {
    auto twin = env(names[1]);
    if (twin && !twin->empty()) {
      int t = parse_int(names[1], *twin, min_value);
      DT_CHECK_ARG(t == out.value, names[0], "=", out.value, " and ", names[1], "=", t,
                   " disagree; unset one of them (dtrun sets DT_*, torchrun sets ", names[1], ")");
    }
  }
  return out;
}

std::string launcher_of(const std::string& var) {
  if (var.rfind("DT_", 0) == 0) return "dtrun";
  if (var.rfind("OMPI_", 0) == 0) return "openmpi";
  if (var.rfind("SLURM_", 0) == 0) return "slurm";
  return "torchrun";
}

}  // namespace

BootstrapEnv init_from_env() {
  return init_from_env([](const std::string& name) -> std::optional<std::string> { return config::lookup(name); });
}

BootstrapEnv init_from_env(const EnvLookup& env) {
  DT_CHECK_ARG(env != nullptr, "init_from_env: the environment lookup is empty");
  BootstrapEnv out;
  IntField rank = read_int(env, {"DT_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, 0);
  IntField world = read_int(env, {"DT_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1);
  IntField local_rank =
      read_int(env, {"DT_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0);
  IntField local_world = read_int(env, {"DT_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, 1);

  DT_CHECK_ARG(!rank.name.empty(),
               "no rank in the environment: set DT_RANK (or RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID); "
               "start the program with dtrun, torchrun, mpirun or srun");
  DT_CHECK_ARG(!world.name.empty(),
               "no world size in the environment: set DT_WORLD_SIZE (or WORLD_SIZE, OMPI_COMM_WORLD_SIZE, "
               "SLURM_NTASKS); start the program with dtrun, torchrun, mpirun or srun");
  DT_CHECK_ARG(rank.value < world.value, rank.name, "=", rank.value, " must be < ", world.name, "=", world.value);
  if (local_world.value >= 0) {
    DT_CHECK_ARG(local_world.value <= world.value, local_world.name, "=", local_world.value, " must be <= ", world.name,
                 "=", world.value);
  }
  if (local_rank.value >= 0 && local_world.value >= 0) {
    DT_CHECK_ARG(local_rank.value < local_world.value, local_rank.name, "=", local_rank.value, " must be < ",
                 local_world.name, "=", local_world.value);
  }
  if (local_rank.value >= 0) {
    DT_CHECK_ARG(local_rank.value < world.value, local_rank.name, "=", local_rank.value, " must be < ", world.name, "=",
                 world.value);
  }
  out.rank = rank.value;
  out.world_size = world.value;
  out.local_rank = local_rank.value;
  out.local_world_size = local_world.value;
  out.launcher = launcher_of(rank.name);
  out.restart_count = read_int(env, {"DT_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}, 0).value;
  out.max_restarts = std::max(0, read_int(env, {"DT_MAX_RESTARTS", "TORCHELASTIC_MAX_RESTARTS"}, 0).value);

  Found addr = first_set(env, {"DT_MASTER_ADDR", "MASTER_ADDR"});
  if (!addr.name.empty()) {
    out.master_addr = addr.value;
  } else {
    bool multi_node = local_world.value >= 0 && local_world.value < world.value;
    Found nnodes = first_set(env, {"SLURM_NNODES"});
    if (!nnodes.name.empty() && parse_int("SLURM_NNODES", nnodes.value, 1) > 1) multi_node = true;
    DT_CHECK_ARG(!multi_node,
                 "DT_MASTER_ADDR (or MASTER_ADDR) must be set when the job spans several nodes: the address of the "
                 "node that hosts rank 0");
    out.master_addr = "127.0.0.1";
  }
  Found port = first_set(env, {"DT_MASTER_PORT", "MASTER_PORT"});
  if (!port.name.empty()) {
    out.master_port = parse_int(port.name, port.value, 1);
    DT_CHECK_ARG(out.master_port <= 65535, port.name, "=", port.value, " must be a port in 1..65535");
  }

  out.store_hosted = parse_bool("DT_STORE_HOSTED", env("DT_STORE_HOSTED"));
  Found bind = first_set(env, {"DT_STORE_BIND_ADDR"});
  out.bind_addr = bind.name.empty() ? out.master_addr : bind.value;

  auto secret = env("DT_STORE_SECRET");
  if (secret) {
    DT_CHECK_ARG(!secret->empty(), "DT_STORE_SECRET is set but empty");
    out.secret = *secret;
  } else if (parse_bool("DT_STORE_INSECURE", env("DT_STORE_INSECURE"))) {
    out.secret = kInsecureDefaultSecret;
    out.insecure_secret = true;
  } else if (out.world_size == 1 && !out.store_hosted) {
    out.secret = store_protocol::random_hex(32);  // nobody else needs to know it
  } else {
    DT_THROW(InvalidArgument,
             "DT_STORE_SECRET is not set: dtrun sets it; under mpirun/srun give every rank the same one "
             "(mpirun -x DT_STORE_SECRET=$(openssl rand -hex 32)), or set DT_STORE_INSECURE=1 to use a well-known "
             "default secret on a trusted network");
  }
  return out;
}

namespace {

std::shared_ptr<Store> connect_tcp_store(const BootstrapEnv& env, std::optional<StoreDuration> timeout) {
  TcpStoreOptions client;
  client.host = env.master_addr;
  client.port = env.master_port;
  client.secret = env.secret;
  client.timeout = timeout;
  if (env.store_hosted || env.rank != 0) return std::make_shared<TcpStore>(std::move(client));

  TcpStoreServerOptions server_options;
  server_options.host = env.bind_addr.empty() ? env.master_addr : env.bind_addr;
  // A single-process job: nobody else connects, so any free port avoids clashing with another job.
  server_options.port = env.world_size == 1 ? 0 : env.master_port;
  server_options.secret = env.secret;
  auto server = std::make_shared<TcpStoreServer>(server_options);
  // Reach our own server through loopback when it listens on a wildcard address.
  if (server_options.host == "0.0.0.0") {
    client.host = "127.0.0.1";
  } else if (server_options.host == "::") {
    client.host = "::1";
  } else {
    client.host = server_options.host;
  }
  client.port = server->port();
  return std::make_shared<TcpStore>(std::move(client), std::move(server));
}

}  // namespace

std::string generation_prefix(int restart_count) {
  DT_CHECK_ARG(restart_count >= 0, "generation_prefix: the restart count must be >= 0, not ", restart_count);
  return "gen" + std::to_string(restart_count);
}

std::shared_ptr<Store> connect_store(const BootstrapEnv& env, std::optional<StoreDuration> timeout) {
  std::shared_ptr<Store> store = connect_tcp_store(env, timeout);
  if (env.restart_count < 0) return store;
  return std::make_shared<PrefixStore>(std::move(store), generation_prefix(env.restart_count));
}

}  // namespace dt
