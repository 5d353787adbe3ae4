// A rank program for the dtrun and mpirun tests. Usage: dtrun_test_helper MODE [args...]
//   ok                      exit 0
//   env                     print the launcher's variables on one line
//   fail RANK CODE DIR      rank RANK exits CODE after a moment; the others write DIR/pid.<rank> and sleep 30 s
//   kill RANK SIG DIR       rank RANK raises signal SIG; the others as above
//   lines N                 print N lines to stdout ("out <i>") and N to stderr ("err <i>")
//   trap DIR                write DIR/ready.<rank>, then on SIGTERM write DIR/term.<rank> and exit 0 (wait 30 s max)
//   stubborn RANK CODE DIR  rank RANK waits for DIR/ready.<r> of the others, then exits CODE; the others ignore
//                           SIGTERM, write DIR/pid.<rank> and DIR/ready.<rank>, and sleep 30 s
//   store                   init_from_env + connect_store, exchange a value with every rank, print "store ok ..."
//   generations A0,A1,...   generation g (DT_RESTART_COUNT) does A<g>, after printing "gen=<g> rank=<r> ..." and
//                           checking that no key of an older generation is visible in the store:
//                             ok          every rank exits 0
//                             fail:R:C    rank R writes its error file and exits C; the others sleep 30 s
//                             hang:R      rank R stops itself (SIGSTOP); the others exit 1 after 0.5 s
//                             wait        every rank sleeps 30 s (until dtrun stops it)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/bootstrap.h"
#include "collectives/store/store.h"
#include "collectives/store/tcp_store.h"
#include "core/error.h"
#include "core/error_file.h"

