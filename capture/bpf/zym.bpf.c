/* zym capture, kernel side: uprobes on CUDA API entry points that record each call with the
 * calling thread's CPython stack.
 *
 * Configured only through -D flags (set by capture/bpf_loader.py; `zym capture --print-bpf`
 * shows them) and through maps filled from user space:
 *   procs   tgid -> struct zym_proc      tracked processes and their interpreter layout
 *   probes  probe index -> zym_probe_spec  how to read each probed function's arguments
 *   config  ZYM_CFG_* -> value            what user space changes while capturing (sampling)
 * Layout shared with user space: events.h.
 *
 * Required -D flags: ZYM_FSBASE_OFF (offsetof(task_struct, thread.fsbase), from kernel BTF,
 * because the kernel headers BCC compiles against may belong to another kernel: then
 * task->thread.fsbase compiles and silently reads 0), ZYM_RINGBUF_PAGES (call records),
 * ZYM_EVENT_PAGES (stacks, process events), ZYM_RETURNS (1 when any return probe is
 * attached: only then can a call be pending).
 */
#include <uapi/linux/ptrace.h>
#define ZYM_BPF 1
#include "events.h"

/* Two ring buffers. Call records are all one size and never wake zym: it reads them by mmap,
 * a batch at a time (capture/ringbuf.py). Stacks and process events are rare, vary in kind,
 * and a held process waits on them: they wake zym and go through BCC's callback. */
BPF_RINGBUF_OUTPUT(calls, ZYM_RINGBUF_PAGES);
BPF_RINGBUF_OUTPUT(events, ZYM_EVENT_PAGES);
BPF_HASH(procs, u32, struct zym_proc, 16384);
BPF_ARRAY(probes, struct zym_probe_spec, ZYM_MAX_PROBES);
BPF_ARRAY(config, u64, ZYM_NCONFIG);
/* The outermost probed call in progress on a thread, kept until its return probe fires.
 * Calls that start while one is pending are nested (cudaLaunchKernel -> cuLaunchKernel) and
 * are counted, not recorded: one API call is one event. */
BPF_HASH(pending, u32, struct zym_call, 16384);
/* Stacks already sent, so a hot loop sends its stack once. Key: (tgid, hash). */
struct seen_key { u64 hash; u32 pid; u32 pad; };
BPF_TABLE("lru_hash", struct seen_key, u8, seen, 65536);
/* The last stack each CPU sent or found in `seen`: a hot loop skips the LRU lookup too. */
BPF_PERCPU_ARRAY(last_seen, struct seen_key, 1);
BPF_TABLE("lru_hash", u32, u64, sample_count, 65536);
BPF_PERCPU_ARRAY(scratch, struct zym_stack, 1);
BPF_PERCPU_ARRAY(call_scratch, struct zym_call, 1);
/* One frame's bytes. Fields are read at offsets masked below ZYM_FRAME_READ_MAX, so the
 * buffer has 8 bytes of slack past it for the verifier's bounds. */
#define ZYM_FRAME_READ_MAX 128
struct frame_buf { u8 b[ZYM_FRAME_READ_MAX + 8]; };
BPF_PERCPU_ARRAY(frame_bufs, struct frame_buf, 1);
/* The top of the thread's data stack (3.11+), read at once: its frames lie there back to
 * back, so one read replaces one read per frame (~120 ns each in a VM). A power of two. */
#ifndef ZYM_BULK_MAX
#define ZYM_BULK_MAX 16384
#endif
struct bulk_buf { u8 b[ZYM_BULK_MAX + ZYM_FRAME_READ_MAX + 8]; };
BPF_PERCPU_ARRAY(bulk_bufs, struct bulk_buf, 1);
/* The walk's position (frame) and the copy's bounds (lo, hi), kept in map memory: values loaded
 * from it are unknown to the verifier, so the states at its loop heads match and are pruned
 * (bounds it learned from comparisons would differ from exit to exit: 2^frames paths). */
