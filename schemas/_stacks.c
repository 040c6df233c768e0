/* The compiled half of schemas/stacks.py: each row's root path interned in one walk.
 *
 * walk(frame, parent, parent_width, path, path_width) takes a forest by rows: ``frame``
 * (int64 per row), ``parent`` (each row's parent row, n = len(frame) or more at a root) and
 * ``path`` (writable, every entry -1), the last two of 4- or 8-byte integers as the widths
 * say. It writes each row's path
 * number into ``path`` and returns (paths, parent_path, frame, size, first_row): per path,
 * as int64 bytes, the parent's path (-1 at a root), its frame, its length (depth + 1) and the
 * least row on it; paths are numbered in the order the walk first meets them. paths is -1
 * when the parent links loop (the arrays then empty).
 *
 * A path is (its parent's path, its frame), interned in an open-addressing table of the
 * paths found so far; a row's unresolved ancestors are collected up to a resolved one or a
 * root, then resolved from the top down, so each row is resolved once, whatever the rows'
 * order. No hashing of whole paths: two paths are the same exactly when their parents are
 * and their frames are. The GIL is released during the walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t *parent, *frame, *size, *first;
    int64_t n, cap;
    int64_t *slots; /* path number per slot, -1: empty; at most half full */
    int64_t n_slots;
} Paths;

static inline uint64_t slot_hash(int64_t up, int64_t f) {
    uint64_t h = (uint64_t)up * 0x9E3779B97F4A7C15ULL + (uint64_t)f * 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 29);
}

static int64_t *grown(int64_t *a, int64_t cap) {
    return realloc(a, (size_t)cap * sizeof(int64_t));
}

static int paths_rehash(Paths *p, int64_t n_slots) {
    int64_t *slots = malloc((size_t)n_slots * sizeof(int64_t));
    if (slots == NULL)
        return -1;
    memset(slots, 0xff, (size_t)n_slots * sizeof(int64_t));
    uint64_t mask = (uint64_t)n_slots - 1;
    for (int64_t k = 0; k < p->n; k++) {
        uint64_t s = slot_hash(p->parent[k], p->frame[k]) & mask;
        while (slots[s] >= 0)
            s = (s + 1) & mask;
        slots[s] = k;
    }
    free(p->slots);
    p->slots = slots;
    p->n_slots = n_slots;
    return 0;
}

static int paths_init(Paths *p) {
    memset(p, 0, sizeof(*p));
    p->cap = 1 << 12;
    p->parent = malloc((size_t)p->cap * sizeof(int64_t));
    p->frame = malloc((size_t)p->cap * sizeof(int64_t));
    p->size = malloc((size_t)p->cap * sizeof(int64_t));
    p->first = malloc((size_t)p->cap * sizeof(int64_t));
    if (!p->parent || !p->frame || !p->size || !p->first)
        return -1;
    return paths_rehash(p, 2 * p->cap);
}

static void paths_free(Paths *p) {
    free(p->parent);
    free(p->frame);
    free(p->size);
    free(p->first);
    free(p->slots);
}

/* The path (up, f), made when new (with ``row`` its first row so far); -1 when out of memory. */
static inline int64_t paths_intern(Paths *p, int64_t up, int64_t f, int64_t row) {
    uint64_t mask = (uint64_t)p->n_slots - 1;
    uint64_t s = slot_hash(up, f) & mask;
    int64_t k;
    while ((k = p->slots[s]) >= 0) {
        if (p->parent[k] == up && p->frame[k] == f) {
            if (row < p->first[k])
                p->first[k] = row;
            return k;
        }
        s = (s + 1) & mask;
    }
    if (p->n == p->cap) {
        int64_t cap = 2 * p->cap;
        int64_t *a = grown(p->parent, cap);
        if (a == NULL)
            return -1;
        p->parent = a;
        if ((a = grown(p->frame, cap)) == NULL)
            return -1;
        p->frame = a;
        if ((a = grown(p->size, cap)) == NULL)
            return -1;
        p->size = a;
        if ((a = grown(p->first, cap)) == NULL)
            return -1;
        p->first = a;
        p->cap = cap;
        if (paths_rehash(p, 2 * cap) < 0)
            return -1;
        mask = (uint64_t)p->n_slots - 1;
        s = slot_hash(up, f) & mask;
        while (p->slots[s] >= 0)
            s = (s + 1) & mask;
    }
    k = p->n++;
    p->parent[k] = up;
    p->frame[k] = f;
    p->size[k] = up < 0 ? 1 : p->size[up] + 1;
    p->first[k] = row;
    p->slots[s] = k;
    return k;
}

