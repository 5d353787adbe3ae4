/* Every call of the C API from C99, on 1, 2 or 4 processes (dtrun) or one (no launcher), checked against values
 * computed here from the full tensors: meshes, placements, DTensors (copy and zero copy), redistribution (sync and
 * async), ops, layouts and plans, DLPack both ways, checkpoints, the FSDP engine, and bad input (NULL pointers and
 * handles, destroyed and double-destroyed handles, handles of another kind, unknown codes, wrong shapes, a call from
 * another thread), which must return a status and a message, never crash.
 *
 * usage: c_api_test SCRATCH_DIR */
#include <dtensor/c_api.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0;
static int g_failures = 0;

#define CHECK(call)                                                                                           \
  do {                                                                                                        \
    dt_status_t s_ = (call);                                                                                  \
    if (s_ != DT_OK) {                                                                                        \
      fprintf(stderr, "[r%d] %s:%d: %s -> %s: %s\n", g_rank, __FILE__, __LINE__, #call, dt_status_string(s_), \
              dt_last_error());                                                                               \
      exit(1);                                                                                                \
    }                                                                                                         \
  } while (0)

/* A call that must fail with `want` and leave a message containing `needle`. */
#define EXPECT_STATUS(want, needle, call)                                                                       \
  do {                                                                                                          \
    dt_status_t s_ = (call);                                                                                    \
    if (s_ != (want) || strstr(dt_last_error(), (needle)) == NULL) {                                            \
      fprintf(stderr, "[r%d] %s:%d: %s -> %s (%s), expected %s with '%s'\n", g_rank, __FILE__, __LINE__, #call, \
              dt_status_string(s_), dt_last_error(), dt_status_string(want), (needle));                         \
      ++g_failures;                                                                                             \
    }                                                                                                           \
  } while (0)

#define EXPECT(cond)                                                                    \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "[r%d] %s:%d: expected %s\n", g_rank, __FILE__, __LINE__, #cond); \
      ++g_failures;                                                                     \
    }                                                                                   \
  } while (0)

static dt_placement_t shard(int32_t dim) {
  dt_placement_t p = {DT_SHARD, dim, 0, -1};
  return p;
}
static dt_placement_t replicate(void) {
  dt_placement_t p = {DT_REPLICATE, 0, 0, -1};
  return p;
}

static dt_buffer_t buffer(void* data, int32_t dtype, int32_t ndim, const int64_t* shape) {
  dt_buffer_t b;
  b.data = data;
  b.dtype = dtype;
  b.ndim = ndim;
  b.shape = shape;
  b.strides = NULL;
  b.device = dt_cpu();
  return b;
}

static int g_released = 0;
static void count_release(void* context) { g_released += *(int*)context; }

static int g_dl_deleted = 0;
static void dl_deleter(DLManagedTensorVersioned* self) {
  ++g_dl_deleted;
  free(self->dl_tensor.data);
  free(self);
}

struct thread_call {
  dt_tensor_t t;
  dt_status_t status;
  char message[512];
};
/* A versioned DLPack CPU f32 tensor of `shape` (2 dims) over `data`, released through dl_deleter. */
static DLManagedTensorVersioned* dl_cpu_f32(void* data, int64_t* shape) {
  DLManagedTensorVersioned* m = (DLManagedTensorVersioned*)calloc(1, sizeof *m);
  m->version.major = 1;
  m->deleter = dl_deleter;
  m->dl_tensor.data = data;
  m->dl_tensor.device.device_type = kDLCPU;
  m->dl_tensor.ndim = 2;
  m->dl_tensor.dtype.code = kDLFloat;
  m->dl_tensor.dtype.bits = 32;
  m->dl_tensor.dtype.lanes = 1;
  m->dl_tensor.shape = shape;
  return m;
}

static void* redistribute_from_thread(void* arg) {
  struct thread_call* c = (struct thread_call*)arg;
  dt_placement_t r[1];
  dt_tensor_t out;
  r[0] = replicate();
  c->status = dt_tensor_redistribute(c->t, r, 1, &out);
  strncpy(c->message, dt_last_error(), sizeof c->message - 1);
  return NULL;
}