struct walk_state { u64 frame, lo, hi; };
BPF_PERCPU_ARRAY(walk_states, struct walk_state, 1);
BPF_PROG_ARRAY(walker, 2);   /* slot 0: zym_walk, 1: zym_native; set by the loader */
/* Native paths already sent: key (native key, tgid), as `seen` for Python stacks. */
BPF_TABLE("lru_hash", struct seen_key, u8, native_seen, 65536);
/* The native paths each CPU met last, direct-mapped by key: a loop over a few operators
 * skips the LRU lookup (one slot alone missed whenever two paths alternate). */
#define ZYM_NATIVE_CACHE 16
BPF_PERCPU_ARRAY(last_native, struct seen_key, ZYM_NATIVE_CACHE);
/* One stack copy buffer per CPU, indexed by the CPU (a per-CPU map value is at most 32 KiB,
 * too small). A BPF program runs on one CPU from start to end, tail calls included. */
BPF_ARRAY(native_scratch, struct zym_native, ZYM_NCPUS);
BPF_PERCPU_ARRAY(counters, u64, ZYM_NCOUNTERS);

static __always_inline void count(u32 slot) {
    u64 *c = counters.lookup(&slot);
    if (c)
        *c += 1;
}

static __always_inline u64 read_u64(u64 addr) {
    u64 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

/* Integer argument `slot` at function entry (SysV x86-64): six registers, then the stack
 * above the return address. */
static __always_inline u64 read_arg(struct pt_regs *ctx, s16 slot) {
    switch (slot) {
    case 0: return PT_REGS_PARM1(ctx);
    case 1: return PT_REGS_PARM2(ctx);
    case 2: return PT_REGS_PARM3(ctx);
    case 3: return PT_REGS_PARM4(ctx);
    case 4: return PT_REGS_PARM5(ctx);
    case 5: return PT_REGS_PARM6(ctx);
    }
    if (slot < 0 || slot > 15)
        return 0;
    return read_u64(PT_REGS_SP(ctx) + 8 * (u64)(slot - 5));
}

/* pthread_getspecific(key) of the current thread, glibc x86-64, key < 32 (the first block).
 * The gilstate key's value stays set while the thread has released the GIL, which is the
 * normal state inside a torch op; "current tstate" pointers are NULL or another thread's.
 * The key is read once per process (Py_tss_t {int _is_initialized; pthread_key_t _key}) and
 * kept in its procs entry: it does not change after the runtime created it. */
static __always_inline u64 thread_state(struct zym_proc *proc) {
    int key = proc->tss_key;
    if (key < 0) {
        int tss[2] = {0, -1};
        bpf_probe_read_user(tss, sizeof(tss), (void *)(proc->tss_key_addr - 4));
        if (!tss[0])
            return 0;   /* not created yet */
        key = tss[1];
        if (key >= 0 && key < 32)
            proc->tss_key = key;
    }
    if (key < 0 || key >= 32)
        return 0;
    u64 fsbase = 0;
    u64 task = (u64)bpf_get_current_task();
    bpf_probe_read_kernel(&fsbase, sizeof(fsbase), (void *)(task + ZYM_FSBASE_OFF));
    if (!fsbase)
        return 0;
    return read_u64(fsbase + proc->tsd_first + (u64)key * proc->tsd_stride);
}

/* The thread's innermost frame and its data stack chunk (0 when none), from one read of the
 * PyThreadState fields that hold them. */
#define ZYM_TS_SPAN 512
static __always_inline u64 first_frame(struct zym_proc *proc, u64 tstate, u64 *chunk) {
    u32 zero = 0;
    struct bulk_buf *bb = bulk_bufs.lookup(&zero);
    if (!bb)
        return 0;
    u32 span = proc->ts_span & (ZYM_TS_SPAN - 1);   /* set by user space, <= 504 */
    if (!span || bpf_probe_read_user(bb->b, span, (void *)(tstate + proc->ts_lo)))
        return 0;
    u64 frame = *(u64 *)(bb->b + ((proc->ts_frame - proc->ts_lo) & (ZYM_TS_SPAN - 1)));
    *chunk = proc->ts_chunk >= 0
        ? *(u64 *)(bb->b + (((u32)proc->ts_chunk - proc->ts_lo) & (ZYM_TS_SPAN - 1))) : 0;
    if (proc->cframe_current >= 0 && frame)
        frame = read_u64(frame + (u32)proc->cframe_current);
    return frame;
}

static __always_inline u64 mix(u64 h, u64 v) {
    h ^= v;
    h *= 0x100000001b3ULL;
    return h ^ (h >> 29);
}

/* One frame whose fields are at `src`: keep it (a Python frame: not a C-stack shim, not None
 * code), hash it, step to the previous one. Branch-free, with the count and the hash in map
 * memory: a branch, or a value the verifier knows exactly, differs from path to path and
 * defeats its pruning (2^frames paths). A skipped frame is overwritten by the next kept one. */
#define ZYM_FRAME_STEP(src)                                                                    \
    do {                                                                                       \
        u64 code = *(u64 *)((src) + o_code);                                                   \
        u64 instr = *(u64 *)((src) + o_instr);   /* 3.10: low 32 bits are f_lasti */           \
        u8 owner = (src)[o_owner];                                                             \
        ws->frame = *(u64 *)((src) + o_prev);                                                  \
        u64 keep = (code != 0) & (code != proc->none_addr) & (owner != proc->owned_by_cstack); \
        u32 n = st->nframes & (ZYM_MAX_FRAMES - 1);                                            \
        st->frames[n].code = code;                                                             \
        st->frames[n].instr = instr;                                                           \
        st->nframes += (u32)keep;                                                              \
        st->hash = mix(mix(st->hash, code * keep), instr * keep);                              \
    } while (0)

/* Frames inside the copy of the data stack [lo, hi). */
#define ZYM_FROM_COPY                                                                           \
    for (int i = 0; i < ZYM_MAX_FRAMES; i++) {                                                  \
        u64 frame = ws->frame, lo = ws->lo;                                                     \
        if (!frame || frame < lo || frame + size > ws->hi || st->nframes >= ZYM_MAX_FRAMES - 1) \
            break;                                                                              \
        u8 *src = bb->b + ((frame - lo) & (ZYM_BULK_MAX - 1));                                  \
        ZYM_FRAME_STEP(src);                                                                    \
    }
/* Frames outside it, read one by one, until one is inside it again (``stop_in_copy``), or
 * all of the remaining ones (the last phase: whatever the copy holds). */
#define ZYM_READ_ALONE(budget, stop_in_copy)                                                    \
    for (int i = 0; i < (budget); i++) {                                                        \
        u64 frame = ws->frame;                                                                  \
        if (!frame || ((stop_in_copy) && frame >= ws->lo && frame + size <= ws->hi)             \
            || st->nframes >= ZYM_MAX_FRAMES - 1)                                               \
            break;                                                                              \
        if (bpf_probe_read_user(fb->b, size, (void *)frame)) {                                  \
            ws->frame = 0;                                                                      \
            break;                                                                              \
        }                                                                                       \
        *singles += 1;                                                                          \
        ZYM_FRAME_STEP(fb->b);                                                                  \
    }
#define ZYM_ALONE(budget) ZYM_READ_ALONE(budget, 1)

/* Walks the interpreter's frame list into the per-CPU scratch record; returns its hash.
 * 3.11+: the thread's frames lie back to back in its data stack chunk, so one read of the
 * chunk from its start (or ZYM_BULK_MAX below the innermost frame) up to the innermost frame
 * covers them: one user-memory read instead of one per frame (~120 ns each in a VM). Frames
 * outside that copy (C-stack entry frames between two runs of the interpreter loop, a
 * generator's frame, any 3.10 frame) are read one by one; the walk switches between the two
 * a few times (each nn.Module call is one C-stack entry frame: a model nests several), then
 * reads whatever is left one frame at a time, so no stack is cut short however often it
 * alternates. At most ZYM_MAX_FRAMES - 1 frames are kept; deeper stacks are flagged. */
static __always_inline u64 walk(struct zym_proc *proc, u64 frame, u64 chunk,
                                struct zym_stack *st) {
    u32 zero = 0;
    struct frame_buf *fb = frame_bufs.lookup(&zero);
    struct bulk_buf *bb = bulk_bufs.lookup(&zero);
    struct walk_state *ws = walk_states.lookup(&zero);
    u32 slot = ZYM_C_FRAME_READS;
    u64 *singles = counters.lookup(&slot);
    if (!fb || !bb || !ws || !singles)
        return 0;
    u32 size = proc->frame_read & (ZYM_FRAME_READ_MAX - 1);
    u32 o_code = proc->f_code & (ZYM_FRAME_READ_MAX - 1);
    u32 o_instr = proc->f_instr & (ZYM_FRAME_READ_MAX - 1);
    u32 o_prev = proc->f_previous & (ZYM_FRAME_READ_MAX - 1);
    u32 o_owner = proc->f_owner & (ZYM_FRAME_READ_MAX - 1);
    u64 lo = 0, hi = 0;
    if (chunk && frame) {
        u64 base = chunk + proc->chunk_data, top = frame + size;
        if (top > base) {   /* else the innermost frame is not in the chunk */
            if (top - base > ZYM_BULK_MAX)
                base = top - ZYM_BULK_MAX;
            u32 len = (top - base) & (2 * ZYM_BULK_MAX - 1);
            if (len <= ZYM_BULK_MAX && bpf_probe_read_user(bb->b, len, (void *)base) == 0) {
                lo = base;
                hi = top;
                count(ZYM_C_BULK_READS);
            }
        }
    }
    ws->frame = frame;
    ws->lo = lo;
    ws->hi = hi;
    st->hash = 0xcbf29ce484222325ULL;
    st->nframes = 0;
    ZYM_ALONE(8)
    ZYM_FROM_COPY
    ZYM_ALONE(16)
    ZYM_FROM_COPY
    ZYM_ALONE(16)
    ZYM_FROM_COPY
    ZYM_ALONE(16)
    ZYM_FROM_COPY
    ZYM_READ_ALONE(ZYM_MAX_FRAMES, 0)
    st->flags = ws->frame ? ZYM_F_TRUNCATED : 0;
    return st->hash ? st->hash : 1;
}

/* Walks the calling thread's Python stack, sends it if this process has not sent it yet,
 * and returns its hash (0 when there is none; *flags says why). */
static __always_inline u64 python_stack(struct zym_proc *proc, u32 tgid, u32 tid, u32 *flags) {
    if (proc->has_layout != ZYM_LAYOUT_KNOWN) {
        *flags |= ZYM_F_NO_LAYOUT;
        return 0;
    }
    u32 cfg = ZYM_CFG_SAMPLE;
    u64 *period = config.lookup(&cfg);
    if (period && *period > 1) {
        u64 zero = 0, *n = sample_count.lookup_or_try_init(&tid, &zero);
        if (n) {
            u64 k = (*n)++;
            if (k % *period) {
                *flags |= ZYM_F_NOT_SAMPLED;
                count(ZYM_C_NOT_SAMPLED);
                return 0;
            }
        }
    }
    u64 tstate = thread_state(proc);
    if (!tstate) {
        *flags |= ZYM_F_NO_TSTATE;
        return 0;
    }
    u32 zero32 = 0;
    struct zym_stack *st = scratch.lookup(&zero32);
    struct seen_key *last = last_seen.lookup(&zero32);
    if (!st || !last)
        return 0;
    u64 chunk = 0;
    u64 frame = first_frame(proc, tstate, &chunk);
    u64 h = walk(proc, frame, chunk, st);
    if (!st->nframes) {
        *flags |= ZYM_F_NO_FRAMES;
        return 0;
    }
    if (last->hash == h && last->pid == tgid)
        return h;
    struct seen_key key = {.hash = h, .pid = tgid};
    if (seen.lookup(&key)) {
        *last = key;
        return h;
    }
    st->type = ZYM_EV_STACK;
    st->pid = tgid;
    st->hash = h;
    if (events.ringbuf_output(st, sizeof(*st), 0) < 0) {
        count(ZYM_C_LOST_STACKS);
        return h;   /* user space will count the call's stack as missed */
    }
    u8 one = 1;
    seen.update(&key, &one);
    *last = key;
    return h;
}

/* Calls are sent without waking the reader: at ~20,000 calls/s a wakeup per record costs the
 * target more than the record. User space drains the buffer every few ms (session.py). Stack
 * and process records (rare, and a held process waits on them) wake it as usual. */
static __always_inline void send_call(struct zym_call *call) {
    if (calls.ringbuf_output(call, sizeof(*call), BPF_RB_NO_WAKEUP) < 0)
        count(ZYM_C_LOST_CALLS);
}

/* Parks the call in `pending` when its return probe will send it with its duration, else
 * sends it. */
static __always_inline void park_or_send(struct zym_call *call) {
    if (ZYM_RETURNS && call->pad) {
        u32 tid = call->tid;
        call->pad = 0;
        pending.update(&tid, call);
        return;
    }
    send_call(call);
}

/* Entry of probe `probe`: record the call's arguments, then tail-call zym_walk for the stack.
 * Keeping the frame walk in one program (not inlined into every slot) makes the kernel
 * verify it once instead of once per probe: startup went from seconds to a fraction. */
static __always_inline int on_entry(struct pt_regs *ctx, u32 probe) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32, tid = (u32)pid_tgid;
    if (!procs.lookup(&tgid))
        return 0;
    struct zym_probe_spec *spec = probes.lookup(&probe);
    u32 zero = 0;
    struct zym_call *call = call_scratch.lookup(&zero);
    if (!spec || !call)
        return 0;
    count(ZYM_C_CALLS);
    if (ZYM_RETURNS && pending.lookup(&tid)) {
        count(ZYM_C_NESTED);
        return 0;
    }
    __builtin_memset(call, 0, sizeof(*call));
    call->type = ZYM_EV_CALL;
    call->probe = probe;
    call->pid = tgid;
    call->tid = tid;
    call->ts_ns = bpf_ktime_get_ns();
    if (spec->size_slot >= 0)
        call->size_arg = read_arg(ctx, spec->size_slot);
    if (spec->copy_slot >= 0)
        call->copy_arg = read_arg(ctx, spec->copy_slot);
    if (spec->stream_slot >= 0) {
        u64 v = read_arg(ctx, spec->stream_slot);
        call->stream = spec->stream_deref >= 0 && v ? read_u64(v + (u32)spec->stream_deref) : v;
    }
    call->pad = spec->has_return;   /* read back by zym_walk */
    walker.call(ctx, 0);
    /* Only reached when the tail call failed: record the call without its stack. */
    call->flags |= ZYM_F_NO_LAYOUT;
    send_call(call);
    return 0;
}

