// The emulator's runner: a standalone executable that runs emitted kernels on CPU fibers.
//
//   emu_runner PLAN
//
// PLAN is a text file written by emmy/runtime/emu.py, one directive per line:
//   so PATH                       kernel shared object (built with -DEMMY_EMU)
//   workers N | smem_limit BYTES | schedule forward|reverse|shuffle SEED | time WARMUP REPS
//   buffer BYTES PATH             a device buffer, loaded from and written back to PATH
//   launch KERNEL GX GY GZ BX BY BZ SMEM
//   arg buf INDEX [BYTE_OFFSET] | arg i32 V | arg i64 V | arg f32 HEXBITS   (parameters of the last launch)
// Errors are one line "error: ..." on stderr and exit status 3; crashes print a line naming
// the kernel, block and thread, then die of the signal. With "time", one line per repetition
// "time SECONDS" goes to stdout.
//
// Each CUDA thread is a fiber (own stack slot, see emmy_device_emu.h); each worker OS thread
// runs whole blocks, one at a time, resuming its ready fibers in the schedule's order until all
// are done. Fibers only give up the CPU at barriers, shuffles and warp collectives.
#include <dlfcn.h>
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
  unsigned char* smem_end = nullptr;
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
  pthread_t thread;
};

// ---- configuration and global state ----
int g_workers = 1;
size_t g_smem_limit = 227 * 1024;
int g_schedule = 0;  // 0 forward, 1 reverse, 2 shuffle
uint64_t g_seed = 0;
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

extern "C" void emmy_emu_misaligned(int n, const char* type, const void* p, int store) {
  fail("misaligned vector %s of %d x %s at address %p (%s)", store ? "store" : "load", n, type, p,
       where(self()).c_str());
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

void* worker_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  tl_worker = w;
#ifndef __SANITIZE_ADDRESS__
  stack_t ss{};
  ss.ss_sp = w->altstack;
  ss.ss_size = sizeof w->altstack;
  sigaltstack(&ss, nullptr);
#endif
  for (;;) {
    const uint64_t b = g_next_block.fetch_add(1);
    if (b >= g_nblocks) break;
    run_block(w, b);
  }
  return nullptr;
}

void launch(const Launch& L) {
  const uint64_t threads = uint64_t(L.block[0]) * L.block[1] * L.block[2];
  if (threads == 0 || L.grid[0] == 0 || L.grid[1] == 0 || L.grid[2] == 0)
    fail("kernel '%s': empty grid or block", L.kernel.c_str());
  if (threads > kMaxThreads || L.block[2] > 64)
    fail("kernel '%s': block (%u,%u,%u) has %llu threads; the limit is 1024 (and z <= 64)",
         L.kernel.c_str(), L.block[0], L.block[1], L.block[2],
         static_cast<unsigned long long>(threads));
  if (L.grid[1] > 65535 || L.grid[2] > 65535 || L.grid[0] > 0x7fffffffu)
    fail("kernel '%s': grid (%u,%u,%u) exceeds the GPU limits", L.kernel.c_str(), L.grid[0],
         L.grid[1], L.grid[2]);
  if (L.smem > g_smem_limit)
    fail("kernel '%s' asks for %zu bytes of dynamic shared memory; the limit is %zu",
         L.kernel.c_str(), L.smem, g_smem_limit);
  const unsigned n = static_cast<unsigned>(threads);
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
      w->order[i] = g_schedule == 1 ? n - 1 - i : i;
    }
  }
  for (unsigned k = 0; k < nw; ++k)
    if (pthread_create(&g_pool[k]->thread, nullptr, worker_main, g_pool[k]) != 0)
      fail("cannot start worker thread");
  for (unsigned k = 0; k < nw; ++k) pthread_join(g_pool[k]->thread, nullptr);
}

struct Buffer {
  unsigned char* data;
  size_t size;
  std::string path;
};

