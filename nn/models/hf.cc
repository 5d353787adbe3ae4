// Hugging Face model folders (nn/models/hf.h).
#include "nn/models/hf.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "dtensor/checkpoint/file_io.h"
#include "dtensor/ops/elementwise.h"
#include "nn/checkpoint.h"

namespace dt::nn {
namespace {

namespace json = boost::json;
using checkpoint::file_exists;
using checkpoint::join_path;

// Note [Hugging Face names]: module name <-> Hugging Face name, "{i}" standing for a layer index. Parameters keep
// their last part (.weight, .bias) on both sides.
struct NamePair {
  const char* module;
  const char* hf;
};
constexpr NamePair kHfNames[] = {
    {"tok_embeddings", "model.embed_tokens"},
    {"layers.{i}.attention_norm", "model.layers.{i}.input_layernorm"},
    {"layers.{i}.attention.wq", "model.layers.{i}.self_attn.q_proj"},
    {"layers.{i}.attention.wk", "model.layers.{i}.self_attn.k_proj"},
    {"layers.{i}.attention.wv", "model.layers.{i}.self_attn.v_proj"},
    {"layers.{i}.attention.wo", "model.layers.{i}.self_attn.o_proj"},
    {"layers.{i}.ffn_norm", "model.layers.{i}.post_attention_layernorm"},
    {"layers.{i}.feed_forward.w1", "model.layers.{i}.mlp.gate_proj"},
    {"layers.{i}.feed_forward.w3", "model.layers.{i}.mlp.up_proj"},
    {"layers.{i}.feed_forward.w2", "model.layers.{i}.mlp.down_proj"},
    {"norm", "model.norm"},
    {"output", "lm_head"},
};
constexpr const char* kTiedHead = "lm_head.weight";

// `name` in the column `from` rewritten in the column `to` (false: module -> hf).
std::optional<std::string> map_name(const std::string& name, bool from_hf) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string stem = name.substr(0, dot), leaf = name.substr(dot);
  if (leaf != ".weight" && leaf != ".bias") return std::nullopt;
  // The layer index: the number after "layers." (module) or "model.layers." (hf).
  const std::string prefix = from_hf ? "model.layers." : "layers.";
  std::string pattern = stem, index;
  if (stem.rfind(prefix, 0) == 0) {
    size_t end = prefix.size();
    while (end < stem.size() && std::isdigit(static_cast<unsigned char>(stem[end]))) ++end;
    if (end == prefix.size() || end >= stem.size() || stem[end] != '.') return std::nullopt;
    index = stem.substr(prefix.size(), end - prefix.size());
    pattern = prefix + "{i}" + stem.substr(end);
  }
  for (const NamePair& p : kHfNames) {
    if (pattern != (from_hf ? p.hf : p.module)) continue;
    std::string out = from_hf ? p.module : p.hf;
    if (const size_t at = out.find("{i}"); at != std::string::npos) out.replace(at, 3, index);
    return out + leaf;
  }
  return std::nullopt;
}

// ---- config.json ----

class ConfigReader {
 public:
  explicit ConfigReader(std::string file) : file_(std::move(file)) {
    std::error_code ec;
    json::value v = json::parse(checkpoint::read_whole_file(file_), ec);
    DT_CHECK_ARG(!ec && v.is_object(), "Hugging Face config '", file_, "' is not a JSON object",
                 ec ? ": " + ec.message() : std::string());
    o_ = std::move(v.get_object());
  }
  const json::object& object() const { return o_; }
  const std::string& file() const { return file_; }
  const json::value* find(const char* key) const {
    const json::value* v = o_.if_contains(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  int64_t integer(const char* key) const {
    const json::value* v = find(key);
    DT_CHECK_ARG(v != nullptr, "Hugging Face config '", file_, "': '", key, "' is missing");
    return integer_of(*v, key);
  }
  int64_t integer(const char* key, int64_t fallback) const {
    const json::value* v = find(key);
    return v == nullptr ? fallback : integer_of(*v, key);
  }
  double number(const json::object& o, const char* key, double fallback) const {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return fallback;
    DT_CHECK_ARG(v->is_number(), "Hugging Face config '", file_, "': '", key, "' must be a number, got ",
                 json::serialize(*v));
    return v->to_number<double>();
  }
  double number(const char* key, double fallback) const { return number(o_, key, fallback); }
  bool boolean(const char* key, bool fallback) const {
    const json::value* v = find(key);
    if (v == nullptr) return fallback;
    DT_CHECK_ARG(v->is_bool(), "Hugging Face config '", file_, "': '", key, "' must be true or false, got ",
                 json::serialize(*v));
    return v->get_bool();
  }
  std::string string(const json::object& o, const char* key, const std::string& fallback) const {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return fallback;
    DT_CHECK_ARG(v->is_string(), "Hugging Face config '", file_, "': '", key, "' must be a string, got ",
                 json::serialize(*v));
    return std::string(v->get_string());
  }
  std::string string(const char* key, const std::string& fallback) const { return string(o_, key, fallback); }
  // An integer or a list of integers (eos_token_id).
  std::vector<int64_t> integers(const char* key) const {
    const json::value* v = find(key);
    if (v == nullptr) return {};
    if (!v->is_array()) return {integer_of(*v, key)};
    std::vector<int64_t> out;
    for (const json::value& x : v->get_array()) out.push_back(integer_of(x, key));
    return out;
  }

 private:
  int64_t integer_of(const json::value& v, const char* key) const {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64() && v.get_uint64() < (uint64_t(1) << 62)) return int64_t(v.get_uint64());
    if (v.is_double() && v.get_double() == std::floor(v.get_double()) && std::abs(v.get_double()) < 1e15)
      return int64_t(v.get_double());
    DT_THROW(InvalidArgument, "Hugging Face config '", file_, "': '", key, "' must be an integer, got ",
             json::serialize(v));
  }
  std::string file_;
  json::object o_;
};

struct Architecture {
  const char* name;
  const char* model_type;
  bool qkv_bias;  // always (Qwen2), else attention_bias decides
};
constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", false},
    {"MistralForCausalLM", "mistral", false},
    {"Qwen2ForCausalLM", "qwen2", true},
};

// rope_theta and the scaling: transformers 4 writes rope_theta and rope_scaling, transformers 5 rope_parameters
// (with rope_theta inside); either is read.
void read_rope(const ConfigReader& r, GptConfig& c) {
  const json::object* params = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (const json::value* v = r.find(key)) {
      DT_CHECK_ARG(v->is_object(), "Hugging Face config '", r.file(), "': '", key, "' must be an object, got ",
                   json::serialize(*v));
      params = &v->get_object();
      break;
    }
  c.rope_theta = r.number("rope_theta", 10000.0);
  if (params == nullptr) return;
  c.rope_theta = r.number(*params, "rope_theta", c.rope_theta);
  const std::string type = r.string(*params, "rope_type", r.string(*params, "type", "default"));
  if (type == "default") return;
  DT_CHECK_ARG(type == "llama3", "Hugging Face config '", r.file(), "': rope_type '", type,
               "' is not supported (default and llama3 are)");
  c.rope_scaling.factor = r.number(*params, "factor", 0);
  c.rope_scaling.low_freq_factor = r.number(*params, "low_freq_factor", 1);
  c.rope_scaling.high_freq_factor = r.number(*params, "high_freq_factor", 4);
  c.rope_scaling.original_max_positions =
      int64_t(r.number(*params, "original_max_position_embeddings", double(c.rope_scaling.original_max_positions)));
  DT_CHECK_ARG(c.rope_scaling.factor > 0, "Hugging Face config '", r.file(), "': llama3 rope scaling needs a factor");
}

DType read_dtype(const ConfigReader& r) {
  std::string name = r.string("torch_dtype", r.string("dtype", "float32"));
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  DT_CHECK_ARG(name == "float32" || name == "bfloat16" || name == "float16", "Hugging Face config '", r.file(),
               "': dtype '", name, "' is not supported (float32, bfloat16 and float16 are)");
  return dtype_from_name(name);
}

}  // namespace

