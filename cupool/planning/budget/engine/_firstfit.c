/* The pair first-fit placement of cupool.planning.budget.engine.firstfit, compiled.
 *
 * place(first, last, sizes, item_ptr, item_members, num_slots, budget, offsets) places
 * items in order: item i is the intervals item_members[item_ptr[i]:item_ptr[i + 1]] (one
 * interval, or the two halves of a persistent buffer's stay across the iteration boundary),
 * every interval in one item, the item of the size of its first member. Interval j covers
 * time slots [first[j], last[j]) with sizes[j] > 0 bytes. Returns (True, arena) with
 * offsets[j] filled for every interval, arena the highest offsets[j] + sizes[j]; or
 * (False, cursor + size) for the first item whose offset cursor leaves its size bytes
 * above `budget` (offsets then partly filled).
 *
 * The rule (firstfit._first_fit_numpy): an item goes where the walk over the byte ranges
 * of the placed intervals that share a slot with a member, by low end, first finds a gap
 * of `size` bytes between the highest end so far (from 0) and the next low end, else at
 * the highest end of all. With positive sizes that is the lowest offset x >= 0 where
 * [x, x + size) meets none of those ranges: the walk stops at such an x, and for any lower
 * x' the range whose end first took the walk past x' started below x' + size (its gap was
 * too small) and so meets [x', x' + size). Only the union of the ranges matters, then.
 *
 * So the placed intervals are kept as unions of bytes on a segment tree over slots (as
 * cupool/planning/solvers/_greedy.c keeps them as lists): cover[v] is the union of the
 * bytes of the intervals whose canonical nodes include v, touch[v] of those with a
 * canonical node in v's subtree. The bytes of the intervals overlapping slots [lo, hi) are
 * the touch sets of its canonical nodes and the cover sets of the nodes on the root paths
 * of its two end slots, a few dozen sets of merged blocks; the lowest free offset is found
 * by stepping over the blocks in the way, set by set, until a whole round finds none.
 * A query costs about the number of blocks below the answer, not of intervals overlapping
 * the item (on a training step's residencies, thousands, most of them below the answer).
 *
 * All arrays are C-contiguous int64 (NumPy's default integer on 64-bit Linux/macOS).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../_int64_arg.h"

typedef struct {
    int64_t low, top;
} Block;

/* A set of bytes: disjoint blocks [low, top), sorted, none touching the next. */
typedef struct {
    Block *blocks;
    Py_ssize_t len, cap;
} ByteSet;

/* The first block of `set` from `at` on whose top is above `x`. */
static Py_ssize_t first_above(const ByteSet *set, Py_ssize_t at, int64_t x) {
    Py_ssize_t hi = set->len;
    while (at < hi) {
        Py_ssize_t mid = at + (hi - at) / 2;
        if (set->blocks[mid].top > x) hi = mid;
        else at = mid + 1;
    }
    return at;
}

/* Adds the bytes [low, top) to `set`, merging the blocks they overlap or touch. */
static int byteset_add(ByteSet *set, int64_t low, int64_t top) {
    Py_ssize_t i = set->len && set->blocks[set->len - 1].top < low ? set->len
                                                                   : first_above(set, 0, low - 1);
    Py_ssize_t j = i;
    while (j < set->len && set->blocks[j].low <= top) j++;
    if (j > i) {
        if (set->blocks[i].low < low) low = set->blocks[i].low;
        if (set->blocks[j - 1].top > top) top = set->blocks[j - 1].top;
        set->blocks[i].low = low;
        set->blocks[i].top = top;
        memmove(set->blocks + i + 1, set->blocks + j, (size_t)(set->len - j) * sizeof(Block));
        set->len -= j - i - 1;
        return 0;
    }
    if (set->len == set->cap) {
        Py_ssize_t cap = set->cap ? 2 * set->cap : 4;
        Block *blocks = realloc(set->blocks, (size_t)cap * sizeof(Block));
        if (!blocks) return -1;
        set->blocks = blocks;
        set->cap = cap;
    }
    memmove(set->blocks + i + 1, set->blocks + i, (size_t)(set->len - i) * sizeof(Block));
    set->blocks[i].low = low;
    set->blocks[i].top = top;
    set->len++;
    return 0;
}

