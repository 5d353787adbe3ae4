// pipeline/: the action and schedule text forms, the built-in schedules (each validated for p in 1..4 and m in
// {1, 2, 3, 4, 5, 8, 9}, with and without FSDP actions, their memory bounds tight, their simulated bubble equal to
// the theory where it applies), a table loaded from text, and refused input naming the action at fault. The random
// schedules and the independent executor are in random_schedule_test.cc.
#include "pipeline/schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/lower.h"
#include "pipeline/schedule_builders.h"
#include "pipeline/simulate.h"
#include "pipeline/validate.h"
#include "tests/error_of.h"

namespace dt::pipeline {
namespace {

using ::dt::testing::error_of;

// Whether `text` holds `part`, printing both when it does not.
::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "'\n does not hold '" << part << "'";
}

const std::vector<int> kRanks = {1, 2, 3, 4};
const std::vector<int> kMicrobatches = {1, 2, 3, 4, 5, 8, 9};

// Every built-in schedule of the test's sizes: (name, p, m, v).
struct Case {
  std::string name;
  int p = 1, m = 1, v = 1;
};
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int p : kRanks) {
    for (int m : kMicrobatches) {
      for (const std::string& name : schedule_names()) {
        if (name != "interleaved") cases.push_back({name, p, m, 1});
      }
      for (int v : {2, 3}) cases.push_back({"interleaved", p, m, v});
    }
  }
  return cases;
}

TEST(PipelineAction, TextRoundTrip) {
  const std::vector<std::string> tokens = {"0F0",      "3B12",     "1I0",       "1W4",      "0SEND_F7",    "1RECV_F7",
                                           "2SEND_B0", "1RECV_B0", "10UNSHARD", "0RESHARD", "4REDUCE_GRAD"};
  for (const std::string& t : tokens) EXPECT_EQ(to_string(parse_action(t)), t);
  EXPECT_EQ(parse_action("12SEND_B3"), (Action{ActionKind::kSendB, 12, 3}));
  EXPECT_EQ(parse_action("2UNSHARD"), (Action{ActionKind::kUnshard, 2, -1}));
  EXPECT_EQ(peer_transfer(parse_action("1SEND_F3")), parse_action("2RECV_F3"));
  EXPECT_EQ(peer_transfer(parse_action("1SEND_B3")), parse_action("0RECV_B3"));
}

TEST(PipelineAction, BadTokens) {
  EXPECT_TRUE(has(error_of([] { parse_action("F0"); }), "'F0': no stage number"));
  EXPECT_TRUE(has(error_of([] { parse_action("0X1"); }), "'0X1': unknown kind 'X'"));
  EXPECT_TRUE(has(error_of([] { parse_action("0FWD1"); }), "unknown kind 'FWD'"));
  EXPECT_TRUE(has(error_of([] { parse_action("0F"); }), "'0F': F needs a microbatch"));
  EXPECT_TRUE(has(error_of([] { parse_action("0UNSHARD1"); }), "'0UNSHARD1': UNSHARD takes no microbatch"));
  EXPECT_TRUE(has(error_of([] { parse_action("0F1x"); }), "'0F1x': trailing characters"));
  EXPECT_TRUE(has(error_of([] { parse_action("99999999999F0"); }), "stage out of range"));
  EXPECT_TRUE(has(error_of([] { parse_action(""); }), "no stage number"));
}

TEST(PipelineSchedule, TextRoundTripOfEveryBuiltIn) {
  for (const Case& c : all_cases()) {
    for (bool fsdp : {false, true}) {
      const Schedule s = by_name(c.name, c.p, c.m, c.v, {.fsdp = fsdp});
      const std::string text = format_schedule(s);
      const Schedule back = parse_schedule(text);
      EXPECT_EQ(back, s) << text;
      EXPECT_EQ(format_schedule(back), text);
    }
  }
}

