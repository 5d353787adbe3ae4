// save and save_async (Note [Checkpoint layout]): agree on the tensors and a save id, plan the writers, write this
// rank's file and its checksums, and on rank 0 commit the index once every rank's part is on disk.
#include <boost/json.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include "collectives/exchange.h"
#include "core/config.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fault_inject.h"
#include "core/logging.h"
#include "core/trace.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/plan.h"
#include "dtensor/checkpoint/prepare.h"

namespace dt::checkpoint {
namespace {

namespace json = boost::json;

// Checksums are computed on windows of this size just before they are written, while the bytes are in cache.
constexpr uint64_t kWriteWindowBytes = uint64_t(4) << 20;

struct Job {
  std::string dir;
  std::string save_id;
  int64_t rank = 0;
  int64_t world = 1;
  CommunicatorPtr comm;  // the world's: rank 0's commit stops waiting for a rank it knows dead
  uint64_t page_bytes = 0;
  double timeout_s = 300;
  Metadata metadata;
  std::vector<SavedTensor> tensors;
  std::vector<std::vector<PlannedBlock>> plan;
  RankFile file;
  std::vector<Tensor> blocks;  // host, contiguous: the data of file.entries, in order
};

// This rank's safetensors file (temporary name, fsync, rename), then its checksums the same way.
void write_part(const Job& job) {
  trace::Span span(trace::Category::kCheckpoint, "save.write");
  make_dirs(job.dir);
  json::array crcs;
  if (!job.file.entries.empty()) {
    const std::string path = join_path(job.dir, job.file.name);
    File f(path + ".tmp", File::Mode::kCreate);
    f.write_at(job.file.header.data(), job.file.header.size(), 0);
    fault::point("checkpoint_save");  // Note [Fault injection]: the file is half written
    const uint64_t P = job.page_bytes;
    const uint64_t window = std::max<uint64_t>(1, kWriteWindowBytes / P) * P;
    for (size_t k = 0; k < job.file.entries.size(); ++k) {
      const RankFile::Entry& e = job.file.entries[k];
      const char* data = static_cast<const char*>(job.blocks[k].data_ptr());
      std::vector<uint32_t> page(page_count(e.bytes, P));
      for (uint64_t pos = 0; pos < e.bytes; pos += window) {
        const uint64_t n = std::min(window, e.bytes - pos);
        crc32c_pages(data + pos, n, P, page.data() + pos / P);
        f.write_at(data + pos, n, e.begin + pos);
        f.start_writeback(e.begin + pos, n);
      }
      crcs.push_back(json::string(encode_crcs(page)));
    }
    f.sync();
    f.close();
    durable_rename(path + ".tmp", path);
  }
  json::object meta;
  meta["rank"] = job.rank;
  meta["crc32c"] = std::move(crcs);
  // Not fsynced: it only tells rank 0 that this rank's file is durable, and the index, durable, carries its checksums.
  write_file_atomically(join_path(job.dir, rank_meta_name(job.save_id, job.rank)), json::serialize(meta),
                        /*durable=*/false);
}

// Rank 0: waits for every rank's checksums (or its error), writes the index, removes what it does not name.
void commit(const Job& job) {
  trace::Span span(trace::Category::kCheckpoint, "save.commit");
  Index index;
  index.save_id = job.save_id;
  index.world_size = job.world;
  index.page_bytes = job.page_bytes;
  index.metadata = job.metadata;
  for (const SavedTensor& t : job.tensors) index.tensors.push_back({t.name, t.dtype, t.shape, t.spec.to_string(), {}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(job.timeout_s);
  for (int64_t r = 0; r < job.world; ++r) {
    const std::string meta_path = join_path(job.dir, rank_meta_name(job.save_id, r));
    const std::string error_path = join_path(job.dir, rank_error_name(job.save_id, r));
    auto sleep = std::chrono::microseconds(200);
    while (!file_exists(meta_path)) {
      if (file_exists(error_path))
        DT_THROW(RemoteError, "checkpoint save to '", job.dir, "': rank ", r, " failed: ", read_whole_file(error_path));
      if (std::exception_ptr dead = job.comm ? job.comm->health() : nullptr) {
        try {
          std::rethrow_exception(dead);
        } catch (const Error& e) {
          DT_THROW(RemoteError, "checkpoint save to '", job.dir, "': rank ", r,
                   " did not write its part, and the group is broken: ", e.what(), "; the checkpoint is incomplete");
        }
      }
      if (std::chrono::steady_clock::now() > deadline)
        DT_THROW(TimeoutError, "checkpoint save to '", job.dir, "': rank ", r, " did not write its part within ",
                 job.timeout_s, " s (DT_TIMEOUT_S); the checkpoint is incomplete");
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
    }
    const RankFile rf = r == job.rank ? job.file : rank_file(job.save_id, r, job.tensors, job.plan);
    boost::system::error_code ec;
    const json::value meta = json::parse(read_whole_file(meta_path), ec);
    const json::value* list = !ec && meta.is_object() ? meta.get_object().if_contains("crc32c") : nullptr;
    if (list == nullptr || !list->is_array() || list->get_array().size() != rf.entries.size())
      DT_THROW(InvalidArgument, "checkpoint save to '", job.dir, "': the checksums of rank ", r, " in '", meta_path,
               "' do not match its blocks");
    for (size_t k = 0; k < rf.entries.size(); ++k) {
      const RankFile::Entry& e = rf.entries[k];
      const json::value& hex = list->get_array()[k];
      const auto crcs = decode_crcs(hex.is_string() ? std::string_view(hex.get_string()) : std::string_view("?"));
      if (!crcs || crcs->size() != page_count(e.bytes, job.page_bytes))
        DT_THROW(InvalidArgument, "checkpoint save to '", job.dir, "': the checksums of rank ", r, " in '", meta_path,
                 "' do not match its blocks");
      index.tensors[e.tensor].chunks.push_back({e.box, rf.name, e.begin, e.bytes, *crcs});
    }
    if (!rf.entries.empty()) index.file_bytes[rf.name] = rf.bytes;
  }
  write_file_atomically(join_path(job.dir, kIndexName), encode_index(index));
  for (const std::string& name : list_dir(job.dir))
    if (is_checkpoint_file(name) && !index.file_bytes.count(name)) remove_file(join_path(job.dir, name));
}

void run(const Job& job) {
  try {
    write_part(job);
  } catch (const std::exception& e) {
    try {
      write_file_atomically(join_path(job.dir, rank_error_name(job.save_id, job.rank)), e.what(), /*durable=*/false);
    } catch (...) {
    }
    throw;
  }
  if (job.rank == 0) commit(job);
}

// Saves in flight per world, so that a new save first waits for them (this rank's part only).
std::mutex g_inflight_mu;
std::vector<std::weak_ptr<SaveHandle::State>> g_inflight;

}  // namespace

struct SaveHandle::State {
  CommunicatorPtr world;
  int64_t rank = 0;
  std::thread thread;
  std::exception_ptr error;
  std::atomic<bool> done{false};
  bool waited = false;
  std::string dir;

  void join() {
    if (thread.joinable()) thread.join();
  }
  ~State() {
    join();
    if (error && !waited) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        DT_LOG_ERROR("checkpoint save to '", dir, "' failed and nobody waited for it: ", e.what());
      }
    }
  }
};

SaveHandle::~SaveHandle() = default;
SaveHandle::SaveHandle(SaveHandle&&) noexcept = default;
SaveHandle& SaveHandle::operator=(SaveHandle&&) noexcept = default;

bool SaveHandle::is_completed() const { return state_ == nullptr || state_->done.load(); }

void SaveHandle::wait() {
  DT_CHECK_ARG(state_ != nullptr, "SaveHandle::wait on an empty handle");
  DT_CHECK_ARG(!state_->waited, "SaveHandle::wait called twice");
  state_->join();
  state_->waited = true;
  const bool failed = state_->error != nullptr;
  const std::vector<int64_t> all = all_gather_ints(*state_->world, {failed ? 1 : 0});
  if (failed) std::rethrow_exception(state_->error);
  std::string ranks;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty())
    DT_THROW(RemoteError, "checkpoint save to '", state_->dir, "' failed on rank ", ranks,
             " (see its error); the folder keeps its previous checkpoint, if any");
}

