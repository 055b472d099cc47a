// The emulator's runner: a process that runs emitted kernels on CPU fibers, one per client.
//
//   emu_runner --serve
//
// It stays up and serves requests from emmy/runtime/emu_serve.py: one line on stdin each
// (a "program" request is followed by its launch lines), one answer line on stdout each,
// "ok [RESULT]" or "error MESSAGE" (a request refused; the runner goes on serving). Ids are the
// client's; numbers are decimal unless said otherwise.
//   map REGION BYTES PATH        map device memory: the file PATH (BYTES, whole pages), shared
//                                with the client, between two guard pages
//   unmap REGION
//   so OBJECT PATH               load a kernel shared object (built with -DEMMY_EMU)
//   unload OBJECT                unload it, and forget the programs that use it
//   program ID OBJECT SLOTS N    define a program of N launches over SLOTS buffer slots; then
//                                N lines "launch KERNEL GX GY GZ BX BY BZ SMEM ARG...", each ARG
//                                s:SLOT:BYTE_OFFSET | i32:V | i64:V | f32:HEXBITS; packed and
//                                checked against the kernel's __emmy_params once, here
//   drop ID                      forget a program
//   run ID WORKERS forward|reverse|shuffle SEED deferred|eager SMEM_LIMIT REGION:OFFSET...
//                                bind slot k to the k-th REGION:OFFSET and run the launches in
//                                order; answers "ok SECONDS" (measured here). The threads of a
//                                block resume in thread order, reversed, or shuffled by SEED;
//                                cp_asyncs land at the wait that retires them, or at issue (the
//                                two ends of what a GPU may do, see emmy_device_emu.h)
//   time ID WARMUP REPS WORKERS SMEM_LIMIT REGION:OFFSET...
//                                answers "ok SECONDS..." one per repetition, after WARMUP runs
//                                (forward, deferred)
// EOF on stdin ends the runner. A kernel that fails at run time (a crash, a deadlock, a
// misaligned access...) kills the runner, as a GPU context dies: one line "error: ..." on
// stderr naming the kernel, block and thread, then exit status 3 or death by the signal. The
// client reports it and starts a fresh runner. A fault a GPU reports as a sticky CUDA error
// starts with that error's enum name and text (CUDA_ERROR_MISALIGNED_ADDRESS: misaligned
// address), so that the client classifies it as it would the GPU's. Kernels' own stdout goes
// to stderr.
//
// Each CUDA thread is a fiber (own stack slot, see emmy_device_emu.h); each worker OS thread
// runs whole blocks, one at a time, resuming its ready fibers in the schedule's order until all
// are done. Fibers only give up the CPU at barriers, shuffles and warp collectives.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <unordered_map>
#include <vector>

#include "emmy_device.cuh"

#if !defined(__x86_64__) || defined(EMMY_EMU_UCONTEXT)
#define EMMY_USE_UCONTEXT 1
#include <ucontext.h>
#endif
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

using emmy::emu::dim3u;
using emmy::emu::ThreadCtx;

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kSlot = size_t(1) << EMMY_EMU_STACK_BITS;
constexpr unsigned kMaxThreads = 1024;

enum State { kReady, kAtBarrier, kAtWarp, kDone };

struct Worker;

// Lives at the base of its stack slot: [Fiber | guard page | stack growing down to the guard].
struct Fiber {
  ThreadCtx ctx;  // first, so that emmy::emu::ctx() finds it
  Worker* worker;
  int state;
  void* sp;
#ifdef EMMY_USE_UCONTEXT
  ucontext_t uc;
#endif
};
static_assert(sizeof(Fiber) <= kPage, "Fiber must fit below the guard page");

constexpr int kCollective = 4;  // Warp::mode of a pending emmy_emu_collective (shuffles: 0-3)

struct Warp {
  float val[32], res[32];
  int src[32];
  int mode, width, site;  // of the pending shuffle: every lane must be at the same one
  unsigned arrived, size;
  void* arg[32];  // of the pending collective, by lane
  void (*fn)(void* const*);
};

struct Launch {
  std::string kernel;
  void (*entry)(void**);
  const unsigned char* params;
  unsigned grid[3], block[3];
  size_t smem;
  std::vector<uint64_t> values;
  std::vector<int> sizes;
  std::vector<void*> args;
};

struct Worker {
  char* slots = nullptr;
  unsigned fibers = 0;  // slots initialised so far
  unsigned index = 0;  // in the pool; 0 is the serving thread
  unsigned char* smem_end = nullptr;
  size_t smem_cap = 0;
  void* sched_sp = nullptr;
#ifdef EMMY_USE_UCONTEXT
  ucontext_t sched_uc;
#endif
#ifdef __SANITIZE_ADDRESS__
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
  const Launch* launch = nullptr;
  Fiber* current = nullptr;
  unsigned nthreads = 0, barrier_arrived = 0;
  dim3u block_idx{};
  bool restart = false;
  Warp warps[kMaxThreads / 32];
  unsigned order[kMaxThreads];
  char altstack[32768];
  pthread_t thread{};
};