TEST(PipelineSchedule, BuiltInsValidateWithTightBounds) {
  for (const Case& c : all_cases()) {
    for (bool fsdp : {false, true}) {
      SCOPED_TRACE(c.name + " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v) +
                   (fsdp ? " fsdp" : ""));
      const Schedule s = by_name(c.name, c.p, c.m, c.v, {.fsdp = fsdp});
      ValidationReport report;
      ASSERT_NO_THROW(report = validate(s)) << format_schedule(s);
      EXPECT_EQ(report.peak_activations, s.memory_bound);
      EXPECT_EQ(report.fsdp, fsdp);
      if (c.name == "1f1b") {
        for (int r = 0; r < c.p; ++r) EXPECT_EQ(s.memory_bound[r], std::min(c.p - r, c.m));
      }
      if (c.name == "zb-h1") {
        EXPECT_EQ(s.memory_bound, one_f_one_b(c.p, c.m).memory_bound);
      }
      if (c.name == "gpipe") {
        EXPECT_EQ(s.memory_bound, std::vector<int>(c.p, c.m));
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBOnTwoRanks) {
  EXPECT_EQ(format_schedule(one_f_one_b(2, 2)),
            "# 1f1b\nstages: 2\nmicrobatches: 2\nstage_ranks: 0 1\nmemory_bound: 2 1\n"
            "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
            "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n");
  EXPECT_EQ(format_schedule(zero_bubble_h1(2, 2, {.fsdp = true})),
            "# zb-h1\nstages: 2\nmicrobatches: 2\nstage_ranks: 0 1\nmemory_bound: 2 1\n"
            "rank 0: 0UNSHARD 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0I0 0W0 0RECV_B1 0I1 0W1 0REDUCE_GRAD 0RESHARD\n"
            "rank 1: 1UNSHARD 1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1F1 1I1 1SEND_B1 1W0 1W1 1REDUCE_GRAD 1RESHARD\n");
  // Stages on one rank pass tensors locally: no transfers at all on one rank.
  for (const auto& list : interleaved_one_f_one_b(1, 3, 3).actions) {
    for (const Action& a : list) EXPECT_TRUE(is_compute(a.kind)) << to_string(a);
  }
}

TEST(PipelineSimulate, BubbleOfTheBuiltInsAtFourRanksEightMicrobatches) {
  EXPECT_NEAR(simulate(one_f_one_b(4, 8)).bubble_share, 3.0 / 11, 1e-9);  // 27.3 %
  EXPECT_NEAR(simulate(gpipe(4, 8)).bubble_share, 3.0 / 11, 1e-9);
  EXPECT_NEAR(simulate(interleaved_one_f_one_b(4, 8, 2)).bubble_share, 3.0 / 19, 1e-9);  // 15.8 %
  EXPECT_NEAR(simulate(zero_bubble_h1(4, 8)).bubble_share, 1.0 / 9, 1e-9);               // 11.1 %
  EXPECT_NEAR(theory_bubble("1f1b", 4, 8), 3.0 / 11, 1e-9);
  EXPECT_NEAR(theory_bubble("gpipe", 4, 8), 3.0 / 11, 1e-9);
  EXPECT_NEAR(theory_bubble("interleaved", 4, 8, 2), 3.0 / 19, 1e-9);
  EXPECT_NEAR(theory_bubble("zb-h1", 4, 8), 1.0 / 9, 1e-9);
  const SimulationResult r = simulate(one_f_one_b(4, 8));
  EXPECT_DOUBLE_EQ(r.makespan, 33);  // (m + p - 1) (F + B)
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_DOUBLE_EQ(r.busy[rank], 24);
    EXPECT_NEAR(r.bubble[rank], 9.0 / 33, 1e-12);
  }
}

TEST(PipelineSimulate, BubbleEqualsTheoryWhereItApplies) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name + " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v));
    const double simulated = simulate(by_name(c.name, c.p, c.m, c.v)).bubble_share;
    const double theory = theory_bubble(c.name, c.p, c.m, c.v);
    const bool applies = c.name == "gpipe" || c.name == "1f1b" || c.m >= c.p;
    if (applies) {
      EXPECT_NEAR(simulated, theory, 1e-9);
    } else {
      EXPECT_GE(simulated, theory - 1e-9);
    }
  }
  // FSDP actions take no time; a latency on every transfer lengthens the step.
  EXPECT_NEAR(simulate(zero_bubble_h1(4, 8, {.fsdp = true})).bubble_share, 1.0 / 9, 1e-9);
  EXPECT_GT(simulate(one_f_one_b(4, 8), {.comm = 0.5}).makespan, 33);
  EXPECT_DOUBLE_EQ(simulate(gpipe(1, 3), {.backward = 5}).makespan, 18);
}