/* Tail of every entry probe: walk the Python stack of the call in call_scratch, then send the
 * call, or park it in `pending` when its return probe will send it with its duration. */
int zym_walk(struct pt_regs *ctx) {
    u32 zero = 0;
    struct zym_call *call = call_scratch.lookup(&zero);
    if (!call)
        return 0;
    u32 tgid = call->pid, tid = call->tid;
    struct zym_proc *proc = procs.lookup(&tgid);
    if (!proc)
        return 0;
    call->stack_hash = python_stack(proc, tgid, tid, &call->flags);
    walker.call(ctx, 1);
    /* Only reached when the tail call failed: the call goes without its native key. */
    park_or_send(call);
    return 0;
}

/* Copies the user stack above sp into n->stack, as much of ZYM_NATIVE_MAX as is mapped (the
 * top of a thread's stack may lie closer): the largest chunk that reads, then halves of the
 * rest, down to 512 bytes. */
static __always_inline u32 copy_stack(struct zym_native *n, u64 sp) {
    u32 len = 0;
#pragma unroll
    for (int shift = 0; shift < 9; shift++) {
        u32 size = ZYM_NATIVE_MAX >> shift;
        if (len > ZYM_NATIVE_MAX - size)
            continue;
        if (bpf_probe_read_user(n->stack + len, size, (void *)(sp + len)) == 0)
            len += size;
    }
    return len;
}

