#include "dtensor/ops/dispatch.h"

#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/fault_inject.h"
#include "core/logging.h"
#include "core/trace.h"
#include "placement/planner.h"

namespace dt::ops {

// ---- OpCall ----

std::vector<IndexRange> OpCall::input_ranges(size_t i) const {
  return local_ranges(schema.inputs.at(i).shape, mesh.shape(), input_spec(i), mesh.coordinate());
}

std::vector<IndexRange> OpCall::output_ranges(size_t i) const {
  return local_ranges(outputs.at(i).shape, mesh.shape(), output_spec(i), mesh.coordinate());
}

Shape OpCall::output_local_shape(size_t i) const {
  return local_shape(outputs.at(i).shape, mesh.shape(), output_spec(i), mesh.coordinate());
}

std::vector<int64_t> OpCall::mesh_dims_sharding(size_t input, int64_t dim) const {
  std::vector<int64_t> out;
  const ShardingSpec& spec = input_spec(input);
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
    if (is_shard(spec[m], dim)) out.push_back(m);
  return out;
}

// ---- policy ----

namespace {

thread_local ImplicitRedistribute g_mode = ImplicitRedistribute::kAllow;

struct SchemaHash {
  size_t operator()(const OpSchema& s) const { return s.hash(); }
};
struct SchemaEq {
  bool operator()(const OpSchema& a, const OpSchema& b) const { return a.same_key(b); }
};

struct StrategyCache {
  std::mutex mu;
  std::unordered_map<OpSchema, Propagation, SchemaHash, SchemaEq> map;
  StrategyCacheStats stats;
};
StrategyCache& cache() {
  static StrategyCache* c = new StrategyCache();  // never destroyed: ops may run during static destruction
  return *c;
}
constexpr size_t kMaxCacheEntries = 1 << 14;

const std::vector<std::string>& names_of(const OpSchema& schema) {
  static const std::vector<std::string> kNone;
  try {
    return schema.id == OpId::kUnresolved ? find_rule(schema.op).input_names : rule_of(schema.id).input_names;
  } catch (const Error&) {
    return kNone;
  }
}

Propagation propagate_uncached(const OpSchema& schema) {
  const OpRule& rule = rule_of(schema.id);
  Propagation prop;
  prop.outputs = rule.meta(schema);
  std::vector<DimStrategy> dims = rule.strategies(schema, prop.outputs);
  std::vector<OpStrategy> candidates = expand_strategies(schema, prop.outputs, dims);
  bool found = false;
  double best = 0;
  for (OpStrategy& cand : candidates) {
    bool usable = true;
    for (const ShardingSpec& s : cand.outputs) usable = usable && is_usable_spec(s);
    if (!usable) continue;
    if (rule.validate && !rule.validate(schema, prop.outputs, cand)) continue;
    std::optional<double> cost = redistribute_cost(schema, cand);
    if (!cost) continue;
    cand.redistribute_cost = *cost;
    cand.extra_cost = rule.extra_cost ? rule.extra_cost(schema, prop.outputs, cand) : 0.0;
    ++prop.candidates;
    // Strictly cheaper wins, so ties keep the earlier (preferred) candidate.
    if (!found || cand.cost() < best - 1e-15) {
      found = true;
      best = cand.cost();
      prop.chosen = cand;
    }
  }
  if (!found) {
    std::string alternative;
    OpSchema replicated = schema;
    bool changed = false;
    for (TensorMeta& t : replicated.inputs) {
      if (t.defined && !t.spec.is_replicated()) {
        t.spec = ShardingSpec::replicated(schema.mesh.ndim());
        changed = true;
      }
    }
    if (changed) {
      try {
        alternative = propagate_uncached(replicated).chosen.to_string();
      } catch (const Error&) {
      }
    }
    DT_THROW(Unsupported, "dt::", schema.op, ": no sharding strategy accepts ",
             schema.describe_inputs(rule.input_names), " on ", schema.mesh.to_string(),
             alternative.empty() ? std::string(" (and none exists for these shapes)")
                                 : "; a layout that works: " + alternative +
                                       " (redistribute the inputs to it first; mixed Partial ops must be reduced)");
  }
  for (size_t i = 0; i < schema.inputs.size(); ++i)
    if (schema.inputs[i].defined && !(schema.inputs[i].spec == prop.chosen.inputs[i]))
      prop.redistributed_inputs.push_back(i);
  return prop;
}

}  // namespace

void set_implicit_redistribute(ImplicitRedistribute mode) { g_mode = mode; }
ImplicitRedistribute implicit_redistribute() { return g_mode; }

StrategyCacheStats strategy_cache_stats() {
  StrategyCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  StrategyCacheStats s = c.stats;
  s.size = int64_t(c.map.size());
  return s;
}

void clear_strategy_cache() {
  StrategyCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.map.clear();
  c.stats = {};
}

Propagation propagate(const OpSchema& given) {
  if (given.id == OpId::kUnresolved) {
    OpSchema resolved = given;
    resolved.id = op_id(given.op);
    return propagate(resolved);
  }
  const OpSchema& schema = given;
  StrategyCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(schema);
    if (it != c.map.end()) {
      ++c.stats.hits;
      return it->second;
    }
    ++c.stats.misses;
  }
  Propagation prop = propagate_uncached(schema);
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.map.size() >= kMaxCacheEntries) c.map.clear();
  c.map.emplace(schema, prop);
  return prop;
}