// Note [Interleaved microbatch groups]: equal groups of g >= p reach the theory for every m >= p.
TEST(PipelineSimulate, InterleavedAndZeroBubbleOverAWideRange) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 20; ++m) {
      for (int v = 2; v <= 4; ++v) {
        const Schedule s = interleaved_one_f_one_b(p, m, v);
        const double bubble = simulate(s).bubble_share, theory = theory_bubble("interleaved", p, m, v);
        if (m >= p) {
          EXPECT_NEAR(bubble, theory, 1e-9) << "p=" << p << " m=" << m << " v=" << v;
        }
        EXPECT_EQ(validate(s).peak_activations, s.memory_bound);
      }
      if (m >= p) {
        EXPECT_NEAR(simulate(zero_bubble_h1(p, m)).bubble_share, theory_bubble("zb-h1", p, m), 1e-9);
      }
    }
  }
}

// Megatron's groups of p with a short last group (p = 4, v = 3, m = 5: groups {0..3}, {4}) deadlock, which is why
// the interleaved schedule takes equal groups.
TEST(PipelineValidate, MegatronShortLastGroupDeadlocks) {
  const int p = 4, v = 3, m = 5;
  std::vector<std::pair<int, int>> order;  // (mb, chunk)
  for (int first = 0; first < m; first += p) {
    for (int chunk = 0; chunk < v; ++chunk) {
      for (int mb = first; mb < std::min(first + p, m); ++mb) order.push_back({mb, chunk});
    }
  }
  Schedule s{.name = "megatron", .num_ranks = p, .num_stages = p * v, .num_microbatches = m};
  for (int stage = 0; stage < p * v; ++stage) s.stage_rank.push_back(stage % p);
  s.actions.resize(p);
  for (int r = 0; r < p; ++r) {
    const int total = v * m, warmup = std::min((v - 1) * p + 2 * (p - 1 - r), total);
    const auto forward = [&](int k) { return Action{ActionKind::kForward, order[k].second * p + r, order[k].first}; };
    const auto backward = [&](int k) {
      return Action{ActionKind::kBackward, (v - 1 - order[k].second) * p + r, order[k].first};
    };
    for (int k = 0; k < warmup; ++k) s.actions[r].push_back(forward(k));
    for (int k = 0; k < total; ++k) {
      if (warmup + k < total) s.actions[r].push_back(forward(warmup + k));
      s.actions[r].push_back(backward(k));
    }
    s.memory_bound.push_back(total);
  }
  add_send_recv(s);
  EXPECT_TRUE(has(error_of([&] { validate(s); }), "pipeline schedule 'megatron': deadlock: "));
}

TEST(PipelineSchedule, ByNameRefusesWhatItDoesNotKnow) {
  EXPECT_TRUE(
      has(error_of([] { by_name("pipedream", 4, 8); }), "'pipedream' is not one of gpipe, 1f1b, interleaved, zb-h1"));
  EXPECT_TRUE(has(error_of([] { by_name("interleaved", 4, 8); }), "stages_per_rank is 1; it needs at least 2"));
  EXPECT_TRUE(has(error_of([] { by_name("1f1b", 4, 8, 2); }), "1f1b runs one stage per rank"));
  EXPECT_TRUE(has(error_of([] { one_f_one_b(4, 0); }), "num_microbatches (0)"));
  EXPECT_TRUE(has(error_of([] { theory_bubble("zb", 4, 8); }), "'zb' is not one of"));
}

