// Training checkpoints across layouts (issue: FSDP on 4 ranks -> FSDP + TP on 2x2 -> one process, bit-exact for the
// model and the AdamW state), resuming equal to training on, async saves during training, strict and non-strict
// loads of model-only and full checkpoints, and weights exported to safetensors loaded into another layout.
#include "nn/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <optional>

#include "collectives/thread/thread_comm.h"
#include "fsdp/fully_shard.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"
#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;

constexpr int64_t kBatch = 8, kSeq = 8;

struct Layout {
  int64_t dp = 1, tp = 1;
  bool fsdp = false;
  int64_t world() const { return dp * tp; }
};

// The full value of every tensor of the training state, the optimizer's scalars, the losses of the steps run.
struct Snapshot {
  std::vector<std::pair<std::string, Tensor>> tensors;
  checkpoint::Metadata scalars;
  std::vector<double> losses;
};

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    path_ = std::string(base && *base ? base : "/tmp") + "/dt_fsdp_ckpt_XXXXXX";
    DT_ASSERT(::mkdtemp(path_.data()) != nullptr, "mkdtemp");
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `body` on every rank with a GPT laid out as `l` (init seed `seed`) and its AdamW; then snapshots.
Snapshot with_model(const Layout& l, uint64_t seed,
                    const std::function<void(nn::Gpt&, nn::AdamW&, const DeviceMesh& mesh, Snapshot&)>& body) {
  Snapshot out;
  std::mutex mu;
  run_threads(int(l.world()), [&](CommunicatorPtr world) {
    set_default_world(world, /*this_thread_only=*/true);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {l.dp, l.tp}, {"dp", "tp"});
    const nn::GptConfig cfg = nn_test::uneven_gpt_config();
    auto model = std::make_shared<nn::Gpt>(cfg);
    if (l.tp > 1) nn::parallelize_module(model, mesh["tp"], nn::gpt_tp_plan(cfg, false));
    model->materialize(mesh["tp"], seed);
    if (l.fsdp) {
      for (auto& block : model->layers) fsdp::fully_shard(block, mesh["dp"], {.gradient_divide_factor = 1.0});
      fsdp::fully_shard(model, mesh["dp"], {.gradient_divide_factor = 1.0});
    }
    nn::AdamW opt(model->parameters(), {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    Snapshot mine;
    body(*model, opt, mesh, mine);
    const nn::TrainingState s = nn::training_state(*model, &opt);
    std::vector<std::pair<std::string, Tensor>> full;
    for (const auto& [name, t] : s.tensors) full.emplace_back(name, t.full_tensor());
    if (world->rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.tensors = std::move(full);
      out.scalars = s.metadata;
      out.losses = mine.losses;
    }
  });
  return out;
}

// train_gpt's recipe on this dp rank's rows: loss = token losses summed / global tokens, clip to 1, AdamW.
double train_step(nn::Gpt& model, nn::AdamW& opt, const DeviceMesh& mesh, int64_t step) {
  const DeviceMesh tp = mesh["tp"];
  const int64_t dp = mesh.size(0);
  const Tensor tokens = nn_test::step_tokens(kBatch, kSeq, model.config.vocab, step);
  const IndexRange rows = chunk_range(kBatch, dp, mesh.local_rank(0));
  Tensor part = tokens.narrow(0, rows.begin, rows.size());
  Tensor ids = part.narrow(1, 0, kSeq).contiguous(), tgt = part.narrow(1, 1, kSeq).contiguous();
  Variable logits = model(Variable(nn_test::replicate_on(ids, tp)));
  Variable loss = nn::div(nn::cross_entropy(logits, nn_test::replicate_on(tgt, tp), -100, LossReduction::kSum),
                          double(kBatch * kSeq));
  loss.backward();
  const std::vector<Variable> params = model.parameters();  // dp > 1 runs under FSDP, which reduces the gradients
  nn::clip_grad_norm_(params, 1.0);
  opt.step();
  opt.zero_grad();
  Tensor l = Tensor::from_vector({loss.full_tensor().to(DType::f64).data<double>()[0]}, {1}, DType::f64);
  if (dp > 1) mesh["dp"].comm(0)->all_reduce(l, ReduceOp::kSum)->wait();
  return l.data<double>()[0];
}

void expect_same_state(const Snapshot& got, const Snapshot& want, const std::string& label) {
  ASSERT_EQ(got.tensors.size(), want.tensors.size()) << label;
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].first, want.tensors[i].first) << label;
    EXPECT_TRUE(equal(got.tensors[i].second, want.tensors[i].second)) << label << ": " << want.tensors[i].first;
  }
  EXPECT_EQ(got.scalars, want.scalars) << label;
}