namespace {

// The schema of a call; checks that the inputs share one mesh.
OpSchema make_schema(const std::string& op, const std::vector<DTensor>& inputs, const OpParams& params,
                     DeviceMesh* mesh_out) {
  const DTensor* first = nullptr;
  for (const DTensor& t : inputs) {
    if (t.defined()) {
      first = &t;
      break;
    }
  }
  DT_CHECK_ARG(first != nullptr, "dt::", op, ": every input is undefined");
  const DeviceMesh& mesh = first->mesh();
  OpSchema schema(op, mesh.shape(), op_id(op));
  schema.params = params;
  const std::vector<std::string>& names = names_of(schema);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DTensor& t = inputs[i];
    TensorMeta meta;
    if (!t.defined()) {
      meta.defined = false;
      meta.spec = ShardingSpec::replicated(mesh.ndim());
    } else {
      DT_CHECK_ARG(t.mesh() == mesh || t.mesh().same_layout(mesh), "dt::", op, ": ",
                   i < names.size() ? names[i] : "input " + std::to_string(i), " is on ", t.mesh().to_string(),
                   " but the first input is on ", mesh.to_string(),
                   ": redistribute it to the same mesh first (DTensor::redistribute(mesh, placements))");
      meta.shape = t.shape();
      meta.dtype = t.dtype();
      meta.spec = t.spec();
    }
    schema.inputs.push_back(std::move(meta));
  }
  *mesh_out = mesh;
  return schema;
}

bool plan_has_collective(const Plan& plan) {
  for (const PlanStep& s : plan.steps)
    if (is_collective(s.kind)) return true;
  return false;
}

}  // namespace

Propagation explain(const std::string& op, const std::vector<DTensor>& inputs, const OpParams& params) {
  DeviceMesh mesh;
  return propagate(make_schema(op, inputs, params, &mesh));
}

namespace {

// An op span's args, formatted when the trace is written: {"shapes": "[4, 8], [8, 16]", "device": "cpu"}. Stored:
// the device, the count of inputs, then each input's rank and dims (-1 for an absent input), as many as fit.
trace::Deferred op_trace_args(const std::vector<Tensor>& locals, const Device& device) {
  trace::Deferred d;
  d.format = [](const int64_t* v, std::string& out) {
    const Device dev{DeviceType(v[0]), int(v[1])};
    out += "\"shapes\":\"";
    size_t i = 3;
    for (int64_t k = 0; k < v[2]; ++k) {
      if (k) out += ", ";
      if (v[i] < 0) {
        out += "-";
        ++i;
        continue;
      }
      trace::append_dims(out, v + i + 1, size_t(v[i]));
      i += size_t(v[i]) + 1;
    }
    out += "\",\"device\":";
    trace::append_string(out, dev.to_string());
  };
  d.push(int64_t(device.type));
  d.push(device.index);
  d.push(0);
  for (const Tensor& t : locals) {
    const size_t need = t.defined() ? t.shape().size() + 1 : 1;
    if (d.size + need > trace::kDeferred) break;  // the shapes that fit
    ++d.values[2];
    if (!t.defined()) {
      d.push(-1);
      continue;
    }
    d.push(int64_t(t.shape().size()));
    for (int64_t s : t.shape()) d.push(s);
  }
  return d;
}

}  // namespace