// ---- configuration and global state ----
int g_workers = 1;
size_t g_smem_limit = 227 * 1024;
int g_schedule = 0;  // 0 forward, 1 reverse, 2 shuffle
uint64_t g_seed = 0;
bool g_cp_eager = false;  // the run lands cp_asyncs at issue (else at their wait)
std::vector<Worker*> g_pool;
std::atomic<uint64_t> g_next_block{0};
uint64_t g_nblocks = 0;
thread_local Worker* tl_worker = nullptr;

Fiber* fiber(Worker* w, unsigned i) { return reinterpret_cast<Fiber*>(w->slots + i * kSlot); }
Fiber* self() { return reinterpret_cast<Fiber*>(emmy::emu::ctx()); }

[[noreturn]] void fail(const char* fmt, ...) {
  static std::atomic<int> once{0};
  if (once.exchange(1)) {
    for (;;) pause();  // another thread is already reporting and exiting
  }
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "error: %s\n", buf);
  fflush(stderr);
  _exit(3);
}

// "kernel 'k', block (x,y,z), thread (x,y,z)" for messages.
std::string where(const Fiber* f) {
  char buf[512];
  const ThreadCtx& c = f->ctx;
  snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u)",
           f->worker->launch->kernel.c_str(), c.block_idx.x, c.block_idx.y, c.block_idx.z,
           c.thread_idx.x, c.thread_idx.y, c.thread_idx.z);
  return buf;
}
std::string where_block(const Worker* w) {
  char buf[512];
  snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u)", w->launch->kernel.c_str(),
           w->block_idx.x, w->block_idx.y, w->block_idx.z);
  return buf;
}

void* map_or_die(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) fail("out of memory mapping %zu bytes", bytes);
  return p;
}

// Memory of `bytes` bytes that ends (rounded up to `align`) right at a guard page, with another
// guard page below, so that overruns fault like they would on a GPU instead of passing silently.
unsigned char* guarded(size_t bytes, size_t align) {
  const size_t body = (bytes + align - 1) / align * align;
  const size_t pages = (body + kPage - 1) / kPage * kPage;
  char* base = static_cast<char*>(map_or_die(pages + 2 * kPage));
  mprotect(base, kPage, PROT_NONE);
  mprotect(base + kPage + pages, kPage, PROT_NONE);
  return reinterpret_cast<unsigned char*>(base + kPage + pages - body);
}

}  // namespace

// ---- context switching ----
extern "C" void emmy_fiber_main(Fiber* f);

#ifndef EMMY_USE_UCONTEXT
// Saves the callee-saved registers on the current stack, stores rsp in *save, switches to
// `next` and pops its registers. A fresh fiber's stack is laid out so that the final `ret`
// enters emmy_fiber_trampoline with the Fiber* in r12.
extern "C" void emmy_switch(void** save, void* next);
extern "C" void emmy_fiber_trampoline();
asm(R"(
  .text
  .p2align 4
  .type emmy_switch,@function
emmy_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emmy_switch, .-emmy_switch
  .type emmy_fiber_trampoline,@function
emmy_fiber_trampoline:
  movq %r12, %rdi
  call emmy_fiber_main
  ud2
  .size emmy_fiber_trampoline, .-emmy_fiber_trampoline
)");
#else
extern "C" void emmy_fiber_entry_uc(unsigned lo, unsigned hi) {
  emmy_fiber_main(reinterpret_cast<Fiber*>((uintptr_t(hi) << 32) | lo));
}
#endif

namespace {

void init_fiber(Worker* w, unsigned i) {
  char* slot = w->slots + i * kSlot;
  Fiber* f = reinterpret_cast<Fiber*>(slot);
  memset(static_cast<void*>(f), 0, sizeof(Fiber));
  f->worker = w;
  f->state = kDone;
  mprotect(slot + kPage, kPage, PROT_NONE);
#ifndef EMMY_USE_UCONTEXT
  void** sp = reinterpret_cast<void**>(slot + kSlot - 72);  // trampoline starts 16-aligned
  for (int r = 0; r < 6; ++r) sp[r] = nullptr;
  sp[3] = f;  // r12
  sp[6] = reinterpret_cast<void*>(&emmy_fiber_trampoline);
  f->sp = sp;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = slot + 2 * kPage;
  f->uc.uc_stack.ss_size = kSlot - 2 * kPage;
  f->uc.uc_link = nullptr;
  const uintptr_t p = reinterpret_cast<uintptr_t>(f);
  makecontext(&f->uc, reinterpret_cast<void (*)()>(&emmy_fiber_entry_uc), 2,
              static_cast<unsigned>(p), static_cast<unsigned>(p >> 32));
#endif
}

void resume(Worker* w, Fiber* f) {
  w->current = f;
#ifdef __SANITIZE_ADDRESS__
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, reinterpret_cast<char*>(f) + 2 * kPage, kSlot - 2 * kPage);
#endif
#ifndef EMMY_USE_UCONTEXT
  emmy_switch(&w->sched_sp, f->sp);
#else
  swapcontext(&w->sched_uc, &f->uc);
#endif
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  w->current = nullptr;
}