// A 1F1B on two ranks written by hand, with comments and blank lines.
const char* kTable = R"(# by hand
# two ranks, two microbatches
stages: 2
microbatches: 2

stage_ranks: 0 1
memory_bound: 2 1
rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
)";

TEST(PipelineSchedule, TableLoadedFromText) {
  const Schedule s = parse_schedule(kTable);
  EXPECT_EQ(s.name, "by hand");
  EXPECT_EQ(s.num_ranks, 2);
  EXPECT_EQ(s.actions, one_f_one_b(2, 2).actions);
  EXPECT_EQ(validate(s).peak_activations, (std::vector<int>{2, 1}));
  EXPECT_NEAR(simulate(s).bubble_share, 1.0 / 3, 1e-12);
  // A compute-only table, lowered.
  Schedule compute = parse_schedule(
      "# c\nstages: 2\nmicrobatches: 1\nstage_ranks: 0 1\nmemory_bound: 1 1\n"
      "rank 0: 0F0 0B0\nrank 1: 1F0 1B0\n");
  add_send_recv(compute);
  EXPECT_EQ(format_schedule(compute).substr(format_schedule(compute).find("rank 0")),
            "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n");
}

TEST(PipelineSchedule, BadTablesNameTheLine) {
  const auto parse_error = [](const std::string& text) { return error_of([&] { parse_schedule(text); }); };
  const std::string head = "# t\nstages: 2\nmicrobatches: 1\nstage_ranks: 0 1\nmemory_bound: 1 1\n";
  EXPECT_TRUE(has(parse_error(head + "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1FF0\n"),
                  "schedule line 7 ('rank 1: 1RECV_F0 1FF0'): bad pipeline action '1FF0': unknown kind 'FF'"));
  EXPECT_TRUE(has(parse_error(head + "rank 1: 1F0\n"), "line 6 ('rank 1: 1F0'): rank 1 where rank 0 comes next"));
  EXPECT_TRUE(has(parse_error("stages: 2\nstage: 3\n"), "line 2 ('stage: 3'): unknown key 'stage'"));
  EXPECT_TRUE(has(parse_error("stages: 2\nstages: 3\n"), "line 2 ('stages: 3'): 'stages' given twice"));
  EXPECT_TRUE(has(parse_error("stages: two\n"), "line 1 ('stages: two'): 'two' is not a non-negative integer"));
  EXPECT_TRUE(has(parse_error("rank 0 0F0\n"), "line 1 ('rank 0 0F0'): expected 'key: value'"));
  EXPECT_TRUE(has(parse_error("# t\nmicrobatches: 1\nstage_ranks: 0\nmemory_bound: 1\nrank 0: 0F0 0B0\n"),
                  "no 'stages:' line"));
  EXPECT_TRUE(has(parse_error("stages: 2\nmicrobatches: 1\nstage_ranks: 0\nmemory_bound: 1\nrank 0: 0F0 0B0\n"),
                  "schedule line 3: stage_ranks has 1 entries for 2 stages"));
  EXPECT_TRUE(has(parse_error(head + "rank 0: 0F0 0B0\n"), "line 5: memory_bound has 2 entries for 1 rank"));
}

// Refused schedules: each message names the rank, the action's index and the action.
std::string refusal(const std::string& ranks, const std::string& header =
                                                  "stages: 2\nmicrobatches: 1\n"
                                                  "stage_ranks: 0 1\nmemory_bound: 1 1\n") {
  return error_of([&] { validate(parse_schedule("# bad\n" + header + ranks)); });
}