std::optional<std::string> to_hf_name(const std::string& fqn) { return map_name(fqn, false); }
std::optional<std::string> from_hf_name(const std::string& hf_name) { return map_name(hf_name, true); }

HfConfig read_hf_config(const std::string& path) {
  const std::string file = file_exists(join_path(path, "config.json")) ? join_path(path, "config.json") : path;
  DT_CHECK_ARG(file_exists(file), "Hugging Face model: no config.json in '", path, "'");
  const ConfigReader r(file);
  HfConfig h;
  std::string arch;
  if (const json::value* a = r.find("architectures")) {
    DT_CHECK_ARG(a->is_array() && !a->get_array().empty() && a->get_array()[0].is_string(), "Hugging Face config '",
                 file, "': 'architectures' must be a list of names");
    arch = std::string(a->get_array()[0].get_string());
  }
  const std::string model_type = r.string("model_type", "");
  const Architecture* found = nullptr;
  for (const Architecture& a : kArchitectures)
    if (arch == a.name || (arch.empty() && model_type == a.model_type)) found = &a;
  DT_CHECK_ARG(found != nullptr, "Hugging Face config '", file, "': architecture '", arch.empty() ? model_type : arch,
               "' is not supported (LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM are)");
  h.architecture = found->name;
  h.model_type = found->model_type;

  GptConfig& c = h.model;
  c.vocab = r.integer("vocab_size");
  c.dim = r.integer("hidden_size");
  c.layers = r.integer("num_hidden_layers");
  c.heads = r.integer("num_attention_heads");
  c.kv_heads = r.integer("num_key_value_heads", c.heads);
  c.hidden = r.integer("intermediate_size");
  c.head_dim = r.integer("head_dim", 0);
  c.norm = NormKind::kRMSNorm;
  c.mlp = MlpKind::kSwiGlu;
  c.norm_eps = r.number("rms_norm_eps", 1e-6);
  c.init.std = r.number("initializer_range", 0.02);
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  const bool attention_bias = r.boolean("attention_bias", false);
  c.qkv_bias = found->qkv_bias || attention_bias;
  c.o_bias = attention_bias;
  c.mlp_bias = r.boolean("mlp_bias", false);
  read_rope(r, c);
  DT_CHECK_ARG(c.vocab > 0 && c.dim > 0 && c.layers >= 0 && c.heads > 0 && c.kv_heads > 0 && c.hidden > 0,
               "Hugging Face config '", file, "': vocab_size, hidden_size, num_attention_heads, num_key_value_heads ",
               "and intermediate_size must be positive");
  DT_CHECK_ARG(c.heads % c.kv_heads == 0, "Hugging Face config '", file, "': num_attention_heads ", c.heads,
               " is not a multiple of num_key_value_heads ", c.kv_heads);
  DT_CHECK_ARG(c.head_dim > 0 || c.dim % c.heads == 0, "Hugging Face config '", file, "': hidden_size ", c.dim,
               " is not a multiple of num_attention_heads ", c.heads, " and no head_dim is given");
  const std::string act = r.string("hidden_act", "silu");
  DT_CHECK_ARG(act == "silu", "Hugging Face config '", file, "': hidden_act '", act, "' is not supported (silu is)");
  // A sliding window changes attention only where it is in use (Mistral v0.1's 4096, Qwen2's use_sliding_window).
  const bool sliding = h.model_type == "qwen2" ? r.boolean("use_sliding_window", false)
                                               : r.find("sliding_window") != nullptr && h.model_type == "mistral";
  DT_CHECK_ARG(!sliding, "Hugging Face config '", file, "': sliding-window attention is not supported");
  h.dtype = read_dtype(r);
  h.max_position_embeddings = r.integer("max_position_embeddings", 2048);
  if (r.find("bos_token_id")) h.bos_token_id = r.integer("bos_token_id");
  h.eos_token_ids = r.integers("eos_token_id");
  if (r.find("pad_token_id")) h.pad_token_id = r.integer("pad_token_id");
  return h;
}