void yield(Fiber* f) {
  Worker* w = f->worker;
#ifdef __SANITIZE_ADDRESS__
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, w->sched_bottom, w->sched_size);
#endif
#ifndef EMMY_USE_UCONTEXT
  emmy_switch(&f->sp, w->sched_sp);
#else
  swapcontext(&f->uc, &w->sched_uc);
#endif
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_finish_switch_fiber(fake, &w->sched_bottom, &w->sched_size);
#endif
}

}  // namespace

extern "C" __attribute__((used)) void emmy_fiber_main(Fiber* f) {
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_finish_switch_fiber(nullptr, &f->worker->sched_bottom, &f->worker->sched_size);
#endif
  // A fiber is reused for the same thread slot of every later block: it loops, not returns.
  for (;;) {
    f->worker->launch->entry(const_cast<void**>(f->worker->launch->args.data()));
    emmy::cp_async_wait_all();  // copies still in flight land, as they would on a GPU
    f->state = kDone;
    yield(f);
  }
}

// ---- the kernel-facing runtime (declared in emmy_device_emu.h) ----
extern "C" void emmy_emu_sync() {
  Fiber* f = self();
  Worker* w = f->worker;
  if (++w->barrier_arrived == w->nthreads) {
    w->barrier_arrived = 0;
    for (unsigned i = 0; i < w->nthreads; ++i) fiber(w, i)->state = kReady;
    w->restart = true;  // the next phase starts again in schedule order
  } else {
    f->state = kAtBarrier;
  }
  yield(f);
}

extern "C" float emmy_emu_shfl(float v, int mode, int b, int width, int site) {
  Fiber* f = self();
  Worker* w = f->worker;
  const int lane = static_cast<int>(f->ctx.linear % 32);
  const unsigned warp = f->ctx.linear / 32;
  Warp& wp = w->warps[warp];
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fail("shuffle width %d is not a power of two in [1, 32] (%s)", width, where(f).c_str());
  // Source lane exactly as PTX shfl.sync computes it; out of range reads the own value.
  const int lo = lane & ~(width - 1), hi = lo + width - 1;
  int j;
  switch (mode) {
    case 0: j = lo | (b & (width - 1)); break;
    case 1: j = lane - b; break;
    case 2: j = lane + b; break;
    default: j = lane ^ b; break;
  }
  if (j > hi || (mode == 1 && j < lo) || j < 0) j = lane;
  if (wp.arrived == 0) {
    wp.mode = mode;
    wp.width = width;
    wp.site = site;
  } else if (wp.mode != mode || wp.width != width || wp.site != site) {
    fail("warp %u reached different warp shuffles: shuffles need the whole warp converged (%s)",
         warp, where(f).c_str());
  }
  wp.val[lane] = v;
  wp.src[lane] = j;
  if (++wp.arrived == wp.size) {
    // The last lane computes everybody's result, so later shuffles can reuse val[] at once.
    for (unsigned l = 0; l < wp.size; ++l)
      wp.res[l] = static_cast<unsigned>(wp.src[l]) < wp.size ? wp.val[wp.src[l]] : __builtin_nanf("");
    wp.arrived = 0;
    for (unsigned l = 0; l < wp.size; ++l) fiber(w, warp * 32 + l)->state = kReady;
    return wp.res[lane];
  }
  f->state = kAtWarp;
  yield(f);
  return wp.res[lane];
}

extern "C" void emmy_emu_collective(void* lane_arg, void (*fn)(void* const*), const char* what,
                                    int site) {
  Fiber* f = self();
  Worker* w = f->worker;
  const unsigned lane = f->ctx.linear % 32, warp = f->ctx.linear / 32;
  Warp& wp = w->warps[warp];
  if (wp.size != 32)
    fail("%s is warp-collective but warp %u of the block has only %u threads (%s)", what, warp,
         wp.size, where(f).c_str());
  if (wp.arrived == 0) {
    wp.mode = kCollective;
    wp.fn = fn;
    wp.site = site;
  } else if (wp.mode != kCollective || wp.fn != fn || wp.site != site) {
    fail("warp %u reached different warp collectives or shuffles (one is %s): they need the "
         "whole warp converged (%s)", warp, what, where(f).c_str());
  }
  wp.arg[lane] = lane_arg;
  if (++wp.arrived == 32) {
    wp.arrived = 0;
    fn(wp.arg);  // the other lanes wait, so their arguments on their stacks are still there
    for (unsigned l = 0; l < 32; ++l) fiber(w, warp * 32 + l)->state = kReady;
    return;
  }
  f->state = kAtWarp;
  yield(f);
}