/* Second tail of every entry probe: key the call's native path (when enabled) and send the
 * stack copy of a path this process has not sent yet, then send or park the call. */
int zym_native(struct pt_regs *ctx) {
    u32 zero = 0;
    struct zym_call *call = call_scratch.lookup(&zero);
    if (!call)
        return 0;
    u32 cfg = ZYM_CFG_NATIVE;
    u64 *on = config.lookup(&cfg);
    if (on && *on && !(call->flags & ZYM_F_NOT_SAMPLED)) {
        u64 sp = PT_REGS_SP(ctx);
        u64 k = mix(mix(mix(call->stack_hash, sp), read_u64(sp)), call->tid);
        k = k ? k : 1;
        call->native_key = k;
        u32 slot = (u32)k & (ZYM_NATIVE_CACHE - 1);
        struct seen_key *last = last_native.lookup(&slot);
        if (!last)
            goto send;
        struct seen_key key = {.hash = k, .pid = call->pid};
        if (last->hash == k && last->pid == call->pid) {
            /* a path this CPU met lately: a hot loop skips the map lookup */
        } else if (native_seen.lookup(&key)) {
            *last = key;
        } else {
            u32 cpu = bpf_get_smp_processor_id();
            struct zym_native *n = native_scratch.lookup(&cpu);
            if (n) {
                n->type = ZYM_EV_NATIVE;
                n->pid = call->pid;
                n->key = k;
                n->ip = PT_REGS_IP(ctx);
                n->sp = sp;
                n->bp = PT_REGS_FP(ctx);
                n->probe = call->probe;
                n->len = copy_stack(n, sp);
                u32 size = offsetof(struct zym_native, stack) + n->len;
                if (size > sizeof(*n))
                    size = sizeof(*n);
                if (events.ringbuf_output(n, size, 0) == 0) {
                    u8 one = 1;
                    native_seen.update(&key, &one);
                    *last = key;
                    count(ZYM_C_NATIVE_SENT);
                } else {
                    count(ZYM_C_LOST_NATIVE);   /* sent again at the path's next call */
                }
            }
        }
    }
send:
    park_or_send(call);
    return 0;
}