TEST(PipelineValidate, RefusesNamingTheAction) {
  // The valid one these break: rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 / rank 1: 1RECV_F0 1F0 1B0 1SEND_B0.
  EXPECT_EQ(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"), "(no error)");
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 1F0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"),
                  "'bad': rank 0 action 4 (1F0): stage 1 runs on rank 1"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1F0 1B0 1SEND_B0\n"),
                  "rank 0 action 1 (0SEND_F0): rank 1 never receives it: it has no 1RECV_F0"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1F0 1RECV_F0 1B0 1SEND_B0\n"),
                  "rank 1 action 0 (1F0): needs 1RECV_F0 before it (its input comes from rank 0)"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"),
                  "rank 0 action 1 (0F0): repeats action 0 of rank 0"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1W0 1I0 1SEND_B0\n"),
                  "rank 1 action 2 (1W0): needs 1I0 before it"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1I0 1SEND_B0\n"),
                  "rank 1 action 2 (1I0): its weight gradient 1W0 never runs"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1I0 1W0 1SEND_B0\n"),
                  "rank 1 action 3 (1I0): rank 1 action 2 (1B0) is the backward already"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0\nrank 1: 1RECV_F0 1F0 1B0\n"),
                  "rank 0 never runs the backward of stage 0 microbatch 0 (0B0, or 0I0 and 0W0)"));
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"),
                  "rank 0 action 4 (0F1): there is no microbatch 1 (1 microbatches)"));
  // A cycle of waits: rank 0 waits for a gradient before sending the activation rank 1 waits for.
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0RECV_B0 0SEND_F0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n"),
                  "deadlock: rank 0 action 1 (0RECV_B0) waits for 1SEND_B0, which rank 1 posts at its action "
                  "3; rank 1 action 0 (1RECV_F0) waits for 0SEND_F0, which rank 0 posts at its action 2; cycle "
                  "of waits: rank 0 -> rank 1 -> rank 0"));
  // Stages on one rank pass tensors locally.
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0SEND_F0 1RECV_F0 1F0 1B0 0B0\n",
                          "stages: 2\nmicrobatches: 1\n"
                          "stage_ranks: 0 0\nmemory_bound: 2\n"),
                  "rank 0 action 1 (0SEND_F0): stages 0 and 1 are both on rank 0"));
}

TEST(PipelineValidate, RefusesAnOverMemoryBound) {
  Schedule s = gpipe(2, 4);
  s.memory_bound = {3, 4};
  EXPECT_TRUE(has(error_of([&] { validate(s); }),
                  "rank 0 action 6 (0F3): 4 activations in flight on rank 0, over its memory bound of 3"));
}

TEST(PipelineValidate, RefusesBrokenFsdpLifecycles) {
  const std::string header = "stages: 1\nmicrobatches: 2\nstage_ranks: 0\nmemory_bound: 2\n";
  EXPECT_EQ(refusal("rank 0: 0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD 0RESHARD\n", header), "(no error)");
  EXPECT_TRUE(has(refusal("rank 0: 0F0 0F1 0B0 0B1 0REDUCE_GRAD\n", header),
                  "rank 0 action 0 (0F0): needs 0UNSHARD before it (stage 0 is sharded here)"));
  EXPECT_TRUE(has(refusal("rank 0: 0UNSHARD 0F0 0F1 0RESHARD 0B0 0B1 0REDUCE_GRAD\n", header),
                  "rank 0 action 4 (0B0): needs 0UNSHARD before it"));
  EXPECT_TRUE(has(refusal("rank 0: 0UNSHARD 0F0 0F1 0B0 0REDUCE_GRAD 0B1\n", header),
                  "rank 0 action 4 (0REDUCE_GRAD): needs all of stage 0's gradients before it (1 of 2"));
  EXPECT_TRUE(has(refusal("rank 0: 0UNSHARD 0F0 0F1 0B0 0B1 0RESHARD\n", header), "never runs 0REDUCE_GRAD"));
  EXPECT_TRUE(has(refusal("rank 0: 0UNSHARD 0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD\n", header),
                  "rank 0 action 1 (0UNSHARD): stage 0 is unsharded already"));
}

}  // namespace
}  // namespace dt::pipeline