extern "C" void emmy_emu_misaligned(int n, const char* type, const void* p, int store,
                                    int align) {
  fail("CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address: vector %s of %d x %s at address %p, "
       "not %d-byte aligned (%s)",
       store ? "store" : "load", n, type, p, align, where(self()).c_str());
}

namespace {

void run_block(Worker* w, uint64_t b) {
  const Launch& L = *w->launch;
  const unsigned n = w->nthreads;
  w->block_idx = {static_cast<unsigned>(b % L.grid[0]),
                  static_cast<unsigned>(b / L.grid[0] % L.grid[1]),
                  static_cast<unsigned>(b / (uint64_t(L.grid[0]) * L.grid[1]))};
  // Poison: reading shared memory nobody wrote gives NaN (0xFFFFFFFF as float).
  unsigned char* smem = w->smem_end - (L.smem + 15) / 16 * 16;
  memset(smem, 0xFF, L.smem);
  for (unsigned i = 0; i < n; ++i) {
    Fiber* f = fiber(w, i);
    f->ctx.block_idx = w->block_idx;
    f->ctx.smem = smem;
    f->state = kReady;
  }
  for (unsigned k = 0; k * 32 < n; ++k) {
    w->warps[k].arrived = 0;
    w->warps[k].size = n - k * 32 < 32 ? n - k * 32 : 32;
  }
  w->barrier_arrived = 0;
  if (g_schedule == 2) {  // a seeded permutation per block (splitmix64 + Fisher-Yates)
    for (unsigned i = 0; i < n; ++i) w->order[i] = i;
    uint64_t s = g_seed * 0x9E3779B97F4A7C15ull + b + 1;
    for (unsigned i = n - 1; i > 0; --i) {
      uint64_t z = (s += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const unsigned j = static_cast<unsigned>(z % (i + 1));
      const unsigned t = w->order[i];
      w->order[i] = w->order[j];
      w->order[j] = t;
    }
  }
  for (;;) {
    bool progress = false;
    w->restart = false;
    for (unsigned k = 0; k < n; ++k) {
      Fiber* f = fiber(w, w->order[k]);
      if (f->state != kReady) continue;
      progress = true;
      resume(w, f);
      if (w->restart) break;
    }
    if (progress) continue;
    unsigned counts[4] = {0, 0, 0, 0};
    for (unsigned i = 0; i < n; ++i) ++counts[fiber(w, i)->state];
    if (counts[kDone] == n) return;
    if (counts[kAtWarp] == 0)
      fail("barrier divergence in %s: %u of %u threads wait at sync_threads() but %u exited",
           where_block(w).c_str(), counts[kAtBarrier], n, counts[kDone]);
    fail("deadlock in %s: %u threads wait at sync_threads(), %u at a warp shuffle or collective, "
         "%u exited (those need every lane of their warp)",
         where_block(w).c_str(), counts[kAtBarrier], counts[kAtWarp], counts[kDone]);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "a signal";
  }
}

void on_crash(int sig, siginfo_t* info, void*) {
  char buf[1024];
  Worker* w = tl_worker;
  Fiber* f = w ? w->current : nullptr;
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  const char* what = "invalid memory access";
  if (w != nullptr && w->slots != nullptr) {
    const uintptr_t s = reinterpret_cast<uintptr_t>(w->slots);
    if (a >= s && a < s + kMaxThreads * kSlot && (a - s) % kSlot >= kPage &&
        (a - s) % kSlot < 2 * kPage)
      what = "fiber stack overflow: too much local memory for the emulator's stack";
  }
  int len;
  if (f != nullptr) {
    len = snprintf(buf, sizeof buf, "error: %s crashed with %s (%s at address %p)\n",
                   where(f).c_str(), signal_name(sig), what, info->si_addr);
  } else {
    len = snprintf(buf, sizeof buf, "error: the emulator crashed with %s at address %p\n",
                   signal_name(sig), info->si_addr);
  }
  if (write(2, buf, static_cast<size_t>(len)) < 0) {
  }
  signal(sig, SIG_DFL);  // returning re-executes the fault, which now kills the process
}

// ---- the worker pool: worker 0 is the serving thread itself, the others wait for launches ----
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_go = PTHREAD_COND_INITIALIZER, g_idle = PTHREAD_COND_INITIALIZER;
uint64_t g_generation = 0;  // one per launch that needs helpers
unsigned g_helpers = 0;     // workers 1..g_helpers take part in the current launch
unsigned g_busy = 0;        // helpers still running blocks of it

void use_altstack(Worker* w) {
#ifndef __SANITIZE_ADDRESS__
  stack_t ss{};
  ss.ss_sp = w->altstack;
  ss.ss_size = sizeof w->altstack;
  sigaltstack(&ss, nullptr);
#endif
}

void run_blocks(Worker* w) {
  for (;;) {
    const uint64_t b = g_next_block.fetch_add(1);
    if (b >= g_nblocks) return;
    run_block(w, b);
  }
}

void* helper_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  tl_worker = w;
  use_altstack(w);
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    while (g_generation == seen) pthread_cond_wait(&g_go, &g_mu);
    seen = g_generation;
    const bool mine = w->index <= g_helpers;
    pthread_mutex_unlock(&g_mu);
    if (!mine) continue;
    run_blocks(w);
    pthread_mutex_lock(&g_mu);
    if (--g_busy == 0) pthread_cond_signal(&g_idle);
    pthread_mutex_unlock(&g_mu);
  }
  return nullptr;
}