static __always_inline int on_return(struct pt_regs *ctx, u32 probe) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct zym_call *p = pending.lookup(&tid);
    if (!p || p->probe != probe)
        return 0;   /* the return of a nested call */
    struct zym_call call = *p;
    pending.delete(&tid);
    call.dur_ns = bpf_ktime_get_ns() - call.ts_ns;
    send_call(&call);
    return 0;
}

/* A tracked process forks: the child shares the parent's memory layout until it execs, so it
 * inherits the interpreter layout and is traced from its first instruction. (This tracepoint
 * also fires for new threads; user space ignores those.) */
TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    struct zym_proc *proc = procs.lookup(&parent);
    if (!proc)
        return 0;
    u32 child = args->child_pid;
    struct zym_proc copy = *proc;
    procs.update(&child, &copy);
    struct zym_proc_event ev = {.type = ZYM_EV_PROC, .what = ZYM_PROC_FORK,
                                .pid = child, .ppid = parent};
    events.ringbuf_output(&ev, sizeof(ev), 0);
    return 0;
}

/* exec replaces the image: forget the layout until user space has detected the new one. */
TRACEPOINT_PROBE(sched, sched_process_exec) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct zym_proc *proc = procs.lookup(&tgid);
    if (!proc)
        return 0;
    proc->has_layout = ZYM_LAYOUT_UNKNOWN;
    struct zym_proc_event ev = {.type = ZYM_EV_PROC, .what = ZYM_PROC_EXEC, .pid = tgid};
    events.ringbuf_output(&ev, sizeof(ev), 0);
    return 0;
}