std::vector<DTensor> dispatch(const std::string& op, const std::vector<DTensor>& inputs, const OpParams& params) {
  DeviceMesh mesh;
  OpSchema schema = make_schema(op, inputs, params, &mesh);
  const OpRule& rule = rule_of(schema.id);
  Propagation prop = propagate(schema);
  const OpStrategy& chosen = prop.chosen;

  // Redistribute the inputs that need it (every rank decides alike: the choice depends on global metadata only).
  std::vector<DTensor> ready = inputs;
  if (!prop.direct()) {
    const bool strict = implicit_redistribute() == ImplicitRedistribute::kError;
    if (strict || log_enabled(LogLevel::kDebug)) {
      std::string what;
      bool collective = false;
      for (size_t i : prop.redistributed_inputs) {
        const TensorMeta& t = schema.inputs[i];
        const Plan& plan = plan_redistribution(schema.mesh, t.shape, dtype_size(t.dtype), t.spec, chosen.inputs[i]);
        collective = collective || plan_has_collective(plan);
        what += str_cat(what.empty() ? "" : "; ",
                        i < rule.input_names.size() ? rule.input_names[i] : "input " + std::to_string(i), " ",
                        t.spec.to_string(), " -> ", chosen.inputs[i].to_string(), " (", plan.steps.size(),
                        " steps, cost ", plan.cost, ")");
      }
      if (collective && strict) {
        DT_THROW(Unsupported, "dt::", op, ": no strategy takes ", schema.describe_inputs(rule.input_names), " on ",
                 schema.mesh.to_string(), " without communication; the cheapest supported layout is ",
                 chosen.to_string(), " (implicit redistribution is disabled: redistribute the inputs to it first)");
      }
      DT_LOG_DEBUG("dt::", op, ": inputs ", schema.describe_inputs(rule.input_names),
                   " have no direct strategy; redistributing ", what, " to run ", chosen.to_string());
    }
    if (mesh.is_member()) {
      for (size_t i : prop.redistributed_inputs) ready[i] = inputs[i].redistribute(chosen.inputs[i]);
    }
  }

  std::vector<DTensor> out;
  if (!mesh.is_member()) {
    for (size_t i = 0; i < prop.outputs.size(); ++i)
      out.push_back(DTensor::from_local_unchecked(Tensor::empty({0}, prop.outputs[i].dtype, mesh.device()), mesh,
                                                  chosen.outputs[i], prop.outputs[i].shape));
    return out;
  }

  std::vector<Tensor> locals;
  for (const DTensor& t : ready) locals.push_back(t.defined() ? t.to_local() : Tensor());
  OpCall call{schema, mesh, chosen, prop.outputs};
  fault::point("compute");                                    // Note [Fault injection]
  trace::Span span(trace::Category::kOp, rule.name.c_str());  // the registry's names live as long as the process
  trace::GpuSpan gpu_span(rule.name.c_str(), mesh.device().is_cuda() ? mesh.device().index : -1,
                          nullptr);  // the kernels' time on a CUDA device (Note [GPU spans])
  if (span.active()) {
    const trace::Deferred args = op_trace_args(locals, mesh.device());
    span.set_args(args);
    gpu_span.set_args(args);
  }
  std::vector<Tensor> results = rule.compute(call, locals);
  DT_ASSERT(results.size() == prop.outputs.size(), "dt::", op, " computed ", results.size(), " outputs, expected ",
            prop.outputs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    Shape want = call.output_local_shape(i);
    DT_ASSERT(results[i].defined() && results[i].shape() == want && results[i].dtype() == prop.outputs[i].dtype,
              "dt::", op, " output ", i, " under ", chosen.to_string(), ": local block ",
              results[i].defined() ? shape_str(results[i].shape()) : std::string("undefined"), " ",
              results[i].defined() ? dtype_name(results[i].dtype()) : "", ", expected ", shape_str(want), " ",
              dtype_name(prop.outputs[i].dtype));
    out.push_back(DTensor::from_local_unchecked(results[i], mesh, chosen.outputs[i], prop.outputs[i].shape));
  }
  return out;
}

DTensor dispatch_one(const std::string& op, const std::vector<DTensor>& inputs, const OpParams& params) {
  std::vector<DTensor> out = dispatch(op, inputs, params);
  DT_ASSERT(out.size() == 1, "dt::", op, " has ", out.size(), " outputs");
  return out[0];
}

}  // namespace dt::ops