// Grows the pool to `workers`, each with shared memory for `smem_limit` bytes.
void ensure_pool(unsigned workers, size_t smem_limit) {
  while (g_pool.size() < workers) {
    Worker* w = new Worker();
    w->index = static_cast<unsigned>(g_pool.size());
    w->slots = static_cast<char*>(map_or_die((kMaxThreads + 1) * kSlot));
    w->slots += (kSlot - reinterpret_cast<uintptr_t>(w->slots) % kSlot) % kSlot;
    g_pool.push_back(w);
    if (w->index == 0) {
      tl_worker = w;
      use_altstack(w);
    } else if (pthread_create(&w->thread, nullptr, helper_main, w) != 0) {
      fail("cannot start worker thread");
    }
  }
  for (Worker* w : g_pool) {
    if (w->smem_cap >= smem_limit) continue;
    w->smem_end = guarded(smem_limit, 16) + (smem_limit + 15) / 16 * 16;
    w->smem_cap = smem_limit;
  }
}

// Why the launch's geometry cannot run on a GPU, or "".
std::string invalid(const Launch& L) {
  char buf[512] = "";
  const uint64_t threads = uint64_t(L.block[0]) * L.block[1] * L.block[2];
  if (threads == 0 || L.grid[0] == 0 || L.grid[1] == 0 || L.grid[2] == 0)
    snprintf(buf, sizeof buf, "kernel '%s': empty grid or block", L.kernel.c_str());
  else if (threads > kMaxThreads || L.block[2] > 64)
    snprintf(buf, sizeof buf,
             "kernel '%s': block (%u,%u,%u) has %llu threads; the limit is 1024 (and z <= 64)",
             L.kernel.c_str(), L.block[0], L.block[1], L.block[2],
             static_cast<unsigned long long>(threads));
  else if (L.grid[1] > 65535 || L.grid[2] > 65535 || L.grid[0] > 0x7fffffffu)
    snprintf(buf, sizeof buf, "kernel '%s': grid (%u,%u,%u) exceeds the GPU limits",
             L.kernel.c_str(), L.grid[0], L.grid[1], L.grid[2]);
  return buf;
}

