// The node agents' rendezvous of an elastic job on several nodes (dtrun --nnodes MIN:MAX, or --max-restarts with
// --nnodes > 1), through the job's store that node 0's dtrun hosts.
//
// Note [Agent rendezvous]
// Each generation g is a round: every agent that takes part registers under rdzv/g<g>/ (a count, and its agent id,
// its --node-rank, in the next free place); node 0's agent, which hosts the store, waits until MIN agents have
// registered, then for more for --settle seconds (or until MAX have), and closes the round by writing its members,
// the registered ids (node 0's first, then by id): an agent's node rank in the generation is its place among them, so
// the surviving agents of a lost node close up. An agent that registers after the round closed, or starts while a
// generation runs (rdzv/round names the newest round), asks for a place (rdzv/g<g>/waiting): the running agents see it,
// stop their ranks and all meet in round g + 1, one node larger. An agent whose ranks fail announces it
// (rdzv/g<g>/failed) so that every other agent stops its ranks at once (a hung rank on another node included); node 0's
// agent counts the failures against --max-restarts and ends the job (members "", read by everyone) when none are left.
// Node 0's agent holds the store: it cannot be lost (as with torchrun's c10d rendezvous hosted on a node).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dt {
class Store;
}

namespace dt::dtrun {

struct Membership {
  int generation = 0;
  std::vector<int> members;  // agent ids (--node-rank) in node-rank order
  int node_index = -1;       // this agent's node rank in the generation
  bool job_over = false;     // node 0 ended the job (no restarts left)
};

class Rendezvous {
 public:
  // host: this agent hosts the store (node rank 0). settle_s: how long node 0 waits for more agents once `min_nodes`
  // have come; timeout_s: how long an agent waits for a round to close.
  Rendezvous(std::shared_ptr<Store> store, int agent_id, bool host, int min_nodes, int max_nodes, double settle_s,
             double timeout_s);

  // The round this agent should join first: 0 on a fresh job; a running job's next round (asking for a place).
  int first_round();
  // Registers for round g and waits for it to close; an agent left out asks for a place in g + 1 and joins that.
  Membership join(int generation);
  // Node 0: ends the job; the agents waiting on round g read it.
  void end_job(int generation);
  void announce_failure(int generation);
  // This agent's ranks all succeeded; node 0 then waits (up to the rendezvous timeout) for every member's, or for a
  // failure, before it stops the store the others' ranks may still use.
  void announce_success(int generation, int members);
  // Whether another agent announced a failure of generation g, or an agent waits for a place after it.
  bool failed(int generation);
  bool someone_waiting(int generation);

 private:
  std::string key(int g, const std::string& rest) const { return "rdzv/g" + std::to_string(g) + "/" + rest; }

  std::shared_ptr<Store> store_;
  int id_;
  bool host_;
  int min_nodes_, max_nodes_;
  double settle_s_, timeout_s_;
};

}  // namespace dt::dtrun
