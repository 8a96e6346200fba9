/* The sweep of cupool.planning.solvers.best_fit, compiled.
 *
 * sweep(starts, ends, sizes, allocations, frees, offsets) replays what solve_best_fit's
 * loop does with a cupool.core.free_ranges.FreeRanges heap (one region from 0, best fit,
 * alignment 1, every split kept): for each buffer j of `allocations` in turn, the buffers
 * of `frees` (in that order) whose end is at or before starts[j] are freed first, then j
 * takes the smallest free range holding sizes[j] (ties: the lowest address) at its start,
 * else the heap grows: j goes at the start of the free range touching the top when there
 * is one, else at the top. offsets[j] is filled for every j. Every size must be > 0 and
 * every start < its end (the caller checks: the Python loop is the reference elsewhere).
 *
 * The free ranges are kept twice, as FreeRanges keeps them: sorted by start (to find the
 * neighbours a freed block merges with) and sorted by (size, start) (best fit is the first
 * entry of size >= the request). Both are arrays; an insertion or removal moves the entries
 * after it, as the list under FreeRanges does.
 *
 * All arrays are C-contiguous int64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_int64_arg.h"

typedef struct {
    int64_t key, start; /* by start: key = end; by size: key = size */
} Entry;

typedef struct {
    Entry *by_start; /* (end, start) sorted by start */
    Entry *by_size;  /* (size, start) sorted by (size, start) */
    Py_ssize_t len;
    int64_t top; /* the heap's end */
} Heap;