std::string rest_of(const char* line, int skip) {
  std::string s(line + skip);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

void load(Buffer& b) {
  const int fd = open(b.path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open buffer file %s", b.path.c_str());
  size_t done = 0;
  while (done < b.size) {
    const ssize_t r = read(fd, b.data + done, b.size - done);
    if (r <= 0) fail("buffer file %s is shorter than %zu bytes", b.path.c_str(), b.size);
    done += size_t(r);
  }
  close(fd);
}

void save(const Buffer& b) {
  const int fd = open(b.path.c_str(), O_WRONLY);
  if (fd < 0) fail("cannot write buffer file %s", b.path.c_str());
  size_t done = 0;
  while (done < b.size) {
    const ssize_t r = write(fd, b.data + done, b.size - done);
    if (r <= 0) fail("cannot write buffer file %s", b.path.c_str());
    done += size_t(r);
  }
  close(fd);
}

double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: emu_runner PLAN");
  FILE* plan = fopen(argv[1], "r");
  if (plan == nullptr) fail("cannot open plan %s", argv[1]);
  void* so = nullptr;
  std::vector<Buffer> buffers;
  std::vector<Launch> launches;
  int warmup = -1, reps = 0;
  char line[8192], word[256], kind[16];
  while (fgets(line, sizeof line, plan) != nullptr) {
    if (sscanf(line, "%255s", word) != 1) continue;
    const std::string op = word;
    if (op == "so") {
      so = dlopen(rest_of(line, 3).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (so == nullptr) fail("cannot load the compiled kernels: %s", dlerror());
    } else if (op == "workers") {
      sscanf(line, "%*s %d", &g_workers);
      if (g_workers < 1) g_workers = 1;
    } else if (op == "smem_limit") {
      sscanf(line, "%*s %zu", &g_smem_limit);
    } else if (op == "schedule") {
      char name[32] = "";
      unsigned long long seed = 0;
      sscanf(line, "%*s %31s %llu", name, &seed);
      const std::string s = name;
      g_schedule = s == "reverse" ? 1 : s == "shuffle" ? 2 : 0;
      g_seed = seed;
    } else if (op == "time") {
      sscanf(line, "%*s %d %d", &warmup, &reps);
    } else if (op == "buffer") {
      size_t size = 0;
      int skip = 0;
      sscanf(line, "%*s %zu %n", &size, &skip);
      Buffer b{guarded(size, 256), size, rest_of(line, skip)};
      load(b);
      buffers.push_back(b);
    } else if (op == "launch") {
      Launch L{};
      if (sscanf(line, "%*s %255s %u %u %u %u %u %u %zu", word, &L.grid[0], &L.grid[1], &L.grid[2],
                 &L.block[0], &L.block[1], &L.block[2], &L.smem) != 8)
        fail("bad plan line: %s", line);
      L.kernel = word;
      if (so == nullptr) fail("plan launches before loading kernels");
      L.entry = reinterpret_cast<void (*)(void**)>(dlsym(so, (L.kernel + "__emmy_entry").c_str()));
      auto params = static_cast<const unsigned char* const*>(
          dlsym(so, (L.kernel + "__emmy_params").c_str()));
      if (L.entry == nullptr || params == nullptr)
        fail("kernel '%s' is not in the compiled source (is it EMMY_KERNEL with EMMY_EMU_ENTRY?)",
             L.kernel.c_str());
      L.params = *params;
      launches.push_back(std::move(L));
    } else if (op == "arg") {
      if (launches.empty()) fail("plan has an argument before any launch");
      Launch& L = launches.back();
      unsigned long long v = 0;
      sscanf(line, "%*s %15s", kind);
      const std::string k = kind;
      if (k == "buf") {
        unsigned long long offset = 0;
        sscanf(line, "%*s %*s %llu %llu", &v, &offset);
        if (v >= buffers.size()) fail("launch of '%s' uses unknown buffer %llu", L.kernel.c_str(), v);
        if (offset > buffers[v].size)
          fail("launch of '%s' uses offset %llu past buffer %llu", L.kernel.c_str(), offset, v);
        L.values.push_back(reinterpret_cast<uintptr_t>(buffers[v].data) + offset);
        L.sizes.push_back(sizeof(void*));
      } else if (k == "i32" || k == "i64") {
        long long s = 0;
        sscanf(line, "%*s %*s %lld", &s);
        uint64_t bits = 0;
        if (k == "i32") {
          const int32_t i = static_cast<int32_t>(s);
          memcpy(&bits, &i, 4);
        } else {
          memcpy(&bits, &s, 8);
        }
        L.values.push_back(bits);
        L.sizes.push_back(k == "i32" ? 4 : 8);
      } else if (k == "f32") {
        sscanf(line, "%*s %*s %llx", &v);
        const uint32_t u = static_cast<uint32_t>(v);
        uint64_t bits = 0;
        memcpy(&bits, &u, 4);
        L.values.push_back(bits);
        L.sizes.push_back(4);
      } else {
        fail("bad argument kind '%s' in plan", kind);
      }
    } else {
      fail("bad plan line: %s", line);
    }
  }
  fclose(plan);
  for (Launch& L : launches) {
    std::string want, got;
    for (const unsigned char* p = L.params; *p != 0; ++p) want += std::to_string(*p) + " ";
    for (int s : L.sizes) got += std::to_string(s) + " ";
    if (want != got)
      fail("kernel '%s' takes parameters of sizes [ %s] but the launch passes [ %s]",
           L.kernel.c_str(), want.c_str(), got.c_str());
    for (uint64_t& v : L.values) L.args.push_back(&v);
  }

  for (int k = 0; k < g_workers; ++k) {
    Worker* w = new Worker();
    w->slots = static_cast<char*>(map_or_die((kMaxThreads + 1) * kSlot));
    w->slots += (kSlot - reinterpret_cast<uintptr_t>(w->slots) % kSlot) % kSlot;
    w->smem_end = guarded(g_smem_limit, 16) + (g_smem_limit + 15) / 16 * 16;
    g_pool.push_back(w);
  }
#ifndef __SANITIZE_ADDRESS__
  struct sigaction sa{};
  sa.sa_sigaction = on_crash;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
#endif

  if (warmup < 0) {
    for (const Launch& L : launches) launch(L);
  } else {
    for (int r = 0; r < warmup; ++r)
      for (const Launch& L : launches) launch(L);
    for (int r = 0; r < reps; ++r) {
      const double t0 = now();
      for (const Launch& L : launches) launch(L);
      printf("time %.9f\n", now() - t0);
    }
  }
  for (const Buffer& b : buffers) save(b);
  fflush(stdout);
  return 0;
}