int main(int argc, char** argv) {
  dt_comm_t world;
  dt_mesh_t mesh, flat_mesh, t_mesh;
  int32_t rank, size, ndim, n, i, j, dtype, done, n_out;
  int64_t mesh_size[1], coord[1], shape[2], local_shape[2], offset[2], shape_a[2] = {7, 5};
  float full[35], back[35], local_buf[35];
  dt_placement_t spec[2], got[4];
  dt_tensor_t x, y, z, sum, outputs[2];
  dt_work_t work;
  char text[4096];
  size_t needed;
  const char* scratch = argc > 1 ? argv[1] : "/tmp";

  /* ---- version and statuses ---- */
  EXPECT((dt_version() >> 16) == DT_C_API_VERSION_MAJOR);
  EXPECT(strcmp(dt_status_string(DT_ERR_TIMEOUT), "DT_ERR_TIMEOUT") == 0);
  EXPECT(strcmp(dt_status_string((dt_status_t)99), "unknown status") == 0);
  EXPECT(strlen(dt_version_string()) > 0);

  CHECK(dt_init_from_env(NULL, &world));
  CHECK(dt_comm_rank(world, &rank));
  CHECK(dt_comm_size(world, &size));
  g_rank = rank;
  CHECK(dt_comm_barrier(world));

  /* ---- placements as text ---- */
  CHECK(dt_placements_parse("S(0)[1],S(0)[0]", 2, got, 4, &n));
  EXPECT(n == 2 && got[0].kind == DT_SHARD && got[0].dim == 0 && got[0].order == 1 && got[1].order == 0);
  CHECK(dt_placements_format(got, n, text, sizeof text, &needed));
  EXPECT(strcmp(text, "S(0)[1],S(0)[0]") == 0 && needed == strlen(text) + 1);
  CHECK(dt_placements_parse("P(max),R", -1, got, 4, &n));
  EXPECT(n == 2 && got[0].kind == DT_PARTIAL && got[0].reduce_op == DT_REDUCE_MAX && got[1].kind == DT_REPLICATE);
  EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "S(x", dt_placements_parse("S(x),R", 2, got, 4, &n));
  EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "room", dt_placements_parse("R,R,R", -1, got, 2, &n));

  /* ---- layouts and plans ---- */
  {
    int64_t mesh4[1] = {4}, c2[1] = {3}, ls[2], off[2];
    spec[0] = shard(0);
    CHECK(dt_layout_block(shape_a, 2, mesh4, 1, spec, c2, ls, off));
    EXPECT(ls[0] == 1 && ls[1] == 5 && off[0] == 6 && off[1] == 0); /* 7 rows over 4: 2, 2, 2, 1 */
    got[0] = shard(1);
    CHECK(dt_plan_describe(shape_a, 2, mesh4, 1, spec, got, DT_FLOAT32, text, sizeof text, &needed));
    EXPECT(strstr(text, "all_to_all") != NULL);
  }

  /* ---- meshes ---- */
  mesh_size[0] = size;
  {
    const char* names[1] = {"dp"};
    CHECK(dt_mesh_create(world, dt_cpu(), mesh_size, 1, names, &mesh));
  }
  CHECK(dt_mesh_ndim(mesh, &ndim));
  EXPECT(ndim == 1);
  CHECK(dt_mesh_shape(mesh, mesh_size, 1));
  EXPECT(mesh_size[0] == size);
  CHECK(dt_mesh_coordinate(mesh, coord, 1));
  EXPECT(coord[0] == rank);
  if (size == 4) {
    int64_t sizes2[2] = {2, 2}, c[2], s[1];
    const char* names2[2] = {"a", "b"};
    const char* sub_names[1] = {"b"};
    dt_mesh_t m2, sub;
    CHECK(dt_mesh_create(world, dt_cpu(), sizes2, 2, names2, &m2));
    CHECK(dt_mesh_sub(m2, sub_names, 1, &sub));
    CHECK(dt_mesh_coordinate(sub, c, 1));
    EXPECT(c[0] == rank % 2);
    CHECK(dt_mesh_flatten(m2, names2, 2, "ab", &flat_mesh));
    CHECK(dt_mesh_shape(flat_mesh, s, 1));
    EXPECT(s[0] == 4);
    CHECK(dt_mesh_destroy(sub));
    CHECK(dt_mesh_destroy(flat_mesh));
    CHECK(dt_mesh_destroy(m2));
  }

  /* ---- a DTensor from the full tensor, and everything it answers ---- */
  for (i = 0; i < 35; ++i) full[i] = (float)i * 0.5f - 3.0f;
  {
    dt_buffer_t b = buffer(full, DT_FLOAT32, 2, shape_a);
    spec[0] = shard(0);
    CHECK(dt_tensor_distribute(mesh, &b, spec, 1, -1, &x));
  }
  CHECK(dt_tensor_dtype(x, &dtype));
  EXPECT(dtype == DT_FLOAT32);
  CHECK(dt_tensor_ndim(x, &ndim));
  EXPECT(ndim == 2);
  CHECK(dt_tensor_shape(x, shape, 2));
  EXPECT(shape[0] == 7 && shape[1] == 5);
  CHECK(dt_tensor_local_shape(x, local_shape, 2));
  CHECK(dt_tensor_local_offset(x, offset, 2));
  {
    int64_t ls[2], off[2], me[1];
    me[0] = rank;
    CHECK(dt_layout_block(shape_a, 2, mesh_size, 1, spec, me, ls, off));
    EXPECT(ls[0] == local_shape[0] && ls[1] == local_shape[1] && off[0] == offset[0] && off[1] == offset[1]);
  }
  {
    void* data;
    float* f;
    CHECK(dt_tensor_local_data(x, &data));
    f = (float*)data;
    for (i = 0; i < local_shape[0] * local_shape[1]; ++i) EXPECT(f[i] == full[offset[0] * 5 + i]);
  }
  {
    dt_buffer_t b = buffer(local_buf, DT_FLOAT32, 2, local_shape);
    CHECK(dt_tensor_to_local(x, &b));
    for (i = 0; i < local_shape[0] * local_shape[1]; ++i) EXPECT(local_buf[i] == full[offset[0] * 5 + i]);
  }
  {
    dt_buffer_t b = buffer(back, DT_FLOAT32, 2, shape_a);
    CHECK(dt_tensor_full(x, &b));
    EXPECT(memcmp(back, full, sizeof full) == 0);
  }
  CHECK(dt_tensor_placements(x, got, 4, &n));
  EXPECT(n == 1 && got[0].kind == DT_SHARD && got[0].dim == 0);
  CHECK(dt_tensor_describe(x, text, sizeof text, &needed));
  EXPECT(strstr(text, "S(0)") != NULL);
  CHECK(dt_tensor_mesh(x, &t_mesh));
  CHECK(dt_mesh_ndim(t_mesh, &ndim));
  EXPECT(ndim == 1);
  CHECK(dt_mesh_destroy(t_mesh));

  /* ---- redistribution, sync and async ---- */
  spec[0] = shard(1);
  CHECK(dt_tensor_redistribute(x, spec, 1, &y));
  CHECK(dt_tensor_local_shape(y, local_shape, 2));
  CHECK(dt_tensor_local_offset(y, offset, 2));
  {
    dt_buffer_t b = buffer(local_buf, DT_FLOAT32, 2, local_shape);
    CHECK(dt_tensor_to_local(y, &b));
    for (i = 0; i < local_shape[0]; ++i)
      for (j = 0; j < local_shape[1]; ++j) EXPECT(local_buf[i * local_shape[1] + j] == full[i * 5 + offset[1] + j]);
  }
  spec[0] = replicate();
  CHECK(dt_tensor_redistribute_async(y, spec, 1, &work));
  CHECK(dt_work_test(work, &done));
  CHECK(dt_work_wait(work, &z));
  {
    dt_buffer_t b = buffer(back, DT_FLOAT32, 2, shape_a);
    CHECK(dt_tensor_to_local(z, &b));
    EXPECT(memcmp(back, full, sizeof full) == 0);
  }
  EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "already", dt_work_wait(work, &z));
  CHECK(dt_work_destroy(work));

  /* ---- ops ---- */
  {
    dt_tensor_t in[2];
    in[0] = x;
    in[1] = y;
    CHECK(dt_tensor_op("add", in, 2, NULL, 0, outputs, 2, &n_out));
    EXPECT(n_out == 1);
    sum = outputs[0];
    {
      dt_buffer_t b = buffer(back, DT_FLOAT32, 2, shape_a);
      CHECK(dt_tensor_full(sum, &b));
      for (i = 0; i < 35; ++i) EXPECT(back[i] == 2 * full[i]);
    }
    {
      dt_op_param_t p[2];
      float total = 0, expect_total = 0;
      int64_t dims[1] = {1};
      int64_t scalar_shape[1] = {7};
      dt_buffer_t b = buffer(back, DT_FLOAT32, 1, scalar_shape);
      p[0].name = "dims";
      p[0].kind = DT_PARAM_INTS;
      p[0].ints = dims;
      p[0].n_ints = 1;
      p[1].name = "keepdim";
      p[1].kind = DT_PARAM_BOOL;
      p[1].i = 0;
      CHECK(dt_tensor_op("sum", in, 1, p, 2, outputs, 2, &n_out));
      CHECK(dt_tensor_full(outputs[0], &b));
      for (i = 0; i < 7; ++i) total += back[i];
      for (i = 0; i < 35; ++i) expect_total += full[i];
      EXPECT(fabsf(total - expect_total) < 1e-3f);
      CHECK(dt_tensor_destroy(outputs[0]));
    }
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "no op named 'frobnicate'",
                  dt_tensor_op("frobnicate", in, 1, NULL, 0, outputs, 2, &n_out));
    CHECK(dt_ops_list(text, sizeof text, &needed));
    EXPECT(strstr(text, "matmul") != NULL && strstr(text, "add") != NULL);
  }

  /* ---- from_local: a copy, and zero copy with a release callback ---- */
  {
    float* mine = (float*)malloc(sizeof(float) * 6);
    int64_t ls[2] = {2, 3}, gs[2];
    int weight = 1;
    void* data;
    dt_from_local_params_t params;
    dt_tensor_t zc, cp;
    dt_buffer_t b = buffer(mine, DT_FLOAT32, 2, ls);
    for (i = 0; i < 6; ++i) mine[i] = (float)(rank * 100 + i);
    spec[0] = shard(0);
    CHECK(dt_tensor_from_local(mesh, &b, spec, 1, NULL, &cp));
    CHECK(dt_tensor_shape(cp, gs, 2));
    EXPECT(gs[0] == 2 * size && gs[1] == 3);
    CHECK(dt_tensor_local_data(cp, &data));
    EXPECT(data != (void*)mine);
    dt_from_local_params_init(&params);
    params.mode = DT_ZERO_COPY;
    params.release = count_release;
    params.release_context = &weight;
    params.global_shape = gs;
    params.global_ndim = 2;
    CHECK(dt_tensor_from_local(mesh, &b, spec, 1, &params, &zc));
    CHECK(dt_tensor_local_data(zc, &data));
    EXPECT(data == (void*)mine); /* zero copy: the very buffer */
    EXPECT(g_released == 0);
    CHECK(dt_tensor_destroy(zc));
    EXPECT(g_released == 1); /* released exactly once, when the tensor went */
    CHECK(dt_tensor_destroy(cp));
    free(mine);
  }

  /* ---- DLPack ---- */
  {
    DLManagedTensorVersioned* dl;
    void* data;
    CHECK(dt_tensor_to_dlpack(x, 0, &dl));
    CHECK(dt_tensor_local_data(x, &data));
    EXPECT(dl->dl_tensor.data == data); /* zero copy */
    EXPECT(dl->version.major == 1 && dl->dl_tensor.dtype.code == kDLFloat && dl->dl_tensor.dtype.bits == 32);
    EXPECT(dl->flags == 0);
    dl->deleter(dl);
    CHECK(dt_tensor_to_dlpack(x, DT_DLPACK_COPY | DT_DLPACK_READ_ONLY, &dl));
    EXPECT(dl->dl_tensor.data != data && (dl->flags & DLPACK_FLAG_BITMASK_READ_ONLY) &&
           (dl->flags & DLPACK_FLAG_BITMASK_IS_COPIED));
    dl->deleter(dl);
  }
  {
    static int64_t dl_shape[2] = {3, 2};
    DLManagedTensorVersioned* m;
    dt_tensor_t from_dl;
    void* data;
    float* values = (float*)malloc(6 * sizeof(float));
    for (i = 0; i < 6; ++i) values[i] = (float)(rank * 10 + i);
    m = dl_cpu_f32(values, dl_shape);
    spec[0] = shard(0);
    CHECK(dt_tensor_from_dlpack(mesh, m, spec, 1, NULL, 0, &from_dl));
    CHECK(dt_tensor_local_data(from_dl, &data));
    EXPECT(data == (void*)values);
    EXPECT(g_dl_deleted == 0);
    CHECK(dt_tensor_destroy(from_dl));
    EXPECT(g_dl_deleted == 1);
    /* A bad one is still released (ownership passes on every path). */
    m = dl_cpu_f32(malloc(6 * sizeof(float)), dl_shape);
    m->version.major = 9;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "major version 9",
                  dt_tensor_from_dlpack(mesh, m, spec, 1, NULL, 0, &from_dl));
    EXPECT(g_dl_deleted == 2);
    {
      /* Params read as dt_tensor_from_local reads them: an unset struct_size is refused, the tensor released. */
      dt_from_local_params_t bad;
      dt_from_local_params_init(&bad);
      bad.struct_size = 0;
      m = dl_cpu_f32(malloc(6 * sizeof(float)), dl_shape);
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "params.struct_size is 0",
                    dt_tensor_from_dlpack(mesh, m, spec, 1, &bad, 0, &from_dl));
      EXPECT(g_dl_deleted == 3);
    }
  }

  /* ---- checkpoints ---- */
  {
    char dir[1024];
    const char* names[1] = {"x"};
    dt_tensor_t loaded;
    dt_buffer_t zb;
    float zeros[35];
    memset(zeros, 0, sizeof zeros);
    snprintf(dir, sizeof dir, "%s/c_api_ckpt_%d", scratch, size);
    CHECK(dt_checkpoint_save(dir, names, &x, 1, "{\"step\": 7, \"tag\": \"c\"}", NULL));
    zb = buffer(zeros, DT_FLOAT32, 2, shape_a);
    spec[0] = shard(1);
    CHECK(dt_tensor_distribute(mesh, &zb, spec, 1, -1, &loaded));
    CHECK(dt_checkpoint_load(dir, names, &loaded, 1, 1, text, sizeof text, &needed));
    EXPECT(strstr(text, "\"step\":7") != NULL);
    {
      dt_buffer_t b = buffer(back, DT_FLOAT32, 2, shape_a);
      CHECK(dt_tensor_full(loaded, &b));
      EXPECT(memcmp(back, full, sizeof full) == 0);
    }
    CHECK(dt_checkpoint_save(dir, names, &y, 1, NULL, &work));
    CHECK(dt_work_wait(work, NULL));
    CHECK(dt_work_destroy(work));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "not a JSON object", dt_checkpoint_save(dir, names, &x, 1, "[1,2]", NULL));
    {
      const char* wrong[1] = {"nope"};
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "missing from the checkpoint: 'nope'",
                    dt_checkpoint_load(dir, wrong, &loaded, 1, 1, NULL, 0, NULL));
    }
    CHECK(dt_tensor_destroy(loaded));
  }

  /* ---- the FSDP engine: gather, reduce gradients ---- */
  {
    float w[15], wb[15], g[15], gs[15];
    int64_t wshape[2] = {5, 3};
    dt_tensor_t param, grad, gathered, shard_t, rgrad;
    dt_fsdp_group_t group;
    dt_fsdp_options_t opts;
    dt_fsdp_memory_t mem;
    const char* pnames[1] = {"w"};
    for (i = 0; i < 15; ++i) w[i] = (float)i;
    {
      dt_buffer_t b = buffer(w, DT_FLOAT32, 2, wshape);
      spec[0] = replicate();
      CHECK(dt_tensor_distribute(mesh, &b, spec, 1, -1, &param));
    }
    dt_fsdp_options_init(&opts);
    CHECK(dt_fsdp_group_create(mesh, "block", pnames, &param, 1, &opts, &group));
    CHECK(dt_fsdp_group_sharded_param(group, 0, &shard_t));
    CHECK(dt_tensor_placements(shard_t, got, 4, &n));
    EXPECT(n == 1 && got[0].kind == DT_SHARD && got[0].dim == 0);
    CHECK(dt_fsdp_group_unshard(group, 1));
    CHECK(dt_fsdp_group_wait_unshard(group));
    CHECK(dt_fsdp_group_unsharded_param(group, 0, &gathered));
    {
      dt_buffer_t b = buffer(wb, DT_FLOAT32, 2, wshape);
      CHECK(dt_tensor_full(gathered, &b));
      EXPECT(memcmp(wb, w, sizeof w) == 0);
    }
    CHECK(dt_fsdp_group_reshard(group, 0));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "not unsharded", dt_fsdp_group_unsharded_param(group, 0, &gathered));
    /* Each rank's gradient is (rank + 1) * index; the reduced shard is their average. */
    for (i = 0; i < 15; ++i) g[i] = (float)((rank + 1) * i);
    {
      dt_buffer_t b = buffer(g, DT_FLOAT32, 2, wshape);
      spec[0] = replicate();
      CHECK(dt_tensor_distribute(mesh, &b, spec, 1, -1, &grad));
    }
    CHECK(dt_fsdp_group_unshard(group, 0));
    CHECK(dt_fsdp_group_accumulate_grad(group, 0, grad));
    CHECK(dt_fsdp_group_reduce_grads(group));
    CHECK(dt_fsdp_group_wait_reduce(group));
    CHECK(dt_fsdp_group_sharded_grad(group, 0, &rgrad));
    EXPECT(rgrad != NULL);
    {
      dt_buffer_t b = buffer(gs, DT_FLOAT32, 2, wshape);
      const float mean_factor = (float)(size + 1) / 2.0f;
      CHECK(dt_tensor_full(rgrad, &b));
      for (i = 0; i < 15; ++i) EXPECT(fabsf(gs[i] - mean_factor * (float)i) < 1e-5f);
    }
    CHECK(dt_fsdp_group_reshard(group, 0));
    mem.struct_size = sizeof mem;
    CHECK(dt_fsdp_group_memory(group, &mem));
    {
      int64_t ls[2], off[2], me[1];
      dt_placement_t s0 = shard(0);
      me[0] = rank;
      CHECK(dt_layout_block(wshape, 2, mesh_size, 1, &s0, me, ls, off));
      EXPECT(mem.sharded_bytes == ls[0] * 3 * 4); /* this rank's rows (torch.chunk: 5 over 4 is 2, 2, 1, 0) */
    }
    /* The batched hand-offs of a framework's hooks: addresses, DLPack exports, a gradient taken over. */
    {
      void* ptrs[2] = {NULL, NULL};
      DLManagedTensorVersioned* views[2] = {NULL, NULL};
      int64_t gshape[2] = {5, 3}, bad_shape[2] = {3, 5}, ls[2], off[2], me[1];
      float* gd = (float*)malloc(sizeof g);
      const int deleted = g_dl_deleted;
      dt_placement_t s0 = shard(0);
      me[0] = rank;
      CHECK(dt_layout_block(wshape, 2, mesh_size, 1, &s0, me, ls, off));
      CHECK(dt_fsdp_group_unshard(group, 0));
      CHECK(dt_fsdp_group_unsharded_data(group, ptrs, 1));
      CHECK(dt_fsdp_group_export(group, DT_FSDP_UNSHARDED_PARAMS, views, 1));
      EXPECT(ptrs[0] != NULL && views[0]->dl_tensor.data == ptrs[0] && views[0]->dl_tensor.ndim == 2);
      EXPECT(memcmp(views[0]->dl_tensor.data, w, sizeof w) == 0);
      views[0]->deleter(views[0]);
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "has 1 parameters", dt_fsdp_group_unsharded_data(group, ptrs, 2));
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "what 7", dt_fsdp_group_export(group, 7, views, 1));
      /* A gradient of the wrong shape is refused by name, and its deleter still runs. */
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "the gradient of w has local shape [3, 5]",
                    dt_fsdp_group_accumulate_grad_dlpack(group, 0, dl_cpu_f32(malloc(sizeof g), bad_shape)));
      EXPECT(g_dl_deleted == deleted + 1);
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "grad is NULL", dt_fsdp_group_accumulate_grad_dlpack(group, 0, NULL));
      for (i = 0; i < 15; ++i) gd[i] = (float)((rank + 1) * i);
      CHECK(dt_fsdp_group_accumulate_grad_dlpack(group, 0, dl_cpu_f32(gd, gshape)));
      CHECK(dt_fsdp_group_reduce_grads(group));
      CHECK(dt_fsdp_group_wait_reduce(group));
      EXPECT(g_dl_deleted == deleted + 2); /* the reduction has read it: the engine released it */
      CHECK(dt_fsdp_group_export(group, DT_FSDP_SHARDED_GRADS, views, 1));
      if (ls[0] == 0) {
        EXPECT(views[0] == NULL || views[0]->dl_tensor.shape[0] == 0);
      } else {
        const float* rg = (const float*)views[0]->dl_tensor.data;
        const float mean_factor = (float)(size + 1) / 2.0f;
        EXPECT(views[0]->dl_tensor.shape[0] == ls[0]);
        for (i = 0; i < ls[0] * 3; ++i) EXPECT(fabsf(rg[i] - mean_factor * (float)(off[0] * 3 + i)) < 1e-5f);
      }
      if (views[0] != NULL) views[0]->deleter(views[0]);
      CHECK(dt_fsdp_group_reshard(group, 0));
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "not unsharded", dt_fsdp_group_unsharded_data(group, ptrs, 1));
      EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "not unsharded",
                    dt_fsdp_group_export(group, DT_FSDP_UNSHARDED_PARAMS, views, 1));
    }
    CHECK(dt_fsdp_group_set_requires_gradient_sync(group, 1));
    CHECK(dt_fsdp_group_set_gradient_divide_factor(group, 1.0));
    CHECK(dt_fsdp_group_set_gradient_divide_factor(group, 0.0));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "factor -2", dt_fsdp_group_set_gradient_divide_factor(group, -2.0));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "parameter index 3", dt_fsdp_group_sharded_param(group, 3, &shard_t));
    CHECK(dt_tensor_destroy(rgrad));
    CHECK(dt_tensor_destroy(gathered));
    CHECK(dt_tensor_destroy(shard_t));
    CHECK(dt_tensor_destroy(grad));
    CHECK(dt_tensor_destroy(param));
    CHECK(dt_fsdp_group_destroy(group));
  }

  /* ---- bad input: a status and a message, never a crash ---- */
  EXPECT_STATUS(DT_ERR_INVALID_HANDLE, "NULL tensor handle", dt_tensor_ndim(NULL, &ndim));
  EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "ndim is NULL", dt_tensor_ndim(x, NULL));
  EXPECT_STATUS(DT_ERR_INVALID_HANDLE, "is a mesh handle, not a tensor", dt_tensor_ndim((dt_tensor_t)mesh, &ndim));
  EXPECT_STATUS(DT_ERR_INVALID_HANDLE, "not a live handle", dt_tensor_ndim((dt_tensor_t)(uintptr_t)12345, &ndim));
  {
    dt_buffer_t b = buffer(full, 42, 2, shape_a);
    spec[0] = shard(0);
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "unknown dtype code 42", dt_tensor_distribute(mesh, &b, spec, 1, -1, &z));
    b.dtype = DT_FLOAT32;
    spec[0].kind = 7;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "unknown kind 7", dt_tensor_distribute(mesh, &b, spec, 1, -1, &z));
    spec[0] = shard(2);
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "Shard(2)", dt_tensor_distribute(mesh, &b, spec, 1, -1, &z));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "one per mesh dim", dt_tensor_distribute(mesh, &b, spec, 2, -1, &z));
    b.device.type = 5;
    spec[0] = shard(0);
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "unknown device type 5", dt_tensor_distribute(mesh, &b, spec, 1, -1, &z));
  }
  {
    float small[4];
    int64_t wrong[2] = {2, 2};
    dt_buffer_t b = buffer(small, DT_FLOAT32, 2, wrong);
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "but the tensor is f32 [7, 5]", dt_tensor_full(x, &b));
  }
  {
    dt_init_params_t p;
    dt_comm_t other;
    dt_init_params_init(&p);
    p.struct_size = 0;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "struct_size", dt_init(&p, &other));
    dt_init_params_init(&p);
    p.rank = 3;
    p.world_size = 2;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "rank 3 of world_size 2", dt_init(&p, &other));
  }
  {
    /* ---- a host's NCCL communicator and CUDA streams: the checks that need no GPU (tests/collectives/nccl/
     * nccl_adopt_test.cc runs them on one) ---- */
    dt_nccl_adopt_params_t ap;
    dt_comm_t adopted;
    dt_device_t bad_device = {5, 0};
    void* stream = &ndim;
    int not_a_comm = 0;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "nccl_comm is NULL", dt_comm_from_nccl(NULL, NULL, &adopted));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "out is NULL", dt_comm_from_nccl(&not_a_comm, NULL, NULL));
    dt_nccl_adopt_params_init(&ap);
    ap.struct_size = 0;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "struct_size", dt_comm_from_nccl(&not_a_comm, &ap, &adopted));
    dt_nccl_adopt_params_init(&ap);
    ap.may_abort = 7;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "may_abort is 7", dt_comm_from_nccl(&not_a_comm, &ap, &adopted));
    dt_nccl_adopt_params_init(&ap);
    ap.timeout_s = HUGE_VAL;
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "timeout_s is inf", dt_comm_from_nccl(&not_a_comm, &ap, &adopted));
#if !DT_TEST_HAS_NCCL
    EXPECT_STATUS(DT_ERR_UNSUPPORTED, "built without NCCL", dt_comm_from_nccl(&not_a_comm, NULL, &adopted));