typedef struct {
    const ByteSet *set;
    Py_ssize_t at; /* blocks before it end at or below the cursor */
} Cursor;

/* The lowest offset >= 0 where `size` (> 0) bytes meet no block of the sets: from 0, over
 * every block in the way, until a whole round of the sets finds none. */
static int64_t lowest_free(Cursor *sets, Py_ssize_t num_sets, int64_t size) {
    int64_t x = 0;
    Py_ssize_t settled = 0, c = 0;
    while (settled < num_sets) {
        Cursor *q = &sets[c];
        Py_ssize_t at = first_above(q->set, q->at, x);
        const Block *b = q->set->blocks;
        int moved = 0;
        while (at < q->set->len && b[at].low < x + size) {
            x = b[at++].top;
            moved = 1;
        }
        q->at = at;
        settled = moved ? 1 : settled + 1;
        c = c + 1 == num_sets ? 0 : c + 1;
    }
    return x;
}

/* Checks the arguments: every interval of positive size over a non-empty range of slots,
 * the sizes adding up to at most INT64_MAX / 2 (no offset or end can overflow), and items that split the intervals into non-empty groups, each interval in exactly one
 * (`listed` is scratch, zeroed). */
static int check_items(const int64_t *first, const int64_t *last, const int64_t *sizes,
                       Py_ssize_t n, Py_ssize_t num_slots, const int64_t *ptr,
                       Py_ssize_t num_items, const int64_t *members, Py_ssize_t num_members,
                       char *listed) {
    int64_t total = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (first[j] < 0 || last[j] > num_slots || first[j] >= last[j]) {
            PyErr_Format(PyExc_ValueError, "interval %zd: slots [%lld, %lld) must be a "
                         "non-empty range in [0, %zd)", j, (long long)first[j],
                         (long long)last[j], num_slots);
            return -1;
        }
        if (sizes[j] <= 0) {
            PyErr_Format(PyExc_ValueError, "interval %zd: size (=%lld) must be > 0", j,
                         (long long)sizes[j]);
            return -1;
        }
        if (sizes[j] > INT64_MAX / 2 - total) {
            PyErr_Format(PyExc_ValueError, "interval %zd: sizes add up past %lld bytes", j,
                         (long long)(INT64_MAX / 2));
            return -1;
        }
        total += sizes[j];
    }
    if (ptr[0] != 0 || ptr[num_items] != num_members) {
        PyErr_Format(PyExc_ValueError, "item_ptr must run from 0 to len(item_members) (=%zd), "
                     "not from %lld to %lld", num_members, (long long)ptr[0],
                     (long long)ptr[num_items]);
        return -1;
    }
    for (Py_ssize_t i = 0; i < num_items; i++) {
        if (ptr[i + 1] <= ptr[i]) {
            PyErr_Format(PyExc_ValueError, "item %zd: item_ptr[%zd] (=%lld) must be < "
                         "item_ptr[%zd] (=%lld)", i, i, (long long)ptr[i], i + 1,
                         (long long)ptr[i + 1]);
            return -1;
        }
    }
    for (Py_ssize_t t = 0; t < num_members; t++) {
        int64_t j = members[t];
        if (j < 0 || j >= n || listed[j]) {
            PyErr_Format(PyExc_ValueError, "item_members[%zd] (=%lld) is not an interval "
                         "of [0, %zd) listed once", t, (long long)j, n);
            return -1;
        }
        listed[j] = 1;
    }
    if (num_members != n) {
        PyErr_Format(PyExc_ValueError, "the items hold %zd of the %zd intervals; every "
                     "interval must be in one", num_members, n);
        return -1;
    }
    return 0;
}

/* The segment tree over slots. */
typedef struct {
    Py_ssize_t leaves;
    ByteSet *cover, *touch;    /* by node */
    int32_t *cover_at, *touch_at; /* by node: the last query that took its set */
    int32_t *added;            /* by node: the last interval (+ 1) added to its touch */
    Cursor *sets;              /* one query's sets */
    Py_ssize_t num_sets, cap_sets;
} Tree;

