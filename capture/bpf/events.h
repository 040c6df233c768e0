/* zym capture: the one layout contract between the BPF program (zym.bpf.c) and user space.
 *
 * Compiled by BCC (clang, target bpf) and, in the tests, by gcc: the test compares every
 * sizeof/offsetof here with the ctypes mirrors in capture/events.py, so the two cannot drift.
 */
#ifndef ZYM_EVENTS_H
#define ZYM_EVENTS_H

#ifndef ZYM_BPF  /* gcc (tests); zym.bpf.c defines ZYM_BPF and gets these from the kernel headers */
#include <stdint.h>
typedef uint8_t u8;
typedef int8_t s8;
typedef uint16_t u16;
typedef int16_t s16;
typedef uint32_t u32;
typedef int32_t s32;
typedef uint64_t u64;
#endif

/* Frames walked per stack (innermost first). Deeper stacks are cut and flagged. */
#ifndef ZYM_MAX_FRAMES
#define ZYM_MAX_FRAMES 128
#endif
/* One entry and one return program exist per probe slot; probes.py may use this many. */
#define ZYM_MAX_PROBES 64

/* Record types: the first u32 of every ring buffer record. */
#define ZYM_EV_CALL 1
#define ZYM_EV_STACK 2
#define ZYM_EV_PROC 3
#define ZYM_EV_NATIVE 4

/* Bytes of the thread's native stack copied (from the stack pointer up) when a call's native
 * path is new: unwound with .eh_frame and symbolised in user space (capture/native.py).
 * cuBLAS and cuDNN keep frames of tens of KiB (measured on the H200: 32 KiB reached only
 * part of the way up), so the copy is large; it is made once per native path. */
#ifndef ZYM_NATIVE_MAX
#define ZYM_NATIVE_MAX 131072
#endif

/* zym_call.flags */
#define ZYM_F_NO_LAYOUT 1    /* the process is tracked but its interpreter is not known (yet) */
#define ZYM_F_NO_TSTATE 2    /* the thread has no PyThreadState: a native thread */
#define ZYM_F_NO_FRAMES 4    /* a PyThreadState without Python frames */
#define ZYM_F_NOT_SAMPLED 8  /* --sample N: this call's stack was not walked */
#define ZYM_F_TRUNCATED 16   /* deeper than ZYM_MAX_FRAMES (zym_stack.flags) */

/* zym_proc_event.what */
#define ZYM_PROC_FORK 1
#define ZYM_PROC_EXEC 2
#define ZYM_PROC_GATE 3      /* a process without a layout entered CUDA init: it is stopped */

/* zym_proc.has_layout */
#define ZYM_LAYOUT_UNKNOWN 0 /* not detected yet: the CUDA init gate stops the process */
#define ZYM_LAYOUT_KNOWN 1
#define ZYM_LAYOUT_NONE 2    /* not a CPython zym can read: record calls without stacks */

/* Counter slots (per-CPU array "counters"). */
#define ZYM_C_CALLS 0         /* calls seen by an entry probe in a tracked process */
#define ZYM_C_NESTED 1        /* calls made inside another probed call (runtime -> driver) */
#define ZYM_C_LOST_CALLS 2    /* call records the ring buffer had no room for */
#define ZYM_C_LOST_STACKS 3   /* stack records the ring buffer had no room for */
#define ZYM_C_NOT_SAMPLED 4
#define ZYM_C_BULK_READS 5     /* walks that read the thread's data stack at once */
#define ZYM_C_FRAME_READS 6    /* frames read one by one (outside that read, or 3.10) */
#define ZYM_C_NATIVE_SENT 7    /* native stack copies sent (one per new native path) */
#define ZYM_C_LOST_NATIVE 8    /* native stack copies the ring buffer had no room for */
#define ZYM_NCOUNTERS 10

/* Slots of the "config" array, set by user space while capturing. */
#define ZYM_CFG_SAMPLE 0      /* walk the stack of every Nth call per thread (1: every call) */
#define ZYM_CFG_NATIVE 1      /* 1: key each call's native path and copy the stack of new ones */
#define ZYM_NCONFIG 4