/* The first index of `by_start` whose start is >= `start`. */
static Py_ssize_t start_at(const Heap *h, int64_t start) {
    Py_ssize_t lo = 0, hi = h->len;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (h->by_start[mid].start < start) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The first index of `by_size` not below (size, start). */
static Py_ssize_t size_at(const Heap *h, int64_t size, int64_t start) {
    Py_ssize_t lo = 0, hi = h->len;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        const Entry *e = &h->by_size[mid];
        if (e->key < size || (e->key == size && e->start < start)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void insert_range(Heap *h, int64_t start, int64_t end) {
    Py_ssize_t i = start_at(h, start), k = size_at(h, end - start, start);
    memmove(&h->by_start[i + 1], &h->by_start[i], (size_t)(h->len - i) * sizeof(Entry));
    h->by_start[i].key = end;
    h->by_start[i].start = start;
    memmove(&h->by_size[k + 1], &h->by_size[k], (size_t)(h->len - k) * sizeof(Entry));
    h->by_size[k].key = end - start;
    h->by_size[k].start = start;
    h->len++;
}

/* Remove the free range at index i of `by_start`. */
static void remove_range(Heap *h, Py_ssize_t i) {
    int64_t start = h->by_start[i].start, end = h->by_start[i].key;
    Py_ssize_t k = size_at(h, end - start, start);
    memmove(&h->by_start[i], &h->by_start[i + 1], (size_t)(h->len - i - 1) * sizeof(Entry));
    memmove(&h->by_size[k], &h->by_size[k + 1], (size_t)(h->len - k - 1) * sizeof(Entry));
    h->len--;
}

static int64_t allocate(Heap *h, int64_t size) {
    Py_ssize_t k = size_at(h, size, -1);
    if (k == h->len) { /* nothing fits: grow the heap at its top */
        int64_t start = h->top;
        if (h->len && h->by_start[h->len - 1].key == h->top) {
            start = h->by_start[h->len - 1].start;
            remove_range(h, h->len - 1);
        }
        h->top = start + size;
        return start;
    }
    int64_t start = h->by_size[k].start, end = start + h->by_size[k].key;
    remove_range(h, start_at(h, start));
    if (end - start - size >= 1) insert_range(h, start + size, end);
    return start;
}

static void release(Heap *h, int64_t start, int64_t size) {
    int64_t end = start + size;
    Py_ssize_t i = start_at(h, start);
    if (i < h->len && h->by_start[i].start == end) { /* the free range above */
        end = h->by_start[i].key;
        remove_range(h, i);
    }
    if (i > 0 && h->by_start[i - 1].key == start) { /* the free range below */
        start = h->by_start[i - 1].start;
        remove_range(h, i - 1);
    }
    insert_range(h, start, end);
}

static PyObject *sweep(PyObject *self, PyObject *args) {
    PyObject *o_starts, *o_ends, *o_sizes, *o_alloc, *o_frees, *o_offsets;
    Arg a_starts = {0}, a_ends = {0}, a_sizes = {0}, a_alloc = {0}, a_frees = {0},
        a_offsets = {0};
    Heap heap = {0};
    PyObject *result = NULL;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOOOOO", &o_starts, &o_ends, &o_sizes, &o_alloc, &o_frees,
                          &o_offsets))
        return NULL;
    if (get_int64(o_starts, &a_starts, 0, "starts") || get_int64(o_ends, &a_ends, 0, "ends") ||
        get_int64(o_sizes, &a_sizes, 0, "sizes") ||
        get_int64(o_alloc, &a_alloc, 0, "allocations") ||
        get_int64(o_frees, &a_frees, 0, "frees") ||
        get_int64(o_offsets, &a_offsets, 1, "offsets"))
        goto done;
    Py_ssize_t n = a_sizes.view.len / 8;
    if (a_starts.view.len / 8 != n || a_ends.view.len / 8 != n || a_alloc.view.len / 8 != n ||
        a_frees.view.len / 8 != n || a_offsets.view.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError,
                        "starts, ends, sizes, allocations, frees and offsets must have one "
                        "length");
        goto done;
    }
    const int64_t *starts = a_starts.view.buf, *ends = a_ends.view.buf,
                  *sizes = a_sizes.view.buf, *alloc = a_alloc.view.buf,
                  *frees = a_frees.view.buf;
    int64_t *offsets = a_offsets.view.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (alloc[k] < 0 || alloc[k] >= n || frees[k] < 0 || frees[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "allocations and frees must index the buffers");
            goto done;
        }
        if (sizes[k] <= 0 || starts[k] >= ends[k]) {
            PyErr_SetString(PyExc_ValueError, "every size must be > 0 and every start < end");
            goto done;
        }
    }
    heap.by_start = malloc((size_t)(n + 1) * sizeof(Entry));
    heap.by_size = malloc((size_t)(n + 1) * sizeof(Entry));
    if (!heap.by_start || !heap.by_size) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t freed = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t j = alloc[k];
        while (freed < n && ends[frees[freed]] <= starts[j]) {
            int64_t f = frees[freed++];
            release(&heap, offsets[f], sizes[f]);
        }
        offsets[j] = allocate(&heap, sizes[j]);
    }
    result = Py_NewRef(Py_None);
done:
    free(heap.by_start);
    free(heap.by_size);
    if (a_starts.held) PyBuffer_Release(&a_starts.view);
    if (a_ends.held) PyBuffer_Release(&a_ends.view);
    if (a_sizes.held) PyBuffer_Release(&a_sizes.view);
    if (a_alloc.held) PyBuffer_Release(&a_alloc.view);
    if (a_frees.held) PyBuffer_Release(&a_frees.view);
    if (a_offsets.held) PyBuffer_Release(&a_offsets.view);
    return result;
}

static PyMethodDef methods[] = {
    {"sweep", sweep, METH_VARARGS,
     "sweep(starts, ends, sizes, allocations, frees, offsets): the best-fit heap sweep of "
     "cupool.planning.solvers.best_fit into `offsets` (int64 arrays)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_bestfit",
    .m_doc = "Compiled best-fit heap sweep of cupool.planning.solvers.best_fit (identical "
             "offsets).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__bestfit(void) { return PyModule_Create(&module); }