static int take(Tree *tree, ByteSet *set, int32_t *at, int32_t query) {
    if (*at == query || !set->len) return 0;
    *at = query;
    if (tree->num_sets == tree->cap_sets) {
        Py_ssize_t cap = tree->cap_sets ? 2 * tree->cap_sets : 256;
        Cursor *sets = realloc(tree->sets, (size_t)cap * sizeof(Cursor));
        if (!sets) return -1;
        tree->sets = sets;
        tree->cap_sets = cap;
    }
    tree->sets[tree->num_sets].set = set;
    tree->sets[tree->num_sets++].at = 0;
    return 0;
}

/* Appends to tree->sets the byte sets of the intervals overlapping slots [lo, hi): touch
 * of its canonical nodes, cover of the nodes on the root paths of its two end slots. */
static int take_overlapping(Tree *tree, int64_t lo, int64_t hi, int32_t query) {
    Py_ssize_t a = lo + tree->leaves, b = hi + tree->leaves;
    while (a < b) {
        if (a & 1) {
            if (take(tree, &tree->touch[a], &tree->touch_at[a], query)) return -1;
            a++;
        }
        if (b & 1) {
            --b;
            if (take(tree, &tree->touch[b], &tree->touch_at[b], query)) return -1;
        }
        a >>= 1;
        b >>= 1;
    }
    for (Py_ssize_t v = lo + tree->leaves; v; v >>= 1)
        if (take(tree, &tree->cover[v], &tree->cover_at[v], query)) return -1;
    for (Py_ssize_t v = hi - 1 + tree->leaves; v; v >>= 1)
        if (take(tree, &tree->cover[v], &tree->cover_at[v], query)) return -1;
    return 0;
}

/* Adds interval j's bytes [low, top) over slots [lo, hi): to cover of its canonical nodes
 * and to touch of those and of every node above them. */
static int add_interval(Tree *tree, int32_t j, int64_t lo, int64_t hi, int64_t low,
                        int64_t top) {
    Py_ssize_t a = lo + tree->leaves, b = hi + tree->leaves;
    while (a < b) {
        Py_ssize_t canon[2] = {-1, -1};
        if (a & 1) canon[0] = a++;
        if (b & 1) canon[1] = --b;
        for (int c = 0; c < 2; c++) {
            if (canon[c] < 0) continue;
            if (byteset_add(&tree->cover[canon[c]], low, top)) return -1;
            for (Py_ssize_t v = canon[c]; v && tree->added[v] != j + 1; v >>= 1) {
                tree->added[v] = j + 1;
                if (byteset_add(&tree->touch[v], low, top)) return -1;
            }
        }
        a >>= 1;
        b >>= 1;
    }
    return 0;
}