/* Reads row i of an int32 or int64 buffer. */
#define AT(buf, wide, i) ((wide) ? ((const int64_t *)(buf))[i] : (int64_t)((const int32_t *)(buf))[i])

/* 0: done; 1: cyclic links; -1: out of memory. */
static int walk_rows(const int64_t *frame, const void *parent, int parent_wide, void *path,
                     int path_wide, int64_t n, Paths *p) {
    int64_t work_cap = 1 << 10, *work = malloc((size_t)work_cap * sizeof(int64_t));
    if (work == NULL)
        return -1;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        if (AT(path, path_wide, i) >= 0)
            continue;
        int64_t top = 0, j = i, v;
        while (j >= 0 && j < n && (v = AT(path, path_wide, j)) == -1) {
            if (path_wide)
                ((int64_t *)path)[j] = -2; /* collected: met again means a loop */
            else
                ((int32_t *)path)[j] = -2;
            if (top == work_cap) {
                int64_t *w = realloc(work, (size_t)(2 * work_cap) * sizeof(int64_t));
                if (w == NULL) {
                    rc = -1;
                    break;
                }
                work = w;
                work_cap *= 2;
            }
            work[top++] = j;
            j = AT(parent, parent_wide, j);
        }
        if (rc)
            break;
        int64_t up = -1;
        if (j >= 0 && j < n) {
            up = AT(path, path_wide, j);
            if (up == -2) {
                rc = 1;
                break;
            }
        }
        while (top > 0) {
            int64_t r = work[--top];
            up = paths_intern(p, up, frame[r], r);
            if (up < 0) {
                rc = -1;
                break;
            }
            if (path_wide)
                ((int64_t *)path)[r] = up;
            else
                ((int32_t *)path)[r] = (int32_t)up;
        }
    }
    free(work);
    return rc;
}

static PyObject *as_bytes(const int64_t *a, int64_t n) {
    return PyBytes_FromStringAndSize((const char *)a, (Py_ssize_t)(n * (int64_t)sizeof(int64_t)));
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer frame, parent, path;
    int parent_width, path_width;
    if (!PyArg_ParseTuple(args, "y*y*iw*i", &frame, &parent, &parent_width, &path, &path_width))
        return NULL;
    PyObject *out = NULL;
    int64_t n = frame.len / 8;
    int parent_wide = parent_width == 8, path_wide = path_width == 8;
    if (frame.len % 8 || (parent_width != 4 && parent_width != 8)
        || (path_width != 4 && path_width != 8) || parent.len != n * parent_width
        || path.len != n * path_width || (!path_wide && n > INT32_MAX)) {
        PyErr_SetString(PyExc_ValueError, "walk: frame int64, parent and path int32/int64, "
                                          "one entry per row");
        goto done;
    }
    Paths p;
    if (paths_init(&p) < 0) {
        paths_free(&p);
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = walk_rows(frame.buf, parent.buf, parent_wide, path.buf, path_wide, n, &p);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else if (rc > 0)
        out = Py_BuildValue("(iyyyy)", -1, "", "", "", "");
    else
        out = Py_BuildValue("(LNNNN)", (long long)p.n, as_bytes(p.parent, p.n),
                            as_bytes(p.frame, p.n), as_bytes(p.size, p.n), as_bytes(p.first, p.n));
    paths_free(&p);
done:
    PyBuffer_Release(&frame);
    PyBuffer_Release(&parent);
    PyBuffer_Release(&path);
    return out;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Intern each row's root path: see the module comment."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stacks", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__stacks(void) { return PyModule_Create(&module); }