namespace {

SaveHandle start_save(const std::string& dir, const TensorList& tensors, const Metadata& metadata,
                      const SaveOptions& options, bool async);

}  // namespace

SaveHandle save_async(const std::string& dir, const TensorList& tensors, const Metadata& metadata,
                      const SaveOptions& options) {
  return start_save(dir, tensors, metadata, options, true);
}

void save(const std::string& dir, const TensorList& tensors, const Metadata& metadata, const SaveOptions& options) {
  start_save(dir, tensors, metadata, options, false).wait();
}

namespace {

SaveHandle start_save(const std::string& dir, const TensorList& tensors, const Metadata& metadata,
                      const SaveOptions& options, bool async) {
  DT_CHECK_ARG(!dir.empty(), "checkpoint save: the folder name is empty");
  DT_CHECK_ARG(options.page_bytes >= 8 && options.page_bytes % 8 == 0,
               "checkpoint save: page_bytes must be a positive multiple of 8, got ", options.page_bytes);
  const std::string what = "checkpoint save to '" + dir + "'";
  DT_CHECK_ARG(!tensors.empty(), what, ": no tensors given");
  {  // this rank's earlier saves on this world finish first
    const CommunicatorPtr world = tensors.front().second.defined() ? tensors.front().second.mesh().world() : nullptr;
    std::lock_guard<std::mutex> lock(g_inflight_mu);
    for (auto& w : g_inflight)
      if (auto s = w.lock(); s && s->world == world) s->join();
    std::erase_if(g_inflight, [](const auto& w) { return w.expired(); });
  }
  std::optional<trace::Span> preparing(std::in_place, trace::Category::kCheckpoint, "save.prepare");
  Prepared p = prepare(what, tensors, int64_t(options.page_bytes));
  const CommunicatorPtr world = p.world;
  auto state = std::make_shared<SaveHandle::State>();
  state->world = world;
  state->rank = world->rank();
  state->dir = dir;

  Job job;
  job.dir = dir;
  job.rank = world->rank();
  job.world = world->size();
  job.comm = world;
  job.page_bytes = options.page_bytes;
  job.timeout_s = config::get_seconds(config::Var::kTimeoutS);
  job.metadata = metadata;
  job.save_id = p.save_id;
  job.tensors = std::move(p.tensors);
  job.plan = std::move(p.plan);
  job.file = rank_file(job.save_id, job.rank, job.tensors, job.plan);
  for (const RankFile::Entry& e : job.file.entries) {
    job.blocks.push_back(host_block(p.values[e.tensor], async));
    DT_ASSERT(job.blocks.back().shape() == e.box.shape, "planned block of ", job.tensors[e.tensor].name);
  }
  preparing.reset();
  if (!async) {
    // Every rank learns whether all parts are written before rank 0 commits (no waiting on files); wait() then tells
    // everyone whether the commit succeeded.
    try {
      write_part(job);
    } catch (...) {
      state->error = std::current_exception();
    }
    const std::vector<int64_t> written = all_gather_ints(*world, {state->error ? 1 : 0});
    std::string failed;
    for (size_t r = 0; r < written.size(); ++r)
      if (written[r] != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    if (!state->error && !failed.empty())
      state->error = make_error(ErrorCode::kRemoteError, str_cat("checkpoint save to '", dir, "': rank ", failed,
                                                                 " failed to write its part (see its error)"));
    if (!state->error && job.rank == 0) {
      try {
        commit(job);
      } catch (...) {
        state->error = std::current_exception();
      }
    }
    state->done = true;
    return SaveHandle(state);
  }
  SaveHandle::State* raw = state.get();
  state->thread = std::thread([raw, job = std::move(job)]() {
    try {
      run(job);
    } catch (...) {
      raw->error = std::current_exception();
    }
    raw->done = true;
  });
  std::lock_guard<std::mutex> lock(g_inflight_mu);
  g_inflight.push_back(state);
  return SaveHandle(state);
}

}  // namespace

}  // namespace dt::checkpoint