/* CUDA initialization (cuInit, cuGetProcAddress) in a process whose interpreter layout user
 * space has not detected yet, typically a command that exec'd a moment ago: stop the process
 * (SIGSTOP, delivered before the call proceeds) and tell user space, which detects the
 * layout, fills the map and sends SIGCONT. No CUDA call can precede cuInit, so every recorded
 * call gets its stack. Processes with a known layout, or none, pass straight through. */
int zym_gate(struct pt_regs *ctx) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    struct zym_proc *proc = procs.lookup(&tgid);
    if (!proc || proc->has_layout != ZYM_LAYOUT_UNKNOWN)
        return 0;
    struct zym_proc_event ev = {.type = ZYM_EV_PROC, .what = ZYM_PROC_GATE, .pid = tgid,
                                .ppid = (u32)pid_tgid};
    if (events.ringbuf_output(&ev, sizeof(ev), 0) == 0)
        bpf_send_signal(19);   /* SIGSTOP (x86-64) */
    return 0;
}

/* The trap-cost calibration's probe (capture/cost.py): does nothing, so what it adds to a call
 * is the trap alone. */
int zym_calib(struct pt_regs *ctx) { return 0; }

/* One entry and one return program per probe slot; probes.py maps symbols to slots. They are
 * small (the walk is zym_walk's), so all ZYM_MAX_PROBES are compiled; the loader loads those
 * its libraries use. */