void launch(const Launch& L) {
  const unsigned n = L.block[0] * L.block[1] * L.block[2];
  g_nblocks = uint64_t(L.grid[0]) * L.grid[1] * L.grid[2];
  g_next_block = 0;
  const unsigned nw = g_nblocks < uint64_t(g_workers) ? unsigned(g_nblocks) : unsigned(g_workers);
  for (unsigned k = 0; k < nw; ++k) {
    Worker* w = g_pool[k];
    while (w->fibers < n) init_fiber(w, w->fibers++);
    w->launch = &L;
    w->nthreads = n;
    for (unsigned i = 0; i < n; ++i) {
      ThreadCtx& c = fiber(w, i)->ctx;
      c.thread_idx = {i % L.block[0], i / L.block[0] % L.block[1], i / (L.block[0] * L.block[1])};
      c.block_dim = {L.block[0], L.block[1], L.block[2]};
      c.grid_dim = {L.grid[0], L.grid[1], L.grid[2]};
      c.linear = i;
      c.cp_eager = g_cp_eager;
      w->order[i] = g_schedule == 1 ? n - 1 - i : i;
    }
  }
  if (nw > 1) {
    pthread_mutex_lock(&g_mu);
    g_helpers = g_busy = nw - 1;
    ++g_generation;
    pthread_cond_broadcast(&g_go);
    pthread_mutex_unlock(&g_mu);
  }
  run_blocks(g_pool[0]);
  pthread_mutex_lock(&g_mu);
  while (g_busy != 0) pthread_cond_wait(&g_idle, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// ---- what the client defined: regions, kernel objects and programs, by the client's ids ----
struct Region {
  unsigned char* data;
  size_t size;
};

struct ArgSource {
  bool slot;          // a buffer slot's address + offset, else a value fixed at definition
  unsigned index;     // the slot
  uint64_t value;     // the offset, or the value's bits
};

struct Program {
  long so;
  unsigned nslots;
  std::vector<Launch> launches;
  std::vector<std::vector<ArgSource>> sources;  // per launch, per parameter
};

std::unordered_map<long, Region> g_regions;
std::unordered_map<long, void*> g_sos;
std::unordered_map<long, Program> g_programs;
FILE* g_answers = nullptr;

// A request the runner refuses and survives: answered "error MSG".
struct Refused {
  std::string message;
};

[[noreturn]] void refuse(const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw Refused{buf};
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t j = line.find(' ', i);
    const size_t end = j == std::string::npos ? line.size() : j;
    if (end > i) words.push_back(line.substr(i, end - i));
    i = end;
  }
  return words;
}

long long integer(const std::string& s, int base = 10) {
  char* end = nullptr;
  errno = 0;
  const long long v = strtoll(s.c_str(), &end, base);
  if (s.empty() || *end != 0 || errno != 0) refuse("bad number '%s' in request", s.c_str());
  return v;
}

unsigned long long unsigned_integer(const std::string& s, int base = 10) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = strtoull(s.c_str(), &end, base);
  if (s.empty() || s[0] == '-' || *end != 0 || errno != 0)
    refuse("bad number '%s' in request", s.c_str());
  return v;
}

// The path after the first `skip` words of a request (paths may hold spaces).
std::string path_after(const std::string& line, int skip) {
  size_t i = 0;
  for (int k = 0; k < skip; ++k) {
    i = line.find(' ', i);
    if (i == std::string::npos) refuse("request '%s' has no path", line.c_str());
    while (i < line.size() && line[i] == ' ') ++i;
  }
  return line.substr(i);
}

void need(const std::vector<std::string>& w, size_t n) {
  if (w.size() < n) refuse("request '%s' needs %zu words", w[0].c_str(), n);
}

