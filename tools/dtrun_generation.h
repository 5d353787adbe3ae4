// One generation of a job's ranks on this node, for dtrun (tools/dtrun.cc), which runs one, or one after another
// under --max-restarts: starts the ranks with the launcher's environment, relays their output (tagged with the rank
// on request), forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT, and when a rank fails stops the others.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dt::dtrun {

// What stays the same from generation to generation.
struct LaunchOptions {
  std::string path;                  // the program, found on PATH
  std::vector<std::string> program;  // argv
  bool tag_output = false;
  std::string timeout;  // DT_TIMEOUT_S for the ranks ("" : passed through from dtrun's environment)
  double grace_s = 5.0;
  double failure_grace_s = 5.0;
  std::vector<std::string> base_env;  // dtrun's environment less the launcher's variables
};

// One generation: which ranks run here, and where they meet.
struct GenerationSpec {
  int restart_count = 0;  // DT_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT: 0 for the first generation
  int max_restarts = 0;
  int node_rank = 0, nnodes = 1;
  int first_rank = 0;  // the global rank of local rank 0
  int world_size = 1;
  std::vector<int> slots;  // local rank i runs on slot slots[i] (DT_SLOT); slots.size() ranks run here
  std::string master_addr;
  int store_port = 0;         // DT_MASTER_PORT: dtensor's store, hosted by dtrun
  int torch_master_port = 0;  // MASTER_PORT: free for a PyTorch program's own store (torch.distributed env://)
  std::string secret;
  std::string run_id;     // TORCHELASTIC_RUN_ID
  std::string error_dir;  // each rank's TORCHELASTIC_ERROR_FILE is error_dir/<local rank>/error.json
};

struct GenerationEnd {
  enum class Kind {
    kSucceeded,    // every rank exited 0
    kFailed,       // a rank failed (exit code != 0 or a signal); the others were stopped
    kInterrupted,  // dtrun got a signal and forwarded it
    kResized,      // stopped on request (stop_wanted): to start the job again on more ranks, or another node failed
    kSpawnFailed,  // a rank could not be started
  };
  Kind kind = Kind::kSucceeded;
  int exit_code = 0;            // the exit status dtrun returns when it stops here
  int failed_slot = -1;         // kFailed: the slot of the rank that failed first
  std::vector<int> hung_slots;  // kFailed: slots whose ranks were still running after the failure grace (Note
                                // [Lost slots] in tools/dtrun.cc)
  std::string error;            // kFailed: the first failed rank's error file's message ("" when it wrote none)
};

// Runs the generation to its end. signal_fd: a signalfd for SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD.
// stop_wanted (may be empty) is asked ten times a second; when it gives a reason the ranks get SIGTERM (then SIGKILL
// after the grace period) and the generation ends as kResized.
GenerationEnd run_generation(const LaunchOptions& options, const GenerationSpec& spec, int signal_fd,
                             const std::function<std::string()>& stop_wanted);

// Shared with dtrun.cc.
void say(const std::string& msg);  // "dtrun: <msg>" on stderr
std::string signal_name(int sig);
std::string seconds_str(double s);
std::string join_ints(const std::vector<int>& v);  // "0, 2, 3"

}  // namespace dt::dtrun
