/* The compiled half of capture/kineto.py's nest_intervals: each interval's parent in one pass.
 *
 * Intervals are keyed as kineto.py's numpy path keys them: one int64 per open and per close
 * that orders threads, then instants, then, at one instant, closes of intervals that have
 * length before opens before closes of zero-length ones.
 *
 * preorder(opens, length, node, order): ``order`` holds the rows sorted by ``opens`` (a
 * stable sort); each run of rows with one open key is put in (longest first, node) order, so
 * that ``order`` is the preorder np.lexsort((node, -length, opens)) gives. In place.
 *
 * nest(opens, closes_sorted, order, node, thread, parent, top): along the preorder, an
 * interval's depth is the number of earlier intervals of its thread minus those of their
 * closes that come before its open (a pointer into the sorted closes), and its parent is the
 * latest earlier interval one level up (the last interval seen at each depth): the same
 * counting as the numpy path, so intervals that overlap without nesting get the same parents.
 * ``thread``: per row, its thread's number (a thread starts where it changes in preorder).
 * Writes, per row (not per position), the parent's node and whether it is at the top.
 *
 * The GIL is released while either runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t neg_dur, node, row;
} Tie;

static int tie_cmp(const void *a, const void *b) {
    const Tie *x = a, *y = b;
    if (x->neg_dur != y->neg_dur)
        return x->neg_dur < y->neg_dur ? -1 : 1;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return x->row < y->row ? -1 : (x->row > y->row);
}

/* 0, or -1 when out of memory. */
static int sort_ties(const int64_t *opens, const int64_t *length, const int64_t *node,
                     int64_t *order, int64_t n) {
    Tie *tmp = NULL;
    int64_t cap = 0;
    for (int64_t a = 0, b; a < n; a = b) {
        int64_t key = opens[order[a]];
        for (b = a + 1; b < n && opens[order[b]] == key; b++)
            ;
        int64_t len = b - a;
        if (len < 2)
            continue;
        if (len > cap) {
            Tie *t = realloc(tmp, (size_t)len * sizeof(Tie));
            if (t == NULL) {
                free(tmp);
                return -1;
            }
            tmp = t;
            cap = len;
        }
        for (int64_t k = 0; k < len; k++) {
            int64_t r = order[a + k];
            tmp[k] = (Tie){-length[r], node[r], r}; /* lengths and ends are >= 0 */
        }
        qsort(tmp, (size_t)len, sizeof(Tie), tie_cmp);
        for (int64_t k = 0; k < len; k++)
            order[a + k] = tmp[k].row;
    }
    free(tmp);
    return 0;
}

static int same_len(Py_buffer *b, int64_t n) { return b->len == n * 8; }

static PyObject *preorder(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer opens, length, node, order;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &opens, &length, &node, &order))
        return NULL;
    PyObject *out = NULL;
    int64_t n = opens.len / 8;
    if (opens.len % 8 || !same_len(&length, n) || !same_len(&node, n) || !same_len(&order, n)) {
        PyErr_SetString(PyExc_ValueError, "preorder: int64 arrays, one entry per interval");
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sort_ties(opens.buf, length.buf, node.buf, order.buf, n);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else
        out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&opens);
    PyBuffer_Release(&length);
    PyBuffer_Release(&node);
    PyBuffer_Release(&order);
    return out;
}

/* 0, or -1 when out of memory. */
static int nest_rows(const int64_t *opens, const int64_t *closes, const int64_t *order,
                     const int64_t *node, const int64_t *thread, int64_t *parent,
                     uint8_t *top, int64_t n) {
    int64_t *last = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t)); /* row at each depth */
    if (last == NULL)
        return -1;
    int64_t c = 0, first = 0, closed_before = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = order[i], key = opens[r];
        if (i == 0 || thread[r] != thread[order[i - 1]]) {
            first = i;
            while (c < n && closes[c] < key)
                c++;
            closed_before = c; /* every earlier thread's closes: none of this one's yet */
        }
        while (c < n && closes[c] < key)
            c++;
        int64_t depth = (i - first) - (c - closed_before);
        if (depth <= 0) {
            top[r] = 1;
            parent[r] = 0;
            depth = 0;
        } else {
            top[r] = 0;
            parent[r] = node[last[depth - 1]];
        }
        last[depth] = r;
    }
    free(last);
    return 0;
}

static PyObject *nest(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer opens, closes, order, node, thread, parent, top;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*", &opens, &closes, &order, &node, &thread,
                          &parent, &top))
        return NULL;
    PyObject *out = NULL;
    int64_t n = opens.len / 8;
    if (opens.len % 8 || !same_len(&closes, n) || !same_len(&order, n) || !same_len(&node, n)
        || !same_len(&thread, n) || !same_len(&parent, n) || top.len != n) {
        PyErr_SetString(PyExc_ValueError, "nest: int64 arrays (bytes for top), one entry per "
                                          "interval");
        goto done;
    }
    const int64_t *ord = order.buf;
    for (int64_t i = 0; i < n; i++)
        if (ord[i] < 0 || ord[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "nest: order holds a row out of range");
            goto done;
        }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = nest_rows(opens.buf, closes.buf, ord, node.buf, thread.buf, parent.buf, top.buf,
                   n);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else
        out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&opens);
    PyBuffer_Release(&closes);
    PyBuffer_Release(&order);
    PyBuffer_Release(&node);
    PyBuffer_Release(&thread);
    PyBuffer_Release(&parent);
    PyBuffer_Release(&top);
    return out;
}

static PyMethodDef methods[] = {
    {"preorder", preorder, METH_VARARGS, "Order each run of equal opens: see the module comment."},
    {"nest", nest, METH_VARARGS, "Each interval's parent: see the module comment."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nesting", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__nesting(void) { return PyModule_Create(&module); }