// The region maps the file between two guard pages, so overruns fault as on a GPU (the client
// places each buffer at the end of its region).
void map_region(long id, size_t bytes, const std::string& path) {
  if (g_regions.count(id)) refuse("region %ld is already mapped", id);
  if (bytes == 0 || bytes % kPage) refuse("region %ld: %zu bytes is not a whole number of pages", id, bytes);
  char* base = static_cast<char*>(
      mmap(nullptr, bytes + 2 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (base == MAP_FAILED) refuse("out of address space mapping region %ld", id);
  const int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) {
    munmap(base, bytes + 2 * kPage);
    refuse("cannot open region file %s", path.c_str());
  }
  void* p = mmap(base + kPage, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    munmap(base, bytes + 2 * kPage);
    refuse("cannot map region file %s", path.c_str());
  }
  g_regions[id] = Region{reinterpret_cast<unsigned char*>(p), bytes};
}

void unmap_region(long id) {
  auto it = g_regions.find(id);
  if (it == g_regions.end()) refuse("region %ld is not mapped", id);
  munmap(it->second.data - kPage, it->second.size + 2 * kPage);
  g_regions.erase(it);
}

void* kernel_object(long id) {
  auto it = g_sos.find(id);
  if (it == g_sos.end()) refuse("kernel object %ld is not loaded", id);
  return it->second;
}

// "launch KERNEL GX GY GZ BX BY BZ SMEM ARG..." with ARG s:SLOT:OFFSET | i32:V | i64:V | f32:HEX
void parse_launch(const std::string& line, void* so, unsigned nslots, Launch& L,
                  std::vector<ArgSource>& sources) {
  const std::vector<std::string> w = split(line);
  if (w.size() < 9 || w[0] != "launch") refuse("bad launch line: %s", line.c_str());
  L.kernel = w[1];
  for (int d = 0; d < 3; ++d) {
    L.grid[d] = static_cast<unsigned>(unsigned_integer(w[2 + d]));
    L.block[d] = static_cast<unsigned>(unsigned_integer(w[5 + d]));
  }
  L.smem = unsigned_integer(w[8]);
  L.entry = reinterpret_cast<void (*)(void**)>(dlsym(so, (L.kernel + "__emmy_entry").c_str()));
  auto params =
      static_cast<const unsigned char* const*>(dlsym(so, (L.kernel + "__emmy_params").c_str()));
  if (L.entry == nullptr || params == nullptr)
    refuse("kernel '%s' is not in the compiled source (is it EMMY_KERNEL with EMMY_EMU_ENTRY?)",
           L.kernel.c_str());
  L.params = *params;
  for (size_t k = 9; k < w.size(); ++k) {
    const std::string& a = w[k];
    const size_t colon = a.find(':');
    const std::string kind = a.substr(0, colon), rest = colon == std::string::npos ? "" : a.substr(colon + 1);
    ArgSource s{false, 0, 0};
    int size = 0;
    if (kind == "s") {
      const size_t c2 = rest.find(':');
      if (c2 == std::string::npos) refuse("bad buffer argument '%s'", a.c_str());
      s.slot = true;
      s.index = static_cast<unsigned>(unsigned_integer(rest.substr(0, c2)));
      s.value = unsigned_integer(rest.substr(c2 + 1));
      if (s.index >= nslots)
        refuse("launch of '%s' uses unknown buffer %u", L.kernel.c_str(), s.index);
      size = sizeof(void*);
    } else if (kind == "i32") {
      const int32_t i = static_cast<int32_t>(integer(rest));
      memcpy(&s.value, &i, 4);
      size = 4;
    } else if (kind == "i64") {
      const long long i = integer(rest);
      memcpy(&s.value, &i, 8);
      size = 8;
    } else if (kind == "f32") {
      const uint32_t u = static_cast<uint32_t>(unsigned_integer(rest, 16));
      memcpy(&s.value, &u, 4);
      size = 4;
    } else {
      refuse("bad argument kind '%s'", kind.c_str());
    }
    sources.push_back(s);
    L.sizes.push_back(size);
  }
  std::string want, got;
  for (const unsigned char* p = L.params; *p != 0; ++p) want += std::to_string(*p) + " ";
  for (int s : L.sizes) got += std::to_string(s) + " ";
  if (want != got)
    refuse("kernel '%s' takes parameters of sizes [ %s] but the launch passes [ %s]",
           L.kernel.c_str(), want.c_str(), got.c_str());
}

void define(long id, long so_id, unsigned nslots, const std::vector<std::string>& lines) {
  void* so = kernel_object(so_id);
  Program P{so_id, nslots, {}, {}};
  P.launches.resize(lines.size());
  P.sources.resize(lines.size());
  for (size_t k = 0; k < lines.size(); ++k) {
    parse_launch(lines[k], so, nslots, P.launches[k], P.sources[k]);
    const std::string why = invalid(P.launches[k]);
    if (!why.empty()) refuse("%s", why.c_str());
  }
  g_programs.erase(id);
  Program& Q = g_programs[id] = std::move(P);
  for (Launch& L : Q.launches) {
    L.values.assign(L.sizes.size(), 0);
    for (uint64_t& v : L.values) L.args.push_back(&v);
  }
}

Program& program(long id) {
  auto it = g_programs.find(id);
  if (it == g_programs.end()) refuse("program %ld is not defined", id);
  return it->second;
}

// Binds the program's buffer slots to "REGION:OFFSET" words, checking every argument's range.
void bind(Program& P, const std::vector<std::string>& w, size_t first) {
  if (w.size() - first != P.nslots)
    refuse("the program has %u buffer slots but the request binds %zu", P.nslots, w.size() - first);
  std::vector<const Region*> region(P.nslots);
  std::vector<uint64_t> offset(P.nslots);
  for (unsigned k = 0; k < P.nslots; ++k) {
    const std::string& a = w[first + k];
    const size_t colon = a.find(':');
    if (colon == std::string::npos) refuse("bad buffer binding '%s'", a.c_str());
    auto it = g_regions.find(static_cast<long>(unsigned_integer(a.substr(0, colon))));
    if (it == g_regions.end()) refuse("buffer slot %u is bound to an unmapped region", k);
    region[k] = &it->second;
    offset[k] = unsigned_integer(a.substr(colon + 1));
  }
  for (size_t l = 0; l < P.launches.size(); ++l) {
    Launch& L = P.launches[l];
    for (size_t k = 0; k < L.values.size(); ++k) {
      const ArgSource& s = P.sources[l][k];
      if (!s.slot) {
        L.values[k] = s.value;
        continue;
      }
      const uint64_t at = offset[s.index] + s.value;
      if (at > region[s.index]->size)
        refuse("launch of '%s' uses offset %llu past buffer %u", L.kernel.c_str(),
               static_cast<unsigned long long>(s.value), s.index);
      L.values[k] = reinterpret_cast<uintptr_t>(region[s.index]->data) + at;
    }
  }
}

void prepare_run(const Program& P, unsigned workers, size_t smem_limit) {
  g_workers = workers < 1 ? 1 : static_cast<int>(workers);
  g_smem_limit = smem_limit;
  for (const Launch& L : P.launches)
    if (L.smem > g_smem_limit)
      refuse("kernel '%s' asks for %zu bytes of dynamic shared memory; the limit is %zu",
             L.kernel.c_str(), L.smem, g_smem_limit);
  ensure_pool(static_cast<unsigned>(g_workers), g_smem_limit);
}

double run_program(const Program& P) {
  const double t0 = now();
  for (const Launch& L : P.launches) launch(L);
  return now() - t0;
}

// One request; returns the answer after "ok".
std::string serve(const std::string& line) {
  const std::vector<std::string> w = split(line);
  if (w.empty()) refuse("empty request");
  const std::string& op = w[0];
  char buf[64];
  if (op == "map") {
    need(w, 4);
    map_region(integer(w[1]), unsigned_integer(w[2]), path_after(line, 3));
  } else if (op == "unmap") {
    need(w, 2);
    unmap_region(integer(w[1]));
  } else if (op == "so") {
    need(w, 3);
    const long id = integer(w[1]);
    if (g_sos.count(id)) refuse("kernel object %ld is already loaded", id);
    void* so = dlopen(path_after(line, 2).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (so == nullptr) refuse("cannot load the compiled kernels: %s", dlerror());
    g_sos[id] = so;
  } else if (op == "unload") {
    need(w, 2);
    const long id = integer(w[1]);
    void* so = kernel_object(id);
    for (auto it = g_programs.begin(); it != g_programs.end();)
      it = it->second.so == id ? g_programs.erase(it) : std::next(it);
    dlclose(so);
    g_sos.erase(id);
  } else if (op == "program") {
    need(w, 5);
    const long long n = integer(w[4]);
    std::vector<std::string> lines;
    char* l = nullptr;
    size_t cap = 0;
    for (long long k = 0; k < n; ++k) {  // read them all first: a refusal must not desync
      const ssize_t len = getline(&l, &cap, stdin);
      if (len < 0) exit(0);
      lines.emplace_back(l, len > 0 && l[len - 1] == '\n' ? len - 1 : len);
    }
    free(l);
    define(integer(w[1]), integer(w[2]), static_cast<unsigned>(unsigned_integer(w[3])), lines);
  } else if (op == "drop") {
    need(w, 2);
    g_programs.erase(integer(w[1]));
  } else if (op == "run") {
    need(w, 7);
    Program& P = program(integer(w[1]));
    const std::string schedule = w[3], copies = w[5];
    if (schedule != "forward" && schedule != "reverse" && schedule != "shuffle")
      refuse("bad schedule '%s'", schedule.c_str());
    if (copies != "deferred" && copies != "eager")
      refuse("bad cp_async mode '%s' (deferred or eager)", copies.c_str());
    bind(P, w, 7);
    prepare_run(P, static_cast<unsigned>(unsigned_integer(w[2])), unsigned_integer(w[6]));
    g_schedule = schedule == "reverse" ? 1 : schedule == "shuffle" ? 2 : 0;
    g_seed = unsigned_integer(w[4]);
    g_cp_eager = copies == "eager";
    snprintf(buf, sizeof buf, "%.9f", run_program(P));
    return buf;
  } else if (op == "time") {
    need(w, 6);
    Program& P = program(integer(w[1]));
    const long long warmup = integer(w[2]), reps = integer(w[3]);
    bind(P, w, 6);
    prepare_run(P, static_cast<unsigned>(unsigned_integer(w[4])), unsigned_integer(w[5]));
    g_schedule = 0;
    g_cp_eager = false;
    for (long long r = 0; r < warmup; ++r) run_program(P);
    std::string out;
    for (long long r = 0; r < reps; ++r) {
      snprintf(buf, sizeof buf, "%s%.9f", r ? " " : "", run_program(P));
      out += buf;
    }
    return out;
  } else {
    refuse("unknown request '%s'", op.c_str());
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || strcmp(argv[1], "--serve") != 0) fail("usage: emu_runner --serve");
  // Answers go to a private copy of stdout; a kernel's printf goes to stderr with the errors.
  g_answers = fdopen(dup(1), "w");
  dup2(2, 1);
#ifndef __SANITIZE_ADDRESS__
  struct sigaction sa{};
  sa.sa_sigaction = on_crash;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
#endif
  ensure_pool(1, g_smem_limit);  // the serving thread is worker 0, with its signal stack
  char* l = nullptr;
  size_t cap = 0;
  for (;;) {
    const ssize_t len = getline(&l, &cap, stdin);
    if (len < 0) return 0;  // the client closed the pipe: it is done, or gone
    const std::string line(l, len > 0 && l[len - 1] == '\n' ? len - 1 : len);
    try {
      const std::string answer = serve(line);
      fprintf(g_answers, answer.empty() ? "ok\n" : "ok %s\n", answer.c_str());
    } catch (const Refused& r) {
      fprintf(g_answers, "error %s\n", r.message.c_str());
    }
    fflush(g_answers);
  }
}