std::string hf_config_json(const HfConfig& h) {
  const GptConfig& c = h.model;
  json::object o;
  o["architectures"] = json::array{json::value(h.architecture)};
  o["model_type"] = h.model_type;
  o["vocab_size"] = c.vocab;
  o["hidden_size"] = c.dim;
  o["intermediate_size"] = c.hidden_size();
  o["num_hidden_layers"] = c.layers;
  o["num_attention_heads"] = c.heads;
  o["num_key_value_heads"] = c.kv_head_count();
  o["head_dim"] = c.head_size();
  o["hidden_act"] = "silu";
  o["rms_norm_eps"] = c.norm_eps;
  o["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.enabled()) {
    o["rope_scaling"] = json::object{{"rope_type", "llama3"},
                                     {"factor", c.rope_scaling.factor},
                                     {"low_freq_factor", c.rope_scaling.low_freq_factor},
                                     {"high_freq_factor", c.rope_scaling.high_freq_factor},
                                     {"original_max_position_embeddings", c.rope_scaling.original_max_positions}};
  } else {
    o["rope_scaling"] = nullptr;
  }
  o["tie_word_embeddings"] = c.tie_embeddings;
  if (h.model_type == "qwen2") {
    DT_CHECK_ARG(c.qkv_bias && !c.o_bias && !c.mlp_bias,
                 "save_hf: a qwen2 model has q/k/v biases and no other (set qkv_bias only)");
    o["use_sliding_window"] = false;
  } else {
    DT_CHECK_ARG(c.qkv_bias == c.o_bias, "save_hf: a ", h.model_type,
                 " model has biases on all of q, k, v, o (attention_bias) or on none");
    o["attention_bias"] = c.qkv_bias;
    o["mlp_bias"] = c.mlp_bias;
  }
  if (h.model_type == "mistral") o["sliding_window"] = nullptr;
  o["max_position_embeddings"] = h.max_position_embeddings;
  o["torch_dtype"] = dtype_long_name(h.dtype);
  if (h.bos_token_id) o["bos_token_id"] = *h.bos_token_id;
  if (h.eos_token_ids.size() == 1) o["eos_token_id"] = h.eos_token_ids[0];
  if (h.eos_token_ids.size() > 1) o["eos_token_id"] = json::value_from(h.eos_token_ids);
  if (h.pad_token_id) o["pad_token_id"] = *h.pad_token_id;
  o["initializer_range"] = c.init.std;
  o["use_cache"] = true;
  return json::serialize(o) + "\n";
}