TEST(FsdpCheckpoint, Fsdp4ToFsdpTp2x2ToOneProcessIsBitExact) {
  TempDir tmp;
  const std::string a = tmp.path() + "/fsdp4", b = tmp.path() + "/fsdp_tp";
  // FSDP on 4 ranks: two steps, save, and one more step (the run that resuming must reproduce).
  Snapshot trained;
  std::vector<std::pair<std::string, Tensor>> after_third;
  std::mutex mu;
  const Snapshot continued =
      with_model({.dp = 4, .fsdp = true}, 5, [&](nn::Gpt& m, nn::AdamW& opt, const DeviceMesh& mesh, Snapshot& s) {
        for (int64_t step = 0; step < 2; ++step) s.losses.push_back(train_step(m, opt, mesh, step));
        nn::save_checkpoint(a, m, &opt, {{"step", int64_t(2)}});
        const nn::TrainingState st = nn::training_state(m, &opt);
        std::vector<std::pair<std::string, Tensor>> full;
        for (const auto& [name, t] : st.tensors) full.emplace_back(name, t.full_tensor());
        if (mesh.global_rank() == 0) {
          std::lock_guard<std::mutex> lock(mu);
          trained.tensors = std::move(full);
          trained.scalars = st.metadata;
        }
        s.losses.push_back(train_step(m, opt, mesh, 2));
      });
  ASSERT_FALSE(trained.tensors.empty());
  int64_t moments = 0;
  for (const auto& [name, t] : trained.tensors) {
    const std::string tail = ".exp_avg";
    if (name.rfind("optim.state.", 0) != 0 || name.size() < tail.size() ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string param = "model." + name.substr(12, name.size() - 12 - tail.size());
    EXPECT_TRUE(std::any_of(trained.tensors.begin(), trained.tensors.end(), [&](const auto& x) {
      return x.first == param;
    })) << name;
    ++moments;
  }
  EXPECT_GE(moments, 10) << "every parameter's AdamW state is in the checkpoint";

  // FSDP + TP on 2x2, initialised differently, loads it: every tensor bit for bit; then saves from this layout.
  const Snapshot on_2x2 =
      with_model({.dp = 2, .tp = 2, .fsdp = true}, 77, [&](nn::Gpt& m, nn::AdamW& opt, const DeviceMesh&, Snapshot&) {
        const checkpoint::LoadResult r = nn::load_checkpoint(a, m, &opt);
        EXPECT_EQ(std::get<int64_t>(r.metadata.at("step")), 2);
        EXPECT_EQ(opt.steps(), 2);
        nn::save_checkpoint(b, m, &opt, {{"step", int64_t(2)}});
      });
  expect_same_state(on_2x2, trained, "FSDP 4 -> FSDP + TP 2x2");

  // One process loads the 2x2 checkpoint: bit for bit again, and its next step equals the 4-rank run's.
  const Snapshot one = with_model({}, 123, [&](nn::Gpt& m, nn::AdamW& opt, const DeviceMesh& mesh, Snapshot& s) {
    nn::load_checkpoint(b, m, &opt);
    const nn::TrainingState st = nn::training_state(m, &opt);
    for (size_t i = 0; i < st.tensors.size(); ++i)
      EXPECT_TRUE(equal(st.tensors[i].second.full_tensor(), trained.tensors[i].second)) << st.tensors[i].first;
    s.losses.push_back(train_step(m, opt, mesh, 2));
  });
  ASSERT_EQ(one.losses.size(), 1u);
  EXPECT_NEAR(one.losses[0], continued.losses[2], 1e-5 * std::abs(continued.losses[2]))
      << "the resumed step's loss equals the uninterrupted run's";
  for (size_t i = 0; i < one.tensors.size(); ++i) {
    const Tensor d = kernels::sub(one.tensors[i].second.to(DType::f64), continued.tensors[i].second.to(DType::f64));
    const double num = std::sqrt(kernels::sum(kernels::mul(d, d)).item());
    const Tensor w = continued.tensors[i].second.to(DType::f64);
    const double den = std::sqrt(kernels::sum(kernels::mul(w, w)).item());
    EXPECT_LE(num, 1e-5 * std::max(den, 1e-12)) << "after the resumed step: " << one.tensors[i].first;
  }
}

TEST(FsdpCheckpoint, AsyncSaveDuringTrainingModelOnlyAndSafetensors) {
  TempDir tmp;
  const std::string async_dir = tmp.path() + "/async", model_dir = tmp.path() + "/model_only";
  const std::string weights = tmp.path() + "/model.safetensors";
  Snapshot at_save;
  std::mutex mu;
  with_model({.dp = 2, .fsdp = true}, 5, [&](nn::Gpt& m, nn::AdamW& opt, const DeviceMesh& mesh, Snapshot&) {
    train_step(m, opt, mesh, 0);
    const nn::TrainingState st = nn::training_state(m, &opt);
    std::vector<std::pair<std::string, Tensor>> full;
    for (const auto& [name, t] : st.tensors) full.emplace_back(name, t.full_tensor());
    checkpoint::SaveHandle h = nn::save_checkpoint_async(async_dir, m, &opt, {{"step", int64_t(1)}});
    train_step(m, opt, mesh, 1);  // changes every parameter and moment while the save is in flight
    h.wait();
    nn::save_checkpoint(model_dir, m, nullptr);
    checkpoint::export_safetensors(weights, m.state_dict());
    if (mesh.global_rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      at_save.tensors = std::move(full);
      at_save.scalars = st.metadata;
    }
  });
  // The async checkpoint holds the values of the moment it was called.
  const Snapshot loaded = with_model({}, 9, [&](nn::Gpt& m, nn::AdamW& opt, const DeviceMesh&, Snapshot&) {
    nn::load_checkpoint(async_dir, m, &opt);
  });
  expect_same_state(loaded, at_save, "async save while training on");

  with_model({.tp = 2}, 9, [&](nn::Gpt& m, nn::AdamW& opt, const DeviceMesh&, Snapshot&) {
    // A model-only checkpoint into model + optimizer: strict refuses and names the optimizer's tensors.
    try {
      nn::load_checkpoint(model_dir, m, &opt);
      ADD_FAILURE() << "strict load of a model-only checkpoint into model + optimizer";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("missing from the checkpoint: 'optim.state."), std::string::npos)
          << e.what();
    }
    const checkpoint::LoadResult r = nn::load_checkpoint(model_dir, m, &opt, {.strict = false});
    EXPECT_EQ(r.missing.size(), 2 * m.parameters().size()) << "both moments of every parameter reported";
    EXPECT_TRUE(r.unexpected.empty());
    const auto named = m.named_parameters();
    Tensor before_import = named.front().second.full_tensor();
    // The exported weights (Shard(0) over 2 FSDP ranks) into this tensor-parallel layout.
    for (auto& [n, p] : named) Tensor(p.to_local()).zero_();
    nn::load_safetensors(weights, m);
    EXPECT_TRUE(equal(named.front().second.full_tensor(), before_import)) << "safetensors weights = checkpoint weights";
  });
}

}  // namespace
}  // namespace dt