namespace {

int my_rank() {
  for (const char* v : {"DT_RANK", "OMPI_COMM_WORLD_RANK"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return -1;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

void write_file(const std::string& path, const std::string& content) { std::ofstream(path) << content; }

[[noreturn]] void sleep_then_exit(const std::string& dir) {
  write_file(dir + "/pid." + std::to_string(my_rank()), std::to_string(::getpid()));
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::_Exit(0);
}

std::string g_trap_dir;
void on_term(int) {
  std::string path = g_trap_dir + "/term." + std::to_string(my_rank());
  FILE* f = std::fopen(path.c_str(), "w");
  if (f) std::fclose(f);
  std::_Exit(0);
}

int run_store() {
  dt::BootstrapEnv env = dt::init_from_env();
  auto store = dt::connect_store(env, std::chrono::seconds(20));
  store->set("value/" + std::to_string(env.rank), "v" + std::to_string(env.rank * 10));
  for (int p = 0; p < env.world_size; ++p) {
    std::string got = store->get("value/" + std::to_string(p));
    if (got != "v" + std::to_string(p * 10)) {
      std::fprintf(stderr, "rank %d: value/%d = '%s'\n", env.rank, p, got.c_str());
      return 1;
    }
  }
  store->add("done", 1);
  while (std::stoi(store->get("done")) < env.world_size) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::printf("store ok rank=%d world=%d local_rank=%d local_world=%d launcher=%s hosted=%d\n", env.rank,
              env.world_size, env.local_rank, env.local_world_size, env.launcher.c_str(), env.store_hosted ? 1 : 0);
  std::fflush(stdout);
  if (env.rank != 0) {
    store->add("left", 1);  // the last store call of this rank
  } else if (env.world_size > 1) {
    // Whoever serves the store (rank 0 itself, or node 0's dtrun, which stops serving when its own ranks exit)
    // must outlive the other ranks' last calls.
    store->wait({"left"});
    while (std::stoi(store->get("left")) < env.world_size - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return 0;
}

// Note [Generations]: a rank of generation g sees none of the keys generation g - 1 wrote.
int run_generations(const std::string& plan) {
  dt::BootstrapEnv env = dt::init_from_env();
  std::vector<std::string> actions;
  for (size_t start = 0;;) {
    const size_t comma = plan.find(',', start);
    actions.push_back(plan.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const int g = env.restart_count;
  if (g < 0 || g >= int(actions.size())) {
    std::fprintf(stderr, "generation %d has no action in '%s'\n", g, plan.c_str());
    return 2;
  }
  auto store = dt::connect_store(env, std::chrono::seconds(20));
  const std::string mine = "rank" + std::to_string(env.rank);
  if (store->check({mine})) {
    std::fprintf(stderr, "generation %d sees %s, a key of an older generation\n", g, mine.c_str());
    return 3;
  }
  store->set(mine, std::to_string(g));
  std::printf("gen=%d rank=%d world=%d local_rank=%d slot=%s torch_restart=%s torch_rank=%s\n", g, env.rank,
              env.world_size, env.local_rank, env_or("DT_SLOT", "<unset>").c_str(),
              env_or("TORCHELASTIC_RESTART_COUNT", "<unset>").c_str(), env_or("RANK", "<unset>").c_str());
  std::fflush(stdout);
  const std::string& a = actions[size_t(g)];
  if (a == "ok") return 0;
  if (a == "wait") {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return 0;
  }
  const int target = std::atoi(a.substr(a.find(':') + 1).c_str());
  if (a.rfind("fail:", 0) == 0) {
    if (env.rank != target) {
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 0;
    }
    dt::record_error("rank " + std::to_string(env.rank) + " of generation " + std::to_string(g) + " \"failed\"");
    return std::atoi(a.substr(a.rfind(':') + 1).c_str());
  }
  if (a.rfind("hang:", 0) == 0) {
    if (env.rank == target) {
      ::raise(SIGSTOP);
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    dt::record_error("timed out waiting for rank " + std::to_string(target));
    return 1;
  }
  std::fprintf(stderr, "unknown action '%s'\n", a.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dtrun_test_helper MODE [args...]\n");
    return 2;
  }
  std::string mode = argv[1];
  try {
    if (mode == "ok") return 0;
    if (mode == "generations" && argc == 3) return run_generations(argv[2]);
    if (mode == "env") {
      std::string line;
      for (const char* v : {"DT_RANK",
                            "DT_WORLD_SIZE",
                            "DT_LOCAL_RANK",
                            "DT_LOCAL_WORLD_SIZE",
                            "DT_NODE_RANK",
                            "DT_MASTER_ADDR",
                            "DT_MASTER_PORT",
                            "DT_STORE_SECRET",
                            "DT_STORE_HOSTED",
                            "DT_TIMEOUT_S",
                            "DT_SLOT",
                            "DT_RESTART_COUNT",
                            "RANK",
                            "WORLD_SIZE",
                            "LOCAL_RANK",
                            "LOCAL_WORLD_SIZE",
                            "GROUP_RANK",
                            "MASTER_ADDR",
                            "MASTER_PORT",
                            "TORCHELASTIC_RESTART_COUNT",
                            "TORCHELASTIC_MAX_RESTARTS",
                            "TORCHELASTIC_ERROR_FILE"}) {
        line += std::string(v) + "=" + env_or(v, "<unset>") + " ";
      }
      std::printf("%s\n", line.c_str());
      return 0;
    }
    if ((mode == "fail" || mode == "kill") && argc == 5) {
      int target = std::atoi(argv[2]), value = std::atoi(argv[3]);
      if (my_rank() != target) sleep_then_exit(argv[4]);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (mode == "kill") ::raise(value);
      return value;
    }
    if (mode == "stubborn" && argc == 5) {
      int target = std::atoi(argv[2]), code = std::atoi(argv[3]);
      std::string dir = argv[4];
      int world = std::atoi(env_or("DT_WORLD_SIZE", "1").c_str());
      if (my_rank() != target) {
        ::signal(SIGTERM, SIG_IGN);
        write_file(dir + "/pid." + std::to_string(my_rank()), std::to_string(::getpid()));
        write_file(dir + "/ready." + std::to_string(my_rank()), "");
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return 0;
      }
      for (int r = 0; r < world; ++r) {
        while (r != target && ::access((dir + "/ready." + std::to_string(r)).c_str(), F_OK) != 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
      return code;
    }
    if (mode == "lines" && argc == 3) {
      int n = std::atoi(argv[2]);
      for (int i = 0; i < n; ++i) {
        std::printf("out %d\n", i);
        std::fprintf(stderr, "err %d\n", i);
      }
      std::printf("no newline at the end");
      return 0;
    }
    if (mode == "trap" && argc == 3) {
      g_trap_dir = argv[2];
      ::signal(SIGTERM, on_term);
      write_file(g_trap_dir + "/ready." + std::to_string(my_rank()), "");
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 5;
    }
    if (mode == "store") return run_store();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrun_test_helper: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "dtrun_test_helper: bad arguments for mode '%s'\n", mode.c_str());
  return 2;
}