#endif
    CHECK(dt_get_stream(dt_cpu(), &stream));
    EXPECT(stream == NULL);
    CHECK(dt_set_stream(dt_cpu(), NULL));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "has no streams", dt_set_stream(dt_cpu(), &not_a_comm));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "cuda_stream is NULL", dt_get_stream(dt_cpu(), NULL));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "unknown device type 5", dt_set_stream(bad_device, NULL));
    CHECK(dt_stream_wait(dt_cpu(), NULL));
    EXPECT_STATUS(DT_ERR_INVALID_ARGUMENT, "has no streams", dt_stream_wait(dt_cpu(), &not_a_comm));
#if !DT_TEST_HAS_CUDA
    EXPECT_STATUS(DT_ERR_UNSUPPORTED, "without CUDA", dt_set_stream(dt_cuda(0), NULL));
    EXPECT_STATUS(DT_ERR_UNSUPPORTED, "without CUDA", dt_stream_wait(dt_cuda(0), NULL));
#endif
  }
  {
    pthread_t th;
    struct thread_call c;
    c.t = x;
    c.message[0] = '\0';
    pthread_create(&th, NULL, redistribute_from_thread, &c);
    pthread_join(th, NULL);
    if (c.status != DT_ERR_INVALID_ARGUMENT || strstr(c.message, "from the thread that created the world") == NULL) {
      fprintf(stderr, "[r%d] a call from another thread returned %s: %s\n", rank, dt_status_string(c.status),
              c.message);
      ++g_failures;
    }
  }
  EXPECT(strlen(dt_last_error()) > 0);
  CHECK(dt_tensor_ndim(x, &ndim));
  EXPECT(strlen(dt_last_error()) == 0); /* a success clears the message */

  /* ---- destroy, and destroyed handles ---- */
  CHECK(dt_tensor_destroy(sum));
  CHECK(dt_tensor_destroy(z));
  CHECK(dt_tensor_destroy(y));
  CHECK(dt_tensor_destroy(x));
  EXPECT_STATUS(DT_ERR_INVALID_HANDLE, "not a live handle", dt_tensor_destroy(x));
  EXPECT_STATUS(DT_ERR_INVALID_HANDLE, "not a live handle", dt_tensor_ndim(x, &ndim));
  CHECK(dt_comm_barrier(world));
  CHECK(dt_mesh_destroy(mesh));
  CHECK(dt_comm_destroy(world));
  EXPECT_STATUS(DT_ERR_INVALID_HANDLE, "not a live handle", dt_comm_destroy(world));

  if (g_failures != 0) {
    fprintf(stderr, "[r%d] %d check(s) failed\n", rank, g_failures);
    return 1;
  }
  printf("[r%d] c_api_test: every call checked on %d rank(s)\n", rank, size);
  return 0;
}