static PyObject *place(PyObject *self, PyObject *args) {
    PyObject *o_first, *o_last, *o_sizes, *o_ptr, *o_members, *o_offsets;
    Py_ssize_t num_slots;
    long long budget;
    Arg a_first = {0}, a_last = {0}, a_sizes = {0}, a_ptr = {0}, a_members = {0},
        a_offsets = {0};
    Tree tree = {0};
    char *listed = NULL;
    PyObject *result = NULL;
    Py_ssize_t nodes = 0;
    (void)self;

    if (!PyArg_ParseTuple(args, "OOOOOnLO", &o_first, &o_last, &o_sizes, &o_ptr, &o_members,
                          &num_slots, &budget, &o_offsets))
        return NULL;
    if (get_int64(o_first, &a_first, 0, "first") || get_int64(o_last, &a_last, 0, "last") ||
        get_int64(o_sizes, &a_sizes, 0, "sizes") ||
        get_int64(o_ptr, &a_ptr, 0, "item_ptr") ||
        get_int64(o_members, &a_members, 0, "item_members") ||
        get_int64(o_offsets, &a_offsets, 1, "offsets"))
        goto done;
    Py_ssize_t n = a_sizes.view.len / 8, num_items = a_ptr.view.len / 8 - 1;
    Py_ssize_t num_members = a_members.view.len / 8;
    if (a_first.view.len / 8 != n || a_last.view.len / 8 != n || a_offsets.view.len / 8 != n ||
        n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "first, last, sizes and offsets must have one length");
        goto done;
    }
    if (num_items < 0) {
        PyErr_SetString(PyExc_ValueError, "item_ptr must hold at least one entry (0)");
        goto done;
    }
    const int64_t *first = a_first.view.buf, *last = a_last.view.buf, *sizes = a_sizes.view.buf;
    const int64_t *ptr = a_ptr.view.buf, *members = a_members.view.buf;
    int64_t *offsets = a_offsets.view.buf;
    tree.leaves = 1;
    while (tree.leaves < num_slots) tree.leaves *= 2;
    nodes = 2 * tree.leaves;
    tree.cover = calloc((size_t)nodes, sizeof(ByteSet));
    tree.touch = calloc((size_t)nodes, sizeof(ByteSet));
    tree.cover_at = calloc((size_t)nodes, sizeof(int32_t));
    tree.touch_at = calloc((size_t)nodes, sizeof(int32_t));
    tree.added = calloc((size_t)nodes, sizeof(int32_t));
    listed = calloc((size_t)n + 1, 1);
    if (!tree.cover || !tree.touch || !tree.cover_at || !tree.touch_at || !tree.added ||
        !listed) {
        PyErr_NoMemory();
        goto done;
    }
    if (check_items(first, last, sizes, n, num_slots, ptr, num_items, members, num_members,
                    listed))
        goto done;

    for (Py_ssize_t i = 0; i < num_items; i++) {
        int64_t size = sizes[members[ptr[i]]];
        int32_t query = (int32_t)(i + 1);
        tree.num_sets = 0;
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++)
            if (take_overlapping(&tree, first[members[p]], last[members[p]], query)) {
                PyErr_NoMemory();
                goto done;
            }
        int64_t cursor = lowest_free(tree.sets, tree.num_sets, size);
        if (cursor + size > budget) {
            result = Py_BuildValue("(OL)", Py_False, (long long)(cursor + size));
            goto done;
        }
        for (int64_t p = ptr[i]; p < ptr[i + 1]; p++) {
            int64_t j = members[p];
            offsets[j] = cursor;
            if (add_interval(&tree, (int32_t)j, first[j], last[j], cursor, cursor + sizes[j])) {
                PyErr_NoMemory();
                goto done;
            }
        }
    }
    int64_t arena = n ? INT64_MIN : 0;
    for (Py_ssize_t j = 0; j < n; j++)
        if (offsets[j] + sizes[j] > arena) arena = offsets[j] + sizes[j];
    result = Py_BuildValue("(OL)", Py_True, (long long)arena);

done:
    if (tree.cover) for (Py_ssize_t v = 0; v < nodes; v++) free(tree.cover[v].blocks);
    if (tree.touch) for (Py_ssize_t v = 0; v < nodes; v++) free(tree.touch[v].blocks);
    free(tree.cover);
    free(tree.touch);
    free(tree.cover_at);
    free(tree.touch_at);
    free(tree.added);
    free(tree.sets);
    free(listed);
    Arg *held[] = {&a_first, &a_last, &a_sizes, &a_ptr, &a_members, &a_offsets};
    for (size_t i = 0; i < 6; i++)
        if (held[i]->held) PyBuffer_Release(&held[i]->view);
    return result;
}

static PyMethodDef methods[] = {
    {"place", place, METH_VARARGS,
     "place(first, last, sizes, item_ptr, item_members, num_slots, budget, offsets) -> "
     "(placed, arena_bytes): pair first-fit of the items in order into `offsets` (int64 "
     "arrays; see cupool.planning.budget.engine.firstfit)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_firstfit",
    .m_doc = "Compiled pair first-fit placement of cupool.planning.budget.engine.firstfit "
             "(identical offsets).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__firstfit(void) { return PyModule_Create(&module); }