std::string hf_weights_path(const std::string& folder) {
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"})
    if (file_exists(join_path(folder, name))) return join_path(folder, name);
  DT_THROW(InvalidArgument, "Hugging Face model '", folder,
           "': neither model.safetensors nor model.safetensors.index.json is there");
}

checkpoint::LoadResult load_hf_weights(const std::string& folder, Module& model) {
  const std::string path = hf_weights_path(folder);
  for (const auto& [name, t] : model.state_dict())
    DT_CHECK_ARG(to_hf_name(name).has_value(), "load_hf_weights: the model's tensor '", name,
                 "' has no Hugging Face name (the model is not a Llama-family Gpt)");
  const auto params = model.named_parameters();
  const bool tied =
      std::none_of(params.begin(), params.end(), [](const auto& p) { return p.first == "output.weight"; });
  SafetensorsValues r = read_safetensors(path, model, {.strict = false, .convert_dtype = true},
                                         [](const std::string& name) { return *to_hf_name(name); });
  std::vector<std::string> unexpected;
  for (const std::string& name : r.result.unexpected)
    if (!(tied && name == kTiedHead) && name.find("rotary_emb.inv_freq") == std::string::npos)
      unexpected.push_back(name);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    return v.size() > 8 ? s + ", ... (" + std::to_string(v.size()) + " in all)" : s;
  };
  DT_CHECK_ARG(r.result.missing.empty() && unexpected.empty(), "load_hf_weights: '", path, "' does not match the ",
               "model (nothing was loaded)", r.result.missing.empty() ? "" : "; missing: " + list(r.result.missing),
               unexpected.empty() ? "" : "; not in the model: " + list(unexpected));
  model.load_state_dict(r.values, /*strict=*/true);
  r.result.unexpected = unexpected;
  return r.result;
}

void save_hf(const std::string& folder, const Module& model, const HfConfig& config, const HfSaveOptions& options) {
  const DType dtype = options.dtype.value_or(config.dtype);
  DT_CHECK_ARG(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "save_hf: dtype ", dtype_name(dtype),
               " is not one transformers loads for these models (f32, bf16, f16)");
  checkpoint::TensorList tensors;
  for (const auto& [name, t] : model.state_dict()) {
    const auto hf = to_hf_name(name);
    DT_CHECK_ARG(hf.has_value(), "save_hf: the model's tensor '", name, "' has no Hugging Face name");
    tensors.push_back({*hf, t.dtype() == dtype ? t : dt::to(t, dtype)});
  }
  DT_CHECK_ARG(!tensors.empty(), "save_hf: the model has no parameters");
  HfConfig written = config;
  written.dtype = dtype;
  checkpoint::make_dirs(folder);
  // The config first: export_safetensors is collective, so when it returns on any rank rank 0 wrote this.
  if (tensors.front().second.mesh().global_rank() == 0) {
    checkpoint::write_file_atomically(join_path(folder, "config.json"), hf_config_json(written));
    // The other form of a previous save would be read instead of this one (the index wins) or left stale.
    if (options.max_shard_bytes == 0) checkpoint::remove_file(join_path(folder, "model.safetensors.index.json"));
    if (options.max_shard_bytes > 0) checkpoint::remove_file(join_path(folder, "model.safetensors"));
  }
  checkpoint::ExportOptions eo;
  eo.max_shard_bytes = options.max_shard_bytes;
  eo.progress = options.progress;
  const char* name = options.max_shard_bytes > 0 ? "model.safetensors.index.json" : "model.safetensors";
  checkpoint::export_safetensors(join_path(folder, name), tensors, eo);
}

}  // namespace dt::nn