/* One CUDA API call. Calls with a return probe are sent at return, with dur_ns. */
struct zym_call {
    u32 type;
    u32 probe;        /* index into probes.PROBES */
    u32 pid;
    u32 tid;
    u64 ts_ns;        /* bpf_ktime_get_ns() at entry: CLOCK_MONOTONIC */
    u64 dur_ns;       /* 0 without a return probe */
    u64 stack_hash;   /* 0: no stack (see flags) */
    u64 size_arg;     /* raw argument values, scaled and decoded in user space */
    u64 stream;
    u64 copy_arg;
    u32 flags;
    u32 pad;
    u64 native_key;   /* 0: none; else (pid, native_key) names a zym_native record */
};

struct zym_frame {
    u64 code;         /* PyCodeObject * */
    u64 instr;        /* 3.11+: _Py_CODEUNIT * of the executing instruction; 3.10: f_lasti
                         (low 32 bits) */
};

/* A Python stack, sent once per (pid, stack_hash) while it stays in the kernel's LRU. */
struct zym_stack {
    u32 type;
    u32 pid;
    u64 hash;
    u32 nframes;
    u32 flags;
    struct zym_frame frames[ZYM_MAX_FRAMES];
};

/* The native stack of a call whose native path is new: the registers an unwinder starts from
 * at the probed instruction, and the stack's bytes [sp, sp + len). Sent once per
 * (pid, key); the key mixes the Python stack's hash, the stack pointer and the return address
 * (the same Python stack reaching the same API through another native path differs in
 * either), so repeats of a path cost one map lookup. */
struct zym_native {
    u32 type;
    u32 pid;
    u64 key;
    u64 ip;
    u64 sp;
    u64 bp;
    u32 len;
    u32 probe;
    u8 stack[ZYM_NATIVE_MAX];
};

/* A tracked process forked a child, or exec'd: user space (re)detects its interpreter. */
struct zym_proc_event {
    u32 type;
    u32 what;
    u32 pid;
    u32 ppid;
};

/* Per-process interpreter layout (map "procs", key: tgid), filled from capture/offsets. */
struct zym_proc {
    u64 tss_key_addr;   /* &_PyRuntime.(gilstate.)autoTSSkey._key: the pthread key of tstates */
    u64 none_addr;      /* &_Py_NoneStruct: 3.13 entry frames carry None as their code */
    s32 tss_key;        /* the key once read (set by BPF; user space writes -1) */
    s32 ts_chunk;       /* PyThreadState.datastack_chunk (3.11+); -1: no data stack (3.10) */
    u32 chunk_data;     /* offsetof(_PyStackChunk, data) */
    u32 ts_lo;          /* PyThreadState bytes [ts_lo, ts_lo + ts_span) hold ts_frame and */
    u32 ts_span;        /* ts_chunk: one read; ts_span <= 504 */
    u32 has_layout;     /* ZYM_LAYOUT_* */
    u32 tsd_first;      /* glibc struct pthread: offset of specific_1stblock[0].data */
    u32 tsd_stride;
    s32 cframe_current; /* 3.11/3.12: tstate->cframe->current_frame; -1 when direct */
    u32 ts_frame;       /* PyThreadState.cframe / .current_frame / .frame (3.10) */
    u32 f_code;
    u32 f_previous;
    u32 f_instr;
    u32 f_owner;        /* byte compared with owned_by_cstack (any readable byte before 3.12) */
    u32 owned_by_cstack;/* FRAME_OWNED_BY_CSTACK; 256 (never equal to a byte) before 3.12 */
    u32 frame_read;     /* bytes read per frame (one read covers every field above), <= 128 */
};

/* How to read one probe's arguments (map "probes", key: probe index). A slot is the integer
 * argument position of the SysV x86-64 ABI: 0-5 are registers, 6+ the stack. -1: absent. */
struct zym_probe_spec {
    s16 size_slot;      /* 16-bit: BCC's table decoder knows no "signed char" */
    s16 stream_slot;
    s16 copy_slot;
    u16 has_return;
    s32 stream_deref;   /* >= 0: stream_slot holds a struct pointer, the stream is at +this */
};

#endif
