/* The best-fit decoder of cupool.planning.solvers.greedy, compiled.
 *
 * place(first, last, sizes, order, num_slots, offsets) places buffers in `order`: buffer j
 * covers time slots [first[j], last[j]) and goes into the smallest gap (ties: lowest offset)
 * left by the already placed buffers whose slots overlap its own, else just above the highest
 * of them; offsets[j] receives its offset. It is the rule of greedy._place_python and gives
 * the same offsets (the gap choice depends only on the set of overlapping byte ranges).
 *
 * Placed buffers are indexed by a segment tree over slots: cover[v] holds the buffers whose
 * canonical nodes include v, touch[v] those with a canonical node in v's subtree. The
 * buffers overlapping [lo, hi) are touch[c] for the query's canonical nodes c plus cover[a]
 * for the nodes a on the root paths of its two end slots. Buffers spanning every slot
 * (weights, optimizer state) overlap every query, so they are kept apart in one array sorted
 * by offset and merged into each query's sorted candidates instead of being sorted again.
 *
 * All arrays are C-contiguous int64 (NumPy's default integer on 64-bit Linux/macOS).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *items;
    int32_t len, cap;
} IndexList;

typedef struct {
    int64_t offset, top;
} Range;

static int list_push(IndexList *list, int32_t value) {
    if (list->len == list->cap) {
        int32_t cap = list->cap ? 2 * list->cap : 4;
        int32_t *items = realloc(list->items, (size_t)cap * sizeof(int32_t));
        if (!items) return -1;
        list->items = items;
        list->cap = cap;
    }
    list->items[list->len++] = value;
    return 0;
}

/* Sort by offset: quicksort with median-of-three pivots, insertion sort for short runs. */
static void sort_ranges(Range *a, Py_ssize_t n) {
    while (n > 16) {
        Py_ssize_t mid = n / 2, i = 0, j = n - 1;
        Range t;
        if (a[mid].offset < a[0].offset) { t = a[mid]; a[mid] = a[0]; a[0] = t; }
        if (a[n - 1].offset < a[0].offset) { t = a[n - 1]; a[n - 1] = a[0]; a[0] = t; }
        if (a[n - 1].offset < a[mid].offset) { t = a[n - 1]; a[n - 1] = a[mid]; a[mid] = t; }
        int64_t pivot = a[mid].offset;
        for (;;) {
            while (a[i].offset < pivot) i++;
            while (a[j].offset > pivot) j--;
            if (i >= j) break;
            t = a[i]; a[i] = a[j]; a[j] = t;
            i++;
            j--;
        }
        /* recurse on the smaller part, loop on the larger */
        if (j + 1 < n - j - 1) {
            sort_ranges(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            sort_ranges(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        Range x = a[i];
        Py_ssize_t j = i;
        while (j > 0 && a[j - 1].offset > x.offset) { a[j] = a[j - 1]; j--; }
        a[j] = x;
    }
}

/* The best-fit offset for `size` bytes among two offset-sorted runs of byte ranges. */
static int64_t best_gap(const Range *a, Py_ssize_t na, const Range *b, Py_ssize_t nb,
                        int64_t size) {
    int64_t reached = 0, best = -1, best_at = 0;
    Py_ssize_t i = 0, k = 0;
    while (i < na || k < nb) {
        const Range *r = (k >= nb || (i < na && a[i].offset <= b[k].offset)) ? &a[i++] : &b[k++];
        int64_t gap = r->offset - reached;
        if (gap >= size && (best < 0 || gap < best)) {
            best = gap;
            best_at = reached;
        }
        if (r->top > reached) reached = r->top;
    }
    return best >= 0 ? best_at : reached;
}

typedef struct {
    Py_buffer view;
    int held;
} Arg;

static int get_int64(PyObject *obj, Arg *arg, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &arg->view, flags) < 0) return -1;
    arg->held = 1;
    const char *f = arg->view.format;
    if (arg->view.itemsize != 8 || !f || (strcmp(f, "q") && strcmp(f, "l") &&
                                          strcmp(f, "<q") && strcmp(f, "<l") &&
                                          strcmp(f, "=q") && strcmp(f, "=l"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous int64 array", name);
        return -1;
    }
    return 0;
}

static PyObject *place(PyObject *self, PyObject *args) {
    PyObject *o_first, *o_last, *o_sizes, *o_order, *o_offsets;
    Py_ssize_t num_slots;
    Arg a_first = {0}, a_last = {0}, a_sizes = {0}, a_order = {0}, a_offsets = {0};
    IndexList *cover = NULL, *touch = NULL;
    Range *ranges = NULL, *spanning = NULL;
    int32_t *stamp = NULL, *seen = NULL;
    int64_t *tops = NULL;
    PyObject *result = NULL;
    Py_ssize_t leaves = 1, nodes = 0;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOOOnO", &o_first, &o_last, &o_sizes, &o_order, &num_slots,
                          &o_offsets))
        return NULL;
    if (get_int64(o_first, &a_first, 0, "first") || get_int64(o_last, &a_last, 0, "last") ||
        get_int64(o_sizes, &a_sizes, 0, "sizes") || get_int64(o_order, &a_order, 0, "order") ||
        get_int64(o_offsets, &a_offsets, 1, "offsets"))
        goto done;
    Py_ssize_t n = a_sizes.view.len / 8, count = a_order.view.len / 8;
    if (a_first.view.len / 8 != n || a_last.view.len / 8 != n || a_offsets.view.len / 8 != n ||
        n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "first, last, sizes and offsets must have one length");
        goto done;
    }
    const int64_t *first = a_first.view.buf, *last = a_last.view.buf, *sizes = a_sizes.view.buf;
    const int64_t *order = a_order.view.buf;
    int64_t *offsets = a_offsets.view.buf;
    while (leaves < num_slots) leaves *= 2;
    nodes = 2 * leaves;
    cover = calloc((size_t)nodes, sizeof(IndexList));
    touch = calloc((size_t)nodes, sizeof(IndexList));
    seen = calloc((size_t)nodes, sizeof(int32_t));
    stamp = calloc((size_t)n + 1, sizeof(int32_t));
    tops = calloc((size_t)n + 1, sizeof(int64_t));
    ranges = malloc(((size_t)n + 1) * sizeof(Range));
    spanning = malloc(((size_t)n + 1) * sizeof(Range));
    if (!cover || !touch || !seen || !stamp || !tops || !ranges || !spanning) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t q = 0; q < count; q++) {
        int64_t j = order[q];
        if (j < 0 || j >= n || first[j] < 0 || last[j] > num_slots || first[j] >= last[j]) {
            PyErr_Format(PyExc_ValueError, "order[%zd] (=%lld) is not a buffer with slots in "
                         "[0, %zd)", q, (long long)j, num_slots);
            goto done;
        }
    }

    Py_ssize_t num_spanning = 0;
    int32_t query = 0;
    for (Py_ssize_t q = 0; q < count; q++) {
        int64_t j = order[q], size = sizes[j];
        Py_ssize_t lo = first[j] + leaves, hi = last[j] + leaves, k = 0;
        int spans_all = first[j] == 0 && last[j] == num_slots;
        query++;
        /* the canonical nodes of [lo, hi) */
        Py_ssize_t canon[128], num_canon = 0;
        while (lo < hi) {
            if (lo & 1) canon[num_canon++] = lo++;
            if (hi & 1) canon[num_canon++] = --hi;
            lo >>= 1;
            hi >>= 1;
        }
#define TAKE(list)                                                        \
        for (int32_t t = 0; t < (list).len; t++) {                        \
            int32_t b = (list).items[t];                                  \
            if (stamp[b] != query) {                                      \
                stamp[b] = query;                                         \
                ranges[k].offset = offsets[b];                            \
                ranges[k++].top = tops[b];                                \
            }                                                             \
        }
        for (Py_ssize_t c = 0; c < num_canon; c++) TAKE(touch[canon[c]]);
        Py_ssize_t left = first[j] + leaves, right = last[j] - 1 + leaves;
        while (left != right) {
            TAKE(cover[left]);
            TAKE(cover[right]);
            left >>= 1;
            right >>= 1;
        }
        for (; left; left >>= 1) TAKE(cover[left]);
#undef TAKE
        sort_ranges(ranges, k);
        int64_t offset = best_gap(ranges, k, spanning, num_spanning, size);
        offsets[j] = offset;
        tops[j] = offset + size;
        if (spans_all) {
            Py_ssize_t at = num_spanning;
            while (at > 0 && spanning[at - 1].offset > offset) at--;
            memmove(spanning + at + 1, spanning + at, (size_t)(num_spanning - at) * sizeof(Range));
            spanning[at].offset = offset;
            spanning[at].top = offset + size;
            num_spanning++;
            continue;
        }
        for (Py_ssize_t c = 0; c < num_canon; c++) {
            if (list_push(&cover[canon[c]], (int32_t)j)) { PyErr_NoMemory(); goto done; }
            for (Py_ssize_t v = canon[c]; v && seen[v] != query; v >>= 1) {
                seen[v] = query;
                if (list_push(&touch[v], (int32_t)j)) { PyErr_NoMemory(); goto done; }
            }
        }
    }
    result = Py_NewRef(Py_None);

done:
    if (cover) for (Py_ssize_t v = 0; v < nodes; v++) free(cover[v].items);
    if (touch) for (Py_ssize_t v = 0; v < nodes; v++) free(touch[v].items);
    free(cover);
    free(touch);
    free(seen);
    free(stamp);
    free(tops);
    free(ranges);
    free(spanning);
    Arg *held[] = {&a_first, &a_last, &a_sizes, &a_order, &a_offsets};
    for (size_t i = 0; i < 5; i++)
        if (held[i]->held) PyBuffer_Release(&held[i]->view);
    return result;
}

static PyMethodDef methods[] = {
    {"place", place, METH_VARARGS,
     "place(first, last, sizes, order, num_slots, offsets): best-fit decoding of `order` into "
     "`offsets` (int64 arrays; see cupool.planning.solvers.greedy)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_greedy",
    .m_doc = "Compiled best-fit decoder of cupool.planning.solvers.greedy (identical offsets).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__greedy(void) { return PyModule_Create(&module); }