#define ZYM_SLOT(n)                                                                   \
    int zym_entry_##n(struct pt_regs *ctx) { return on_entry(ctx, n); }               \
    int zym_return_##n(struct pt_regs *ctx) { return on_return(ctx, n); }

ZYM_SLOT(0) ZYM_SLOT(1) ZYM_SLOT(2) ZYM_SLOT(3) ZYM_SLOT(4) ZYM_SLOT(5) ZYM_SLOT(6) ZYM_SLOT(7)
ZYM_SLOT(8) ZYM_SLOT(9) ZYM_SLOT(10) ZYM_SLOT(11) ZYM_SLOT(12) ZYM_SLOT(13) ZYM_SLOT(14) ZYM_SLOT(15)
ZYM_SLOT(16) ZYM_SLOT(17) ZYM_SLOT(18) ZYM_SLOT(19) ZYM_SLOT(20) ZYM_SLOT(21) ZYM_SLOT(22) ZYM_SLOT(23)
ZYM_SLOT(24) ZYM_SLOT(25) ZYM_SLOT(26) ZYM_SLOT(27) ZYM_SLOT(28) ZYM_SLOT(29) ZYM_SLOT(30) ZYM_SLOT(31)
ZYM_SLOT(32) ZYM_SLOT(33) ZYM_SLOT(34) ZYM_SLOT(35) ZYM_SLOT(36) ZYM_SLOT(37) ZYM_SLOT(38) ZYM_SLOT(39)
ZYM_SLOT(40) ZYM_SLOT(41) ZYM_SLOT(42) ZYM_SLOT(43) ZYM_SLOT(44) ZYM_SLOT(45) ZYM_SLOT(46) ZYM_SLOT(47)
ZYM_SLOT(48) ZYM_SLOT(49) ZYM_SLOT(50) ZYM_SLOT(51) ZYM_SLOT(52) ZYM_SLOT(53) ZYM_SLOT(54) ZYM_SLOT(55)
ZYM_SLOT(56) ZYM_SLOT(57) ZYM_SLOT(58) ZYM_SLOT(59) ZYM_SLOT(60) ZYM_SLOT(61) ZYM_SLOT(62) ZYM_SLOT(63)
